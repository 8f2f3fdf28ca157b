package queueleader

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/lua"
)

// admit ends the windows that passed and admits the positions the free
// stock allows, in one QueueAdvance: the script reads the stock, the
// buyers and the windows (kept in Redis, lua.QueueWindowsKey) together, so
// a buyer who reserves meanwhile cannot make it promise a unit twice. The
// leader passes what only it knows: the users at the admitted positions
// still in their windows, the rank keys of the positions it may admit, and
// how many it may admit (admit_per_minute, back-pressure).
func (l *Leader) admit(ctx context.Context, sale flashgate.Sale, run *queueRun, f queueFigures, fence int64, now time.Time) error {
	n := f.Prequeued + f.Late - f.Admitted
	if f.backlog > l.backlog || f.latency > l.latency {
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
	}
	// Free units bound what may be admitted, so no more rank keys than
	// units are passed.
	n = max(min(n, max(f.total-f.booked, 0)), 0)
	args := make([]any, 0, 7+(f.Admitted-f.Expired)+min(n, max(int64(len(run.pre))-f.Admitted, 0)))
	args = append(args, fence, f.Admitted, f.Expired, now.UnixMilli(), n, f.MaxNumber, f.Admitted-f.Expired)
	for p := f.Expired + 1; p <= f.Admitted; p++ {
		u, err := l.queueUser(ctx, sale.ID, run, p)
		if err != nil {
			return err
		}
		args = append(args, u)
	}
	for p := f.Admitted + 1; p <= min(f.Admitted+n, int64(len(run.pre))); p++ {
		args = append(args, hex.EncodeToString(run.pre[p-1].key[:]))
	}
	v, err := lua.QueueAdvance.Run(ctx, l.rdb, lua.QueueAdvanceKeys(sale.ID), args...).Int64Slice()
	if err != nil {
		return fmt.Errorf("advancing the queue: %w: %w", flashgate.ErrUnavailable, err)
	}
	if len(v) != 3 {
		return fmt.Errorf("advancing the queue: %d values in the answer, want 3", len(v))
	}
	switch v[0] {
	case 1:
		if sale.AdmitPerMinute > 0 {
			run.tokens -= float64(v[1] - f.Admitted)
		}
		if v[1] > f.Admitted {
			l.log.Debug("fair queue admitted", "sale", sale.ID, "admitted_position", v[1], "window_ended", v[2])
		}
	case 0:
		// Another writer moved a frontier: read again next tick.
	default:
		return fmt.Errorf("advancing the queue: refused (%d)", v[0])
	}
	return nil
}

// tuneChallenge sets the proof-of-work's maxnumber: the sale's
// challenge_maxnumber, raised with challenge_auto by one step per
// fairqueue.AutoRatePerStep entries per second the queue grows by (at most
// fairqueue.MaxAutoFactor times). It returns the maxnumber now in force.
func (l *Leader) tuneChallenge(ctx context.Context, sale flashgate.Sale, run *queueRun, f queueFigures, now time.Time) int64 {
	base := sale.ChallengeMaxNumber
	if base <= 0 || !sale.ChallengeAutoOn() {
		return f.MaxNumber
	}
	entrants := f.Prequeued + f.Late
	if !run.seenAt.IsZero() {
		if dt := now.Sub(run.seenAt).Seconds(); dt > 0 {
			r := float64(entrants-run.entrants) / dt
			run.growth = 0.7*run.growth + 0.3*r
		}
	}
	run.entrants, run.seenAt = entrants, now
	factor := min(1+int64(run.growth/fairqueue.AutoRatePerStep), fairqueue.MaxAutoFactor)
	want := base * factor
	if want == f.MaxNumber {
		return want
	}
	if err := l.rdb.HSet(ctx, lua.SaleKey(sale.ID), lua.FieldQueueMaxNumber, want).Err(); err != nil {
		if ctx.Err() == nil {
			l.log.Warn("fair queue: setting the challenge's maxnumber", "sale", sale.ID, "err", err)
		}
		return f.MaxNumber
	}
	return want
}
