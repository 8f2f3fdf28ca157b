package gateway

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/jsonstr"
)

// apiDoc is the precomputed answer to GET /api/sales/{id}.
type apiDoc struct {
	status int
	body   []byte
}

// publicState is the state GET /api/sales/{id} reports.
func publicState(st *saleState, m *saleMeta) flashgate.SaleState {
	if st == nil || !st.found {
		if m.sale.State != "" {
			return m.sale.State
		}
		return flashgate.StateUpcoming
	}
	switch {
	case st.closed:
		return flashgate.StateClosed
	case st.booked >= st.total:
		return flashgate.StateSoldOut
	case st.start || st.resume:
		return flashgate.StateOpen
	}
	return flashgate.StateUpcoming
}

// rebuildAPI recomputes e's GET /api/sales/{id} answer, keeping the old
// bytes when nothing changed.
func (s *Server) rebuildAPI(e *sale) {
	st, m := e.state.Load(), e.meta.Load()
	missing := st == nil || !st.found // Redis never answered, or has no such sale
	var d apiDoc
	switch {
	case missing && m == nil:
		// The catalog never answered either (it is down): an upcoming sale
		// may be there, so say so rather than guess "not found".
		d = apiDoc(ansUnavail)
	case missing && !m.found:
		d = apiDoc(ansNotFound)
	default:
		if m == nil {
			m = &saleMeta{}
		}
		d = apiDoc{status: fasthttp.StatusOK, body: saleJSON(e.id, st, m)}
	}
	if old := e.api.Load(); old != nil && old.status == d.status && string(old.body) == string(d.body) {
		return
	}
	e.api.Store(&d)
}

func saleJSON(id string, st *saleState, m *saleMeta) []byte {
	name, price, total := m.sale.Name, m.sale.PriceCents, m.sale.Total
	remaining := total
	if st != nil && st.found {
		total = st.total
		remaining = st.total - st.booked
		if !m.found {
			price = st.price
		}
	}
	remaining = max(remaining, 0)
	b := make([]byte, 0, 192)
	b = append(b, `{"id":`...)
	b = jsonstr.Append(b, id)
	b = append(b, `,"name":`...)
	nb, _ := json.Marshal(name)
	b = append(b, nb...)
	b = append(b, `,"price_cents":`...)
	b = strconv.AppendInt(b, price, 10)
	b = append(b, `,"total":`...)
	b = strconv.AppendInt(b, total, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, `,"state":"`...)
	b = append(b, publicState(st, m)...)
	b = append(b, `","starts_at":`...)
	if t := m.sale.StartsAt; t != nil {
		b = append(b, '"')
		b = t.UTC().AppendFormat(b, time.RFC3339)
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	b = appendQueueJSON(b, st, m) // queue_state.go
	b = appendVariantsJSON(b, st, m)
	return append(b, '}')
}

// appendVariantsJSON appends a variant sale's "variants" member: each
// variant's id, name, total and remaining, from the cached figures when
// they were read for the same variants, else from the catalog (all of it
// remaining).
func appendVariantsJSON(b []byte, st *saleState, m *saleMeta) []byte {
	vs := m.vs
	if vs == nil {
		return b
	}
	b = append(b, `,"variants":[`...)
	for i, v := range m.sale.Variants {
		total, remaining := v.Total, v.Total
		if st != nil && st.vs == vs {
			total, remaining = st.vtotal[i], st.vtotal[i]-st.vbooked[i]
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = jsonstr.Append(b, v.ID)
		b = append(b, `,"name":`...)
		b = jsonstr.Append(b, v.Name)
		b = append(b, `,"total":`...)
		b = strconv.AppendInt(b, total, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, max(remaining, 0), 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

// apiSale answers GET /api/sales/{id} with the sale's precomputed JSON.
// It may lag Redis by one StateRefresh, and carries "public, max-age=1" so
// a CDN can absorb the polling of a waiting crowd.
func (s *Server) apiSale(ctx *fasthttp.RequestCtx, id []byte) {
	e := s.lookup(id)
	d := e.api.Load()
	if d == nil {
		writeAnswer(ctx, ansUnavail)
		return
	}
	ctx.Response.SetStatusCode(d.status)
	ctx.Response.Header.SetContentTypeBytes(ctJSON)
	if d.status == fasthttp.StatusOK {
		ctx.Response.Header.SetCanonical(hCacheControl, vAPICache)
	} else {
		ctx.Response.Header.SetCanonical(hCacheControl, vNoStore)
	}
	ctx.Response.SetBodyRaw(d.body)
}
