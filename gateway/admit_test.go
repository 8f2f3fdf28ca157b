package gateway

import "testing"

// TestAdmitLosingRaces checks that admit retries a lost compare-and-swap
// for as long as units remain: it once gave up after 1,000 lost races and
// answered sold out with most of the cap unused.
func TestAdmitLosingRaces(t *testing.T) {
	tests := []struct {
		name         string
		count        int64 // the admission cap
		races        int   // compare-and-swaps another buyer wins first
		want         int
		wantAdmitted int64
	}{
		{"no race", 10, 0, verdictAdmit, 1},
		{"units remain after many lost races", 5000, 1500, verdictAdmit, 1501},
		{"the winners take the last units", 100, 1500, verdictSoldOut, 100},
		{"the winners take all but one", 1501, 1500, verdictAdmit, 1501},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &sale{id: "s"}
			e.state.Store(&saleState{found: true, start: true, total: 10, count: tt.count})
			left := tt.races
			e.lostRace = func() {
				if left > 0 {
					left--
					e.admitted.Add(1) // another buyer counted between the read and the swap
				}
			}
			if got := e.admit(); got != tt.want {
				t.Errorf("admit() = %d, want %d", got, tt.want)
			}
			if got := e.admitted.Load(); got != tt.wantAdmitted {
				t.Errorf("admitted = %d, want %d", got, tt.wantAdmitted)
			}
		})
	}
}
