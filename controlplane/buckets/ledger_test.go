package buckets

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseLedger(t *testing.T) {
	for _, c := range []struct {
		name    string
		v       []any
		want    ledgerState
		wantErr error
	}{
		{"idle", []any{int64(2), int64(7)}, ledgerState{seq: 7}, nil},
		{"in flight", []any{int64(1), int64(8), "grant", int64(0), int64(2), int64(3), int64(3)},
			ledgerState{seq: 8, inFlight: true, phase: "grant", from: 0, to: 2, want: 3, freed: 3}, nil},
		{"stale", []any{int64(-1)}, ledgerState{}, errStaleLeader},
	} {
		got, err := parseLedger(c.v)
		if got != c.want || !errors.Is(err, c.wantErr) {
			t.Errorf("%s: got %+v, %v; want %+v, %v", c.name, got, err, c.want, c.wantErr)
		}
	}
	if _, err := parseLedger(nil); err == nil {
		t.Errorf("empty answer: got no error")
	}
}

// TestRebuildTotals: lost buckets get their live units first, then an
// even split of what no present bucket and no move in flight holds; the
// totals never add up to more than the sale's.
func TestRebuildTotals(t *testing.T) {
	for _, c := range []struct {
		name  string
		total int64
		stock []bucketStock
		led   ledgerState
		live  []int64
		want  []int64
	}{
		{"one lost", 12, []bucketStock{{found: true, total: 4}, {}, {found: true, total: 4}}, ledgerState{}, []int64{0, 1, 0}, []int64{0, 4, 0}},
		{"two lost", 12, []bucketStock{{found: true, total: 2}, {}, {}}, ledgerState{}, []int64{0, 3, 0}, []int64{0, 7, 3}},
		{"move in flight", 12, []bucketStock{{found: true, total: 2}, {}, {found: true, total: 4}},
			ledgerState{seq: 3, inFlight: true, phase: "grant", from: 0, to: 2, freed: 2}, []int64{0, 0, 0}, []int64{0, 4, 0}},
		{"over-full", 5, []bucketStock{{found: true, total: 5}, {}}, ledgerState{}, []int64{0, 1}, []int64{0, 1}},
	} {
		got := rebuildTotals(c.total, c.stock, c.led, c.live, nil)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
