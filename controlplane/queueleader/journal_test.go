package queueleader

import "testing"

// TestLateNumber reads the arrival number of a journaled entry, as the
// restore sorts late entrants by it.
func TestLateNumber(t *testing.T) {
	cases := []struct {
		entry string
		want  int64
	}{{"p", 0}, {"r12", 0}, {"l1", 1}, {"l250", 250}, {"lx", 0}, {"", 0}}
	for _, c := range cases {
		if got := lateNumber(c.entry); got != c.want {
			t.Errorf("lateNumber(%q): got %d, want %d", c.entry, got, c.want)
		}
	}
}

// TestDeriveSeedSecret: the secret depends on the admin token, and is
// the same for the same token (every control plane of a deployment).
func TestDeriveSeedSecret(t *testing.T) {
	a, b := DeriveSeedSecret("token-a"), DeriveSeedSecret("token-b")
	if string(a) == string(b) || len(a) != 32 {
		t.Errorf("got %x and %x, want two different 32-byte secrets", a, b)
	}
	if got := DeriveSeedSecret("token-a"); string(got) != string(a) {
		t.Errorf("got %x, then %x, want the same", a, got)
	}
}
