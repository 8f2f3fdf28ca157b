package systemtest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/lua"
)

// lateReserver runs every reserve, and answers the first n of them
// ErrUnavailable whatever they did, as a reserve that timed out after Redis
// ran it (the unit taken, the order in the stream) is answered.
type lateReserver struct {
	r gateway.Reserver
	n atomic.Int64
}

func (l *lateReserver) Reserve(ctx context.Context, sale, user, variant string, qty int64) (string, error) {
	id, err := l.r.Reserve(ctx, sale, user, variant, qty)
	if l.n.Add(-1) >= 0 {
		return "", fmt.Errorf("reserving: i/o timeout: %w", flashgate.ErrUnavailable)
	}
	return id, err
}

// TestTimedOutReservesThatTookUnitsGiveTheCapBack (review of issue 35): a
// 503 gives its admission back even when the reserve took its unit (it
// timed out after Redis ran it). The admission cap then counts fewer
// attempts than took units; what must still hold is the reserve script's
// word: no unit sold twice, never more orders than units, every buyer at
// most one order, and a buyer told 503 finds the order they hold on
// retrying (while the sale is open: once it is sold out the cache answers
// sold_out before any reserve, as it did before the change). Through the
// inventory in the process and over HTTP.
func TestTimedOutReservesThatTookUnitsGiveTheCapBack(t *testing.T) {
	for _, over := range []string{"in-process", "http"} {
		t.Run(over, func(t *testing.T) {
			const sale, total = "late", 6
			late := &lateReserver{}
			late.n.Store(total / 2)
			rdb, buy := capGatewayWith(t, over, sale, total, nil, func(r gateway.Reserver) gateway.Reserver { late.r = r; return late })
			for i := range total / 2 {
				if code, body := buy("early"+strconv.Itoa(i), `{"quantity":1}`); code != 503 {
					t.Fatalf("early buyer %d: %d %s, want 503 (the reserve timed out after taking its unit)", i, code, body)
				}
			}
			for i := range total / 2 {
				code, body := buy("early"+strconv.Itoa(i), `{"quantity":1}`)
				if code == 201 || !strings.Contains(body, "order") {
					t.Errorf("early buyer %d again: %d %s, want their order named (already purchased), not a second one", i, code, body)
				}
			}
			got := map[int]int{}
			for i := range 2 * total {
				code, _ := buy("late"+strconv.Itoa(i), `{"quantity":1}`)
				got[code]++
			}
			if got[201] != total/2 {
				t.Errorf("late buyers for the %d units left: answers %v, want %d × 201 and the rest 409", total-total/2, got, total/2)
			}
			ctx := context.Background()
			booked, err := rdb.HGet(ctx, lua.SaleKey(sale), lua.FieldBooked).Int64()
			if err != nil || booked != total {
				t.Errorf("booked: got %d, %v, want %d", booked, err, total)
			}
			if n := rdb.XLen(ctx, lua.OrdersKey(sale)).Val(); n != total {
				t.Errorf("orders in the stream: got %d, want %d (one per unit)", n, total)
			}
		})
	}
}
