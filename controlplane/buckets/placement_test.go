package buckets

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestShare(t *testing.T) {
	for _, c := range []struct {
		total int64
		n     int
		want  []int64
	}{
		{10, 3, []int64{4, 3, 3}},
		{12, 3, []int64{4, 4, 4}},
		{2, 3, []int64{1, 1, 0}},
	} {
		var sum int64
		for b := range c.n {
			got := Share(c.total, c.n, b)
			if got != c.want[b] {
				t.Errorf("Share(%d, %d, %d): got %d, want %d", c.total, c.n, b, got, c.want[b])
			}
			sum += got
		}
		if sum != c.total {
			t.Errorf("shares of %d over %d: got sum %d, want %d", c.total, c.n, sum, c.total)
		}
	}
}

// TestPickSalts: each bucket lands on its primary (b mod primaries) on a
// slot of its own.
func TestPickSalts(t *testing.T) {
	const primaries = 3
	owner := func(slot int) int { return slot * primaries / 16384 } // three equal slot ranges
	salts := pickSalts("sale", 8, owner, primaries)
	used := map[int]bool{}
	for b, salt := range salts {
		slot := lua.Slot(lua.BucketTag("sale", b, salt))
		if got := owner(slot); got != b%primaries {
			t.Errorf("bucket %d (salt %d): got primary %d, want %d", b, salt, got, b%primaries)
		}
		if used[slot] {
			t.Errorf("bucket %d: slot %d used twice", b, slot)
		}
		used[slot] = true
	}
}

// TestChooseSaltsOnSentinelMaster: a cluster client over one server without
// cluster support (as go-redis's NewFailoverClusterClient is over a
// Sentinel's master) gives the buckets distinct slots, as a single client
// does, and logs no warning. Before, each bucketed sale's creation warned
// that the cluster's slot map could not be read.
func TestChooseSaltsOnSentinelMaster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := redistest.Start(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: srv.Addr}}}}, nil
		},
	})
	defer cc.Close()
	var logged bytes.Buffer
	k := New(Config{Redis: cc, Logger: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	const sale, n = "sentinel-buckets", 6
	got := k.ChooseSalts(ctx, sale, n)
	if want := pickSalts(sale, n, func(int) int { return 0 }, 1); !slices.Equal(got, want) {
		t.Errorf("salts: got %v, want %v", got, want)
	}
	if logged.Len() > 0 {
		t.Errorf("logged: got %q, want nothing", logged.String())
	}
}
