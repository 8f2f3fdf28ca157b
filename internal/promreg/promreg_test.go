package promreg_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/internal/promreg"
)

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "flashgate_test_total", Help: "A test counter."}
	a, err := promreg.Register(reg, prometheus.NewCounter(opts))
	if err != nil {
		t.Fatalf("first Register: %v", err)
	}
	b, err := promreg.Register(reg, prometheus.NewCounter(opts))
	if err != nil {
		t.Fatalf("second Register: %v", err)
	}
	a.Inc()
	b.Inc()
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("Gather: got %v, %v; want one series", mfs, err)
	}
	if got := mfs[0].GetMetric()[0].GetCounter().GetValue(); got != 2 {
		t.Errorf("shared counter: got %v, want 2", got)
	}
	// The same name with other labels is a clash: the caller gets its own
	// collector back and the error.
	c := prometheus.NewCounterVec(opts, []string{"x"})
	got, err := promreg.Register(reg, c)
	if err == nil || got != c {
		t.Errorf("clashing Register: got %v, %v; want the collector itself and an error", got, err)
	}
}
