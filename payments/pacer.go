package payments

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/flashgate/flashgate"
)

// Defaults of a Pacer (PacerConfig).
const (
	// DefaultPerEndpoint is the calls a second a Pacer makes to each
	// endpoint (captures, cancels): Stripe's per-endpoint limit, and its
	// whole limit in test mode.
	DefaultPerEndpoint = 25
	// DefaultOverall is the calls a second a Pacer makes in all: Stripe's
	// limit per account in live mode.
	DefaultOverall = 100
	// DefaultMaxBackoff caps the wait between two tries of one call.
	DefaultMaxBackoff = 30 * time.Second
	// DefaultMaxTime bounds the tries of one call.
	DefaultMaxTime = 5 * time.Minute
	// firstBackoff is the wait after a call's first failure that named
	// none; it doubles with each failure, up to MaxBackoff.
	firstBackoff = 250 * time.Millisecond
)

// Capturer captures and releases card holds: the provider (*Stripe), or a
// Pacer in front of it.
type Capturer interface {
	Capture(ctx context.Context, intentID, key string) (flashgate.Intent, error)
	Cancel(ctx context.Context, intentID string) (flashgate.Intent, error)
}

var (
	_ Capturer = (*Stripe)(nil)
	_ Capturer = (*Pacer)(nil)
)

// PacerConfig configures a Pacer; the zero value is Stripe's live-mode
// limits.
type PacerConfig struct {
	// PerEndpoint is the most captures a second, and apart from them the
	// most cancels; 0 means DefaultPerEndpoint.
	PerEndpoint float64
	// Overall is the most calls a second, captures and cancels together;
	// 0 means DefaultOverall.
	Overall float64
	// MaxBackoff caps the wait between two tries of one call; 0 means
	// DefaultMaxBackoff. A 429's Retry-After is waited in full up to it.
	MaxBackoff time.Duration
	// MaxTime bounds one call's tries, from its first (the wait for its
	// turn before it is the caller's context's to bound); 0 means
	// DefaultMaxTime.
	MaxTime time.Duration
}

// Pacer makes captures and cancels at the provider at a set rate, so that
// a draw's thousands of them stay under the provider's rate limits, and
// tries again what the provider refused for the moment: a 429 after its
// Retry-After, a failure of the provider (5xx, unreachable) after a
// backoff that doubles up to MaxBackoff, each call for at most MaxTime.
// What the provider refused for good (flashgate.ErrNotCapturable,
// flashgate.ErrNotFound, any other 4xx) is returned at once. Every call
// the provider takes is idempotent (a capture's key, a cancel's state), so
// trying one again is safe. A Pacer is safe for concurrent use: callers
// share its rate.
type Pacer struct {
	next                 Capturer
	overall, capt, cancl *rate.Limiter
	maxBackoff, maxTime  time.Duration

	calls, retries, limited, failed atomic.Int64
}

// NewPacer returns a Pacer in front of next.
func NewPacer(next Capturer, cfg PacerConfig) *Pacer {
	if cfg.PerEndpoint <= 0 {
		cfg.PerEndpoint = DefaultPerEndpoint
	}
	if cfg.Overall <= 0 {
		cfg.Overall = DefaultOverall
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxTime <= 0 {
		cfg.MaxTime = DefaultMaxTime
	}
	// Bursts of one: the calls go evenly spaced, never in a clump the
	// provider's own window could count as over.
	return &Pacer{next: next, maxBackoff: cfg.MaxBackoff, maxTime: cfg.MaxTime,
		overall: rate.NewLimiter(rate.Limit(cfg.Overall), 1),
		capt:    rate.NewLimiter(rate.Limit(cfg.PerEndpoint), 1),
		cancl:   rate.NewLimiter(rate.Limit(cfg.PerEndpoint), 1)}
}

// Capture captures a hold in its turn (Stripe.Capture), trying again under
// the same key.
func (p *Pacer) Capture(ctx context.Context, intentID, key string) (flashgate.Intent, error) {
	return p.do(ctx, p.capt, func(ctx context.Context) (flashgate.Intent, error) { return p.next.Capture(ctx, intentID, key) })
}

// Cancel releases a hold in its turn (Stripe.Cancel).
func (p *Pacer) Cancel(ctx context.Context, intentID string) (flashgate.Intent, error) {
	return p.do(ctx, p.cancl, func(ctx context.Context) (flashgate.Intent, error) { return p.next.Cancel(ctx, intentID) })
}

// PacerStats are a Pacer's counts so far.
type PacerStats struct {
	// Calls is the tries made; Retries those that followed a failure.
	Calls, Retries int64
	// RateLimited is the tries the provider answered 429 (past the
	// client's own wait); Failed the calls given up on.
	RateLimited, Failed int64
}

// Stats returns the Pacer's counts so far.
func (p *Pacer) Stats() PacerStats {
	return PacerStats{Calls: p.calls.Load(), Retries: p.retries.Load(), RateLimited: p.limited.Load(), Failed: p.failed.Load()}
}

func (p *Pacer) do(ctx context.Context, ep *rate.Limiter, call func(context.Context) (flashgate.Intent, error)) (flashgate.Intent, error) {
	var (
		giveUp  time.Time
		backoff = firstBackoff
	)
	for try := 1; ; try++ {
		if err := ep.Wait(ctx); err != nil {
			return flashgate.Intent{}, p.fail(fmt.Errorf("waiting for a turn at the provider: %w", err))
		}
		if err := p.overall.Wait(ctx); err != nil {
			return flashgate.Intent{}, p.fail(fmt.Errorf("waiting for a turn at the provider: %w", err))
		}
		if try == 1 {
			giveUp = time.Now().Add(p.maxTime)
		} else {
			p.retries.Add(1)
		}
		p.calls.Add(1)
		in, err := call(ctx)
		if err == nil || !errors.Is(err, flashgate.ErrUnavailable) || ctx.Err() != nil {
			if err != nil {
				p.failed.Add(1)
			}
			return in, err
		}
		wait := backoff
		var rl *RateLimitedError
		if errors.As(err, &rl) {
			p.limited.Add(1)
			wait = max(wait, rl.RetryAfter())
		}
		wait = min(wait, p.maxBackoff)
		backoff = min(2*backoff, p.maxBackoff)
		if time.Now().Add(wait).After(giveUp) {
			return in, p.fail(fmt.Errorf("the provider still refused after %d tries in %v: %w", try, p.maxTime, err))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return in, p.fail(fmt.Errorf("%w (last try: %w)", ctx.Err(), err))
		case <-t.C:
		}
	}
}

func (p *Pacer) fail(err error) error { p.failed.Add(1); return err }
