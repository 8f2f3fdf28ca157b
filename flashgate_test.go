package flashgate_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flashgate/flashgate"
)

func TestErrorStatus(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{flashgate.ErrNotFound, 404, "not_found"},
		{fmt.Errorf("reserving: %w", flashgate.ErrSoldOut), 409, "sold_out"},
		{&flashgate.PurchasedError{OrderID: "o1"}, 409, "already_purchased"},
		{&flashgate.FieldError{Field: "total", Reason: "must be positive"}, 400, "bad_request"},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", flashgate.ErrUnavailable)), 503, "unavailable"},
		{flashgate.ErrRateLimited, 429, "rate_limited"},
		{flashgate.ErrTooLarge, 413, "too_large"},
		{flashgate.ErrUnauthorized, 401, "unauthorized"},
		{flashgate.ErrNotPayable, 409, "not_payable"},
		{flashgate.ErrMethodNotAllowed, 405, "method_not_allowed"},
		{fmt.Errorf("capturing: %w", flashgate.ErrNotCapturable), 409, "not_capturable"},
		{errors.New("dial tcp 10.0.0.1:6379: connection refused"), 500, "internal"},
	}
	for _, tt := range tests {
		status, code := flashgate.ErrorStatus(tt.err)
		if status != tt.status || code != tt.code {
			t.Errorf("ErrorStatus(%v) = %d %q, want %d %q", tt.err, status, code, tt.status, tt.code)
		}
		if code != "internal" && flashgate.ErrorForCode(code) == nil {
			t.Errorf("ErrorForCode(%q) = nil, want its sentinel", code)
		}
	}
	if got := flashgate.ErrorForCode("no_such_code"); got != nil {
		t.Errorf("ErrorForCode(unknown) = %v, want nil", got)
	}
	for _, err := range flashgate.Errors() {
		_, code := flashgate.ErrorStatus(err)
		if got := flashgate.ErrorForCode(code); got != err {
			t.Errorf("ErrorForCode(%q) = %v, want %v", code, got, err)
		}
	}
}

func TestValidSaleID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"a", true},
		{"spring-drop_2026", true},
		{strings.Repeat("x", 64), true},
		{strings.Repeat("x", 65), false},
		{"", false},
		{"..", false},
		{"a/b", false},
		{"a b", false},
		{"é", false},
		{"%2e", false},
	}
	for _, tt := range tests {
		if got := flashgate.ValidSaleID(tt.id); got != tt.want {
			t.Errorf("ValidSaleID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestAdmitCap(t *testing.T) {
	tests := []struct {
		total int64
		ratio float64
		want  int64
	}{
		{100, 0, 150},
		{100, 1.5, 150},
		{10, 2, 20},
		{7, 1, 7},
		{100, 0.5, 100}, // never below the stock
	}
	for _, tt := range tests {
		if got := flashgate.AdmitCap(tt.total, tt.ratio); got != tt.want {
			t.Errorf("AdmitCap(%d, %v) = %d, want %d", tt.total, tt.ratio, got, tt.want)
		}
	}
}

func TestLive(t *testing.T) {
	for s, want := range map[flashgate.OrderStatus]bool{
		flashgate.StatusReserved: true, flashgate.StatusPendingPayment: true, flashgate.StatusPaid: true,
		flashgate.StatusCancelled: false, flashgate.StatusExpired: false, flashgate.StatusRefunded: false,
	} {
		if got := s.Live(); got != want {
			t.Errorf("%s.Live() = %v, want %v", s, got, want)
		}
	}
}
