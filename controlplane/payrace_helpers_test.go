package controlplane

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/sqldb"
)

// fakeProvider is a payment provider in memory for the payment race tests:
// intents whose status a test sets, and the refunds and cancels asked of
// it. Its webhook payloads are "event|type|intent|status", signed "ok".
type fakeProvider struct {
	mu      sync.Mutex
	n       int
	intents map[string]*flashgate.Intent
	refunds map[string][]string // intent → idempotency keys of its refunds, once each
	cancels int
	asked   map[string]int // intent → Intent calls
	limited int            // answer this many next Intent calls 429
}

// rateLimited is the provider's 429 with its Retry-After.
type rateLimited struct{ after time.Duration }

func (e rateLimited) Error() string             { return "429" }
func (e rateLimited) RetryAfter() time.Duration { return e.after }
func (e rateLimited) Unwrap() error             { return flashgate.ErrUnavailable }

func newFakeProvider() *fakeProvider {
	return &fakeProvider{intents: map[string]*flashgate.Intent{}, refunds: map[string][]string{}, asked: map[string]int{}}
}

func (f *fakeProvider) Checkout(_ context.Context, o flashgate.Order, amount int64, currency string) (flashgate.Intent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, in := range f.intents {
		if in.OrderID == o.ID {
			return *in, nil
		}
	}
	f.n++
	in := &flashgate.Intent{ID: fmt.Sprintf("pi_%d", f.n), ClientSecret: "cs", Status: "requires_payment_method",
		OrderID: o.ID, AmountCents: amount, Currency: currency}
	f.intents[in.ID] = in
	return *in, nil
}

func (f *fakeProvider) Intent(_ context.Context, id string) (flashgate.Intent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.limited > 0 {
		f.limited--
		return flashgate.Intent{}, rateLimited{after: 5 * time.Second}
	}
	f.asked[id]++
	in, ok := f.intents[id]
	if !ok {
		return flashgate.Intent{}, fmt.Errorf("intent %s: %w", id, flashgate.ErrNotFound)
	}
	return *in, nil
}

func (f *fakeProvider) Cancel(_ context.Context, id string) (flashgate.Intent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.intents[id]
	if !ok {
		return flashgate.Intent{}, fmt.Errorf("intent %s: %w", id, flashgate.ErrNotFound)
	}
	// Like Stripe, a processing intent (a debit under way) is not
	// canceled: it is answered as it stands.
	if in.Status != flashgate.IntentSucceeded && in.Status != flashgate.IntentProcessing {
		in.Status = flashgate.IntentCanceled
		f.cancels++
	}
	return *in, nil
}

func (f *fakeProvider) Refund(_ context.Context, id, key string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.refunds[id] {
		if k == key {
			return "re_" + key, nil
		}
	}
	f.refunds[id] = append(f.refunds[id], key)
	return "re_" + key, nil
}

func (f *fakeProvider) ParseEvent(payload []byte, sig string) (flashgate.PaymentEvent, error) {
	parts := strings.Split(string(payload), "|")
	if sig != "ok" || len(parts) != 4 {
		return flashgate.PaymentEvent{}, flashgate.ErrBadSignature
	}
	ev := flashgate.PaymentEvent{ID: parts[0], Type: parts[1], IntentID: parts[2], Status: parts[3]}
	if strings.HasPrefix(ev.Type, "charge.") {
		return ev, nil // a charge names its intent, not the order (as Stripe's)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if in, ok := f.intents[ev.IntentID]; ok {
		ev.OrderID = in.OrderID
	}
	return ev, nil
}

// set sets an intent's status at the provider.
func (f *fakeProvider) set(id, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.intents[id].Status = status
}

// refunded returns how many refunds (distinct keys) an intent had.
func (f *fakeProvider) refunded(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.refunds[id])
}

func (f *fakeProvider) status(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.intents[id].Status
}

// payEnv is a control plane taking payments at a fakeProvider, with a
// yield hook a test sets to run another actor between two steps.
type payEnv struct {
	*env
	prov  *fakeProvider
	mu    sync.Mutex
	yield map[string]func(ctx context.Context) // point → what runs there, once
	// handler, when set, runs at every point of every actor.
	handler func(ctx context.Context, point string)
	evSeq   int
}

func newPayEnv(t *testing.T, dsn string) *payEnv {
	t.Helper()
	pe := &payEnv{prov: newFakeProvider(), yield: map[string]func(context.Context){}}
	pe.env = newEnv(t, dsn, func(c *Config) {
		c.Payments, c.PaymentStore = pe.prov, c.Store.(*sqldb.DB)
		c.PaymentYield = pe.at
		c.PaymentWindow, c.PaymentGrace = time.Minute, time.Second
	})
	return pe
}

// at runs (once) what a test put at point.
func (pe *payEnv) at(ctx context.Context, point string) {
	pe.mu.Lock()
	f := pe.yield[point]
	delete(pe.yield, point)
	pe.mu.Unlock()
	if f != nil {
		f(ctx)
	}
	pe.mu.Lock()
	h := pe.handler
	pe.mu.Unlock()
	if h != nil {
		h(ctx, point)
	}
}

// actorKey names the actor of a context (withActor), for a handler that
// stops one actor and not another.
type actorKey struct{}

func withActor(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, actorKey{}, name)
}

func actorOf(ctx context.Context) string {
	s, _ := ctx.Value(actorKey{}).(string)
	return s
}

// on puts f at point, to run the next time an actor passes it.
func (pe *payEnv) on(point string, f func(ctx context.Context)) {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	pe.yield[point] = f
}

// hook delivers a webhook event about intent.
func (pe *payEnv) hook(typ, intent, status string) {
	pe.t.Helper()
	pe.mu.Lock()
	pe.evSeq++
	id := fmt.Sprintf("evt_%d", pe.evSeq)
	pe.mu.Unlock()
	if err := pe.svc.Webhook(pe.ctx, []byte(id+"|"+typ+"|"+intent+"|"+status), "ok"); err != nil {
		pe.t.Fatalf("webhook %s %s: %v", typ, intent, err)
	}
}

// buy reserves a unit of sale for user and stores the order.
func (pe *payEnv) buy(sale, user string) flashgate.Order {
	pe.t.Helper()
	code, id := pe.reserve(sale, user)
	if code != 0 {
		pe.t.Fatalf("reserve %s: code %d", user, code)
	}
	pe.persist(sale)
	o, err := pe.db.Order(pe.ctx, id)
	if err != nil {
		pe.t.Fatalf("order %s: %v", id, err)
	}
	return o
}

// latePayment makes o a late payment: o expires with no payment row (its
// unit released in Redis), then its checkout's row is stored and its
// intent succeeds at the provider. It returns the intent id.
func (pe *payEnv) latePayment(o flashgate.Order) string {
	pe.t.Helper()
	pe.clock.Add(2 * time.Minute)
	if _, err := pe.svc.ExpireDue(pe.ctx); err != nil {
		pe.t.Fatalf("ExpireDue: %v", err)
	}
	if got := pe.order(o.ID).Status; got != flashgate.StatusExpired {
		pe.t.Fatalf("order %s: got %s, want expired", o.ID, got)
	}
	in, err := pe.prov.Checkout(pe.ctx, o, o.PriceCents, "usd")
	if err != nil {
		pe.t.Fatal(err)
	}
	if _, err := pe.db.InsertPayment(pe.ctx, flashgate.Payment{OrderID: o.ID, IntentID: in.ID, Status: in.Status,
		AmountCents: o.PriceCents, Currency: "usd"}, pe.clock.Now()); err != nil {
		pe.t.Fatal(err)
	}
	pe.prov.set(in.ID, flashgate.IntentSucceeded)
	return in.ID
}

func (pe *payEnv) order(id string) flashgate.Order {
	pe.t.Helper()
	o, err := pe.db.Order(pe.ctx, id)
	if err != nil {
		pe.t.Fatalf("order %s: %v", id, err)
	}
	return o
}

func (pe *payEnv) payment(id string) flashgate.Payment {
	pe.t.Helper()
	p, err := pe.db.Payment(pe.ctx, id)
	if err != nil {
		pe.t.Fatalf("payment of %s: %v", id, err)
	}
	return p
}

// liveUnits counts the live units of a sale's rows.
func (pe *payEnv) liveUnits(sale string) int64 {
	pe.t.Helper()
	live, err := pe.db.LiveOrders(pe.ctx, sale)
	if err != nil {
		pe.t.Fatal(err)
	}
	var n int64
	for _, o := range live {
		n += o.Quantity
	}
	return n
}

// backends are the databases every payment race test runs on.
func payBackends(t *testing.T) map[string]func(*testing.T) string {
	return map[string]func(*testing.T) string{"sqlite": sqliteDSN, "postgres": postgresDSN}
}
