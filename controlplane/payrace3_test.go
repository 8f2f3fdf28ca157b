package controlplane

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
)

// TestRetakeWaitsForRebuild: a late payment settled while its sale is
// paused after a Redis loss (rebuilt from the database, not yet reopened)
// takes nothing: the rebuild may not count what the sinks are still
// delivering. The payment stays late_pending, and once the sale reopens
// the reconciliation honours it.
func TestRetakeWaitsForRebuild(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 2, 3)
			o := pe.buy("s1", "u1")
			intent := pe.latePayment(o)
			if err := pe.rdb.FlushAll(pe.ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if _, _, err := pe.svc.Resync(pe.ctx, "s1"); err != nil {
				t.Fatal(err)
			}
			if got := pe.rdb.HGet(pe.ctx, "fg:{s1}:sale", "resume").Val(); got != "1" {
				t.Fatalf("after the rebuild: resume %q, want 1 (paused)", got)
			}
			pe.hook(flashgate.EventIntentSucceeded, intent, flashgate.IntentSucceeded)
			if st, p := pe.order(o.ID).Status, pe.payment(o.ID); st != flashgate.StatusExpired || p.Outcome != "late_pending" {
				t.Fatalf("settled while the sale is paused: order %s outcome %q, want expired and late_pending (nothing taken)", st, p.Outcome)
			}
			if n := pe.rdb.SCard(pe.ctx, "fg:{s1}:retaken").Val(); n != 0 {
				t.Fatalf("retaken set: %d members while paused, want 0", n)
			}
			if _, _, err := pe.svc.Resync(pe.ctx, "s1"); err != nil {
				t.Fatal(err)
			}
			pe.clock.Add(time.Minute)
			if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
				t.Fatal(err)
			}
			if st, p := pe.order(o.ID).Status, pe.payment(o.ID); st != flashgate.StatusPaid || p.Outcome != "honoured_late" {
				t.Fatalf("after the sale reopened: order %s outcome %q, want paid and honoured_late", st, p.Outcome)
			}
		})
	}
}

// TestRetakeWaitsForReplicas: a retake is acknowledged by the replicas
// the sale's primary has online before the honour step commits it, as a
// reserve is before its 201: with the replica's link held back the
// payment stays late_pending (a failover then would lose the unit the
// honour counts), and once the replica catches up it is honoured.
func TestRetakeWaitsForReplicas(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
			link := redistest.StartProxy(t, primary.Addr)
			replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(link.Port))
			replica.WaitReplica(t)
			pe := newPayEnvOn(t, primary, dsn(t))
			pe.openSale("s1", 2, 3)
			o := pe.buy("s1", "u1")
			intent := pe.latePayment(o)
			link.Pause()
			pe.hook(flashgate.EventIntentSucceeded, intent, flashgate.IntentSucceeded)
			if st, p := pe.order(o.ID).Status, pe.payment(o.ID); st != flashgate.StatusExpired || p.Outcome != "late_pending" {
				t.Fatalf("honoured before a replica held the retake: order %s outcome %q, want expired and late_pending", st, p.Outcome)
			}
			link.Resume()
			pe.clock.Add(time.Minute)
			if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
				t.Fatal(err)
			}
			if st, p := pe.order(o.ID).Status, pe.payment(o.ID); st != flashgate.StatusPaid || p.Outcome != "honoured_late" {
				t.Fatalf("after the replica caught up: order %s outcome %q, want paid and honoured_late", st, p.Outcome)
			}
		})
	}
}

// newPayEnvOn is newPayEnv on the redis-server srv (one with replicas).
func newPayEnvOn(t *testing.T, srv *redistest.Server, dsn string) *payEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	pe := &payEnv{prov: newFakeProvider(), yield: map[string]func(context.Context){}}
	e := &env{t: t, ctx: ctx, srv: srv, rdb: srv.Client(t), db: openDB(t, dsn), clock: testclock.New(t0)}
	e.rel = &luaReleaser{RDB: e.rdb}
	svc, err := New(Config{Redis: e.rdb, Store: e.db, Releaser: e.rel, AdminToken: testToken,
		Clock: e.clock, Logger: quietLogger(), PersistWait: -1, NodeID: "test",
		Payments: pe.prov, PaymentStore: e.db, PaymentYield: pe.at,
		PaymentWindow: time.Minute, PaymentGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	pe.env = e
	return pe
}

// TestLatePaymentOnClosedSale: a payment that succeeds after its order
// expired and its sale closed is refunded, never honoured after the close
// nor left late_pending (as it was when the closed sale's Redis state was
// gone for good: lost, or deleted by the archive).
func TestLatePaymentOnClosedSale(t *testing.T) {
	for name, dsn := range payBackends(t) {
		for _, lost := range []bool{false, true} {
			t.Run(name+"/redis lost "+strconv.FormatBool(lost), func(t *testing.T) {
				pe := newPayEnv(t, dsn(t))
				pe.openSale("s1", 2, 3)
				o := pe.buy("s1", "u1")
				intent := pe.latePayment(o)
				if err := pe.svc.Stop(pe.ctx, "s1"); err != nil {
					t.Fatal(err)
				}
				if lost {
					if err := pe.rdb.FlushAll(pe.ctx).Err(); err != nil {
						t.Fatal(err)
					}
				}
				pe.hook(flashgate.EventIntentSucceeded, intent, flashgate.IntentSucceeded)
				st, p := pe.order(o.ID).Status, pe.payment(o.ID)
				if st != flashgate.StatusExpired || p.Outcome != "refunded_late" || pe.prov.refunded(intent) != 1 {
					t.Fatalf("late payment on a closed sale: order %s outcome %q, %d refunds; want expired, refunded_late, 1",
						st, p.Outcome, pe.prov.refunded(intent))
				}
			})
		}
	}
}

// TestAdminRefundOfHonouredLate: an admin refund of an order a late
// payment honoured gives its unit back and releases its buyer, who can buy
// in the sale again (the retaken order's own release was a no-op).
func TestAdminRefundOfHonouredLate(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 1, 3)
			o := pe.buy("s1", "u1")
			intent := pe.latePayment(o)
			pe.hook(flashgate.EventIntentSucceeded, intent, flashgate.IntentSucceeded)
			if p := pe.payment(o.ID); p.Outcome != "honoured_late" {
				t.Fatalf("late payment: outcome %q, want honoured_late", p.Outcome)
			}
			releases := field(t, pe.rdb, "s1", "releases")
			if _, err := pe.svc.Refund(pe.ctx, o.ID); err != nil {
				t.Fatalf("Refund: %v", err)
			}
			// The give-back counts as a release, so that a re-sync whose
			// snapshot still held the order live does not hide the unit.
			if got := field(t, pe.rdb, "s1", "releases"); got <= releases {
				t.Errorf("releases counter after the refund: got %d, want above %d", got, releases)
			}
			if got, want := field(t, pe.rdb, "s1", "booked"), pe.liveUnits("s1"); got != want || want != 0 {
				t.Errorf("booked after the refund: got %d, want %d = 0 live units", got, want)
			}
			if code, _ := pe.reserve("s1", "u1"); code != 0 {
				t.Fatalf("the refunded buyer buys again: got code %d, want 0", code)
			}
		})
	}
}
