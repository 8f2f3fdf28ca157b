// Package deadletter reads and replays a sale's dead-letter stream
// (lua.DeadKey): the order entries the order sink could not store.
package deadletter

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// MaxDeadLetters is the most dead letters one admin call lists or
// replays; defaultDeadLetters is a listing's default.
const (
	MaxDeadLetters     = 1000
	defaultDeadLetters = 100
)

// SaleReader reads a sale row; the control plane's Store satisfies it.
type SaleReader interface {
	Sale(ctx context.Context, id string) (flashgate.Sale, error)
}

// Service lists and replays dead letters.
type Service struct {
	rdb   redis.UniversalClient
	store SaleReader
	log   *slog.Logger
}

// New returns a Service over rdb that asks store whether a sale with no
// dead letters exists.
func New(rdb redis.UniversalClient, store SaleReader, log *slog.Logger) *Service {
	return &Service{rdb: rdb, store: store, log: log}
}

// DeadLetter is one entry of a sale's dead-letter stream (lua.DeadKey): an
// order entry the order sink could not store, malformed or refused by the
// database.
type DeadLetter struct {
	ID       string            `json:"id"`        // its id in the dead-letter stream
	SourceID string            `json:"source_id"` // its id in the order stream it came from
	OrderID  string            `json:"order_id"`
	UserID   string            `json:"user_id"`
	Reason   string            `json:"reason"`
	DeadAt   time.Time         `json:"dead_at"`
	Fields   map[string]string `json:"fields"` // the order entry's fields as they were
}

// DeadLetters is a sale's dead-letter stream: its length and its oldest
// entries.
type DeadLetters struct {
	SaleID  string       `json:"sale_id"`
	Count   int64        `json:"count"`
	Entries []DeadLetter `json:"dead_letters"`
}

// DeadLetters returns up to limit (1…1000; default 100) of the oldest
// entries of sale id's dead-letter stream, and its length. A sale neither
// the database nor the dead-letter stream knows is ErrNotFound.
func (s *Service) DeadLetters(ctx context.Context, id string, limit int) (DeadLetters, error) {
	limit = deadLimit(limit)
	n, err := s.deadCount(ctx, id)
	if err != nil {
		return DeadLetters{}, err
	}
	msgs, err := s.rdb.XRangeN(ctx, lua.DeadKey(id), "-", "+", int64(limit)).Result()
	if err != nil {
		return DeadLetters{}, fmt.Errorf("dead letters of %s: %w (%w)", id, flashgate.ErrUnavailable, err)
	}
	out := DeadLetters{SaleID: id, Count: n, Entries: make([]DeadLetter, 0, len(msgs))}
	for _, m := range msgs {
		out.Entries = append(out.Entries, deadLetter(m))
	}
	return out, nil
}

// ReplayDeadLetters puts up to limit (1…1000; default 1000) of the oldest
// entries of sale id's dead-letter stream back on its order stream, with
// their original fields, for the order sink to store again (fix what made
// the database refuse them first: whatever it still refuses comes back).
// Each entry moves in one MULTI, so none is lost or doubled; inserts are
// idempotent in any case. It returns how many moved and how many are left.
func (s *Service) ReplayDeadLetters(ctx context.Context, id string, limit int) (replayed int, left int64, err error) {
	if limit <= 0 {
		limit = MaxDeadLetters
	}
	limit = deadLimit(limit)
	if _, err := s.deadCount(ctx, id); err != nil {
		return 0, 0, err
	}
	dkey := lua.DeadKey(id)
	msgs, err := s.rdb.XRangeN(ctx, dkey, "-", "+", int64(limit)).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("replaying dead letters of %s: %w (%w)", id, flashgate.ErrUnavailable, err)
	}
	for _, m := range msgs {
		vals := make([]any, 0, 2*len(m.Values))
		for _, k := range slices.Sorted(maps.Keys(m.Values)) {
			switch k {
			case lua.DeadSource, lua.DeadReason, lua.DeadTime:
				continue
			}
			vals = append(vals, k, m.Values[k])
		}
		if len(vals) == 0 {
			// An entry that had no fields at all: nothing to replay.
			vals = append(vals, lua.EntryOrder, "")
		}
		_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.XAdd(ctx, &redis.XAddArgs{Stream: lua.OrdersKey(id), Values: vals})
			p.XDel(ctx, dkey, m.ID)
			return nil
		})
		if err != nil {
			return replayed, 0, fmt.Errorf("replaying dead letter %s of %s: %w (%w)", m.ID, id, flashgate.ErrUnavailable, err)
		}
		replayed++
	}
	left, err = s.rdb.XLen(ctx, dkey).Result()
	if err != nil {
		return replayed, 0, fmt.Errorf("dead letters of %s: %w (%w)", id, flashgate.ErrUnavailable, err)
	}
	s.log.Info("dead letters replayed", "sale", id, "replayed", replayed, "left", left)
	return replayed, left, nil
}

// deadCount returns the length of sale id's dead-letter stream, or
// ErrNotFound when it is empty and the database knows no such sale.
func (s *Service) deadCount(ctx context.Context, id string) (int64, error) {
	if !flashgate.ValidSaleID(id) {
		return 0, fmt.Errorf("sale %q: %w", id, flashgate.ErrNotFound)
	}
	n, err := s.rdb.XLen(ctx, lua.DeadKey(id)).Result()
	if err != nil {
		return 0, fmt.Errorf("dead letters of %s: %w (%w)", id, flashgate.ErrUnavailable, err)
	}
	if n > 0 {
		return n, nil
	}
	if _, err := s.store.Sale(ctx, id); err != nil {
		return 0, err
	}
	return 0, nil
}

func deadLimit(limit int) int {
	if limit <= 0 {
		return defaultDeadLetters
	}
	return min(limit, MaxDeadLetters)
}

// deadLetter turns a dead-letter stream entry into a DeadLetter.
func deadLetter(m redis.XMessage) DeadLetter {
	d := DeadLetter{ID: m.ID, Fields: map[string]string{}}
	for k, v := range m.Values {
		s, _ := v.(string)
		switch k {
		case lua.DeadSource:
			d.SourceID = s
		case lua.DeadReason:
			d.Reason = s
		case lua.DeadTime:
			if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
				d.DeadAt = time.UnixMilli(ms).UTC()
			}
		default:
			d.Fields[k] = s
		}
	}
	if e, ok := lua.ReadEntry(m.Values); ok {
		d.OrderID, d.UserID = e.Order, e.User
	}
	return d
}
