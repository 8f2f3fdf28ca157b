package salehash

import (
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
