package drawclose_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawclose"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	open    = time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)
	closeAt = open.Add(time.Hour)
)

func drawSale(id string) flashgate.Sale {
	o, c := open, closeAt
	return flashgate.Sale{ID: id, Name: "Drop", Total: 3, Queue: flashgate.QueueDraw, EntriesOpenAt: &o, EntriesCloseAt: &c}
}

// TestSeed: a draw's seed is the same for the same secret, sale and
// opening, and another for any of them changed.
func TestSeed(t *testing.T) {
	base := drawclose.Seed([]byte("k"), drawSale("drop"))
	later := drawSale("drop")
	l := open.Add(time.Millisecond)
	later.EntriesOpenAt = &l
	for _, tc := range []struct {
		name   string
		seed   []byte
		wantEq bool
	}{
		{"again", drawclose.Seed([]byte("k"), drawSale("drop")), true},
		{"another secret", drawclose.Seed([]byte("k2"), drawSale("drop")), false},
		{"another sale", drawclose.Seed([]byte("k"), drawSale("drop2")), false},
		{"another opening", drawclose.Seed([]byte("k"), later), false},
	} {
		if got := string(tc.seed) == string(base); got != tc.wantEq || len(tc.seed) != 32 {
			t.Errorf("%s: got equal %v (%d bytes), want equal %v (32 bytes)", tc.name, got, len(tc.seed), tc.wantEq)
		}
	}
}

// TestStock: a draw's stock is each variant's total, or the sale's under
// "" without variants.
func TestStock(t *testing.T) {
	v := drawSale("drop")
	v.Variants = []flashgate.Variant{{ID: "S", Total: 2}, {ID: "M", Total: 1}}
	for _, tc := range []struct {
		name string
		sale flashgate.Sale
		want map[string]int
	}{
		{"one stock", drawSale("drop"), map[string]int{"": 3}},
		{"variants", v, map[string]int{"S": 2, "M": 1}},
	} {
		got := drawclose.Stock(tc.sale)
		if len(got) != len(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
		for k, n := range tc.want {
			if got[k] != n {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

// TestDue: a draw's close is due from entries_close_at on; another sale's
// never.
func TestDue(t *testing.T) {
	for _, tc := range []struct {
		name string
		sale flashgate.Sale
		now  time.Time
		want bool
	}{
		{"before", drawSale("drop"), closeAt.Add(-time.Millisecond), false},
		{"at", drawSale("drop"), closeAt, true},
		{"after", drawSale("drop"), closeAt.Add(time.Hour), true},
		{"not a draw", flashgate.Sale{ID: "x", Total: 1}, closeAt, false},
	} {
		if got := drawclose.Due(tc.sale, tc.now); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCommit: the commitment is published once entries open, the same
// again and again; a seed secret changed since is an error; a sale Redis
// does not hold gets nothing.
func TestCommit(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	sale := drawSale("drop")
	if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(sale.ID), 3, 1, 1, 100, "", lua.DrawQueueArg(sale), "").Err(); err != nil {
		t.Fatal(err)
	}
	clock := testclock.New(open.Add(-time.Minute))
	c := drawclose.New(drawclose.Config{Redis: rdb, SeedSecret: []byte("k"), Clock: clock})
	published := func(id string) string {
		v, _ := rdb.HGet(ctx, lua.SaleKey(id), lua.FieldDrawSeedSHA).Result()
		return v
	}
	if err := c.Commit(ctx, sale); err != nil || published(sale.ID) != "" {
		t.Fatalf("before the opening: got %q, %v; want nothing published", published(sale.ID), err)
	}
	clock.Set(open)
	want := fairqueue.Commitment(drawclose.Seed([]byte("k"), sale))
	for range 2 {
		if err := c.Commit(ctx, sale); err != nil || published(sale.ID) != want {
			t.Fatalf("at the opening: got %q, %v; want %s", published(sale.ID), err, want)
		}
	}
	other := drawclose.New(drawclose.Config{Redis: rdb, SeedSecret: []byte("changed"), Clock: clock})
	if err := other.Commit(ctx, sale); err == nil || published(sale.ID) != want {
		t.Errorf("another secret: got %q, %v; want an error and %s kept", published(sale.ID), err, want)
	}
	if err := c.Commit(ctx, drawSale("lost")); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, lua.SaleKey("lost")).Result(); err != nil || n != 0 {
		t.Errorf("a sale Redis does not hold: %d keys, %v; want none made", n, err)
	}
}
