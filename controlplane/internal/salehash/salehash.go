// Package salehash reads a sale's hashes in Redis as the control plane
// does (a sale's own hash, or one bucket's: the same fields), and holds the
// few rules that turn a sale row into the arguments of its scripts. Both
// controlplane and controlplane/buckets use it.
package salehash

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/lua"
)

// Figures are a sale's (or a bucket's) figures in Redis.
type Figures struct {
	// Exists is set when the hash is there.
	Exists bool
	// Total, Booked, Reserved, Count, Access and Rejected are the hash's
	// fields (lua.FieldTotal and so on), 0 when absent.
	Total, Booked, Reserved, Count, Access, Rejected int64
	// Backlog is the length of the order stream.
	Backlog int64
}

// figureFields are the fields Read takes from each hash.
var figureFields = []string{lua.FieldTotal, lua.FieldBooked, lua.FieldReserved, lua.FieldCount, lua.FieldAccess, lua.FieldRejected}

// Read reads the hashes and stream lengths of many sales or bucket tags in
// one pipelined round trip (per node, on a cluster).
func Read(ctx context.Context, rdb redis.UniversalClient, tags []string) ([]Figures, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	pipe := rdb.Pipeline()
	hs := make([]*redis.SliceCmd, len(tags))
	xs := make([]*redis.IntCmd, len(tags))
	for i, t := range tags {
		hs[i] = pipe.HMGet(ctx, lua.SaleKey(t), figureFields...)
		xs[i] = pipe.XLen(ctx, lua.OrdersKey(t))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading redis figures: %w: %w", flashgate.ErrUnavailable, err)
	}
	out := make([]Figures, len(tags))
	for i := range tags {
		h, _ := lua.ReadHash(figureFields, hs[i].Val()) // a short reply reads as absent fields
		out[i] = Figures{
			Exists:   h.Has(lua.FieldTotal),
			Total:    h.Int(lua.FieldTotal),
			Booked:   h.Int(lua.FieldBooked),
			Reserved: h.Int(lua.FieldReserved),
			Count:    h.Int(lua.FieldCount),
			Access:   h.Int(lua.FieldAccess),
			Rejected: h.Int(lua.FieldRejected),
			Backlog:  xs[i].Val(),
		}
	}
	return out, nil
}

// ResyncMarks reads, for many sales' or bucket tags' hashes in one
// pipelined round trip, each one's releases counter and rebuild mark
// (lua.FieldReleases, lua.FieldRebuild), as Resync's ARGV[13]
// "<releases>:<mark>": "0:" for a hash without them (or no hash). A
// re-sync reads them before its database snapshot: its script then knows
// whether a release reached the hash after the snapshot may have been
// taken, and whether the hash was rebuilt since (a pass whose snapshot may
// predate the rebuild does not reopen the sale).
func ResyncMarks(ctx context.Context, rdb redis.UniversalClient, tags []string) ([]string, error) {
	fields := []string{lua.FieldReleases, lua.FieldRebuild}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(tags))
	for i, t := range tags {
		cmds[i] = pipe.HMGet(ctx, lua.SaleKey(t), fields...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("reading releases counters and rebuild marks: %w: %w", flashgate.ErrUnavailable, err)
	}
	out := make([]string, len(tags))
	for i, c := range cmds {
		h, ok := lua.ReadHash(fields, c.Val())
		if !ok {
			return nil, fmt.Errorf("reading the releases counter and rebuild mark of %s: %w: %d values", tags[i], flashgate.ErrUnavailable, len(c.Val()))
		}
		out[i] = strconv.FormatInt(h.Int(lua.FieldReleases), 10) + ":" + h.Str(lua.FieldRebuild)
	}
	return out, nil
}

// Restoring is a rebuild's restore of one sale's (or bucket's) released
// set and buyers (BeginRestore): the restore's id, which a concurrent
// rebuild may share, and this rebuild's own id and count of the pages it
// wrote, which a page and MarkRestored carry too (lua/restore.lua's
// ARGV[2]), so that a page lost to a failover to a replica that had the
// restore's id but not the page refuses the rest of the rebuild.
type Restoring struct {
	// ID is the restore's id, lua.FieldRestoring.
	ID      string
	rebuild string
	pages   int
}

// Page is the ARGV[2] of the rebuild's next page (lua.Restore), counted.
func (r *Restoring) Page() string {
	r.pages++
	return r.ID + "|" + r.rebuild + "|" + strconv.Itoa(r.pages)
}

// done is the ARGV[3] of the rebuild's lua.Restored: every page counted.
func (r *Restoring) done() string {
	return r.ID + "|" + r.rebuild + "|" + strconv.Itoa(r.pages)
}

// BeginRestore opens a restore of tag's released set and buyers
// (lua.RestoreBegin) before its first page, and returns the restore its
// pages (lua.Restore, with Restoring.Page) and MarkRestored then carry:
// under the id tag's hash holds (a concurrent rebuild's, which this one
// joins), or a fresh one written when it holds none, with this rebuild's
// own id and page count.
func BeginRestore(ctx context.Context, rdb redis.Scripter, tag string) (*Restoring, error) {
	id, err := freshID()
	if err != nil {
		return nil, fmt.Errorf("beginning the restore: %w", err)
	}
	rebuild, err := freshID()
	if err != nil {
		return nil, fmt.Errorf("beginning the restore: %w", err)
	}
	tok := fencing.Of(ctx)
	v, err := lua.RestoreBegin.Run(ctx, rdb, lua.SaleKeys(tag), tok, id).Slice()
	if err != nil {
		return nil, fmt.Errorf("beginning the restore: %w: %w", flashgate.ErrUnavailable, err)
	}
	if len(v) == 1 && v[0] == int64(lua.RestoreBeginFenced) {
		return nil, fencing.Err("beginning the restore", tok)
	}
	if len(v) != 2 {
		return nil, fmt.Errorf("beginning the restore: %w: %d values", flashgate.ErrUnavailable, len(v))
	}
	got, ok := v[1].(string)
	if !ok {
		return nil, fmt.Errorf("beginning the restore: %w: id %v", flashgate.ErrUnavailable, v[1])
	}
	return &Restoring{ID: got, rebuild: rebuild}, nil
}

// MarkRestored records, at the end of a restore's pages in tag's hash, a
// fresh id of that restore (lua.Restored), and returns the final Resync's
// ARGV[9] that checks it ("1:<id>"): that Resync rebuilds nothing if Redis
// lost the restored pages since. restoring is the restore the pages
// carried (BeginRestore): when the hash holds another id or none, Redis
// lost the sale since the restore began (the pages with it), and when it
// counts fewer of this rebuild's pages than it wrote, a failover lost some;
// then nothing is recorded and the error is the one of ErrLostAgain.
func MarkRestored(ctx context.Context, rdb redis.Scripter, tag string, restoring *Restoring) (string, error) {
	id, err := freshID()
	if err != nil {
		return "", fmt.Errorf("marking the restore: %w", err)
	}
	tok := fencing.Of(ctx)
	n, err := lua.Restored.Run(ctx, rdb, lua.SaleKeys(tag), tok, id, restoring.done()).Int()
	if err != nil {
		return "", fmt.Errorf("marking the restore: %w: %w", flashgate.ErrUnavailable, err)
	}
	switch n {
	case lua.RestoredFenced:
		return "", fencing.Err("marking the restore", tok)
	case lua.RestoredLost:
		return "", ErrLostAgain(tag)
	}
	return "1:" + id, nil
}

// freshID is a random id of 16 hex digits.
func freshID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// ErrLostAgain is the error of a rebuild that Redis lost the sale again
// during: a page of its restore or its MarkRestored found the hash without
// the restore's id (lua.FieldRestoring), or its final Resync found the
// hash missing and the restored id gone (or a later restore of another
// rebuild is under way); the next pass rebuilds it.
func ErrLostAgain(tag string) error {
	return fmt.Errorf("rebuilding %s: its restore was lost or overtaken before the hash was written; the next pass rebuilds it: %w", tag, flashgate.ErrUnavailable)
}

// OwedStore is the database's record of the retakes refunds owe back.
type OwedStore interface {
	OwedRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error)
	RetakeGivenBack(ctx context.Context, orderID string) error
}

// DeliverOwed gives back, in Redis, the units of the sale's retakes that an
// admin refund of their honoured order owes back (lua.Unretake with "",
// the retakes row counting them among the persisted units still; a no-op
// for one given back already), and records each one. A re-sync pass runs
// it after its snapshot and before its script, as it delivers queued
// releases: an unretake raises the hash's releases counter, so the
// script keeps the lesser booked (see lua/resync.lua's ARGV[13]) and the
// refund's unit is freed once, whether the snapshot counted the order
// live or not. It stops at the first failure (the next pass goes on).
func DeliverOwed(ctx context.Context, rdb redis.Scripter, store OwedStore, sale flashgate.Sale) error {
	owed, err := store.OwedRetakes(ctx, sale.ID)
	if err != nil {
		return fmt.Errorf("reading owed retakes: %w", err)
	}
	for _, o := range owed {
		tag := sale.ID
		if l := (lua.Layout{Sale: sale.ID, Salts: sale.BucketSalts}); sale.Bucketed() && o.Bucket >= 0 && o.Bucket < l.N() {
			tag = l.Tag(o.Bucket)
		}
		if err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(tag), o.ID, o.UserID, o.Quantity, o.Variant, "").Err(); err != nil {
			return fmt.Errorf("giving back the retake of order %s: %w: %w", o.ID, flashgate.ErrUnavailable, err)
		}
		if err := store.RetakeGivenBack(ctx, o.ID); err != nil {
			return err
		}
	}
	return nil
}

// HeldArgs adds the pending retakes a rebuild holds to its final Resync
// call of tag, which holds them and counts their units in one step: its
// KEYS[2..5] (refusals, retaken, released, buyers) and ARGV[14 ..] (user
// id, order id, quantity, variant of each). With none, keys and args are
// returned as they are.
func HeldArgs(tag string, keys []string, args []any, held []flashgate.Order) ([]string, []any) {
	if len(held) == 0 {
		return keys, args
	}
	k := append(append([]string(nil), keys...), lua.RetakeRefusedKey(tag), lua.RetakenKey(tag), lua.ReleasedKey(tag), lua.BuyersKey(tag))
	for _, o := range held {
		args = append(args, o.UserID, o.ID, o.Quantity, o.Variant)
	}
	return k, args
}

// PerUser is a sale's per-user limit as the scripts take it: 1 when unset.
func PerUser(s flashgate.Sale) int64 {
	if s.PerUser <= 0 {
		return 1
	}
	return s.PerUser
}

// AdmitRatio is a sale's admission ratio, flashgate.DefaultAdmitRatio when
// unset.
func AdmitRatio(s flashgate.Sale) float64 {
	if s.AdmitRatio <= 0 {
		return flashgate.DefaultAdmitRatio
	}
	return s.AdmitRatio
}

// StateArg is lua.SetState's argument for a sale state: "close" for a
// closed sale, "open" otherwise.
func StateArg(st flashgate.SaleState) string {
	if st == flashgate.StateClosed {
		return "close"
	}
	return "open"
}

// ResyncFigures are a sale's Redis figures before or after a re-sync.
type ResyncFigures struct {
	Total        int64 `json:"total"`
	Booked       int64 `json:"booked"`
	Reserved     int64 `json:"reserved"`
	Remaining    int64 `json:"remaining"`
	Admitted     int64 `json:"admitted"`
	AdmissionCap int64 `json:"admission_cap"`
	// Missing is set in the "before" figures when the sale's hash was gone
	// from Redis and the re-sync rebuilt it.
	Missing bool `json:"missing,omitempty"`
}

// ReleaseChunk is how many orders one ReleaseBatch or Restore call of a
// re-sync carries, and the page it reads from the database.
const ReleaseChunk = 1000

// ErrReleaseBacklog ends a re-sync pass whose deliveries ran out of budget.
var ErrReleaseBacklog = errors.New("pending releases not yet delivered; the next pass goes on")

// VariantSpec is a sale's variants vs as lua.Prepare's ARGV[7] takes them,
// "id:total,..." in vs's order ("" for none); with totals (one per variant)
// those replace the variants' own, as a bucket's share of each. With figs
// it is lua.Resync's ARGV[12], "id:total:L:P,...", L and P each variant's
// live and all-rows units from figs (one database snapshot).
func VariantSpec(vs []flashgate.Variant, totals []int64, figs map[string]flashgate.SaleFigures) string {
	b := make([]byte, 0, 32*len(vs))
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, v.ID...)
		b = append(b, ':')
		t := v.Total
		if totals != nil {
			t = totals[i]
		}
		b = strconv.AppendInt(b, t, 10)
		if figs != nil {
			f := figs[v.ID]
			b = append(b, ':')
			b = strconv.AppendInt(b, f.LiveUnits, 10)
			b = append(b, ':')
			b = strconv.AppendInt(b, f.PersistedUnits, 10)
		}
	}
	return string(b)
}

// RetakesToHold are the retakes a rebuild holds, from its two reads of
// the database: those pending in the second read (after its restore),
// then those pending in the first (in its snapshot) whose honour
// step ran since (in honoured, the second read's honoured retakes of
// still-paid orders: the snapshot does not count them). A retake of the
// first read refunded since (its row dropped) is not held: its units
// were given back, or will be by the refund's unretake, and holding it
// would count a unit no order gives back.
func RetakesToHold(first, pending, honoured []flashgate.Order) []flashgate.Order {
	seen := make(map[string]bool, len(pending))
	out := append([]flashgate.Order(nil), pending...)
	for _, o := range pending {
		seen[o.ID] = true
	}
	done := make(map[string]bool, len(honoured))
	for _, o := range honoured {
		done[o.ID] = true
	}
	for _, o := range first {
		if done[o.ID] && !seen[o.ID] {
			seen[o.ID] = true
			out = append(out, o)
		}
	}
	return out
}
