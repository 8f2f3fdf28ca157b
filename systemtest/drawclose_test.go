package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/controlplane/drawclose"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/draw"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/payments"
	"github.com/flashgate/flashgate/sqldb"
)

const drawToken = "draw-admin-token"

// drawStack is a draw's tiers: Redis, a database, the inventory, an order
// sink, the stand-in provider, and control planes made on demand.
type drawStack struct {
	t     *testing.T
	ctx   context.Context
	rdb   redis.UniversalClient
	db    *sqldb.DB
	inv   *inventory.Service
	clock *testclock.Clock
	stand *stripelocal.Server
	pay   *payments.Stripe
	sale  flashgate.Sale
	// entrants are the entered entries by id; pending one entry that is
	// not authorised.
	entrants map[string]flashgate.DrawEntry
	// ends gives the sale an ends_at a minute after its entries close.
	ends bool
}

func newDrawStack(t *testing.T, dsn string) *drawStack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	db, err := sqldb.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	srv := redistest.Start(t)
	s := &drawStack{t: t, ctx: ctx, rdb: srv.Client(t), db: db, clock: testclock.New(time.Now().Truncate(time.Millisecond)),
		entrants: map[string]flashgate.DrawEntry{}}
	s.inv = inventory.New(s.rdb, inventory.Config{Logger: quiet, Clock: s.clock})
	t.Cleanup(func() { _ = s.inv.Close() })
	s.stand = stripelocal.New("sk_test_draw", "whsec_draw")
	ts := httptest.NewServer(s.stand)
	t.Cleanup(ts.Close)
	if s.pay, err = payments.NewStripe(payments.StripeConfig{Key: s.stand.Key, WebhookSecret: s.stand.WebhookSecret, APIBase: ts.URL}); err != nil {
		t.Fatal(err)
	}
	sink := ordersink.New(srv.Client(t), db, ordersink.Config{Consumer: "draw-sink", Batch: 64, Block: 20 * time.Millisecond,
		RefreshSales: 50 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Logger: quiet})
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := sink.Run(sctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("ordersink: %v", err)
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	return s
}

// controlPlane is a control plane (not running its loops) whose draws
// capture through capt.
func (s *drawStack) controlPlane(capt controlplane.DrawCapturer) *controlplane.Service {
	s.t.Helper()
	cp, err := controlplane.New(controlplane.Config{Redis: s.rdb, Store: s.db, Releaser: s.inv, AdminToken: drawToken,
		Clock: s.clock, Logger: quiet, DrawReserver: s.inv, DrawCapturer: capt, DrawWorkers: 4})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = cp.Close() })
	return cp
}

// pacer is the provider at a quick rate.
func (s *drawStack) pacer() *payments.Pacer {
	return payments.NewPacer(s.pay, payments.PacerConfig{PerEndpoint: 1000, Overall: 2000, MaxTime: 10 * time.Second})
}

// create creates the draw sale (sizes S: 3 units, M: 2), its entries open
// from now for an hour, ending (ends_at) a minute after they close when
// s.ends.
func (s *drawStack) create(cp *controlplane.Service) {
	open, closeAt := s.clock.Now(), s.clock.Now().Add(time.Hour)
	var ends *time.Time
	if s.ends {
		t := closeAt.Add(time.Minute)
		ends = &t
	}
	sale := flashgate.Sale{ID: "drop", Name: "Drop", PriceCents: 1200, Total: 5, PerUser: 1, Queue: flashgate.QueueDraw,
		EntriesOpenAt: &open, EntriesCloseAt: &closeAt, EndsAt: ends,
		Variants: []flashgate.Variant{{ID: "S", Name: "Small", Total: 3}, {ID: "M", Name: "Medium", Total: 2}}}
	created, err := cp.CreateSale(s.ctx, sale)
	if err != nil {
		s.t.Fatal(err)
	}
	s.sale = created
}

// enter creates the draw sale (create), enters n buyers, each with a
// confirmed hold (card for the entry; card nil: no hold, as with simulated
// payments), plus one pending entry, and writes the entries and their
// holds to the database.
func (s *drawStack) enter(cp *controlplane.Service, n int, card func(id string) string) {
	t := s.t
	s.create(cp)
	sale := s.sale
	now := s.clock.Now().UnixMilli()
	for i := range n + 1 {
		user, id, v := fmt.Sprintf("buyer-%02d", i), fmt.Sprintf("d%02d", i), []string{"S", "M"}[i%2]
		if r, err := lua.DrawEnter.Run(s.ctx, s.rdb, lua.DrawEnterKeys(sale.ID, ""), user, id, v, 1, now, 0).Slice(); err != nil || r[0] != int64(0) {
			t.Fatalf("DrawEnter %s: %v %v", id, r, err)
		}
		if i == n {
			break // pending: its hold never authorised
		}
		if r, err := lua.DrawSet.Run(s.ctx, s.rdb, lua.DrawChangeKeys(sale.ID), user, id, string(flashgate.DrawEntered), now,
			string(flashgate.DrawPending)).Slice(); err != nil || r[0] != int64(0) {
			t.Fatalf("DrawSet %s: %v %v", id, r, err)
		}
	}
	// A leader's loop may flush the journal at the same time (as a close
	// does beside the tick): a flush that failed (PostgreSQL may find the
	// two deadlocked) leaves its changes in the journal for the next.
	var last error
	if _, ok := testwait.For(10*time.Second, func() bool {
		_, last = drawjournal.Flush(s.ctx, s.rdb, s.db, sale.ID, 0)
		n, err := s.rdb.XLen(s.ctx, lua.DrawJournalKey(sale.ID)).Result()
		return last == nil && err == nil && n == 0
	}); !ok {
		t.Fatalf("the draw journal not flushed: %v", last)
	}
	rows, err := s.db.DrawEntries(s.ctx, sale.ID)
	if err != nil || len(rows) != n+1 {
		t.Fatalf("entries: got %d, %v; want %d", len(rows), err, n+1)
	}
	var held []flashgate.DrawEntry
	for _, r := range rows {
		if r.State != flashgate.DrawEntered {
			continue
		}
		if card == nil {
			s.entrants[r.ID] = r
			continue
		}
		in, err := s.pay.Hold(s.ctx, flashgate.Hold{EntryID: r.ID, SaleID: sale.ID, AmountCents: 1200, Currency: "usd"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.stand.Confirm(in.ID, card(r.ID)); err != nil {
			t.Fatal(err)
		}
		r.PaymentIntent = in.ID
		held = append(held, r)
		s.entrants[r.ID] = r
	}
	if len(held) > 0 {
		if err := s.db.PutDrawEntries(s.ctx, held); err != nil {
			t.Fatal(err)
		}
	}
}

// winners is the draw's winners of each variant, as anyone redoes it.
func (s *drawStack) winners() map[string][]draw.Entry {
	var es []draw.Entry
	for _, r := range s.entrants {
		es = append(es, draw.Entry{ID: r.ID, Variant: r.Variant, Quantity: int(r.Quantity)})
	}
	won, err := draw.Winners(s.sale.ID, drawclose.Seed(controlplane.DeriveQueueSeedSecret(drawToken), s.sale), es, drawclose.Stock(s.sale))
	if err != nil {
		s.t.Fatal(err)
	}
	return won
}

// closeDraw runs the close until it finished.
func (s *drawStack) closeDraw(cp *controlplane.Service) {
	s.t.Helper()
	var last error
	if _, ok := testwait.For(30*time.Second, func() bool {
		done, err := cp.CloseDraw(s.ctx, s.sale)
		last = err
		return done
	}); !ok {
		s.t.Fatalf("the close did not finish: %v", last)
	}
}

// check checks a finished close: each variant's units captured (one paid
// order row each, of the entrant's variant), every other hold released,
// nobody captured twice, the entries' states, the status and the file.
func (s *drawStack) check(cp *controlplane.Service, wantPromoted int) map[string]bool {
	t := s.t
	t.Helper()
	states := map[string]flashgate.DrawEntryState{}
	all, err := s.rdb.HGetAll(s.ctx, lua.DrawKey(s.sale.ID)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range all {
		st, id, _, _, _ := lua.ParseDrawEntry(v)
		states[id] = st
	}
	captured := map[string]bool{}
	perVariant := map[string]int{}
	for id, r := range s.entrants {
		status := flashgate.IntentCanceled
		if r.PaymentIntent == "" { // simulated payments: no hold
			if states[id] == flashgate.DrawCaptured {
				status = flashgate.IntentSucceeded
			}
		} else {
			in, ok := s.stand.Intent(r.PaymentIntent)
			if !ok {
				t.Fatalf("intent of %s missing", id)
			}
			status = in.Status
		}
		switch status {
		case flashgate.IntentSucceeded:
			captured[id] = true
			perVariant[r.Variant]++
			if states[id] != flashgate.DrawCaptured {
				t.Errorf("entry %s charged: state %s, want captured", id, states[id])
			}
		case flashgate.IntentCanceled:
			if states[id] != flashgate.DrawReleased {
				t.Errorf("entry %s released: state %s, want released", id, states[id])
			}
		default:
			t.Errorf("entry %s: hold %s, want captured or released", id, status)
		}
	}
	for _, v := range s.sale.Variants {
		if perVariant[v.ID] != int(v.Total) {
			t.Errorf("variant %s: got %d captured, want %d (its units)", v.ID, perVariant[v.ID], v.Total)
		}
	}
	if st := states["d"+fmt.Sprint(len(s.entrants))]; st != flashgate.DrawPending {
		t.Errorf("the pending entry: got %s, want pending (not in the draw)", st)
	}
	testwait.Eventually(t, 10*time.Second, func() bool {
		orders, err := s.db.OrdersPage(s.ctx, s.sale.ID, flashgate.StatusPaid, "", 1000)
		return err == nil && len(orders) == len(captured)
	}, "%d paid orders", len(captured))
	orders, _ := s.db.OrdersPage(s.ctx, s.sale.ID, flashgate.StatusPaid, "", 1000)
	for _, o := range orders {
		id := o.ID[1:]
		if r := s.entrants[id]; !captured[id] || o.UserID != r.UserID || o.Variant != r.Variant || o.ID != drawclose.OrderID(id) {
			t.Errorf("order %+v: not the order of a charged entry", o)
		}
	}
	if pending, _ := s.db.OrdersPage(s.ctx, s.sale.ID, flashgate.StatusPendingPayment, "", 1000); len(pending) != 0 {
		t.Errorf("unpaid orders: got %d, want 0", len(pending))
	}
	st, err := cp.SaleStatus(s.ctx, s.sale.ID)
	if err != nil || st.Draw == nil {
		t.Fatalf("status: %+v, %v", st, err)
	}
	d := st.Draw
	if d.Winners != s.sale.Total || d.Captured != int64(len(captured)) || d.Released != int64(len(s.entrants)-len(captured)) ||
		d.Promoted != int64(wantPromoted) || !d.Closed || d.Seed == "" || d.SeedSHA256 == "" {
		t.Errorf("draw status: got %+v; want %d winners, %d captured, %d released, %d promoted, closed, the seed",
			*d, s.sale.Total, len(captured), len(s.entrants)-len(captured), wantPromoted)
	}
	body, err := cp.DrawFile(s.ctx, s.sale.ID)
	if err != nil {
		t.Fatal(err)
	}
	f, err := draw.Read(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := draw.Verify(f); err != nil {
		t.Errorf("the published file does not verify: %v", err)
	}
	if len(f.Entries) != len(s.entrants) || f.SeedSHA256 != d.SeedSHA256 || bytes.Contains(body, []byte("buyer-")) {
		t.Errorf("file: %d entries (want %d), commitment %s (status %s), or a user id in it", len(f.Entries), len(s.entrants), f.SeedSHA256, d.SeedSHA256)
	}
	return captured
}

func drawBackends(t *testing.T, run func(t *testing.T, dsn string)) {
	t.Run("sqlite", func(t *testing.T) { run(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db")) })
	t.Run("postgres", func(t *testing.T) { run(t, pgtest.New(t)) })
}

// TestDrawClose: a close end to end with a capture declined: the seed
// committed at the opening and revealed at the close, each variant's
// units captured (the declined winner's going to the next entrant of its
// size), their orders paid rows through the order sink, every other hold
// released, and the published file verifies. A close run again changes
// nothing.
func TestDrawClose(t *testing.T) {
	drawBackends(t, func(t *testing.T, dsn string) {
		s := newDrawStack(t, dsn)
		cp := s.controlPlane(s.pacer())
		var decline string
		s.enter(cp, 16, func(id string) string {
			if id == decline {
				return stripelocal.CaptureDeclineCard
			}
			return "4242424242424242"
		})
		// The first winner of S declines at capture: its hold is
		// confirmed again with the declining card.
		decline = s.winners()["S"][0].ID
		r := s.entrants[decline]
		if _, err := s.pay.Cancel(s.ctx, r.PaymentIntent); err != nil {
			t.Fatal(err)
		}
		in, err := s.pay.Hold(s.ctx, flashgate.Hold{EntryID: decline + "x", SaleID: s.sale.ID, AmountCents: 1200, Currency: "usd"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.stand.Confirm(in.ID, stripelocal.CaptureDeclineCard); err != nil {
			t.Fatal(err)
		}
		r.PaymentIntent = in.ID
		s.entrants[decline] = r
		if err := s.db.PutDrawEntries(s.ctx, []flashgate.DrawEntry{r}); err != nil {
			t.Fatal(err)
		}
		if err := cp.CommitDraw(s.ctx, s.sale); err != nil {
			t.Fatal(err)
		}
		st, err := cp.SaleStatus(s.ctx, s.sale.ID)
		if err != nil || st.Draw.SeedSHA256 == "" || st.Draw.Seed != "" {
			t.Fatalf("status at the opening: %+v, %v; want the commitment, no seed", st.Draw, err)
		}
		if done, err := cp.CloseDraw(s.ctx, s.sale); done || err != nil {
			t.Fatalf("close before entries_close_at: %v, %v; want nothing done", done, err)
		}
		s.clock.Add(time.Hour)
		s.closeDraw(cp)
		captured := s.check(cp, 1)
		if captured[decline] {
			t.Errorf("the declined winner %s is charged", decline)
		}
		requests := len(s.stand.Requests())
		s.closeDraw(cp)
		if got := len(s.stand.Requests()); got != requests {
			t.Errorf("a finished close run again: %d provider requests, want none", got-requests)
		}
		s.check(cp, 1)
	})
}

// killingCapturer is a provider whose caller dies (its context is
// canceled) after n captures, as a leader killed mid-draw.
type killingCapturer struct {
	next   draw.Capturer
	n      atomic.Int64
	cancel context.CancelFunc
}

func (k *killingCapturer) Capture(ctx context.Context, id, key string) (flashgate.Intent, error) {
	in, err := k.next.Capture(ctx, id, key)
	if k.n.Add(-1) == 0 {
		k.cancel()
	}
	return in, err
}

func (k *killingCapturer) Cancel(ctx context.Context, id string) (flashgate.Intent, error) {
	return k.next.Cancel(ctx, id)
}

// TestDrawCloseInterrupted: a close cut short after two captures (its
// leader killed) is finished by another leader's run: every unit captured
// once, nobody charged twice, no loser charged, every other hold released.
func TestDrawCloseInterrupted(t *testing.T) {
	drawBackends(t, func(t *testing.T, dsn string) {
		s := newDrawStack(t, dsn)
		kctx, kill := context.WithCancel(s.ctx)
		k := &killingCapturer{next: s.pacer(), cancel: kill}
		k.n.Store(2)
		first := s.controlPlane(k)
		s.enter(first, 12, func(string) string { return "4242424242424242" })
		s.clock.Add(time.Hour)
		if done, err := first.CloseDraw(kctx, s.sale); done || err == nil {
			t.Fatalf("the killed close: %v, %v; want an error", done, err)
		}
		second := s.controlPlane(s.pacer())
		s.closeDraw(second)
		captured := s.check(second, 0)
		won := map[string]bool{}
		for _, w := range s.winners() {
			for _, e := range w {
				won[e.ID] = true
			}
		}
		for id := range captured {
			if !won[id] {
				t.Errorf("entry %s charged: not a winner", id)
			}
		}
		for _, in := range s.stand.Intents() {
			if in.Status == flashgate.IntentSucceeded && in.AmountReceived != 1200 {
				t.Errorf("intent %s: received %d, want 1200 once", in.ID, in.AmountReceived)
			}
		}
	})
}

// TestDrawCloseByTheLeader: with simulated payments (no holds), the
// leader's loop publishes the seed's commitment once entries open and
// closes the draw at entries_close_at by itself, and only then the sale at
// its ends_at (which the clock passed with the close: a closed sale would
// refuse the winners' orders); each entrant's entry at the gateway then
// says won (with its order) or lost.
func TestDrawCloseByTheLeader(t *testing.T) {
	drawBackends(t, func(t *testing.T, dsn string) {
		s := newDrawStack(t, dsn)
		cp, err := controlplane.New(controlplane.Config{Redis: s.rdb, Store: s.db, Releaser: s.inv, AdminToken: drawToken,
			Clock: s.clock, Logger: quiet, DrawReserver: s.inv, TickEvery: 10 * time.Millisecond, ResyncEvery: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(s.ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = cp.Run(ctx) }()
		t.Cleanup(func() { stop(); <-done; _ = cp.Close() })
		s.ends = true
		s.enter(cp, 10, nil)
		testwait.Eventually(t, 10*time.Second, func() bool {
			st, err := cp.SaleStatus(s.ctx, s.sale.ID)
			return err == nil && st.Draw != nil && st.Draw.SeedSHA256 != ""
		}, "the commitment published")
		s.clock.Add(2 * time.Hour)
		testwait.Eventually(t, 20*time.Second, func() bool {
			st, err := cp.SaleStatus(s.ctx, s.sale.ID)
			return err == nil && st.Draw != nil && st.Draw.Closed && st.State == flashgate.StateClosed
		}, "the leader's close, then the sale closed")
		captured := s.check(cp, 0)
		// Each entrant reads the result at the gateway.
		secret := []byte(randomHex(t, 32))
		gw, err := gateway.New(gateway.Config{Primary: s.rdb, Replica: s.rdb, Reserver: s.inv, Catalog: s.db, Orders: cp,
			JWTSecret: secret, Logger: quiet, ShutdownDelay: -1, Clock: s.clock})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() { defer close(served); _ = gw.Serve(ln) }()
		t.Cleanup(func() { _ = gw.Shutdown(context.Background()); <-served })
		for id, r := range s.entrants {
			tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": r.UserID, "exp": s.clock.Now().Add(24 * time.Hour).Unix()}).SignedString(secret)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/api/sales/"+s.sale.ID+"/entry", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var got entryResult
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			want := entryResult{Result: "lost"}
			if captured[id] {
				want.Result, want.OrderID = "won", drawclose.OrderID(id)
			}
			if err != nil || resp.StatusCode != 200 || got != want {
				t.Errorf("GET entry of %s: %d %+v, %v; want 200 %+v", id, resp.StatusCode, got, err, want)
			}
		}
	})
}

// drawMetric reads flashgate_draw{step} of the sale "drop" from cp's
// metrics; -1 when absent.
func drawMetric(t *testing.T, cp *controlplane.Service, step string) float64 {
	t.Helper()
	mfs, err := cp.AdminSettings().Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "flashgate_draw" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["sale"] == "drop" && labels["step"] == step {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// entryResult is what TestDrawCloseByTheLeader reads of an entry.
type entryResult struct {
	Result  string `json:"result"`
	OrderID string `json:"order_id"`
}

// TestDrawCloseRedisLost: Redis loses everything (FLUSHALL) after a close
// was cut short; once a re-sync rebuilt the sale, the next run finishes the
// close from the database: every unit captured once, no loser charged,
// every other hold released, one order per charged entrant.
func TestDrawCloseRedisLost(t *testing.T) {
	drawBackends(t, func(t *testing.T, dsn string) {
		s := newDrawStack(t, dsn)
		kctx, kill := context.WithCancel(s.ctx)
		k := &killingCapturer{next: s.pacer(), cancel: kill}
		k.n.Store(3)
		first := s.controlPlane(k)
		s.enter(first, 12, func(string) string { return "4242424242424242" })
		s.clock.Add(time.Hour)
		if done, err := first.CloseDraw(kctx, s.sale); done || err == nil {
			t.Fatalf("the killed close: %v, %v; want an error", done, err)
		}
		// The orders made before the kill reach the database first, as
		// the sink would have written them before the loss.
		testwait.Eventually(t, 10*time.Second, func() bool {
			n, err := s.rdb.XLen(s.ctx, lua.OrdersKey(s.sale.ID)).Result()
			return err == nil && n == 0
		}, "the order stream drained")
		if err := s.rdb.FlushAll(s.ctx).Err(); err != nil {
			t.Fatal(err)
		}
		// The next leader's loop rebuilds the sale, resumes it and
		// finishes the close.
		second, err := controlplane.New(controlplane.Config{Redis: s.rdb, Store: s.db, Releaser: s.inv, AdminToken: drawToken,
			Clock: s.clock, Logger: quiet, DrawReserver: s.inv, DrawCapturer: s.pacer(), DrawWorkers: 4,
			TickEvery: 10 * time.Millisecond, ResyncEvery: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(s.ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = second.Run(ctx) }()
		t.Cleanup(func() { stop(); <-done; _ = second.Close() })
		testwait.Eventually(t, 30*time.Second, func() bool {
			st, err := second.SaleStatus(s.ctx, s.sale.ID)
			return err == nil && st.Draw != nil && st.Draw.Closed
		}, "the next leader's close")
		won := map[string]bool{}
		for _, w := range s.winners() {
			for _, e := range w {
				won[e.ID] = true
			}
		}
		perVariant := map[string]int{}
		for id, r := range s.entrants {
			in, _ := s.stand.Intent(r.PaymentIntent)
			switch {
			case in.Status == flashgate.IntentSucceeded && !won[id]:
				t.Errorf("entry %s charged: not a winner", id)
			case in.Status == flashgate.IntentSucceeded:
				perVariant[r.Variant]++
			case in.Status != flashgate.IntentCanceled:
				t.Errorf("entry %s: hold %s, want captured or released", id, in.Status)
			}
		}
		for _, v := range s.sale.Variants {
			if perVariant[v.ID] != int(v.Total) {
				t.Errorf("variant %s: %d captured, want %d", v.ID, perVariant[v.ID], v.Total)
			}
		}
		testwait.Eventually(t, 10*time.Second, func() bool {
			orders, err := s.db.OrdersPage(s.ctx, s.sale.ID, flashgate.StatusPaid, "", 1000)
			return err == nil && len(orders) == int(s.sale.Total)
		}, "%d paid orders", s.sale.Total)
		// The leader exports the close's progress (of live sales: this one
		// has no ends_at, so it is never archived).
		testwait.Eventually(t, 10*time.Second, func() bool {
			return drawMetric(t, second, "winners") == float64(s.sale.Total) && drawMetric(t, second, "promoted") == 0
		}, `flashgate_draw{step="winners"} = %d and {step="promoted"} = 0`, s.sale.Total)
		for _, st := range []flashgate.OrderStatus{flashgate.StatusPendingPayment, flashgate.StatusCancelled, flashgate.StatusExpired} {
			if orders, _ := s.db.OrdersPage(s.ctx, s.sale.ID, st, "", 1000); len(orders) != 0 {
				t.Errorf("%s orders: got %d, want 0", st, len(orders))
			}
		}
	})
}
