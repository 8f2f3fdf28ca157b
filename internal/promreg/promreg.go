// Package promreg registers Prometheus collectors that several instances in
// one process may share.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg, or returns the collector registered before
// under the same description, so that two instances of a tier in one process
// (or in tests) count into the same series. When an incompatible collector
// owns the name it returns c, unregistered, and the error: the caller may
// fail, or count into c and carry on.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if old, ok := are.ExistingCollector.(C); ok {
			return old, nil
		}
	}
	return c, err
}
