package admin

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
)

// refusingStore refuses, as a database refuses a row, the orders whose ids
// are in refuse.
type refusingStore struct {
	ordersink.Store
	mu     sync.Mutex
	refuse map[string]bool
}

func (r *refusingStore) InsertOrders(ctx context.Context, orders []flashgate.Order) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range orders {
		if r.refuse[o.ID] {
			return 0, &flashgate.FieldError{Field: "order_id", Reason: "refused for the test"}
		}
	}
	return r.Store.InsertOrders(ctx, orders)
}

// TestDeadLetterReplay has the order sink dead-letter an order the
// database refuses, lists it through the admin API, replays it before and
// after the cause is fixed, and finds its row exactly once.
func TestDeadLetterReplay(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	e.openSale("dl", 10, 0)
	var ids []string
	for _, u := range []string{"ann", "bob", "cyd"} {
		code, id := e.reserve("dl", u)
		if code != lua.ReserveOK {
			t.Fatalf("reserve %s: code %d", u, code)
		}
		ids = append(ids, id)
	}
	store := &refusingStore{Store: e.db, refuse: map[string]bool{ids[1]: true}}
	sink := ordersink.New(e.rdb, store, ordersink.Config{Consumer: "t", Logger: quietLogger()})
	drain := func(want int) {
		t.Helper()
		if n, err := sink.DrainOnce(e.ctx); err != nil || n != want {
			t.Fatalf("DrainOnce: got %d, %v, want %d, nil", n, err, want)
		}
	}
	drain(2)

	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	c := client{t, srv.URL}
	list := func() map[string]any {
		t.Helper()
		code, body, raw := c.do("GET", "/admin/sales/dl/dead-letters", testToken, "")
		if code != http.StatusOK {
			t.Fatalf("GET dead-letters: got %d %s, want 200", code, raw)
		}
		return body
	}
	body := list()
	entries, _ := body["dead_letters"].([]any)
	if body["count"] != 1.0 || len(entries) != 1 {
		t.Fatalf("dead letters: got %v, want one", body)
	}
	dl, _ := entries[0].(map[string]any)
	if dl["order_id"] != ids[1] || dl["user_id"] != "bob" || !strings.Contains(dl["reason"].(string), "refused") || dl["source_id"] == "" {
		t.Errorf("dead letter: got %v, want bob's order %s with the reason", dl, ids[1])
	}

	replay := func(wantReplayed, wantLeft float64) {
		t.Helper()
		code, body, raw := c.do("POST", "/admin/sales/dl/dead-letters/replay", testToken, "")
		if code != http.StatusOK || body["replayed"] != wantReplayed || body["left"] != wantLeft {
			t.Fatalf("replay: got %d %s, want 200 replayed %v left %v", code, raw, wantReplayed, wantLeft)
		}
	}
	// Replayed before the cause is fixed, it comes back.
	replay(1, 0)
	drain(0)
	if body := list(); body["count"] != 1.0 {
		t.Fatalf("dead letters after an early replay: got %v, want one again", body)
	}
	// Fixed, it is stored once; a second replay finds nothing.
	store.mu.Lock()
	store.refuse = nil
	store.mu.Unlock()
	replay(1, 0)
	drain(1)
	replay(0, 0)
	drain(0)
	if o, err := e.db.Order(e.ctx, ids[1]); err != nil || o.UserID != "bob" {
		t.Errorf("order %s: got %+v, %v, want bob's row", ids[1], o, err)
	}
	if f, err := e.db.Figures(e.ctx, "dl"); err != nil || f.Persisted != 3 {
		t.Errorf("rows: got %+v, %v, want 3", f, err)
	}
	if n := e.rdb.XLen(e.ctx, lua.DeadKey("dl")).Val(); n != 0 {
		t.Errorf("dead-letter stream: got %d entries, want none", n)
	}

	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/admin/sales/nosuch/dead-letters", http.StatusNotFound},
		{"POST", "/admin/sales/nosuch/dead-letters/replay", http.StatusNotFound},
		{"GET", "/admin/sales/dl/dead-letters?limit=0", http.StatusBadRequest},
		{"GET", "/admin/sales/dl/dead-letters?limit=x", http.StatusBadRequest},
	} {
		if code, _, raw := c.do(tc.method, tc.path, testToken, ""); code != tc.want {
			t.Errorf("%s %s: got %d %s, want %d", tc.method, tc.path, code, raw, tc.want)
		}
		if code, _, _ := c.do(tc.method, tc.path, "", ""); code != http.StatusUnauthorized {
			t.Errorf("%s %s without token: got %d, want 401", tc.method, tc.path, code)
		}
	}
}
