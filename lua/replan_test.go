package lua_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestReplan covers every answer of lua.Replan: a bucket that sells
// nothing and still has the rebuild mark the caller read gets its new
// totals (booked clamped to them) and a fresh mark; one open, paused after
// a failover, marked since or missing is left alone.
func TestReplan(t *testing.T) {
	bs := backends(t)
	paused := map[string]any{"total": 2, "booked": 2, "start": 0, "resume": 1, "rebuild": "100.1",
		"variant:A:total": 1, "variant:A:booked": 1, "variant:B:total": 1, "variant:B:booked": 1}
	with := func(k string, v any) map[string]any {
		h := map[string]any{}
		for f, x := range paused {
			h[f] = x
		}
		h[k] = v
		return h
	}
	cases := []struct {
		name string
		hash map[string]any // nil: no bucket
		mark string
		want int64
		// wantTotal, wantBooked, wantA, wantABooked, wantB: the fields after.
		wantTotal, wantBooked, wantA, wantABooked, wantB string
	}{
		{"paused with the mark read", paused, "100.1", 1, "1", "1", "0", "0", "1"},
		{"not started, another mark", with("resume", 0), "", 0, "2", "2", "1", "1", "1"},
		{"not started, the mark read", with("resume", 0), "100.1", 1, "1", "1", "0", "0", "1"},
		{"open", with("start", 1), "100.1", 0, "2", "2", "1", "1", "1"},
		{"paused after a failover", with("resume", 2), "100.1", 0, "2", "2", "1", "1", "1"},
		{"marked since", paused, "99.9", 0, "2", "2", "1", "1", "1"},
		{"missing", nil, "", 0, "", "", "", "", ""},
	}
	for _, tc := range cases {
		forEach(t, bs, tc.name, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
			if tc.hash != nil {
				if err := rdb.HSet(ctx, lua.SaleKey(saleID), tc.hash).Err(); err != nil {
					t.Fatal(err)
				}
			}
			got, err := lua.Replan.Run(ctx, rdb, lua.SaleKeys(saleID), 1, tc.mark, 1, "A", 0, "B", 1).Int64()
			if err != nil || got != tc.want {
				t.Fatalf("Replan: got %d, %v; want %d", got, err, tc.want)
			}
			h, err := rdb.HGetAll(ctx, lua.SaleKey(saleID)).Result()
			if err != nil {
				t.Fatal(err)
			}
			for f, want := range map[string]string{"total": tc.wantTotal, "booked": tc.wantBooked,
				"variant:A:total": tc.wantA, "variant:A:booked": tc.wantABooked, "variant:B:total": tc.wantB} {
				if h[f] != want {
					t.Errorf("%s: got %q, want %q", f, h[f], want)
				}
			}
			if tc.want == 1 && (h["rebuild"] == "" || h["rebuild"] == "100.1") {
				t.Errorf("rebuild mark %q after a replan, want a fresh one", h["rebuild"])
			}
			if tc.hash == nil && len(h) > 0 {
				t.Errorf("a missing bucket got fields %v", h)
			}
		})
	}
}
