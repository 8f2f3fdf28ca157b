package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/payments"
	"github.com/flashgate/flashgate/sqldb"
)

// BenchmarkStuckPayments: 1,000 payments stuck in processing at a stand-in
// of the provider limited to 25 requests a second, while buyers check out.
// It reports how long the reconciliation (a pass every 200 ms) takes to
// ask about every payment once (reach_all_s; the floor is 1,000 over the
// rate), the 429s the stand-in answered, and the checkouts that failed
// (want 0: a 429 is waited out within the checkout's deadline, never
// surfaced), at PaymentReconcileRate 20 (under the limit) and 40 (over it:
// the 429s' Retry-After paces it).
// Run it alone: go test -run '^$' -bench StuckPayments -benchtime 1x ./controlplane/
func BenchmarkStuckPayments(b *testing.B) {
	for _, rate := range []float64{20, 40} {
		b.Run(fmt.Sprintf("rate=%v", rate), func(b *testing.B) { benchStuckPayments(b, rate) })
	}
}

func benchStuckPayments(b *testing.B, rateCP float64) {
	const (
		stuck    = 1000
		limit    = 25
		buyers   = 20
		maxWait  = 3 * time.Minute
		tickWall = 200 * time.Millisecond
	)
	for range b.N {
		stand := stripelocal.New("sk_test_bench", "whsec_bench")
		ts := httptest.NewServer(stand)
		prov, err := payments.NewStripe(payments.StripeConfig{Key: stand.Key, WebhookSecret: stand.WebhookSecret, APIBase: ts.URL,
			HTTPClient: &http.Client{Timeout: 3 * time.Second}})
		if err != nil {
			b.Fatal(err)
		}
		e := newBenchEnv(b, func(c *Config) {
			c.Payments, c.PaymentStore = prov, c.Store.(*sqldb.DB)
			c.PaymentWindow, c.PaymentGrace = time.Minute, time.Second
			c.PaymentReconcileRate = rateCP
		})
		if _, err := e.svc.CreateSale(e.ctx, flashgate.Sale{ID: "s1", Name: "s1", PriceCents: 500, Total: stuck + buyers, AdmitRatio: 3}); err != nil {
			b.Fatal(err)
		}
		if err := e.svc.Start(e.ctx, "s1"); err != nil {
			b.Fatal(err)
		}
		for i := range stuck {
			if code, _ := e.reserve("s1", fmt.Sprintf("stuck-%d", i)); code != 0 {
				b.Fatalf("reserve %d: code %d", i, code)
			}
		}
		for _, o := range e.persist("s1") {
			in, err := prov.Checkout(e.ctx, o, o.PriceCents, "usd")
			if err != nil {
				b.Fatal(err)
			}
			stand.SetStatus(in.ID, flashgate.IntentProcessing)
			if _, err := e.db.InsertPayment(e.ctx, flashgate.Payment{OrderID: o.ID, IntentID: in.ID, Status: flashgate.IntentProcessing,
				AmountCents: o.PriceCents, Currency: "usd"}, e.clock.Now()); err != nil {
				b.Fatal(err)
			}
		}
		before := len(stand.Requests())
		e.clock.Add(2 * time.Minute)
		stand.RateLimit(limit)
		b.ResetTimer()
		start := time.Now()
		asked := func() int {
			seen := map[string]bool{}
			for _, r := range stand.Requests()[before:] {
				if r.Method == http.MethodGet {
					seen[r.Path] = true
				}
			}
			return len(seen)
		}
		// Buyers check out, one every 2 s, beside the reconciliation.
		var failed, bought atomic.Int64
		stop := make(chan struct{})
		buying := make(chan struct{})
		go func() {
			defer close(buying)
			every := time.NewTicker(2 * time.Second)
			defer every.Stop()
			for i := 0; i < buyers; i++ {
				select {
				case <-stop:
					return
				case <-every.C:
				}
				user := fmt.Sprintf("buyer-%d", i)
				code, id := e.reserve("s1", user)
				if code != 0 {
					continue
				}
				e.persist("s1")
				ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
				if _, err := e.svc.Pay(ctx, id, user); err != nil {
					failed.Add(1)
					b.Logf("checkout of %s: %v", id, err)
				}
				cancel()
				bought.Add(1)
			}
		}()
		var reach time.Duration
		tick := time.NewTicker(tickWall)
		last := time.Now()
		for time.Since(start) < maxWait {
			<-tick.C
			e.clock.Add(time.Since(last))
			last = time.Now()
			if _, err := e.svc.ReconcilePayments(e.ctx); err != nil {
				b.Logf("pass: %v", err)
			}
			if asked() >= stuck {
				reach = time.Since(start)
				break
			}
		}
		close(stop)
		<-buying
		tick.Stop()
		b.StopTimer()
		if reach == 0 {
			b.Fatalf("after %v only %d of %d stuck payments were asked about", maxWait, asked(), stuck)
		}
		b.ReportMetric(reach.Seconds(), "reach_all_s")
		b.ReportMetric(float64(stand.Limited()), "429s")
		b.ReportMetric(float64(failed.Load()), "checkouts_failed")
		b.ReportMetric(float64(bought.Load()), "checkouts")
		ts.Close()
	}
}

// benchEnv is a control plane over its own redis-server and SQLite file,
// for benchmarks.
type benchEnv struct {
	b     *testing.B
	ctx   context.Context
	rdb   redis.UniversalClient
	db    *sqldb.DB
	clock *testclock.Clock
	svc   *Service
	seq   int
}

func newBenchEnv(b *testing.B, mod func(*Config)) *benchEnv {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	srv := redistest.Start(b)
	e := &benchEnv{b: b, ctx: ctx, rdb: srv.Client(b), db: openDB(b, "sqlite://"+filepath.Join(b.TempDir(), "fg.db")), clock: testclock.New(t0)}
	cfg := Config{Redis: e.rdb, Store: e.db, Releaser: &luaReleaser{RDB: e.rdb}, AdminToken: testToken,
		Clock: e.clock, Logger: quietLogger(), PersistWait: -1, NodeID: "bench"}
	mod(&cfg)
	svc, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	e.svc = svc
	return e
}

func (e *benchEnv) reserve(sale, user string) (int64, string) {
	e.seq++
	return cptest.Reserve(e.b, e.ctx, e.rdb, sale, user, fmt.Sprintf("o%06d", e.seq), e.clock.Now())
}

func (e *benchEnv) persist(sale string) []flashgate.Order {
	return cptest.Persist(e.b, e.ctx, e.rdb, e.db, sale)
}
