package controlplane

import (
	"context"
	"errors"
)

// errClosed ends the leadership term of a Service being closed.
var errClosed = errors.New("control plane closed")

// The goroutines a Service runs are each Run (its caller's goroutine,
// counted so that Close can wait for it) and the keeper of each leadership
// term (keepTerm, started by lead). A term's timer (time.AfterFunc) runs
// endTermOf on a goroutine of the runtime's for the moment it takes. Close
// ends them all and waits for them; nothing else in the control plane, its
// rooms included, starts a goroutine.

// runContext returns ctx, ended as well by Close, for one Run; it returns
// nil once Close was called. The caller calls s.wg.Done when Run ends.
// Counting under mu after checking closed (as holdTerm does for a keeper)
// makes every Add happen before Close's Wait.
func (s *Service) runContext(ctx context.Context) (context.Context, context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	s.runs = append(s.runs, cancel)
	s.wg.Add(1)
	return ctx, cancel
}

// Close stops every Run (each gives the leader lease up as it returns),
// ends the current leadership term and waits for every goroutine the
// Service started: each Run and each term's keeper. A Run called after
// Close returns at once, and a lease taken after it has no keeper. Calling
// Close again waits again and returns nil.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		runs := s.runs
		s.runs = nil
		s.mu.Unlock()
		for _, cancel := range runs {
			cancel()
		}
		s.endTerm(errClosed)
	})
	s.wg.Wait()
	return nil
}
