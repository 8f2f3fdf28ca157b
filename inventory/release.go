package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// Release gives the units of order o back to its sale, once. It reports
// whether this call released them: a second release of the same order, or a
// sale Redis no longer holds (a later re-sync from the database fixes Redis),
// returns false and no error.
func (s *Service) Release(ctx context.Context, o flashgate.Order) (bool, error) {
	if !flashgate.ValidSaleID(o.SaleID) {
		return false, fmt.Errorf("releasing: sale id: %w", flashgate.ErrNotFound)
	}
	if o.ID == "" || o.UserID == "" || o.Quantity < 1 {
		return false, fmt.Errorf("releasing: %w", &flashgate.FieldError{Field: "order", Reason: "needs order_id, user_id and quantity >= 1"})
	}
	tag, err := s.tagOf(ctx, o.SaleID, o.Bucket)
	if err != nil {
		return false, err
	}
	keys := lua.ReleaseKeys(tag)
	start := time.Now()
	code, err := lua.Release.Run(ctx, s.rdb, keys, o.ID, o.UserID, o.Quantity, o.Variant).Int64()
	s.m.call(opRelease, start)
	if err != nil {
		return false, s.redisError("releasing", err)
	}
	if code != lua.ReleaseDone && code != lua.ReleaseAlready && code != lua.ReleaseNoSale {
		return false, fmt.Errorf("releasing: unknown script code %d", code)
	}
	// A spilled order's home marker goes after its units are back: a
	// crash in between keeps the user out of the home bucket until the
	// re-sync delivers the release again, never lets them hold two orders.
	if l, err := s.layout(ctx, o.SaleID); err != nil {
		return false, err
	} else if l.Bucketed() {
		if err := s.unmark(ctx, l, []flashgate.Order{o}); err != nil {
			return false, err
		}
	}
	switch code {
	case lua.ReleaseDone:
		return true, nil
	case lua.ReleaseAlready:
		return false, nil
	default:
		s.log.DebugContext(ctx, "release of an order whose sale is not in redis", "sale", o.SaleID, "order", o.ID)
		return false, nil
	}
}

// MaxReleaseBatch is the most orders one ReleaseBatch script call carries;
// longer lists take several calls, so no call holds Redis for long.
const MaxReleaseBatch = 500

// ReleaseBatch gives the units of many orders back, each once, with one
// script call per sale and per MaxReleaseBatch orders (lua.ReleaseBatch). It
// returns how many orders this call released; orders released before, and
// orders of a sale Redis no longer holds (a later re-sync from the database
// fixes Redis), are skipped without error. An order without id, user or a
// quantity >= 1 is skipped too and reported, with ErrBadRequest, in the
// error, after the others were released; a Redis failure stops the call.
func (s *Service) ReleaseBatch(ctx context.Context, orders []flashgate.Order) (released int, err error) {
	var bad error
	var spilled map[string][]flashgate.Order // sale → its bucketed orders (unmark skips the unspilled)
	bySale := make(map[string][]any)
	var sales []string
	for _, o := range orders {
		if !flashgate.ValidSaleID(o.SaleID) || o.ID == "" || o.UserID == "" || o.Quantity < 1 {
			if bad == nil {
				bad = fmt.Errorf("releasing order %q: %w", o.ID, &flashgate.FieldError{Field: "order", Reason: "needs a sale id, order_id, user_id and quantity >= 1"})
			}
			continue
		}
		// Each order goes back to its own bucket (the sale's own keys when
		// unbucketed).
		tag, err := s.tagOf(ctx, o.SaleID, o.Bucket)
		if errors.Is(err, errBadBucket) {
			if bad == nil {
				bad = fmt.Errorf("releasing order %q: %w", o.ID, err)
			}
			continue
		}
		if err != nil {
			return released, err
		}
		if _, ok := bySale[tag]; !ok {
			sales = append(sales, tag)
		}
		if tag != o.SaleID {
			if spilled == nil {
				spilled = make(map[string][]flashgate.Order)
			}
			spilled[o.SaleID] = append(spilled[o.SaleID], o)
		}
		bySale[tag] = append(bySale[tag], o.ID, o.UserID, o.Quantity, o.Variant)
	}
	for _, sale := range sales {
		keys := lua.ReleaseKeys(sale)
		args := bySale[sale]
		for start := 0; start < len(args); start += 4 * MaxReleaseBatch {
			chunk := args[start:min(start+4*MaxReleaseBatch, len(args))]
			call := make([]any, 0, 1+len(chunk))
			call = append(call, "")
			call = append(call, chunk...)
			t := time.Now()
			res, err := lua.ReleaseBatch.Run(ctx, s.rdb, keys, call...).Int64Slice()
			s.m.call(opRelease, t)
			if err != nil {
				return released, s.redisError("releasing", err)
			}
			if len(res) != 3 {
				return released, fmt.Errorf("releasing: unexpected script answer %v", res)
			}
			switch res[0] {
			case lua.ReleaseBatchDone:
				released += int(res[1])
			case lua.ReleaseBatchNoSale:
				s.log.DebugContext(ctx, "release of orders whose sale is not in redis", "sale", sale, "orders", len(chunk)/4)
			default:
				return released, fmt.Errorf("releasing: unknown script code %d", res[0])
			}
		}
	}
	// Spilled orders' home markers go once their units are back.
	for sale, os := range spilled {
		l, err := s.layout(ctx, sale)
		if err != nil {
			return released, err
		}
		if err := s.unmark(ctx, l, os); err != nil {
			return released, err
		}
	}
	return released, bad
}
