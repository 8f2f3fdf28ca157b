package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/lua"
)

// TestBucketedSaleState: a bucketed sale's remaining and sold-out come from
// the sum of its buckets' booked, not from its own hash (whose booked stays
// 0).
func TestBucketedSaleState(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	e.sale(t, "b1", 6, 9, true)
	l := lua.Layout{Sale: "b1", Salts: []int{0, 1, 2}}
	if err := e.primary.HSet(ctx, lua.SaleKey("b1"), lua.FieldLayout, l.String()).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tag := range l.Tags() {
		if err := lua.Prepare.Run(ctx, e.primary, lua.SaleKeys(tag), 2, 0, 1, 1999).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, tc := range []struct {
		booked []int64
		want   string
	}{
		{[]int64{1, 0, 2}, `"remaining":3,"state":"open"`},
		{[]int64{2, 2, 2}, `"remaining":0,"state":"sold_out"`},
	} {
		for b, tag := range l.Tags() {
			if err := e.primary.HSet(ctx, lua.SaleKey(tag), lua.FieldBooked, tc.booked[b]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		e.s.refreshState(ctx)
		r := do(e.s.Handler(), req{method: "GET", path: "/api/sales/b1"})
		if !strings.Contains(string(r.Body()), tc.want) {
			t.Errorf("case %d: got %s, want %s", i, r.Body(), tc.want)
		}
	}
}
