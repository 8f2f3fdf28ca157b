package drawhold_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawhold"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/payments"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	sale  = "dr"
	price = 1250
	grace = 30 * time.Second
)

// sales is the holder's Store: the draw sale's price, and the holds it
// records (in held, when set: entry id → intent; refuse, when set, makes
// it refuse them as a row the journal has not written yet).
type sales struct {
	held   *sync.Map
	refuse *atomic.Bool
}

func (s sales) RecordDrawHold(_ context.Context, _, entryID, intent string) (bool, error) {
	if s.refuse != nil && s.refuse.Load() {
		return false, nil
	}
	if s.held != nil {
		s.held.Store(entryID, intent)
	}
	return true, nil
}

func (sales) Sale(_ context.Context, id string) (flashgate.Sale, error) {
	if id != sale {
		return flashgate.Sale{}, flashgate.ErrNotFound
	}
	return flashgate.Sale{ID: sale, PriceCents: price, Queue: flashgate.QueueDraw}, nil
}

// env is a draw sale in a real Redis, a holder on the stand-in provider
// (nil: simulated payments), and the stand-in's webhooks, delivered to
// the holder through the provider's parser when hooks is on.
type env struct {
	t      *testing.T
	ctx    context.Context
	rdb    *redis.Client
	clock  *testclock.Clock
	stand  *stripelocal.Server
	stripe *payments.Stripe
	h      *drawhold.Holder
	hooks  atomic.Bool
	n      int
	// held and refuse are the Store's (sales); flushes counts the
	// holder's journal flushes, each of which writes the rows (refuse
	// off) when writes is on.
	held    sync.Map
	refuse  atomic.Bool
	flushes atomic.Int32
	writes  atomic.Bool
}

func newEnv(t *testing.T, paying bool) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), rdb: redistest.Start(t).Client(t),
		clock: testclock.New(time.Now().Truncate(time.Millisecond))}
	open := e.clock.Now().Add(-time.Minute)
	if err := lua.Prepare.Run(e.ctx, e.rdb, lua.SaleKeys(sale), 3, 5, 2, price, "", lua.DrawWindowArg(open, open.Add(time.Hour)), "S:2,M:1").Err(); err != nil {
		t.Fatal(err)
	}
	cfg := drawhold.Config{Redis: e.rdb, Store: sales{held: &e.held, refuse: &e.refuse}, Clock: e.clock, Logger: cptest.QuietLogger(), Grace: grace, Rate: 1000,
		Flush: func(context.Context, string) (int, error) {
			e.flushes.Add(1)
			if e.writes.Load() {
				e.refuse.Store(false)
			}
			return 0, nil
		}}
	if paying {
		e.stand = stripelocal.New("sk_test", "whsec_test")
		api := httptest.NewServer(e.stand)
		t.Cleanup(api.Close)
		var err error
		if e.stripe, err = payments.NewStripe(payments.StripeConfig{Key: "sk_test", WebhookSecret: "whsec_test", APIBase: api.URL}); err != nil {
			t.Fatal(err)
		}
		cfg.Provider = e.stripe
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			if !e.hooks.Load() {
				return // lost
			}
			if err := e.webhook(b, r.Header.Get("Stripe-Signature")); err != nil {
				t.Errorf("webhook: %v", err)
				w.WriteHeader(http.StatusInternalServerError)
			}
		}))
		t.Cleanup(hook.Close)
		t.Cleanup(e.stand.Deliveries.Wait)
		e.stand.SetWebhookURL(hook.URL)
		e.hooks.Store(true)
	}
	e.h = drawhold.New(cfg)
	return e
}

// webhook verifies and applies one delivery, as the control plane's
// webhook route does for an event naming an entry.
func (e *env) webhook(payload []byte, sig string) error {
	ev, err := e.stripe.ParseEvent(payload, sig)
	if err != nil {
		return err
	}
	if ev.EntryID == "" {
		return errors.New("an event of a hold without its entry")
	}
	return e.h.Event(context.Background(), ev)
}

// event delivers the event evID of type typ about intent, as it stands.
func (e *env) event(evID, typ, intent string) {
	e.t.Helper()
	p := e.stand.Event(evID, typ, intent, "")
	if err := e.webhook(p, e.stand.Sign(p, time.Now())); err != nil {
		e.t.Fatalf("event %s %s: %v", evID, typ, err)
	}
}

// enter puts user's entry (size S, qty) in the draw and returns its id.
func (e *env) enter(user string, qty int64) string {
	e.t.Helper()
	e.n++
	id := "e" + strconv.Itoa(e.n)
	v, err := lua.DrawEnter.Run(e.ctx, e.rdb, lua.DrawEnterKeys(sale, ""), user, id, "S", qty, e.clock.Now().UnixMilli(), 0).Slice()
	if err != nil || v[0] != int64(0) {
		e.t.Fatalf("DrawEnter %s: %v, %v", user, v, err)
	}
	return id
}

// withdraw withdraws user's entry as the gateway's DELETE does, then
// releases its hold.
func (e *env) withdraw(user string) (flashgate.DrawEntry, error) {
	e.t.Helper()
	e.withdrawOnly(user)
	return e.h.Release(e.ctx, sale, user)
}

// withdrawOnly withdraws user's entry as the gateway's DELETE does, and
// stops there, as a gateway that died before the release.
func (e *env) withdrawOnly(user string) {
	e.t.Helper()
	v, err := lua.DrawWithdraw.Run(e.ctx, e.rdb, lua.DrawWithdrawKeys(sale), user, e.clock.Now().UnixMilli(),
		e.clock.Now().Add(5*time.Second).UnixMilli()).Slice()
	if err != nil || v[0] != int64(0) {
		e.t.Fatalf("DrawWithdraw %s: %v, %v", user, v, err)
	}
}

// state reads user's entry's state.
func (e *env) state(user string) flashgate.DrawEntryState {
	e.t.Helper()
	v, err := e.rdb.HGet(e.ctx, lua.DrawKey(sale), user).Result()
	if err != nil {
		e.t.Fatalf("reading %s's entry: %v", user, err)
	}
	st, _, _, _, _ := lua.ParseDrawEntry(v)
	return st
}

func (e *env) count(st flashgate.DrawEntryState) int64 {
	return cptest.Field(e.t, e.rdb, sale, lua.DrawStateField(st))
}

func (e *env) intent(id string) stripelocal.Intent {
	e.t.Helper()
	in, ok := e.stand.Intent(id)
	if !ok {
		e.t.Fatalf("no intent %s at the stand-in", id)
	}
	return in
}

// listed reports whether entry is on the read path's list.
func (e *env) listed(entry string) bool {
	_, err := e.rdb.ZScore(e.ctx, lua.DrawCheckKey(sale), entry).Result()
	return err == nil
}

// TestHoldWebhookEnters: an entry's hold is one intent with manual capture
// for price × quantity, keyed by the entry, however often it is asked
// for; the entry stays pending until the buyer confirms, and the held
// webhook enters it. Duplicated events change nothing.
func TestHoldWebhookEnters(t *testing.T) {
	e := newEnv(t, true)
	id := e.enter("ann", 2)
	d, err := e.h.Hold(e.ctx, sale, "ann")
	if err != nil || d.ID != id || d.State != flashgate.DrawPending || d.PaymentIntent == "" || d.ClientSecret == "" {
		t.Fatalf("Hold: got %+v, %v; want entry %s pending with its intent and client secret", d, err, id)
	}
	again, err := e.h.Hold(e.ctx, sale, "ann")
	if err != nil || again.PaymentIntent != d.PaymentIntent || again.ClientSecret != d.ClientSecret {
		t.Fatalf("Hold again: got %+v, %v; want intent %s and its secret", again, err, d.PaymentIntent)
	}
	if ins := e.stand.Intents(); len(ins) != 1 {
		t.Fatalf("intents at the provider: got %d, want 1", len(ins))
	}
	in := e.intent(d.PaymentIntent)
	if in.Amount != 2*price || in.CaptureMethod != "manual" || in.Metadata["entry_id"] != id || in.Metadata["sale_id"] != sale {
		t.Errorf("intent: got %+v; want %d held for entry %s of %s", in, 2*price, id, sale)
	}
	for _, r := range e.stand.Requests() {
		if r.Path == "/v1/payment_intents" && r.IdempotencyKey != "flashgate-hold-"+id {
			t.Errorf("create request: idempotency key %q, want flashgate-hold-%s", r.IdempotencyKey, id)
		}
	}
	if got := e.state("ann"); got != flashgate.DrawPending {
		t.Errorf("before the confirm: got %s, want pending", got)
	}
	if _, err := e.stand.Confirm(d.PaymentIntent, "4242424242424242"); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return e.state("ann") == flashgate.DrawEntered }, "ann's entry entered")
	for i := 0; i < 2; i++ {
		e.event("evt_dup", flashgate.EventIntentHeld, d.PaymentIntent)
	}
	if got, want := [2]int64{e.count(flashgate.DrawPending), e.count(flashgate.DrawEntered)}, [2]int64{0, 1}; got != want {
		t.Errorf("pending, entered after duplicates: got %v, want %v", got, want)
	}
	if e.listed(id) {
		t.Errorf("entry %s still on the read path's list once entered", id)
	}
	// Asked again once entered, the entry is answered as it is.
	if d, err := e.h.Hold(e.ctx, sale, "ann"); err != nil || d.State != flashgate.DrawEntered || d.ClientSecret != "" {
		t.Errorf("Hold once entered: got %+v, %v; want the entered entry, no secret", d, err)
	}
}

// TestReorderedEvents: events of a hold arriving out of order, or after
// the entry moved on, change nothing they should not: a held event after
// the entry was withdrawn (its hold released) does not enter it; a
// canceled event of an entered entry leaves it entered (the close's
// capture finds out); a canceled hold of a pending entry takes it out of
// the draw, and a held event after that does not bring it back.
func TestReorderedEvents(t *testing.T) {
	e := newEnv(t, true)
	e.hooks.Store(false) // this test delivers each event itself
	hold := func(user string) (string, string) {
		t.Helper()
		id := e.enter(user, 1)
		d, err := e.h.Hold(e.ctx, sale, user)
		if err != nil {
			t.Fatalf("Hold %s: %v", user, err)
		}
		return id, d.PaymentIntent
	}
	// ann: confirmed, withdrawn (released), then the held event.
	_, annPI := hold("ann")
	if _, err := e.stand.Confirm(annPI, "4242424242424242"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.withdraw("ann"); err != nil {
		t.Fatalf("withdraw: %v", err)
	}
	e.event("evt_a2", flashgate.EventIntentCanceled, annPI)
	e.event("evt_a1", flashgate.EventIntentHeld, annPI)
	// bob: entered, then a canceled event (stale or not).
	_, bobPI := hold("bob")
	if _, err := e.stand.Confirm(bobPI, "4242424242424242"); err != nil {
		t.Fatal(err)
	}
	e.event("evt_b1", flashgate.EventIntentHeld, bobPI)
	e.event("evt_b2", flashgate.EventIntentCanceled, bobPI)
	// cyd: canceled at the provider before any confirm, the held event
	// (of an older state) after it.
	cydID, cydPI := hold("cyd")
	if _, err := e.stripe.Cancel(e.ctx, cydPI); err != nil {
		t.Fatal(err)
	}
	e.event("evt_c2", flashgate.EventIntentCanceled, cydPI)
	e.event("evt_c1", flashgate.EventIntentHeld, cydPI)
	for _, c := range []struct {
		user string
		want flashgate.DrawEntryState
	}{{"ann", flashgate.DrawWithdrawn}, {"bob", flashgate.DrawEntered}, {"cyd", flashgate.DrawWithdrawn}} {
		if got := e.state(c.user); got != c.want {
			t.Errorf("%s: got %s, want %s", c.user, got, c.want)
		}
	}
	if got := e.intent(annPI).Status; got != flashgate.IntentCanceled {
		t.Errorf("ann's hold: got %s, want canceled", got)
	}
	if got, want := [3]int64{e.count(flashgate.DrawPending), e.count(flashgate.DrawEntered), e.count(flashgate.DrawWithdrawn)}, [3]int64{0, 1, 2}; got != want {
		t.Errorf("pending, entered, withdrawn: got %v, want %v", got, want)
	}
	// The held events after the releases put them on the read path's
	// list, which releases them again, harmlessly, and forgets them.
	if _, err := e.h.Reconcile(e.ctx, []flashgate.Sale{{ID: sale, Queue: flashgate.QueueDraw}}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if e.listed(cydID) {
		t.Errorf("cyd's released hold still on the read path's list")
	}
	if got := e.intent(cydPI).Status; got != flashgate.IntentCanceled {
		t.Errorf("cyd's hold: got %s, want canceled", got)
	}
}

// TestWithdrawReleases: a withdrawal releases the hold, and doing it
// again is harmless; a release the provider refused (down) is done by
// the next call or by the read path.
func TestWithdrawReleases(t *testing.T) {
	e := newEnv(t, true)
	e.enter("ann", 1)
	d, err := e.h.Hold(e.ctx, sale, "ann")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.stand.Confirm(d.PaymentIntent, "4242424242424242"); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return e.state("ann") == flashgate.DrawEntered }, "ann's entry entered")
	if w, err := e.withdraw("ann"); err != nil || w.State != flashgate.DrawWithdrawn {
		t.Fatalf("withdraw: got %+v, %v; want withdrawn", w, err)
	}
	if got := e.intent(d.PaymentIntent).Status; got != flashgate.IntentCanceled {
		t.Errorf("hold after the withdrawal: got %s, want canceled", got)
	}
	for i := 0; i < 2; i++ {
		if w, err := e.h.Release(e.ctx, sale, "ann"); err != nil || w.State != flashgate.DrawWithdrawn {
			t.Errorf("release again: got %+v, %v; want withdrawn, no error", w, err)
		}
	}
	if _, err := e.h.Hold(e.ctx, sale, "ann"); !errors.Is(err, flashgate.ErrNotPayable) {
		t.Errorf("Hold of a withdrawn entry: got %v, want ErrNotPayable", err)
	}

	// bob's release fails (the provider is down): his withdrawal stands,
	// and the read path releases the hold.
	bobID := e.enter("bob", 1)
	b, err := e.h.Hold(e.ctx, sale, "bob")
	if err != nil {
		t.Fatal(err)
	}
	e.stand.FailNext(4)
	if _, err := e.withdraw("bob"); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Fatalf("withdraw with the provider down: got %v, want ErrUnavailable", err)
	}
	if got := e.intent(b.PaymentIntent).Status; got == flashgate.IntentCanceled {
		t.Fatalf("bob's hold canceled with the provider down")
	}
	e.stand.FailNext(0)
	if n, err := e.h.Reconcile(e.ctx, []flashgate.Sale{{ID: sale, Queue: flashgate.QueueDraw}}); err != nil || n != 1 {
		t.Fatalf("Reconcile: %d, %v; want 1 hold looked at", n, err)
	}
	if got := e.intent(b.PaymentIntent).Status; got != flashgate.IntentCanceled {
		t.Errorf("bob's hold after the read path: got %s, want canceled", got)
	}
	if e.listed(bobID) {
		t.Errorf("bob's released hold still on the read path's list")
	}
	// A re-entry after the withdrawal holds anew.
	e.clock.Add(time.Second)
	e.enter("bob", 1)
	if b2, err := e.h.Hold(e.ctx, sale, "bob"); err != nil || b2.PaymentIntent == b.PaymentIntent || b2.State != flashgate.DrawPending {
		t.Errorf("Hold of the new entry: got %+v, %v; want a new pending hold", b2, err)
	}
}

// TestLostWebhookReadPath: with every webhook lost, the read path enters
// an authorised entry once its grace is over, leaves one the buyer has
// not confirmed pending (looked at again later), and after the close
// releases a hold that never counted; no hold is made after the close.
func TestLostWebhookReadPath(t *testing.T) {
	e := newEnv(t, true)
	e.hooks.Store(false)
	draw := []flashgate.Sale{{ID: sale, Queue: flashgate.QueueDraw}}
	annID := e.enter("ann", 1)
	a, err := e.h.Hold(e.ctx, sale, "ann")
	if err != nil {
		t.Fatal(err)
	}
	bobID := e.enter("bob", 1)
	b, err := e.h.Hold(e.ctx, sale, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.stand.Confirm(a.PaymentIntent, "4242424242424242"); err != nil {
		t.Fatal(err)
	}
	if n, err := e.h.Reconcile(e.ctx, draw); err != nil || n != 0 {
		t.Errorf("Reconcile within the grace: %d, %v; want 0 looked at", n, err)
	}
	if got := e.state("ann"); got != flashgate.DrawPending {
		t.Errorf("ann within the grace: got %s, want pending", got)
	}
	e.clock.Add(grace)
	if n, err := e.h.Reconcile(e.ctx, draw); err != nil || n != 2 {
		t.Fatalf("Reconcile: %d, %v; want 2 looked at", n, err)
	}
	if got := e.state("ann"); got != flashgate.DrawEntered {
		t.Errorf("ann after the read: got %s, want entered", got)
	}
	if got := e.state("bob"); got != flashgate.DrawPending {
		t.Errorf("bob (unconfirmed) after the read: got %s, want pending", got)
	}
	if e.listed(annID) || !e.listed(bobID) {
		t.Errorf("listed after the read: ann %v, bob %v; want false, true", e.listed(annID), e.listed(bobID))
	}
	if n, err := e.h.Reconcile(e.ctx, draw); err != nil || n != 0 {
		t.Errorf("Reconcile again at once: %d, %v; want 0 (bob put off)", n, err)
	}
	// bob confirms after the close: his hold does not count, and is
	// released. dan, who entered but never asked for a hold, gets none.
	e.enter("dan", 1)
	e.clock.Add(time.Hour)
	before := len(e.stand.Intents())
	if _, err := e.h.Hold(e.ctx, sale, "dan"); !errors.Is(err, flashgate.ErrClosed) {
		t.Errorf("Hold after the close: got %v, want ErrClosed", err)
	}
	if n := len(e.stand.Intents()); n != before {
		t.Errorf("intents after a hold asked for past the close: got %d, want %d", n, before)
	}
	if _, err := e.stand.Confirm(b.PaymentIntent, "4242424242424242"); err != nil {
		t.Fatal(err)
	}
	if n, err := e.h.Reconcile(e.ctx, draw); err != nil || n != 1 {
		t.Fatalf("Reconcile after the close: %d, %v; want 1", n, err)
	}
	if got := e.state("bob"); got != flashgate.DrawPending {
		t.Errorf("bob after the close: got %s, want pending (the close's)", got)
	}
	if got := e.intent(b.PaymentIntent).Status; got != flashgate.IntentCanceled {
		t.Errorf("bob's late hold: got %s, want canceled", got)
	}
	if got := e.intent(a.PaymentIntent).Status; got != flashgate.IntentRequiresCapture {
		t.Errorf("ann's hold: got %s, want requires_capture (the close's to capture)", got)
	}
}

// TestSimulatedEntersAtOnce: without a provider an entry asking for its
// hold is entered at once, with no intent.
func TestSimulatedEntersAtOnce(t *testing.T) {
	e := newEnv(t, false)
	id := e.enter("ann", 1)
	d, err := e.h.Hold(e.ctx, sale, "ann")
	if err != nil || d.ID != id || d.State != flashgate.DrawEntered || d.PaymentIntent != "" || d.ClientSecret != "" {
		t.Fatalf("Hold: got %+v, %v; want entry %s entered, no intent", d, err, id)
	}
	if _, err := e.h.Hold(e.ctx, sale, "bob"); !errors.Is(err, flashgate.ErrNotFound) {
		t.Errorf("Hold without an entry: got %v, want ErrNotFound", err)
	}
	if w, err := e.withdraw("ann"); err != nil || w.State != flashgate.DrawWithdrawn {
		t.Errorf("withdraw: got %+v, %v; want withdrawn", w, err)
	}
}

// TestHoldJournaled: the hold's intent lands in the database's
// draw_entries row of its entry (where the close reads it), and stays
// there as the entry's state changes.
func TestHoldJournaled(t *testing.T) {
	for _, dsn := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{{"sqlite", cptest.SQLiteDSN}, {"postgres", func(t *testing.T) string { return pgtest.New(t) }}} {
		t.Run(dsn.name, func(t *testing.T) { holdJournaled(t, dsn.dsn(t)) })
	}
}

func holdJournaled(t *testing.T, dsn string) {
	e := newEnv(t, true)
	db := cptest.OpenDB(t, dsn)
	id := e.enter("ann", 1)
	d, err := e.h.Hold(e.ctx, sale, "ann")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drawjournal.Flush(e.ctx, e.rdb, db, sale, 0); err != nil {
		t.Fatal(err)
	}
	row := func() flashgate.DrawEntry {
		t.Helper()
		rows, err := db.DrawEntries(e.ctx, sale)
		if err != nil || len(rows) != 1 {
			t.Fatalf("DrawEntries: %+v, %v; want 1", rows, err)
		}
		return rows[0]
	}
	if r := row(); r.ID != id || r.PaymentIntent != d.PaymentIntent || r.State != flashgate.DrawPending {
		t.Errorf("row after the hold: got %+v; want %s pending with intent %s", r, id, d.PaymentIntent)
	}
	if _, err := e.stand.Confirm(d.PaymentIntent, "4242424242424242"); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return e.state("ann") == flashgate.DrawEntered }, "ann's entry entered")
	if _, err := drawjournal.Flush(e.ctx, e.rdb, db, sale, 0); err != nil {
		t.Fatal(err)
	}
	if r := row(); r.PaymentIntent != d.PaymentIntent || r.State != flashgate.DrawEntered {
		t.Errorf("row once entered: got %+v; want entered with intent %s", r, d.PaymentIntent)
	}
}
