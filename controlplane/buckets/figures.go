package buckets

import (
	"context"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/lua"
)

// Status is one bucket's live figures in GET /admin/sales/{id}.
type Status struct {
	Bucket int    `json:"bucket"`
	Tag    string `json:"tag"`
	// Total is the units the bucket holds now (its share of the sale).
	Total  int64 `json:"total"`
	Booked int64 `json:"booked"`
	// StreamBacklog is the bucket's reserved orders not yet in the database.
	StreamBacklog int64 `json:"stream_backlog"`
}

// SetState opens or closes every bucket of a bucketed sale; it
// reports whether some bucket (or the sale's own hash) is missing.
func (k *Keeper) SetState(ctx context.Context, sale flashgate.Sale, arg string) (missing bool, err error) {
	tok := fencing.Of(ctx)
	for _, t := range Layout(sale).Tags() {
		n, err := lua.SetState.Run(ctx, k.rdb, lua.SaleKeys(t), arg, tok).Int()
		if err != nil {
			return false, err
		}
		if n == lua.SetStateFenced {
			return false, fencing.Err("setting bucket state", tok)
		}
		if n == -1 {
			missing = true
		}
	}
	return missing, nil
}

// figures reads each bucket's hash and stream length in one pipeline.
func (k *Keeper) figures(ctx context.Context, sale flashgate.Sale) ([]Status, []salehash.Figures, error) {
	l := Layout(sale)
	tags := l.Tags()
	rfs, err := salehash.Read(ctx, k.rdb, tags)
	if err != nil {
		return nil, nil, err
	}
	out := make([]Status, len(tags))
	for b, t := range tags {
		out[b] = Status{Bucket: b, Tag: t, Total: rfs[b].Total, Booked: rfs[b].Booked, StreamBacklog: rfs[b].Backlog}
	}
	return out, rfs, nil
}

// Fold puts a bucketed sale's stock figures into rf, read from the
// sale's own hash: booked, reserved and the stream backlog become sums over
// its buckets (admission counters stay the sale's). It returns each
// bucket's figures; an unbucketed sale is left as it is.
func (k *Keeper) Fold(ctx context.Context, sale flashgate.Sale, rf *salehash.Figures) ([]Status, error) {
	if !sale.Bucketed() {
		return nil, nil
	}
	bst, brf, err := k.figures(ctx, sale)
	if err != nil {
		return nil, err
	}
	rf.Booked, rf.Reserved, rf.Backlog = 0, 0, 0
	for _, b := range brf {
		rf.Booked += b.Booked
		rf.Reserved += b.Reserved
		rf.Backlog += b.Backlog
	}
	return bst, nil
}
