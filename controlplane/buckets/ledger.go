package buckets

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// errStaleLeader answers a move whose fencing token a newer leader's
// outranks: this Keeper's caller must stop moving units.
var errStaleLeader = errors.New("a newer leader owns the ledger")

// bucketStock is one bucket's stock in Redis.
type bucketStock struct {
	found                                  bool
	total, booked, sseq, freed, gseq, want int64
	// svar is the variant the bucket's last shrink freed units of
	// (lua.FieldShrinkVariant), "" for one stock.
	svar string
	// start and resume are the bucket's lua.FieldStart and
	// lua.FieldResume, and mark its rebuild mark (lua.FieldRebuild, ""
	// for none): a re-sync checks the totals of the buckets it may reopen
	// (settlePlans).
	start, resume int64
	mark          string
	// vtotal, vbooked and vwant are each variant's figures in the bucket
	// (vwant: the buyers of it the bucket turned away, lua.FieldWant per
	// variant), in the order of the variant ids readStock was given; nil
	// for one stock.
	vtotal, vbooked, vwant []int64
}

func (b bucketStock) free() int64 { return max(b.total-b.booked, 0) }

// vfree is the unheld units of variant i in the bucket.
func (b bucketStock) vfree(i int) int64 { return max(b.vtotal[i]-b.vbooked[i], 0) }

// demand is the buyers the bucket turned away sold out: of variant i, or
// of any when i is -1.
func (b bucketStock) demand(i int) int64 {
	if i < 0 {
		return b.want
	}
	return b.vwant[i]
}

// stockFields are the bucket hash fields readStock reads, in its order,
// then each variant's total, booked and want.
var stockFields = []string{lua.FieldTotal, lua.FieldBooked, lua.FieldShrinkSeq, lua.FieldShrinkFreed, lua.FieldGrantSeq, lua.FieldWant, lua.FieldShrinkVariant,
	lua.FieldStart, lua.FieldResume, lua.FieldRebuild}

// readStock reads every bucket's stock in one pipeline, with the figures
// of each variant named in variants (a sale sold in variants: its ids, in
// its order; nil for one stock).
func (k *Keeper) readStock(ctx context.Context, l lua.Layout, variants []string) ([]bucketStock, error) {
	tags := l.Tags()
	fields := stockFields
	if len(variants) > 0 {
		fields = append(append([]string(nil), stockFields...), variantFields(variants)...)
	}
	cmds := make([]*redis.SliceCmd, len(tags))
	pipe := k.rdb.Pipeline()
	for b, t := range tags {
		cmds[b] = pipe.HMGet(ctx, lua.SaleKey(t), fields...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading bucket stock: %w: %w", flashgate.ErrUnavailable, err)
	}
	out := make([]bucketStock, len(tags))
	for b, c := range cmds {
		v := c.Val()
		if len(v) != len(fields) || v[0] == nil {
			continue
		}
		st := bucketStock{found: true, total: lua.Int(v[0]), booked: lua.Int(v[1]), sseq: lua.Int(v[2]), freed: lua.Int(v[3]), gseq: lua.Int(v[4]), want: lua.Int(v[5])}
		st.svar, _ = v[6].(string)
		st.start, st.resume = lua.Int(v[7]), lua.Int(v[8])
		st.mark, _ = v[9].(string)
		if len(variants) > 0 {
			st.vtotal, st.vbooked, st.vwant = make([]int64, len(variants)), make([]int64, len(variants)), make([]int64, len(variants))
			for i := range variants {
				st.vtotal[i] = lua.Int(v[len(stockFields)+3*i])
				st.vbooked[i] = lua.Int(v[len(stockFields)+3*i+1])
				st.vwant[i] = lua.Int(v[len(stockFields)+3*i+2])
			}
		}
		out[b] = st
	}
	return out, nil
}

// variantFields are each variant's total, booked and want fields, in order.
func variantFields(variants []string) []string {
	out := make([]string, 0, 3*len(variants))
	for _, id := range variants {
		out = append(out, lua.VariantField(id, lua.FieldTotal), lua.VariantField(id, lua.FieldBooked), lua.VariantField(id, lua.FieldWant))
	}
	return out
}

// variantIDs are sale's variant ids in its order, nil for one stock.
func variantIDs(sale flashgate.Sale) []string {
	var out []string
	for _, v := range sale.Variants {
		out = append(out, v.ID)
	}
	return out
}

// ledgerState is the move a ledger holds in flight, if any.
type ledgerState struct {
	seq                   int64
	inFlight              bool
	phase                 string // "shrink" or "grant"
	from, to, want, freed int64
	// variant is the variant the move is of, "" for one stock.
	variant string
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
	case code == 1 && (len(v) == 7 || len(v) == 8):
		st := ledgerState{inFlight: true}
		if len(v) == 8 {
			st.variant, _ = v[7].(string)
		}
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
func (k *Keeper) readLedger(ctx context.Context, sale string) (ledgerState, error) {
	v, err := lua.Ledger.Run(ctx, k.rdb, lua.LedgerKeys(sale), "get", 0).Slice()
	if err != nil {
		return ledgerState{}, fmt.Errorf("reading ledger: %w: %w", flashgate.ErrUnavailable, err)
	}
	return parseLedger(v)
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
// live units (live) first, then the units of its pending retakes (held,
// nil for none: the rebuild holds them) as far as the units left go, the
// rest split evenly. Every live unit had a place in a bucket before the
// loss, so each share covers its live units and the buckets' totals add up
// to at most the sale's.
func rebuildTotals(total int64, stock []bucketStock, led ledgerState, live, held []int64) []int64 {
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
	for _, b := range missing {
		if b < len(held) {
			h := min(held[b], free)
			out[b] += h
			free -= h
		}
	}
	for i, b := range missing {
		out[b] += Share(free, len(missing), i)
	}
	return out
}

// rebuildVariantTotals is rebuildTotals for a sale sold in variants, one
// variant at a time: the buckets Redis lost get, of each variant, what no
// present bucket and no move of that variant in flight holds, each its live
// units of it first. totals are the sale's variant totals and live[b][i]
// bucket b's live units of variant i, both in the order of variants (the
// order readStock read stock in). It returns each bucket's totals per
// variant, and their sums; held[b][i] (nil for none) are bucket b's units
// of variant i its pending retakes hold.
func rebuildVariantTotals(variants []string, totals []int64, stock []bucketStock, led ledgerState, live, held [][]int64) (per [][]int64, sums []int64) {
	per = make([][]int64, len(stock))
	sums = make([]int64, len(stock))
	for b := range per {
		per[b] = make([]int64, len(variants))
	}
	vlive := make([]int64, len(stock))
	vheld := make([]int64, len(stock))
	for i, id := range variants {
		vstock := variantStock(stock, i, id)
		for b := range stock {
			vlive[b] = live[b][i]
			vheld[b] = 0
			if b < len(held) && held[b] != nil {
				vheld[b] = held[b][i]
			}
		}
		for b, n := range rebuildTotals(totals[i], vstock, led.of(id), vlive, vheld) {
			per[b][i] = n
			sums[b] += n
		}
	}
	return per, sums
}

// variantStock is stock as rebuildTotals sees it for variant i (id): each
// bucket's total of it, and what the bucket's last shrink freed of it.
func variantStock(stock []bucketStock, i int, id string) []bucketStock {
	out := make([]bucketStock, len(stock))
	for b, st := range stock {
		vs := bucketStock{found: st.found, sseq: st.sseq, gseq: st.gseq}
		if st.found && st.vtotal != nil {
			vs.total = st.vtotal[i]
		}
		if st.svar == id {
			vs.freed = st.freed
		}
		out[b] = vs
	}
	return out
}

// of is the ledger as a move of variant id sees it: the move in flight is
// of another variant's units, none of id's.
func (led ledgerState) of(id string) ledgerState {
	if led.variant != id {
		led.inFlight = false
	}
	return led
}
