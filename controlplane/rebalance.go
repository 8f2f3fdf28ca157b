package controlplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// errStaleLeader answers a move whose fencing token a newer leader's
// outranks: this Service must stop moving units.
var errStaleLeader = errors.New("a newer leader owns the ledger")

// bucketStock is one bucket's stock in Redis.
type bucketStock struct {
	found                                  bool
	total, booked, sseq, freed, gseq, want int64
}

func (b bucketStock) free() int64 { return max(b.total-b.booked, 0) }

// readStock reads every bucket's stock in one pipeline.
func (s *Service) readStock(ctx context.Context, l lua.Layout) ([]bucketStock, error) {
	tags := l.Tags()
	cmds := make([]*redis.SliceCmd, len(tags))
	pipe := s.rdb.Pipeline()
	for b, t := range tags {
		cmds[b] = pipe.HMGet(ctx, lua.SaleKey(t), lua.FieldTotal, lua.FieldBooked, lua.FieldShrinkSeq, lua.FieldShrinkFreed, lua.FieldGrantSeq, lua.FieldWant)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading bucket stock: %w: %w", flashgate.ErrUnavailable, err)
	}
	out := make([]bucketStock, len(tags))
	for b, c := range cmds {
		v := c.Val()
		if len(v) != 6 || v[0] == nil {
			continue
		}
		out[b] = bucketStock{found: true, total: num(v[0]), booked: num(v[1]), sseq: num(v[2]), freed: num(v[3]), gseq: num(v[4]), want: num(v[5])}
	}
	return out, nil
}

// ledgerState is the move a ledger holds in flight, if any.
type ledgerState struct {
	seq                   int64
	inFlight              bool
	phase                 string // "shrink" or "grant"
	from, to, want, freed int64
}

func parseLedger(v []any) (ledgerState, error) {
	if len(v) == 0 {
		return ledgerState{}, fmt.Errorf("ledger: empty answer")
	}
	code, _ := v[0].(int64)
	switch {
	case code == 2 && len(v) == 2:
		seq, _ := v[1].(int64)
		return ledgerState{seq: seq}, nil
	case code == 1 && len(v) == 7:
		st := ledgerState{inFlight: true}
		st.seq, _ = v[1].(int64)
		st.phase, _ = v[2].(string)
		st.from, _ = v[3].(int64)
		st.to, _ = v[4].(int64)
		st.want, _ = v[5].(int64)
		st.freed, _ = v[6].(int64)
		return st, nil
	case code == -1:
		return ledgerState{}, errStaleLeader
	}
	return ledgerState{}, fmt.Errorf("ledger: unexpected answer %v", v)
}

// readLedger reads a sale's ledger.
func (s *Service) readLedger(ctx context.Context, sale string) (ledgerState, error) {
	v, err := lua.Ledger.Run(ctx, s.rdb, lua.LedgerKeys(sale), "get", 0).Slice()
	if err != nil {
		return ledgerState{}, fmt.Errorf("reading ledger: %w: %w", flashgate.ErrUnavailable, err)
	}
	return parseLedger(v)
}

// Rebalance runs one rebalancing step of a bucketed sale under fencing
// token (the leader's; the loop passes its lease's): it first settles stale
// spill claims (SettleClaims), then finishes a
// move a crashed leader left in the ledger, then moves half the difference
// of unheld units from the bucket with the most to the bucket with the
// fewest when they differ by 2 or more. A move shrinks the giving bucket
// first (lua.Shrink: never below its booked, answers what it freed), then
// credits the taking one (lua.Grant: once per move, refused to a stale
// token), each step recorded in the ledger (lua.Ledger), so the buckets'
// totals never add up to more than the sale's: a crash strands units until
// the next step, never oversells. When no two buckets differ by 2, one unit
// goes to an empty bucket whose buyers were turned away (lua.FieldWant,
// counted by the inventory) from a bucket that can spare it. It returns the units this call credited
// (a finished move's included). An unbucketed sale moves nothing.
func (s *Service) Rebalance(ctx context.Context, id string, token int64) (moved int64, err error) {
	if !flashgate.ValidSaleID(id) {
		return 0, fmt.Errorf("sale %q: %w", id, flashgate.ErrNotFound)
	}
	if token < 1 {
		return 0, fmt.Errorf("rebalancing sale %s: no fencing token (not leading)", id)
	}
	s.resyncMu.Lock()
	defer s.resyncMu.Unlock()
	sale, err := s.store.Sale(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("reading sale: %w", err)
	}
	if !sale.Bucketed() || s.recovering(id) {
		return 0, nil // nothing moves while a failover is recovered (failoverbuckets.go)
	}
	l := saleLayout(sale)
	// Stale spill claims first: a claim left by a crash keeps its user
	// from buying.
	if _, _, err := s.settleClaims(ctx, l); err != nil {
		return 0, err
	}
	led, err := s.readLedger(ctx, id)
	if err != nil {
		return 0, err
	}
	if led.inFlight {
		return s.finishMove(ctx, l, token, led)
	}
	stock, err := s.readStock(ctx, l)
	if err != nil {
		return 0, err
	}
	giver, taker := -1, -1
	for b, st := range stock {
		if !st.found {
			return 0, nil // a re-sync rebuilds it first
		}
		if giver < 0 || st.free() > stock[giver].free() {
			giver = b
		}
		if taker < 0 || st.free() < stock[taker].free() {
			taker = b
		}
	}
	want := (stock[giver].free() - stock[taker].free()) / 2
	if want < 1 {
		// Near the end: the last units go where buyers are turned away.
		// An empty bucket that saw buyers (want) takes one unit from a
		// bucket that has one and no such buyers, or has two or more.
		taker, giver, want = -1, -1, 1
		for b, st := range stock {
			if st.free() == 0 && st.want > 0 && (taker < 0 || st.want > stock[taker].want) {
				taker = b
			}
		}
		for b, st := range stock {
			if b != taker && (st.free() >= 2 || st.free() == 1 && st.want == 0) && (giver < 0 || st.free() > stock[giver].free()) {
				giver = b
			}
		}
		if taker < 0 || giver < 0 {
			return 0, nil
		}
	}
	v, err := lua.Ledger.Run(ctx, s.rdb, lua.LedgerKeys(id), "begin", token, giver, taker, want).Slice()
	if err != nil {
		return 0, fmt.Errorf("recording a move: %w: %w", flashgate.ErrUnavailable, err)
	}
	if code, _ := v[0].(int64); code == 0 && len(v) == 2 {
		seq, _ := v[1].(int64)
		// The taker's demand is answered by this move.
		if err := s.rdb.HSet(ctx, lua.SaleKey(l.Tag(taker)), lua.FieldWant, 0).Err(); err != nil {
			return 0, fmt.Errorf("rebalancing: %w: %w", flashgate.ErrUnavailable, err)
		}
		return s.finishMove(ctx, l, token, ledgerState{seq: seq, inFlight: true, phase: "shrink",
			from: int64(giver), to: int64(taker), want: want})
	}
	led, err = parseLedger(v)
	if err != nil {
		return 0, err
	}
	return s.finishMove(ctx, l, token, led)
}

// finishMove carries the move in led through its remaining steps.
func (s *Service) finishMove(ctx context.Context, l lua.Layout, token int64, led ledgerState) (int64, error) {
	if led.from < 0 || led.from >= int64(l.N()) || led.to < 0 || led.to >= int64(l.N()) {
		return 0, fmt.Errorf("ledger of sale %s: move %d between buckets %d and %d of %d", l.Sale, led.seq, led.from, led.to, l.N())
	}
	ledger := lua.LedgerKeys(l.Sale)
	freed := led.freed
	if led.phase == "shrink" {
		var err error
		freed, err = lua.Shrink.Run(ctx, s.rdb, lua.SaleKeys(l.Tag(int(led.from))), led.seq, led.want).Int64()
		if err != nil {
			return 0, fmt.Errorf("shrinking bucket %d: %w: %w", led.from, flashgate.ErrUnavailable, err)
		}
		v, err := lua.Ledger.Run(ctx, s.rdb, ledger, "shrunk", token, led.seq, freed).Int64Slice()
		if err != nil {
			return 0, fmt.Errorf("recording a shrink: %w: %w", flashgate.ErrUnavailable, err)
		}
		if v[0] == -1 {
			return 0, errStaleLeader
		}
		if v[0] != 0 {
			return 0, fmt.Errorf("recording a shrink: ledger answered %v", v)
		}
	}
	code, err := lua.Grant.Run(ctx, s.rdb, lua.SaleKeys(l.Tag(int(led.to))), token, led.seq, freed).Int64()
	if err != nil {
		return 0, fmt.Errorf("crediting bucket %d: %w: %w", led.to, flashgate.ErrUnavailable, err)
	}
	switch code {
	case -1:
		return 0, errStaleLeader
	case -2:
		// The taking bucket is gone: the move stays in flight, and the
		// bucket's rebuild leaves these units out of its share.
		return 0, nil
	}
	v, err := lua.Ledger.Run(ctx, s.rdb, ledger, "done", token, led.seq).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("closing a move: %w: %w", flashgate.ErrUnavailable, err)
	}
	if v[0] == -1 {
		return 0, errStaleLeader
	}
	if code == 1 {
		s.log.Debug("units moved between buckets", "sale", l.Sale, "from", led.from, "to", led.to, "units", freed, "move", led.seq)
		return freed, nil
	}
	return 0, nil
}

// granted reports whether the move in flight was credited already (a
// taking bucket that is gone counts as not credited: its rebuild leaves the
// units out, and the move credits them again).
func (led ledgerState) granted(stock []bucketStock) bool {
	return led.inFlight && int(led.to) < len(stock) && stock[led.to].found && stock[led.to].gseq >= led.seq
}

// inFlightUnits is what the move in flight freed and has not credited.
func (led ledgerState) inFlightUnits(stock []bucketStock) int64 {
	if !led.inFlight || led.granted(stock) {
		return 0
	}
	switch {
	case led.phase == "grant":
		return led.freed
	case led.phase == "shrink" && int(led.from) < len(stock) && stock[led.from].found && stock[led.from].sseq == led.seq:
		return stock[led.from].freed
	}
	return 0
}

// rebuildTotals gives the buckets Redis lost (missing) their totals for a
// rebuild: what no present bucket and no move in flight holds, each its
// live units (live) first, the rest split evenly. Every live unit had a
// place in a bucket before the loss, so each share covers its live units
// and the buckets' totals add up to at most the sale's.
func rebuildTotals(total int64, stock []bucketStock, led ledgerState, live []int64) []int64 {
	free := total - led.inFlightUnits(stock)
	var missing []int
	for b, st := range stock {
		if st.found {
			free -= st.total
		} else {
			missing = append(missing, b)
		}
	}
	out := make([]int64, len(stock))
	for _, b := range missing {
		out[b] = live[b]
		free -= live[b]
	}
	free = max(free, 0)
	for i, b := range missing {
		out[b] += bucketShare(free, len(missing), i)
	}
	return out
}
