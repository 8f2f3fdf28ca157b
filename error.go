package flashgate

import (
	"errors"
	"fmt"
	"net/http"
)

// The error vocabulary. Every tier returns (wrapped) sentinels from this list;
// ErrorStatus turns them into the HTTP status and JSON code of docs/api.md.
var (
	ErrNotFound         = errors.New("flashgate: not found")
	ErrNotStarted       = errors.New("flashgate: not started")
	ErrClosed           = errors.New("flashgate: closed")
	ErrSoldOut          = errors.New("flashgate: sold out")
	ErrAlreadyPurchased = errors.New("flashgate: already purchased")
	ErrUnauthorized     = errors.New("flashgate: unauthorized")
	ErrRateLimited      = errors.New("flashgate: rate limited")
	ErrBadRequest       = errors.New("flashgate: bad request")
	ErrTooLarge         = errors.New("flashgate: too large")
	ErrUnavailable      = errors.New("flashgate: unavailable")
	ErrNotPayable       = errors.New("flashgate: not payable")
	ErrExists           = errors.New("flashgate: exists")
	// ErrNotAdmitted is a purchase in a fair queue by a buyer whose
	// position is not admitted (or whose window has passed).
	ErrNotAdmitted = errors.New("flashgate: not admitted")
	// ErrQueueReset is a fair-queue ticket of a queue that is gone (its
	// seed's commitment is no longer the sale's): the buyer must enter
	// again.
	ErrQueueReset = errors.New("flashgate: queue reset")
	// ErrMethodNotAllowed is a request whose route exists but not for its
	// method; HTTP servers add an Allow header.
	ErrMethodNotAllowed = errors.New("flashgate: method not allowed")
	// ErrFenced is a write of the control plane's loops (or of an admin
	// call that does their work) refused because a newer writer holds a
	// higher fencing token (docs/internals.md); a client sees it as
	// ErrUnavailable and may retry.
	ErrFenced = fmt.Errorf("flashgate: a newer writer holds the fence: %w", ErrUnavailable)
	// ErrPaused is a reserve refused, taking nothing, because the sale is
	// paused while the control plane rebuilds it (after a failover, or the
	// reserve's failover fence): a client sees it as ErrUnavailable and
	// retries. A gateway gives back the admission it counted for it, so
	// that refused attempts never use up the admission cap.
	ErrPaused = fmt.Errorf("flashgate: paused for a rebuild: %w", ErrUnavailable)
	// ErrSaleLost is a reserve of a sale that exists (the gateway's cached
	// state says it sells) answered "no such sale" by Redis: the sale was
	// lost with Redis's data (a FLUSHALL, a fresh Redis, a failover) and
	// the re-sync has not rebuilt it yet. Nothing was taken; a client sees
	// it as ErrUnavailable and retries, never as ErrNotFound.
	ErrSaleLost = fmt.Errorf("flashgate: sale lost from Redis: %w", ErrUnavailable)

	// ErrNotCapturable is a capture of a hold that holds nothing any more:
	// declined at capture, expired, canceled, or never confirmed.
	ErrNotCapturable = errors.New("flashgate: not capturable")

	// ErrBadSignature is a webhook whose signature does not verify (or is
	// older than the tolerance).
	ErrBadSignature = errors.New("flashgate: bad signature")
)

// PurchasedError is ErrAlreadyPurchased carrying the user's live order id.
type PurchasedError struct {
	OrderID string
}

func (e *PurchasedError) Error() string { return ErrAlreadyPurchased.Error() + " (" + e.OrderID + ")" }

// Is makes errors.Is(err, ErrAlreadyPurchased) hold.
func (e *PurchasedError) Is(target error) bool { return target == ErrAlreadyPurchased }

// FieldError is ErrBadRequest naming the offending input field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	return ErrBadRequest.Error() + ": " + e.Field + ": " + e.Reason
}

// Is makes errors.Is(err, ErrBadRequest) hold.
func (e *FieldError) Is(target error) bool { return target == ErrBadRequest }

// errorTable maps each sentinel to its HTTP status and JSON code; it is the
// only such table.
var errorTable = []struct {
	err    error
	status int
	code   string
}{
	{ErrNotFound, http.StatusNotFound, "not_found"},
	{ErrNotStarted, http.StatusConflict, "not_started"},
	{ErrClosed, http.StatusConflict, "closed"},
	{ErrSoldOut, http.StatusConflict, "sold_out"},
	{ErrAlreadyPurchased, http.StatusConflict, "already_purchased"},
	{ErrUnauthorized, http.StatusUnauthorized, "unauthorized"},
	{ErrRateLimited, http.StatusTooManyRequests, "rate_limited"},
	{ErrBadRequest, http.StatusBadRequest, "bad_request"},
	{ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
	{ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
	{ErrNotPayable, http.StatusConflict, "not_payable"},
	{ErrExists, http.StatusConflict, "exists"},
	{ErrNotAdmitted, http.StatusConflict, "not_admitted"},
	{ErrQueueReset, http.StatusConflict, "queue_reset"},
	{ErrMethodNotAllowed, http.StatusMethodNotAllowed, "method_not_allowed"},
	{ErrBadSignature, http.StatusBadRequest, "bad_signature"},
	{ErrNotCapturable, http.StatusConflict, "not_capturable"},
}

// ErrorStatus returns the HTTP status and JSON error code for err. Errors
// outside the vocabulary are 500 "internal": their text never reaches a client.
func ErrorStatus(err error) (status int, code string) {
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.status, e.code
		}
	}
	return http.StatusInternalServerError, "internal"
}

// ErrorForCode returns the sentinel whose JSON code is code, or nil. Clients
// that speak to another tier over HTTP use it to turn answers back into errors.
func ErrorForCode(code string) error {
	for _, e := range errorTable {
		if e.code == code {
			return e.err
		}
	}
	return nil
}

// Errors returns every sentinel of the vocabulary, in table order, so that
// servers can precompute their answers from the one table.
func Errors() []error {
	errs := make([]error, len(errorTable))
	for i, e := range errorTable {
		errs[i] = e.err
	}
	return errs
}

// ReadyBody is the body of every listener's 200 answer to GET /readyz; not
// ready is 503 with the table's unavailable, like any other error.
const ReadyBody = `{"status":"ready"}`
