package buckets

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// snapStore is the database with a step run once, right after the first
// snapshot of bucket figures a re-sync takes.
type snapStore struct {
	*sqldb.DB
	afterSnapshot func()
}

func (s *snapStore) fire() {
	if f := s.afterSnapshot; f != nil {
		s.afterSnapshot = nil
		f()
	}
}

func (s *snapStore) BucketFigures(ctx context.Context, id string, n int) ([]flashgate.SaleFigures, error) {
	defer s.fire()
	return s.DB.BucketFigures(ctx, id, n)
}

func (s *snapStore) BucketVariantFigures(ctx context.Context, id string, n int) ([]flashgate.SaleFigures, []map[string]flashgate.SaleFigures, error) {
	defer s.fire()
	return s.DB.BucketVariantFigures(ctx, id, n)
}

// afterCmd is a Redis client hook that runs a step once, right after the
// first command whose arguments, joined by spaces, are want.
type afterCmd struct {
	want string
	step func()
}

func (h *afterCmd) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *afterCmd) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *afterCmd) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.step == nil {
			return err
		}
		args := make([]string, len(cmd.Args()))
		for i, a := range cmd.Args() {
			args[i] = strings.ToLower(strconv.Quote(toString(a)))
		}
		if strings.Join(args, " ") == h.want {
			f := h.step
			h.step = nil
			f()
		}
		return err
	}
}

func toString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// TestBucketRebuildsOfTwoPlans: two re-sync passes of a bucketed sale at
// once (one term, one fencing token: the leader's loop and an admin
// re-sync, or a failover watch), each rebuilding the buckets it finds
// missing with the shares it computed from its own snapshot. Pass A took
// its snapshot while o1 was live in bucket 0; then o1 was cancelled, o2
// was bought in bucket 1 and Redis lost the sale. A computes bucket 0 = 2
// (o1's unit and the spare one), bucket 1 = 0, and rebuilds bucket 0;
// pass B, run whole before A comes to bucket 1, computes 1 and 1 from its
// fresh snapshot, finds bucket 0 present and rebuilds bucket 1 with 1. The
// buckets' totals add up to 3 of a sale of 2: once reopened, bucket 0
// sells two units beside o2's, three live units of two (explorer seed
// 20262328 on ef24b44). However the passes interleave, the buckets may not
// reopen until their totals add up to the sale's (and each variant's) and
// each covers its live units; then the sale sells exactly what is left.
func TestBucketRebuildsOfTwoPlans(t *testing.T) {
	for _, variants := range []bool{false, true} {
		t.Run("variants="+strconv.FormatBool(variants), func(t *testing.T) { testBucketRebuildsOfTwoPlans(t, variants) })
	}
}

func testBucketRebuildsOfTwoPlans(t *testing.T, variants bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := cptest.OpenDB(t, cptest.SQLiteDSN(t))
	store := &snapStore{DB: db}
	e := &env{t: t, ctx: ctx, db: db, clock: testclock.New(time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC))}
	e.rdb = redistest.Start(t).Client(t)
	e.k = New(Config{Redis: e.rdb, Store: store, Logger: cptest.QuietLogger(), Clock: e.clock})
	sale := flashgate.Sale{ID: "plans", Name: "Plans", Total: 2, Buckets: 2, PerUser: 1, PriceCents: 100}
	v, v2 := "", ""
	if variants {
		// o1 is of variant A (placed in bucket 0), o2 of B (in bucket 1),
		// whose one unit o2 holds at the end; A's unit is the one left.
		sale.Variants = []flashgate.Variant{{ID: "A", Name: "A", Total: 1}, {ID: "B", Name: "B", Total: 1}}
		v, v2 = "A", "B"
	}
	sale = e.startBucketed(sale)
	l := Layout(sale)
	home := func(b, skip int) string {
		for i := 0; ; i++ {
			if u := "u" + strconv.Itoa(i); l.Home(u) == b {
				if skip == 0 {
					return u
				}
				skip--
			}
		}
	}
	reserve := func(b int, id, user, v string) bool {
		t.Helper()
		res, err := lua.Reserve.Run(ctx, e.rdb, lua.ReserveKeys(l.Tag(b)), id, user, 1, e.clock.Now().UnixMilli(), sale.ID, b, "", v).Slice()
		if err != nil {
			t.Fatalf("reserve %s in bucket %d: %v", id, b, err)
		}
		return res[0] == int64(lua.ReserveOK)
	}
	if !reserve(0, "o1", home(0, 0), v) {
		t.Fatal("reserve o1: refused")
	}
	o1 := cptest.Persist(t, ctx, e.rdb, db, l.Tag(0))[0]

	tok := e.takeFence()
	rctx := fencing.WithValue(ctx, tok)
	// Pass B runs whole right after pass A rebuilt bucket 0 (its
	// markRebuilt reads the ledger's fence first).
	hook := &afterCmd{want: strings.Join([]string{`"hget"`, strings.ToLower(strconv.Quote(lua.LedgerKey(sale.ID))), `"fence"`}, " ")}
	e.rdb.AddHook(hook)
	store.afterSnapshot = func() {
		if !reserve(1, "o2", home(1, 0), v2) {
			t.Errorf("reserve o2: refused")
		}
		cptest.Persist(t, ctx, e.rdb, db, l.Tag(1))
		if _, err := db.Transition(ctx, o1.ID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusCancelled, e.clock.Now()); err != nil {
			t.Errorf("cancel o1: %v", err)
		}
		if err := e.rdb.FlushAll(ctx).Err(); err != nil {
			t.Errorf("FLUSHALL: %v", err)
		}
		hook.step = func() {
			if _, _, err := e.k.Resync(rctx, sale); err != nil {
				t.Errorf("pass B: %v", err)
			}
		}
	}
	if _, _, err := e.k.Resync(rctx, sale); err != nil {
		t.Fatalf("pass A: %v", err)
	}
	if hook.step != nil {
		t.Fatal("pass B never ran: pass A rebuilt no bucket")
	}

	// The passes after: the sale must come back, whatever the totals the
	// two plans left, with exactly its one unit left to sell.
	sums := func() (total, open int64, vtotal map[string]int64) {
		vtotal = map[string]int64{}
		for _, tag := range l.Tags() {
			total += cptest.Field(t, e.rdb, tag, lua.FieldTotal)
			open += cptest.Field(t, e.rdb, tag, lua.FieldStart)
			for _, vr := range sale.Variants {
				vtotal[vr.ID] += cptest.Field(t, e.rdb, tag, lua.VariantField(vr.ID, lua.FieldTotal))
			}
		}
		return total, open, vtotal
	}
	for i := range 4 {
		if _, _, err := e.k.Resync(fencing.WithValue(ctx, e.takeFence()), sale); err != nil {
			t.Fatalf("pass %d after: %v", i, err)
		}
		if total, open, _ := sums(); open > 0 && total > sale.Total {
			t.Fatalf("after pass %d: %d buckets open with totals adding up to %d, of a sale of %d", i, open, total, sale.Total)
		}
	}
	total, open, vtotal := sums()
	if open != int64(l.N()) {
		t.Fatalf("after the passes: %d buckets open, want %d", open, l.N())
	}
	if total != sale.Total {
		t.Errorf("bucket totals add up to %d, want the sale's %d", total, sale.Total)
	}
	for _, vr := range sale.Variants {
		if vtotal[vr.ID] != vr.Total {
			t.Errorf("variant %s: bucket totals add up to %d, want %d", vr.ID, vtotal[vr.ID], vr.Total)
		}
	}
	// New buyers, each of every variant in turn, in both buckets.
	kinds := []string{v}
	if variants {
		kinds = []string{"A", "B"}
	}
	sold := map[string]int{}
	for i := range 8 {
		b, k := i%2, kinds[(i/2)%len(kinds)]
		if reserve(b, "n"+strconv.Itoa(i), home(b, 1+i), k) {
			sold[k]++
		}
	}
	want := map[string]int{"": 1}
	if variants {
		want = map[string]int{"A": 1, "B": 0}
	}
	for k, n := range want {
		if sold[k] != n {
			t.Errorf("new buyers bought %d units (variant %q) beside o2's, want %d", sold[k], k, n)
		}
	}
}
