package payments

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The provider's rate limit (429) as flashgate meets it: a request is
// tried again after the Retry-After the provider asks for, when that fits
// in the request's deadline (a checkout is then answered, not refused); a
// wait that does not fit is a *RateLimitedError (made by unavailable),
// which the reconciliation reads to pause its calls (controlplane/orders).
const (
	// maxRateTries bounds the tries of one request the provider limits.
	maxRateTries = 3
	// defaultRetryAfter is the wait when a 429 names none; maxRetryAfter
	// caps what one may ask.
	defaultRetryAfter = time.Second
	maxRetryAfter     = time.Minute
)

// RateLimitedError is a request the provider refused with 429 that could
// not wait its Retry-After within its deadline. It is
// flashgate.ErrUnavailable to a caller that only checks that (see
// unavailable).
type RateLimitedError struct {
	After time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limited by the payment provider: retry after %v", e.After)
}

// RetryAfter is how long the provider asked to wait.
func (e *RateLimitedError) RetryAfter() time.Duration { return e.After }

// retryTransport tries a request again after a 429's Retry-After, within
// the request's deadline. Every request flashgate makes carries an
// idempotency key or reads, so trying it again is safe.
type retryTransport struct {
	next http.RoundTripper
	now  func() time.Time
}

func (t retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	for try := 1; ; try++ {
		res, err := t.next.RoundTrip(req)
		if err != nil || res.StatusCode != http.StatusTooManyRequests {
			return res, err
		}
		after := retryAfter(res.Header.Get("Retry-After"))
		deadline, ok := req.Context().Deadline()
		if try >= maxRateTries || (ok && t.now().Add(after).After(deadline)) || req.Body != nil && req.GetBody == nil {
			// The 429 goes up as it is, marked so that the library does
			// not try it again at once; unavailable makes it a
			// *RateLimitedError.
			res.Header.Set("Stripe-Should-Retry", "false")
			return res, nil
		}
		_ = res.Body.Close()
		timer := time.NewTimer(after)
		select {
		case <-req.Context().Done():
			timer.Stop()
			return nil, req.Context().Err()
		case <-timer.C:
		}
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

// retryAfter reads a Retry-After of seconds (the form Stripe sends);
// anything else is defaultRetryAfter.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return defaultRetryAfter
	}
	return min(time.Duration(n)*time.Second, maxRetryAfter)
}
