package flashgate

import (
	"errors"
	"math"
	"testing"
)

func TestOrderAmount(t *testing.T) {
	tests := []struct {
		name       string
		price, qty int64
		want       int64
		wantErr    bool
	}{
		{"one unit", 1999, 1, 1999, false},
		{"several units", 1999, 4, 7996, false},
		{"free", 0, 4, 0, false},
		{"the largest amount", 333_333_333_333, 3, MaxAmountCents, false},
		{"one cent over", 250_000_000_000, 4, 0, true},
		{"wraps to 52 cents", 4611686018427387917, 4, 0, true},
		{"wraps to 0", 1 << 62, 4, 0, true},
		{"wraps negative", math.MaxInt64, 2, 0, true},
		{"negative price", -1, 1, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := OrderAmount(tt.price, tt.qty)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("OrderAmount(%d, %d) = %d, %v; want %d, error %v", tt.price, tt.qty, got, err, tt.want, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrNotPayable) {
				t.Errorf("OrderAmount(%d, %d) error %v, want one wrapping ErrNotPayable", tt.price, tt.qty, err)
			}
		})
	}
}
