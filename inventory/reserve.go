package inventory

import (
	"context"
	"fmt"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// Reserve takes qty units of sale saleID for userID and enqueues the order,
// returning its id. Errors are flashgate sentinels: ErrNotFound (unknown or
// malformed sale), ErrNotStarted, ErrClosed, ErrSoldOut, a
// *flashgate.PurchasedError carrying the user's live order, ErrBadRequest
// (bad user id, quantity or variant) and ErrUnavailable (Redis
// unreachable).
func (s *Service) Reserve(ctx context.Context, saleID, userID, variant string, qty int64) (string, error) {
	return s.reserve(ctx, "", saleID, userID, variant, qty)
}

// ReserveOrder is Reserve with an order id the caller minted, so that a
// call whose answer was lost can be sent again: a second call with the same
// order id finds the first one's reservation and answers it as its own
// (never a second reservation). orderID must satisfy
// flashgate.ValidOrderID, or the error wraps ErrBadRequest.
func (s *Service) ReserveOrder(ctx context.Context, orderID, saleID, userID, variant string, qty int64) (string, error) {
	if !flashgate.ValidOrderID(orderID) {
		s.m.outcome(outBadRequest)
		return "", errBadOrderID
	}
	return s.reserve(ctx, orderID, saleID, userID, variant, qty)
}

// reserve is Reserve and ReserveOrder; an empty orderID is minted here.
func (s *Service) reserve(ctx context.Context, orderID, saleID, userID, variant string, qty int64) (string, error) {
	if !flashgate.ValidSaleID(saleID) {
		s.m.outcome(outNotFound)
		return "", errBadSaleID
	}
	if !flashgate.ValidUserID(userID) {
		s.m.outcome(outBadRequest)
		return "", errBadUserID
	}
	if qty < 1 {
		s.m.outcome(outBadRequest)
		return "", errBadQty
	}
	if variant != "" && !flashgate.ValidVariantID(variant) {
		s.m.outcome(outBadVariant)
		return "", errBadVariant
	}
	if orderID == "" {
		orderID = s.newID()
	}
	l, err := s.layout(ctx, saleID)
	if err != nil {
		s.m.outcome(outError)
		return "", err
	}
	now := s.clock.Now().UnixMilli()
	// A buyer of a bucketed sale reserves in their home bucket only, so
	// that one live order per user stays one atomic script; a sold-out
	// answer there also counts the bucket's "want" (reserve.lua).
	tag, home := saleID, 0
	if l.Bucketed() {
		home = l.Home(userID)
		tag = l.Tag(home)
	}
	var code int64
	var existing string
	if s.batchMax > 1 {
		code, existing, err = s.reserveBatched(ctx, tag, saleID, bucketArg(l.Bucketed(), home), orderID, userID, variant, qty)
	} else {
		args := []any{orderID, userID, qty, now, saleID}
		switch {
		case l.Bucketed() && variant != "":
			args = append(args, home, "", variant)
		case l.Bucketed():
			args = append(args, home)
		case variant != "":
			args = append(args, "", "", variant)
		}
		code, existing, err = s.reserveIn(ctx, "reserving", tag, lua.ReserveKeys(tag), args...)
	}
	if err != nil {
		return "", err
	}
	switch {
	case code == lua.ReserveOK:
		s.m.outcome(outOK)
		return orderID, nil
	case code == lua.ReservePurchased:
		// A retried call whose first attempt had reserved finds its own
		// order; on a bucketed sale the entry may be a spill's marker.
		return s.purchased(existing, orderID)
	case code == lua.ReserveSoldOut && l.Bucketed():
		// The end game: another bucket may still have units.
		return s.spill(ctx, l, home, orderID, userID, variant, qty, now)
	}
	return s.answer(code)
}

// answer maps a refusing reserve code (not OK, not purchased) to its error.
func (s *Service) answer(code int64) (string, error) {
	switch code {
	case lua.ReserveNoSale:
		s.m.outcome(outNotFound)
		return "", errNoSale
	case lua.ReserveNotStarted:
		s.m.outcome(outNotStarted)
		return "", errNotStarted
	case lua.ReserveClosed:
		s.m.outcome(outClosed)
		return "", errClosed
	case lua.ReserveSoldOut:
		s.m.outcome(outSoldOut)
		return "", errSoldOut
	case lua.ReserveBadQuantity:
		s.m.outcome(outBadRequest)
		return "", errQtyPerUser
	case lua.ReservePaused:
		s.m.outcome(outPaused)
		return "", errPaused
	case lua.ReserveNotAdmitted:
		s.m.outcome(outNotAdmitted)
		return "", errUnadmitted
	case lua.ReserveBadVariant:
		s.m.outcome(outBadVariant)
		return "", errBadVariant
	default:
		s.m.outcome(outError)
		return "", fmt.Errorf("reserving: unknown script code %d", code)
	}
}

// reserveIn runs lua.Reserve on tag's keys (what names the step in errors) and
// returns its code and the existing order it names; a failed call or an
// answer it cannot read counts as an error outcome.
func (s *Service) reserveIn(ctx context.Context, what, tag string, keys []string, args ...any) (code int64, existing string, err error) {
	start := time.Now()
	res, acked, want, err := s.runReserve(ctx, s.scripter, lua.Reserve, tag, keys, args...)
	s.m.call(opReserve, start)
	if err != nil {
		s.m.outcome(outError)
		return 0, "", s.redisError(what, err)
	}
	code, existing, ok := reserveResult(res)
	if !ok {
		s.m.outcome(outError)
		return 0, "", fmt.Errorf("%s: unexpected script answer %v", what, res)
	}
	order, _ := args[0].(string)
	sale, _ := args[4].(string)
	if err := s.confirm(ctx, sale, acked, want, code, existing, order); err != nil {
		s.m.outcome(outError)
		return 0, "", err
	}
	return code, existing, nil
}

// errWaitShort answers a reserve that WAIT could not confirm on enough
// replicas: the order stands in Redis but might not survive a failover, so
// the buyer hears 503 and their retry finds it (ErrAlreadyPurchased).
var errWaitShort = fmt.Errorf("reserving: not on enough replicas: %w", flashgate.ErrUnavailable)

// reserveResult unpacks the {code, order id} answer of lua.Reserve.
func reserveResult(res any) (code int64, orderID string, ok bool) {
	vals, isSlice := res.([]any)
	if !isSlice || len(vals) != 2 {
		return 0, "", false
	}
	code, ok1 := vals[0].(int64)
	orderID, ok2 := vals[1].(string)
	return code, orderID, ok1 && ok2
}
