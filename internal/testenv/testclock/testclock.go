// Package testclock is a flashgate.Clock that tests move by hand.
package testclock

import (
	"sync"
	"time"
)

// Clock tells the time it was last set to; safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

// New returns a Clock that reads t.
func New(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
