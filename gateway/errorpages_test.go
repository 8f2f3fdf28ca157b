package gateway

import (
	"bytes"
	"testing"
)

// TestErrorPages: the item page's errors each have their own page, none of
// them the 404 page (a 503 or a 500 used to show "Not found").
func TestErrorPages(t *testing.T) {
	e := newEnv(t, nil)
	pages := []struct {
		name string
		body []byte
		want string
	}{
		{"404", e.s.notFound, "<h1>Not found</h1>"},
		{"503", e.s.unavailablePage, "<h1>Temporarily unavailable</h1>"},
		{"500", e.s.internalPage, "<h1>Something went wrong</h1>"},
	}
	for i, p := range pages {
		if !bytes.Contains(p.body, []byte(p.want)) {
			t.Errorf("%s page: got %q, want it to contain %q", p.name, p.body, p.want)
		}
		for _, q := range pages[i+1:] {
			if bytes.Equal(p.body, q.body) {
				t.Errorf("the %s and %s pages are the same", p.name, q.name)
			}
		}
	}
}
