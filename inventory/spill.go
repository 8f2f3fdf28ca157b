package inventory

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// errClaimPending answers a buyer of a bucketed sale while a spill of theirs
// is in flight (or was left by a crash and the leader has not settled it
// yet): the outcome is not known, so the buyer should retry, and the retry
// finds either their order (already purchased) or nothing.
var errClaimPending = fmt.Errorf("reserving: a purchase of this user is in progress: %w", flashgate.ErrUnavailable)

// spill is the end-game path of a bucketed sale whose home bucket answered
// sold out (see lua/spill.go): when another bucket still has qty free
// units (of variant, on a sale sold in variants), it claims the home bucket for the user (lua.Claim), reserves in the
// bucket with the most free units (then the next, while they sell out under
// it), and finalises the claim (lua.Finalize). With no unit anywhere the
// claim is removed and the buyer hears sold out. A Redis failure in between
// leaves the claim for the leader to settle, and the buyer hears
// ErrUnavailable.
func (s *Service) spill(ctx context.Context, l lua.Layout, home int, orderID, userID, variant string, qty, now int64) (string, error) {
	cands, err := s.spillCandidates(ctx, l, home, variant, qty)
	if err != nil {
		s.m.outcome(outError)
		return "", err
	}
	if len(cands) == 0 {
		s.m.outcome(outSoldOut)
		return "", errSoldOut
	}
	htag := l.Tag(home)
	start := time.Now()
	res, err := lua.Claim.Run(ctx, s.scripter, lua.ClaimKeys(htag), userID, orderID, now).Result()
	s.m.call(opReserve, start)
	if err != nil {
		s.m.outcome(outError)
		return "", s.redisError("claiming", err)
	}
	code, existing, ok := reserveResult(res)
	if !ok {
		s.m.outcome(outError)
		return "", fmt.Errorf("claiming: unexpected script answer %v", res)
	}
	switch code {
	case lua.ReserveOK:
	case lua.ReservePurchased:
		return s.purchased(existing, orderID)
	default:
		return s.answer(code)
	}
	paused := false
	for _, b := range cands {
		args := []any{orderID, userID, qty, now, l.Sale, b, lua.SpillArg}
		if variant != "" {
			args = append(args, variant)
		}
		c, ex, err := s.reserveIn(ctx, "reserving in a spill bucket", l.Tag(b), lua.SpillReserveKeys(l.Tag(b)), args...)
		if err != nil {
			// The outcome is unknown: the claim stays, and the leader
			// finalises or clears it (controlplane.SettleClaims).
			return "", err
		}
		switch {
		case c == lua.ReserveOK, c == lua.ReservePurchased && ex == orderID:
			s.finalize(ctx, htag, userID, orderID, b)
			s.m.outcome(outOK)
			return orderID, nil
		case c == lua.ReserveSoldOut, c == lua.ReserveNoSale:
			continue
		case c == lua.ReservePaused:
			paused = true
			continue
		case c == lua.ReserveFenced:
			// The leader took the claim for stale and is settling it.
			s.m.outcome(outPending)
			return "", errClaimPending
		case c == lua.ReservePurchased:
			// The user holds an order in this bucket while their home
			// held nothing (a marker lost with its home bucket): the
			// claim gives way to that order's marker, and the order
			// found is the user's.
			s.log.WarnContext(ctx, "spilling buyer holds an order outside the home bucket", "sale", l.Sale, "user", userID, "order", ex, "bucket", b)
			s.unclaim(ctx, htag, userID, orderID)
			s.finalize(ctx, htag, userID, ex, b)
			return s.purchased(ex, orderID)
		default:
			s.unclaim(ctx, htag, userID, orderID)
			return s.answer(c)
		}
	}
	s.unclaim(ctx, htag, userID, orderID)
	if paused {
		s.m.outcome(outPaused)
		return "", errPaused
	}
	s.m.outcome(outSoldOut)
	return "", errSoldOut
}

// stockFields are the bucket hash fields spillCandidates reads.
var stockFields = []string{lua.FieldTotal, lua.FieldBooked}

// spillCandidates are the buckets other than home with at least qty free
// units (of variant too, unless it is ""), most free first, read in one
// pipeline (no cache: it runs only on a home bucket's sold-out answer,
// which the admission cap and the gateways' sold-out state keep rare).
func (s *Service) spillCandidates(ctx context.Context, l lua.Layout, home int, variant string, qty int64) ([]int, error) {
	n := l.N()
	fields := stockFields
	if variant != "" {
		fields = []string{lua.FieldTotal, lua.FieldBooked, lua.VariantField(variant, lua.FieldTotal), lua.VariantField(variant, lua.FieldBooked)}
	}
	cmds := make([]*redis.SliceCmd, n)
	pipe := s.rdb.Pipeline()
	for b := range n {
		if b != home {
			cmds[b] = pipe.HMGet(ctx, lua.SaleKey(l.Tag(b)), fields...)
		}
	}
	start := time.Now()
	_, err := pipe.Exec(ctx)
	s.m.call(opReserve, start)
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, s.redisError("reading bucket stock", err)
	}
	free := make([]int64, n)
	var out []int
	for b, c := range cmds {
		if c == nil {
			continue
		}
		h, ok := lua.ReadHash(fields, c.Val())
		if !ok || !h.Has(lua.FieldTotal) {
			continue
		}
		free[b] = h.Int(lua.FieldTotal) - h.Int(lua.FieldBooked)
		if variant != "" {
			free[b] = min(free[b], h.Int(fields[2])-h.Int(fields[3]))
		}
		if free[b] >= qty {
			out = append(out, b)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return free[out[i]] > free[out[j]] })
	return out, nil
}

// finalize is the spill's last step. A failure only logs: the order
// stands, and the leader finalises the claim it left.
func (s *Service) finalize(ctx context.Context, htag, userID, orderID string, bucket int) {
	v, err := lua.Finalize.Run(ctx, s.scripter, lua.MarkerKeys(htag), userID, orderID, bucket).Slice()
	if err != nil {
		s.log.WarnContext(ctx, "finalising a spill failed; the leader settles the claim", "tag", htag, "order", orderID, "err", err)
		return
	}
	if code, _ := v[0].(int64); code == lua.FinalizeConflict {
		s.log.ErrorContext(ctx, "finalising a spill: the user holds another entry in the home bucket", "tag", htag, "user", userID, "order", orderID, "entry", v[1])
	}
}

// unclaim removes the spill's claim when no bucket took the order. A
// failure only logs: the leader clears the claim once it is stale.
func (s *Service) unclaim(ctx context.Context, htag, userID, orderID string) {
	if err := lua.Unclaim.Run(ctx, s.rdb, lua.UnclaimKeys(htag), userID, orderID).Err(); err != nil {
		s.log.WarnContext(ctx, "removing a spill claim failed; the leader clears it", "tag", htag, "order", orderID, "err", err)
	}
}

// purchased answers a buyer whose home bucket holds existing: a plain order
// id or a final marker is their live order (this call's own when it names
// orderID), a claim is a spill in flight.
func (s *Service) purchased(existing, orderID string) (string, error) {
	if order, _, final, ok := lua.ParseMarker(existing); ok {
		if !final {
			s.m.outcome(outPending)
			return "", errClaimPending
		}
		existing = order
	}
	if existing == orderID {
		s.m.outcome(outOK)
		return orderID, nil
	}
	s.m.outcome(outPurchased)
	return "", &flashgate.PurchasedError{OrderID: existing}
}

// unmark clears the home bucket markers of released orders of a bucketed
// sale that were reserved outside their buyer's home (lua.Unmark), one
// script call per home bucket.
func (s *Service) unmark(ctx context.Context, l lua.Layout, orders []flashgate.Order) error {
	var byHome map[int][]any
	for _, o := range orders {
		h := l.Home(o.UserID)
		if o.Bucket == h || o.Bucket < 0 || o.Bucket >= l.N() {
			continue
		}
		if byHome == nil {
			byHome = make(map[int][]any)
		}
		byHome[h] = append(byHome[h], o.UserID, o.ID, o.Bucket)
	}
	for h, args := range byHome {
		for start := 0; start < len(args); start += 3 * MaxReleaseBatch {
			chunk := args[start:min(start+3*MaxReleaseBatch, len(args))]
			if err := lua.Unmark.Run(ctx, s.rdb, lua.MarkerKeys(l.Tag(h)), chunk...).Err(); err != nil {
				return s.redisError("clearing spill markers", err)
			}
		}
	}
	return nil
}
