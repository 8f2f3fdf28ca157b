package salehash

import (
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/flashgate/flashgate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSaleArgs(t *testing.T) {
	if got := PerUser(flashgate.Sale{}); got != 1 {
		t.Errorf("PerUser unset: got %d, want 1", got)
	}
	if got := PerUser(flashgate.Sale{PerUser: 3}); got != 3 {
		t.Errorf("PerUser 3: got %d, want 3", got)
	}
	if got := AdmitRatio(flashgate.Sale{}); got != flashgate.DefaultAdmitRatio {
		t.Errorf("AdmitRatio unset: got %v, want %v", got, flashgate.DefaultAdmitRatio)
	}
	if got, want := StateArg(flashgate.StateClosed), "close"; got != want {
		t.Errorf("StateArg(closed): got %q, want %q", got, want)
	}
	if got, want := StateArg(flashgate.StateOpen), "open"; got != want {
		t.Errorf("StateArg(open): got %q, want %q", got, want)
	}
}

// TestRetakesToHold: a rebuild holds the retakes pending in its second
// read and those of its first read honoured since, each once; a retake
// of the first read refunded since (in neither) is not held.
func TestRetakesToHold(t *testing.T) {
	o := func(ids ...string) []flashgate.Order {
		var out []flashgate.Order
		for _, id := range ids {
			out = append(out, flashgate.Order{ID: id})
		}
		return out
	}
	tests := []struct {
		name                     string
		first, pending, honoured []flashgate.Order
		want                     []string
	}{
		{"none", nil, nil, nil, nil},
		{"pending in both", o("a"), o("a"), nil, []string{"a"}},
		{"written after the first read", nil, o("a"), nil, []string{"a"}},
		{"honoured since the first read", o("a"), nil, o("a"), []string{"a"}},
		{"refunded since the first read", o("a"), nil, nil, nil},
		{"honoured before the first read", nil, nil, o("a"), nil},
		{"mixed", o("a", "b", "c"), o("c", "d"), o("b", "e"), []string{"c", "d", "b"}},
	}
	for _, tt := range tests {
		var got []string
		for _, h := range RetakesToHold(tt.first, tt.pending, tt.honoured) {
			got = append(got, h.ID)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
