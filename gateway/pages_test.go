package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/valyala/fasthttp"
)

func TestItemPageCaching(t *testing.T) {
	e := newEnv(t, nil)
	e.sale(t, "s1", 3, 4, true)
	h := e.s.Handler()
	plain := do(h, req{method: "GET", path: "/sales/s1"})
	gz := do(h, req{method: "GET", path: "/sales/s1", header: map[string]string{"Accept-Encoding": "gzip, br"}})
	et, gzet := string(plain.Header.Peek("ETag")), string(gz.Header.Peek("ETag"))
	if et == "" || et[0] != '"' || et == gzet {
		t.Fatalf("got ETags %q and %q, want two different quoted strong tags", et, gzet)
	}
	for _, r := range []*fasthttp.Response{plain, gz} {
		if got := string(r.Header.Peek("Vary")); got != "Accept-Encoding" {
			t.Errorf("got Vary %q, want Accept-Encoding", got)
		}
		if got := string(r.Header.Peek("Cache-Control")); got != "public, max-age=1" {
			t.Errorf("got Cache-Control %q, want public, max-age=1", got)
		}
	}
	if got := string(gz.Header.Peek("Content-Encoding")); got != "gzip" {
		t.Fatalf("got Content-Encoding %q, want gzip", got)
	}
	unz, err := gz.BodyGunzip()
	if err != nil || string(unz) != string(plain.Body()) {
		t.Fatalf("gunzipped body differs from the plain one (err %v)", err)
	}
	if !strings.Contains(string(plain.Body()), `data-sale="s1"`) {
		t.Fatalf("page lacks its sale id: %s", plain.Body())
	}
	// 304 for each encoding's own tag, 200 for the other's.
	tests := []struct {
		inm, enc string
		status   int
	}{
		{et, "", 304},
		{gzet, "gzip", 304},
		{`W/` + et, "", 304},
		{`"x", ` + et, "", 304},
		{"*", "", 304},
		{gzet, "", 200},
		{et, "gzip", 200},
		{`"other"`, "", 200},
	}
	for _, tc := range tests {
		hdr := map[string]string{"If-None-Match": tc.inm}
		if tc.enc != "" {
			hdr["Accept-Encoding"] = tc.enc
		}
		r := do(h, req{method: "GET", path: "/sales/s1", header: hdr})
		if r.StatusCode() != tc.status {
			t.Errorf("If-None-Match %s (%q): got %d, want %d", tc.inm, tc.enc, r.StatusCode(), tc.status)
		}
		if tc.status == 304 && len(r.Body()) != 0 {
			t.Errorf("304 with a body of %d bytes", len(r.Body()))
		}
	}
	// A changed catalog entry gives a new page and ETag after a catalog refresh.
	starts := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	e.catalog.put(flashgate.Sale{ID: "s1", Name: "Renamed", PriceCents: 2500, Total: 3, StartsAt: &starts})
	e.s.refreshCatalog(context.Background())
	r := do(h, req{method: "GET", path: "/sales/s1", header: map[string]string{"If-None-Match": et}})
	if r.StatusCode() != 200 || string(r.Header.Peek("ETag")) == et || !strings.Contains(string(r.Body()), "Renamed") {
		t.Fatalf("after a rename: got %d, ETag %s, want 200 with a new ETag and the new name", r.StatusCode(), r.Header.Peek("ETag"))
	}
	// An unchanged catalog entry keeps the page.
	et2 := string(r.Header.Peek("ETag"))
	e.s.refreshCatalog(context.Background())
	if r := do(h, req{method: "GET", path: "/sales/s1", header: map[string]string{"If-None-Match": et2}}); r.StatusCode() != 304 {
		t.Fatalf("unchanged catalog: got %d, want 304", r.StatusCode())
	}
	// The static assets are cacheable too.
	js := do(h, req{method: "GET", path: "/static/buy.js"})
	if r := do(h, req{method: "GET", path: "/static/buy.js", header: map[string]string{"If-None-Match": string(js.Header.Peek("ETag"))}}); r.StatusCode() != 304 {
		t.Fatalf("static 304: got %d, want 304", r.StatusCode())
	}
}
