package controlplane

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/lua"
)

// gauge returns the value of the series name{sale} (sale "" for none) in
// reg, and whether it is there.
func gauge(t *testing.T, reg *prometheus.Registry, name, sale string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "sale" {
					got = l.GetValue()
				}
			}
			if got != sale {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func TestOpsMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, sqliteDSN(t), func(c *Config) { c.Metrics = reg })

	if v, ok := gauge(t, reg, "flashgate_controlplane_leader", ""); !ok || v != 0 {
		t.Errorf("leader before the first tick: got %v (present %v), want 0", v, ok)
	}
	if tctx, err := e.svc.lead(e.ctx); tctx == nil || err != nil {
		t.Fatalf("lead: %v, %v", tctx, err)
	}
	if v, _ := gauge(t, reg, "flashgate_controlplane_leader", ""); v != 1 {
		t.Errorf("leader after taking the lease: got %v, want 1", v)
	}

	// A closed, drained sale settles at 0; a skewed Redis shows the
	// difference until a re-sync corrects it.
	e.openSale("m1", 5, 1.5)
	if code, _ := e.reserve("m1", "u1"); code != lua.ReserveOK {
		t.Fatalf("reserve: code %d", code)
	}
	e.persist("m1")
	if _, ok := gauge(t, reg, "flashgate_settlement_difference", "m1"); ok {
		t.Errorf("an open sale has a settlement difference, want none")
	}
	if err := e.svc.Stop(e.ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	if v, ok := gauge(t, reg, "flashgate_settlement_difference", "m1"); !ok || v != 0 {
		t.Errorf("settled sale: got difference %v (present %v), want 0", v, ok)
	}
	if err := e.rdb.HIncrBy(e.ctx, lua.SaleKey("m1"), lua.FieldBooked, 2).Err(); err != nil {
		t.Fatal(err)
	}
	if v, _ := gauge(t, reg, "flashgate_settlement_difference", "m1"); v != 2 {
		t.Errorf("Redis booked 2 over the database: got difference %v, want 2", v)
	}
	if _, _, err := e.svc.Resync(e.ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	if v, _ := gauge(t, reg, "flashgate_settlement_difference", "m1"); v != 0 {
		t.Errorf("after a re-sync: got difference %v, want 0", v)
	}

	// An unknown sale is the caller's mistake; Redis gone is a failure.
	_, _, _ = e.svc.Resync(e.ctx, "nope")
	if v, _ := gauge(t, reg, "flashgate_resync_errors_total", ""); v != 0 {
		t.Errorf("re-sync of an unknown sale counted as a failure: %v, want 0", v)
	}
	e.srv.Stop()
	if _, _, err := e.svc.Resync(e.ctx, "m1"); err == nil {
		t.Fatal("re-sync with Redis stopped: got nil error")
	}
	if v := counterValue(e.svc.metrics.ResyncErrors); v != 1 {
		t.Errorf("re-sync with Redis stopped: got %v failures, want 1", v)
	}
}
