package procgroup

import "testing"

// TestFreePortNeverRepeats: a port the kernel offers again is not handed
// out a second time; the next one it offers is (ports below the kernel's
// ephemeral range, so no other test of the package was handed them).
func TestFreePortNeverRepeats(t *testing.T) {
	offers := []int{101, 101, 101, 102}
	pick := func() (int, error) {
		p := offers[0]
		offers = offers[1:]
		return p, nil
	}
	first, err := freePort(pick)
	if err != nil || first != 101 {
		t.Fatalf("first: got %d, %v, want 101", first, err)
	}
	second, err := freePort(pick)
	if err != nil || second != 102 {
		t.Errorf("second, offered 101 twice more then 102: got %d, %v, want 102", second, err)
	}
}
