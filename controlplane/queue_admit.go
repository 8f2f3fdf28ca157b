package controlplane

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// admit ends the windows that passed and admits the positions the free
// stock allows, in one QueueAdvance.
func (s *Service) admit(ctx context.Context, sale flashgate.Sale, run *queueRun, f queueFigures, fence int64, now time.Time) error {
	ms := now.UnixMilli()
	// Positions this process has not seen admitted count from now.
	for p := run.base + int64(len(run.admittedAt)); p < f.k; p++ {
		run.admittedAt = append(run.admittedAt, ms)
	}
	window := int64(sale.AdmitWindow()) * 1000
	e := max(f.e, run.base)
	for e < f.k && run.admittedAt[e-run.base]+window <= ms {
		e++
	}
	// Positions in (e, k] whose buyer holds no order are promised a bound.
	users := make([]string, 0, f.k-e)
	for p := e + 1; p <= f.k; p++ {
		u, err := s.queueUser(ctx, sale.ID, run, p)
		if err != nil {
			return err
		}
		users = append(users, u)
	}
	pending := int64(0)
	if len(users) > 0 {
		held, err := s.rdb.HMGet(ctx, lua.BuyersKey(sale.ID), users...).Result()
		if err != nil {
			return fmt.Errorf("reading buyers: %w: %w", flashgate.ErrUnavailable, err)
		}
		for _, h := range held {
			if h == nil {
				pending++
			}
		}
	}
	free := max(f.total-f.booked, 0)/f.perUser - pending
	n := min(max(free, 0), f.pre+f.late-f.k)
	if f.backlog > s.queueBacklog || f.latency > s.queueLatency {
		n = 0 // hold admission while the system is behind
	}
	if apm := sale.AdmitPerMinute; apm > 0 {
		burst := max(float64(apm)/60, 1)
		if !run.refilled.IsZero() {
			run.tokens += now.Sub(run.refilled).Minutes() * float64(apm)
		} else {
			run.tokens = burst
		}
		run.tokens = min(run.tokens, burst)
		run.refilled = now
		n = min(n, int64(run.tokens))
		run.tokens -= float64(n)
	}
	if n <= 0 && e == f.e {
		return nil
	}
	k := f.k + n
	rate := int64(0)
	for p := k; p > run.base && p > 0; p-- {
		if p > f.k {
			rate++ // admitted now
			continue
		}
		if run.admittedAt[p-run.base-1] <= ms-60_000 {
			break
		}
		rate++
	}
	res, err := lua.QueueAdvance.Run(ctx, s.rdb, lua.SaleKeys(sale.ID), fence, f.k, k, run.theta(k), e, run.theta(e),
		rate, f.maxnum).Int()
	if err != nil {
		return fmt.Errorf("advancing the queue: %w: %w", flashgate.ErrUnavailable, err)
	}
	switch res {
	case 1:
		for range n {
			run.admittedAt = append(run.admittedAt, ms)
		}
		// Forget the times of positions whose window ended.
		if drop := e - run.base; drop > 0 {
			run.admittedAt = run.admittedAt[drop:]
			run.base = e
		}
		if n > 0 {
			s.log.Debug("fair queue admitted", "sale", sale.ID, "admitted_position", k, "pending", pending)
		}
	case 0:
		// Another writer moved q_k: read again next tick.
	default:
		return fmt.Errorf("advancing the queue: refused (%d)", res)
	}
	return nil
}

// theta is the rank key of pre-start position min(k, pre), "" for none.
func (r *queueRun) theta(k int64) string {
	k = min(k, int64(len(r.pre)))
	if k <= 0 {
		return ""
	}
	return hex.EncodeToString(r.pre[k-1].key[:])
}

// tuneChallenge sets the proof-of-work's maxnumber: the sale's
// challenge_maxnumber, raised with challenge_auto by one step per
// autoRatePerStep entries per second the queue grows by (at most
// maxAutoFactor times). It returns the maxnumber now in force.
func (s *Service) tuneChallenge(ctx context.Context, sale flashgate.Sale, run *queueRun, f queueFigures, now time.Time) int64 {
	base := sale.ChallengeMaxNumber
	if base <= 0 || !sale.ChallengeAutoOn() {
		return f.maxnum
	}
	entrants := f.pre + f.late
	if !run.seenAt.IsZero() {
		if dt := now.Sub(run.seenAt).Seconds(); dt > 0 {
			r := float64(entrants-run.entrants) / dt
			run.growth = 0.7*run.growth + 0.3*r
		}
	}
	run.entrants, run.seenAt = entrants, now
	factor := min(1+int64(run.growth/autoRatePerStep), maxAutoFactor)
	want := base * factor
	if want == f.maxnum {
		return want
	}
	if err := s.rdb.HSet(ctx, lua.SaleKey(sale.ID), lua.FieldQMaxNumber, want).Err(); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("fair queue: setting the challenge's maxnumber", "sale", sale.ID, "err", err)
		}
		return f.maxnum
	}
	return want
}
