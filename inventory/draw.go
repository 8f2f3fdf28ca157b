package inventory

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// errDrawBucketed refuses a draw winner's reserve on a bucketed sale: a
// draw sells from one bucket (flashgate.Sale.ValidateDraw).
var errDrawBucketed = fmt.Errorf("reserving a draw's winner: a bucketed sale: %w", flashgate.ErrBadRequest)

// ReserveWinner reserves a draw winner's order, orderID minted by the
// caller as ReserveOrder's (a retry with the same id finds the first
// call's order): the draw's close path, the one way a draw sale sells
// (lua.Reserve's ARGV[9], lua.DrawReserveFlag). It needs no start flag and
// takes every other check of a purchase, with the same errors as Reserve:
// stock and the variant's, one live order per buyer (a
// *flashgate.PurchasedError), per_user, paused; not closed: the close
// charged the winner before it reserves, so an admin's stop during the
// close must not leave the winner without the order. On a sale that is
// no draw it is a purchase like Reserve's, unbatched.
func (s *Service) ReserveWinner(ctx context.Context, orderID, saleID, userID, variant string, qty int64) (string, error) {
	switch {
	case !flashgate.ValidOrderID(orderID):
		s.m.outcome(outBadRequest)
		return "", errBadOrderID
	case !flashgate.ValidSaleID(saleID):
		s.m.outcome(outNotFound)
		return "", errBadSaleID
	case !flashgate.ValidUserID(userID):
		s.m.outcome(outBadRequest)
		return "", errBadUserID
	case qty < 1:
		s.m.outcome(outBadRequest)
		return "", errBadQty
	case variant != "" && !flashgate.ValidVariantID(variant):
		s.m.outcome(outBadVariant)
		return "", errBadVariant
	}
	l, err := s.layout(ctx, saleID)
	if err != nil {
		s.m.outcome(outError)
		return "", err
	}
	if l.Bucketed() {
		s.m.outcome(outBadRequest)
		return "", errDrawBucketed
	}
	now := s.clock.Now().UnixMilli()
	code, existing, err := s.reserveIn(ctx, "reserving a draw's winner", saleID, lua.ReserveKeys(saleID),
		orderID, userID, qty, now, saleID, "", "", variant, lua.DrawReserveFlag)
	if err != nil {
		return "", err
	}
	switch code {
	case lua.ReserveOK:
		s.m.outcome(outOK)
		return orderID, nil
	case lua.ReservePurchased:
		return s.purchased(existing, orderID)
	}
	return s.answer(code)
}
