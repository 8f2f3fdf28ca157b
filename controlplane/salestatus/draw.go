package salestatus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// DrawStatus is a draw sale's figures in GET /admin/sales/{id}: its entry
// window and its entries by state, as Redis counts them.
type DrawStatus struct {
	EntriesOpenAt  *time.Time `json:"entries_open_at"`
	EntriesCloseAt *time.Time `json:"entries_close_at"`
	// Entries is the live entries (pending and entered): one per buyer.
	Entries int64 `json:"entries"`
	// Made is every entry ever made (a re-entry after a withdrawal counts
	// again).
	Made int64 `json:"made"`
	// The entries now in each state (flashgate.DrawEntryState).
	Pending   int64 `json:"pending"`
	Entered   int64 `json:"entered"`
	Withdrawn int64 `json:"withdrawn"`
	Won       int64 `json:"won"`
	Lost      int64 `json:"lost"`
	Captured  int64 `json:"captured"`
	Released  int64 `json:"released"`
	// Variants are each variant's entries ever made, in the sale's order,
	// for a sale sold in several.
	Variants []DrawVariant `json:"variants,omitempty"`
	// SeedSHA256 is the seed's commitment, published when entries open;
	// Seed the seed, revealed at the close ("" until then).
	SeedSHA256 string `json:"seed_sha256,omitempty"`
	Seed       string `json:"seed,omitempty"`
	// Winners is the draw's winners, from the close; Promoted the
	// entrants charged in place of a winner whose capture failed; Closed
	// is true once the close finished (every hold captured or released).
	Winners  int64 `json:"winners"`
	Promoted int64 `json:"promoted"`
	Closed   bool  `json:"closed"`
}

// DrawVariant is one variant's entries in a draw's status.
type DrawVariant struct {
	ID   string `json:"id"`
	Made int64  `json:"made"`
}

// drawStates are the states DrawStatus counts, in its fields' order.
var drawStates = []flashgate.DrawEntryState{flashgate.DrawPending, flashgate.DrawEntered, flashgate.DrawWithdrawn,
	flashgate.DrawWon, flashgate.DrawLost, flashgate.DrawCaptured, flashgate.DrawReleased}

// ReadDraw reads a draw sale's figures from its hash in one HMGET; nil for
// a sale that is no draw.
func ReadDraw(ctx context.Context, rdb redis.UniversalClient, sale flashgate.Sale) (*DrawStatus, error) {
	if !sale.Draw() {
		return nil, nil
	}
	fields := []string{lua.FieldDrawEntries, lua.FieldDrawSeedSHA, lua.FieldDrawSeed, lua.FieldDrawWinners, lua.FieldDrawPromoted, lua.FieldDrawDone}
	for _, st := range drawStates {
		fields = append(fields, lua.DrawStateField(st))
	}
	for _, v := range sale.Variants {
		fields = append(fields, lua.VariantField(v.ID, lua.FieldDrawEntries))
	}
	vals, err := rdb.HMGet(ctx, lua.SaleKey(sale.ID), fields...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading the draw: %w: %w", flashgate.ErrUnavailable, err)
	}
	h, ok := lua.ReadHash(fields, vals)
	if !ok {
		return nil, fmt.Errorf("reading the draw: %w: %d values for %d fields", flashgate.ErrUnavailable, len(vals), len(fields))
	}
	d := &DrawStatus{EntriesOpenAt: sale.EntriesOpenAt, EntriesCloseAt: sale.EntriesCloseAt, Made: h.Int(lua.FieldDrawEntries)}
	counts := []*int64{&d.Pending, &d.Entered, &d.Withdrawn, &d.Won, &d.Lost, &d.Captured, &d.Released}
	for i, st := range drawStates {
		*counts[i] = h.Int(lua.DrawStateField(st))
	}
	d.Entries = d.Pending + d.Entered
	d.SeedSHA256, d.Seed = h.Str(lua.FieldDrawSeedSHA), h.Str(lua.FieldDrawSeed)
	d.Winners, d.Promoted, d.Closed = h.Int(lua.FieldDrawWinners), h.Int(lua.FieldDrawPromoted), h.Int(lua.FieldDrawDone) == 1
	for _, v := range sale.Variants {
		d.Variants = append(d.Variants, DrawVariant{ID: v.ID, Made: h.Int(lua.VariantField(v.ID, lua.FieldDrawEntries))})
	}
	return d, nil
}
