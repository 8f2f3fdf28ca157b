package ordersink_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
)

// unreachable is a Store out of reach (flashgate.ErrUnavailable, as sqldb
// answers a refused or lost connection) for its first down calls, then
// store; it records how many orders each call held. With down < 0 it
// fails every call with an error that is not ErrUnavailable.
type unreachable struct {
	store ordersink.Store
	mu    sync.Mutex
	down  int
	calls []int
}

func (u *unreachable) InsertOrders(ctx context.Context, orders []flashgate.Order) (int, error) {
	u.mu.Lock()
	u.calls = append(u.calls, len(orders))
	down := u.down
	if u.down > 0 {
		u.down--
	}
	u.mu.Unlock()
	switch {
	case down < 0:
		return 0, fmt.Errorf("inserting orders: a trigger failed")
	case down > 0:
		return 0, fmt.Errorf("%w (inserting orders: dial tcp: %w)", flashgate.ErrUnavailable, syscall.ECONNREFUSED)
	}
	return u.store.InsertOrders(ctx, orders)
}

func (u *unreachable) sizes() []int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]int(nil), u.calls...)
}

// TestUnreachableStoreKeepsBatchesWhole (issue 35): a database out of
// reach (stopped, restarting) fails every insert with ErrUnavailable, more
// times than splitAfter (3). That is no order's fault, so the batch is
// never split: every try, and the one that succeeds once the database is
// back, holds the whole batch. (The failures used to count toward
// splitting, and after a PostgreSQL restart the sink committed its backlog
// one order a transaction, seconds late.)
func TestUnreachableStoreKeepsBatchesWhole(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const orders, down = 40, 6
		store := &unreachable{store: e.db, down: down}
		ids := e.reserve(t, "u", orders)
		d := drainer(e, store, ordersink.Config{Batch: 64})
		for try := 1; try <= down; try++ {
			if _, err := d.DrainOnce(ctx); err == nil {
				t.Fatalf("DrainOnce %d with the database out of reach: got nil error", try)
			}
		}
		if n, err := d.DrainOnce(ctx); err != nil || n != orders {
			t.Fatalf("DrainOnce with the database back: got %d, %v, want %d, nil", n, err, orders)
		}
		sizes := store.sizes()
		if len(sizes) != down+1 {
			t.Errorf("inserts: got %d of %v orders, want %d of %d (tried whole each time)", len(sizes), sizes, down+1, orders)
		}
		for i, n := range sizes {
			if n != orders {
				t.Errorf("insert %d: got %d orders, want the whole batch of %d (all inserts: %v)", i+1, n, orders, sizes)
				break
			}
		}
		if n := e.rdb.XLen(ctx, lua.OrdersKey(sale)).Val(); n != 0 {
			t.Errorf("stream length: got %d, want 0", n)
		}
		if n := e.rdb.XLen(ctx, lua.DeadKey(sale)).Val(); n != 0 {
			t.Errorf("dead letters: got %d, want 0", n)
		}
		e.check(t, ids)
	})
}

// TestUnreachableStoreRetriesSoon: while the database is out of reach a
// sale's backoff grows to 200ms at most, whatever BackoffMax, so that the
// sink stores its backlog soon after the database is back; other failures
// of the store back off up to BackoffMax.
func TestUnreachableStoreRetriesSoon(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.reserve(t, "u", 5)
		cfg := ordersink.Config{BackoffMin: 50 * time.Millisecond, BackoffMax: time.Hour}
		for _, tt := range []struct {
			name string
			down int
			want time.Duration
		}{
			{"unreachable", 1000, 200 * time.Millisecond},
			{"failing", -1, 3200 * time.Millisecond}, // 50ms doubled 6 times
		} {
			d := drainer(e, &unreachable{store: e.db, down: tt.down}, cfg)
			for range 7 {
				if _, err := d.DrainOnce(ctx); err == nil {
					t.Fatalf("%s: DrainOnce: got nil error", tt.name)
				}
			}
			if got := d.RetryWait(sale); got != tt.want {
				t.Errorf("%s: the sale's backoff after 7 failed tries: got %v, want %v", tt.name, got, tt.want)
			}
		}
	})
}
