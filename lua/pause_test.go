package lua_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestPause covers every answer of lua.Pause: an open sale is paused, a
// sale not open or missing is left alone (and no hash is created).
func TestPause(t *testing.T) {
	bs := backends(t)
	cases := []struct {
		name       string
		hash       map[string]any // nil: no sale
		want       int64
		wantStart  string
		wantResume string // "2": paused, answered 503 until rebuilt
	}{
		{"open", map[string]any{"total": 5, "start": 1, "closed": 0}, 1, "0", "2"},
		{"not started", map[string]any{"total": 5, "start": 0, "closed": 0}, 0, "0", ""},
		{"closed", map[string]any{"total": 5, "start": 0, "closed": 1}, 0, "0", ""},
		{"missing", nil, 0, "", ""},
	}
	for _, tc := range cases {
		forEach(t, bs, tc.name, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
			if tc.hash != nil {
				if err := rdb.HSet(ctx, lua.SaleKey(saleID), tc.hash).Err(); err != nil {
					t.Fatal(err)
				}
			}
			got, err := lua.Pause.Run(ctx, rdb, lua.SaleKeys(saleID)).Int64()
			if err != nil || got != tc.want {
				t.Fatalf("Pause: got %d, %v; want %d", got, err, tc.want)
			}
			start, _ := rdb.HGet(ctx, lua.SaleKey(saleID), "start").Result()
			if start != tc.wantStart {
				t.Errorf("start: got %q, want %q", start, tc.wantStart)
			}
			if resume, _ := rdb.HGet(ctx, lua.SaleKey(saleID), "resume").Result(); resume != tc.wantResume {
				t.Errorf("resume: got %q, want %q", resume, tc.wantResume)
			}
		})
	}
}
