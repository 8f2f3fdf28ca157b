package gateway

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"hash/fnv"
	"html/template"
	"io/fs"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/static"
)

// page is a rendered document: its body and gzip body, each with its own
// strong ETag. Pages are immutable once built.
type page struct {
	meta         *saleMeta // the catalog entry an item page was rendered from
	body, gz     []byte
	etag, gzEtag []byte
	// The response heads: 200 and 304, plain and gzip. Copying one
	// (ResponseHeader.CopyTo) costs a third of setting its four or five
	// headers one by one (each Set normalizes its name and scans its
	// value), which was most of a page's own time; an answer with one or
	// two headers is cheaper set.
	head, gzHead, head304, gzHead304 *fasthttp.ResponseHeader
}

var (
	itemTmpl = template.Must(template.ParseFS(static.Gateway, "gateway/item.html"))
	hINM     = fasthttp.HeaderIfNoneMatch
)

// assetTypes are the embedded files served under /static/.
var assetTypes = map[string]string{
	"buy.js":    "text/javascript; charset=utf-8",
	"style.css": "text/css; charset=utf-8",
	"queue.js":  "text/javascript; charset=utf-8",
	"pow.js":    "text/javascript; charset=utf-8",
	"draw.js":   "text/javascript; charset=utf-8",
}

// loadAssets prepares the error pages and the /static/ files.
func (s *Server) loadAssets() error {
	for _, p := range []struct {
		name string
		dst  *[]byte
	}{{"404.html", &s.notFound}, {"503.html", &s.unavailablePage}, {"500.html", &s.internalPage}} {
		b, err := fs.ReadFile(static.Gateway, "gateway/"+p.name)
		if err != nil {
			return fmt.Errorf("gateway: reading the error page %s: %w", p.name, err)
		}
		*p.dst = b
	}
	s.assets = make(map[string]*page, len(assetTypes))
	for name, ct := range assetTypes {
		b, err := fs.ReadFile(static.Gateway, "gateway/"+name)
		if err != nil {
			return fmt.Errorf("gateway: reading %s: %w", name, err)
		}
		s.assets[name] = newPage(b, []byte(ct), []byte("public, max-age=300"))
	}
	return nil
}

// newPage compresses body once and computes both ETags; extra are more
// headers (name, value, ...) of every answer.
func newPage(body, contentType, cacheControl []byte, extra ...[]byte) *page {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write(body)
	_ = zw.Close()
	h := fnv.New64a()
	_, _ = h.Write(body)
	sum := strconv.FormatUint(h.Sum64(), 16)
	p := &page{
		body:   body,
		gz:     buf.Bytes(),
		etag:   []byte(`"` + sum + `"`),
		gzEtag: []byte(`"` + sum + `-gz"`),
	}
	p.head = newHead(fasthttp.StatusOK, contentType,
		append([][]byte{hCacheControl, cacheControl, hETag, p.etag, hVary, vAcceptEnc}, extra...)...)
	p.gzHead = newHead(fasthttp.StatusOK, contentType,
		append([][]byte{hCacheControl, cacheControl, hETag, p.gzEtag, hVary, vAcceptEnc, hEncoding, vGzip}, extra...)...)
	p.head304 = newHead(fasthttp.StatusNotModified, nil,
		append([][]byte{hCacheControl, cacheControl, hETag, p.etag, hVary, vAcceptEnc}, extra...)...)
	p.gzHead304 = newHead(fasthttp.StatusNotModified, nil,
		append([][]byte{hCacheControl, cacheControl, hETag, p.gzEtag, hVary, vAcceptEnc}, extra...)...)
	return p
}

// itemPage answers GET /sales/{id} from the page LRU, rendering the page
// when it is missing or the catalog entry changed.
func (s *Server) itemPage(ctx *fasthttp.RequestCtx, id []byte) {
	e := s.lookup(id)
	m := e.meta.Load()
	if m == nil {
		// The catalog never answered for this id: it may name a sale.
		errorPage(ctx, fasthttp.StatusServiceUnavailable, s.unavailablePage)
		return
	}
	if !m.found {
		s.notFoundPage(ctx)
		return
	}
	p, ok := s.pages.Get(e.id)
	if !ok || p.meta != m {
		var err error
		if p, err = s.render(e.id, m); err != nil {
			s.log.Error("gateway: rendering an item page", "sale", e.id, "err", err)
			errorPage(ctx, fasthttp.StatusInternalServerError, s.internalPage)
			return
		}
		s.pages.Add(e.id, p)
	}
	s.writePage(ctx, p)
}

// itemData is what item.html shows. StripeKey and StripeJS, when set,
// give the page its payment form (pagepay.go); Draw, set for a draw
// sale, gives it the draw's view (draw.js) instead of the buy button.
type itemData struct {
	ID, Name, Price, StartsAt string
	Total                     int64
	StripeKey, StripeJS       string
	Draw                      *drawData
}

// drawData is what a draw sale's page shows of the draw: the entry
// window (RFC 3339, UTC), the sizes to choose from, the most units an
// entry may ask for and the price the hold is for. It is the sale's, the
// same for every buyer: the page stays one cached answer, and draw.js
// asks the entry routes for the buyer's own entry.
type drawData struct {
	OpensAt, ClosesAt string
	Variants          []flashgate.Variant
	PerUser           int64
	PriceCents        int64
}

func (s *Server) render(id string, m *saleMeta) (*page, error) {
	d := itemData{ID: id, Name: m.sale.Name, Total: m.sale.Total, Price: formatPrice(m.sale.PriceCents),
		StripeKey: s.pay.key, StripeJS: s.pay.js}
	if t := m.sale.StartsAt; t != nil {
		d.StartsAt = t.UTC().Format(time.RFC3339)
	}
	if sl := m.sale; sl.Draw() && sl.EntriesOpenAt != nil && sl.EntriesCloseAt != nil {
		d.Draw = &drawData{OpensAt: sl.EntriesOpenAt.UTC().Format(time.RFC3339), ClosesAt: sl.EntriesCloseAt.UTC().Format(time.RFC3339),
			Variants: sl.Variants, PerUser: max(sl.PerUser, 1), PriceCents: sl.PriceCents}
	}
	var buf bytes.Buffer
	if err := itemTmpl.ExecuteTemplate(&buf, "item.html", d); err != nil {
		return nil, fmt.Errorf("rendering: %w", err)
	}
	p := newPage(buf.Bytes(), ctHTML, s.pageCacheControl, s.pay.headers()...)
	p.meta = m
	return p, nil
}

// formatPrice writes cents as units with two decimals.
func formatPrice(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s%d.%02d", sign, cents/100, cents%100)
}

// writePage answers with p: 304 when If-None-Match names the ETag of the
// encoding the client gets, else the (gzip) body.
func (s *Server) writePage(ctx *fasthttp.RequestCtx, p *page) {
	body, etag, head, head304 := p.body, p.etag, p.head, p.head304
	if ctx.Request.Header.HasAcceptEncodingBytes(strGzip) {
		body, etag, head, head304 = p.gz, p.gzEtag, p.gzHead, p.gzHead304
	}
	if inm := ctx.Request.Header.Peek(hINM); len(inm) > 0 && matchETag(inm, etag) {
		head304.CopyTo(&ctx.Response.Header)
		ctx.Response.SkipBody = true
		return
	}
	head.CopyTo(&ctx.Response.Header)
	ctx.Response.SetBodyRaw(body)
}

// matchETag reports whether an If-None-Match value names etag (or is "*").
// Weak comparison is used, as RFC 9110 asks for If-None-Match.
func matchETag(inm, etag []byte) bool {
	inm = bytes.TrimSpace(inm)
	if len(inm) == 1 && inm[0] == '*' {
		return true
	}
	for len(inm) > 0 {
		i := bytes.IndexByte(inm, ',')
		tag := inm
		if i >= 0 {
			tag, inm = inm[:i], inm[i+1:]
		} else {
			inm = nil
		}
		tag = bytes.TrimSpace(tag)
		if len(tag) > 2 && tag[0] == 'W' && tag[1] == '/' {
			tag = tag[2:]
		}
		if bytes.Equal(tag, etag) {
			return true
		}
	}
	return false
}

// notFoundPage answers with the HTML 404 page.
func (s *Server) notFoundPage(ctx *fasthttp.RequestCtx) {
	errorPage(ctx, fasthttp.StatusNotFound, s.notFound)
}

// errorPage answers an item page's request with status and the HTML page
// of that error (404.html, 503.html, 500.html), never cached.
func errorPage(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.Response.SetStatusCode(status)
	ctx.Response.Header.SetContentTypeBytes(ctHTML)
	ctx.Response.Header.SetCanonical(hCacheControl, vNoStore)
	ctx.Response.SetBodyRaw(body)
}

// newHead builds a constant response head: status, content type (unless
// nil) and the headers kv (name, value, ...), set in that order. Copying
// it with CopyTo resets the whole head first, so it comes before any other
// header a handler sets; the flags it also copies (no default Date or
// Content-Type, name normalizing) are fasthttp's defaults, as the
// gateway's servers keep them.
func newHead(status int, contentType []byte, kv ...[]byte) *fasthttp.ResponseHeader {
	h := &fasthttp.ResponseHeader{}
	h.SetStatusCode(status)
	if contentType != nil {
		h.SetContentTypeBytes(contentType)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		h.SetCanonical(kv[i], kv[i+1])
	}
	return h
}
