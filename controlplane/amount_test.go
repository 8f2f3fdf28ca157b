package controlplane

import (
	"errors"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// TestPayAmountNeverWraps: an order whose price_cents × quantity is over
// the largest amount a payment carries (here 4 units at
// 4611686018427387917 cents, whose product wraps to 52 in int64) is not
// payable: Pay answers ErrNotPayable and asks the provider for nothing,
// never a checkout of a wrapped amount. The sale's figures are set in
// Redis directly, as a sale created before the admin API refused them
// left them.
func TestPayAmountNeverWraps(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("big", 4, 1)
			if err := pe.rdb.HSet(pe.ctx, lua.SaleKey("big"), lua.FieldPrice, "4611686018427387917", lua.FieldPerUser, 4).Err(); err != nil {
				t.Fatal(err)
			}
			res, err := lua.Reserve.Run(pe.ctx, pe.rdb, lua.ReserveKeys("big"), "o000001", "u1", 4, pe.clock.Now().UnixMilli(), "big").Slice()
			if err != nil || res[0] != int64(lua.ReserveOK) {
				t.Fatalf("reserving 4 units: %v, %v", res, err)
			}
			pe.persist("big")
			_, err = pe.svc.Pay(pe.ctx, "o000001", "u1")
			if !errors.Is(err, flashgate.ErrNotPayable) {
				t.Errorf("Pay of 4 units at 4611686018427387917 cents: got %v, want ErrNotPayable", err)
			}
			pe.prov.mu.Lock()
			defer pe.prov.mu.Unlock()
			if len(pe.prov.intents) != 0 {
				for _, in := range pe.prov.intents {
					t.Errorf("the provider was asked for an intent of %d cents, want none", in.AmountCents)
				}
			}
		})
	}
}
