//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// readTags reads the sale's layout once it is open: a bucketed sale's
// stock and orders are in its buckets (lua.Layout).
func (x *run) readTags(ctx context.Context) {
	v, err := x.c.rdb.HGet(ctx, lua.SaleKey(x.sale), lua.FieldLayout).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		x.problem("reading the sale's layout: %v", err)
	}
	l, ok := lua.ParseLayout(x.sale, v)
	if !ok {
		x.problem("the sale's layout %q is malformed", v)
	}
	x.tags = []string{x.sale}
	if l.Bucketed() {
		x.tags = append(x.tags, l.Tags()...)
	}
}

// stockTags are the tags whose hashes and streams hold the sale's stock and
// orders (readTags; the sale's own when not read).
func (x *run) stockTags() []string {
	if len(x.tags) == 0 {
		return []string{x.sale}
	}
	return x.tags
}

// stock is a stock field of the sale (booked, a variant's booked) summed
// over its hashes: the sale's own, and a bucketed sale's buckets (whose
// own hash books nothing). A missing hash counts 0.
func (x *run) stock(ctx context.Context, field string) (int64, error) {
	var sum int64
	for _, tag := range x.stockTags() {
		n, err := x.c.rdb.HGet(ctx, lua.SaleKey(tag), field).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// settle waits until every reserved order of the sale is in the database
// (the stream is empty and nothing is pending), then re-syncs the sale
// through the admin API. It returns how long the drain took.
func (x *run) settle(ctx context.Context, limit time.Duration) time.Duration {
	var backlog, pending int64
	var lastErr error
	took, ok := testwait.For(limit, func() bool {
		backlog, pending = 0, 0
		for _, tag := range x.stockTags() {
			n, err := x.c.rdb.XLen(ctx, lua.OrdersKey(tag)).Result()
			if err != nil {
				lastErr = err
				return false
			}
			p, err := x.c.rdb.XPending(ctx, lua.OrdersKey(tag), lua.SinkGroup).Result()
			if err != nil && !redis.HasErrorPrefix(err, "NOGROUP") {
				lastErr = err
				return false
			}
			backlog += n
			if p != nil {
				pending += p.Count
			}
		}
		return backlog == 0 && pending == 0
	})
	if !ok {
		x.problem("drain: order stream still holds %d entries (%d pending) %v after the crowd (last error %v): confirmed orders are not reaching the database",
			backlog, pending, took.Round(time.Millisecond), lastErr)
	}
	if _, ok := testwait.For(10*time.Second, func() bool {
		lastErr = x.c.adminDo(ctx, http.MethodPost, "/admin/sales/"+x.sale+"/resync", nil, nil)
		return lastErr == nil
	}); !ok {
		x.problem("re-sync through the admin API failed for 10s: %v", lastErr)
	}
	return took
}

// checkAll checks the invariants of what buyers were told (confirmed: order
// id → user; outs: every buyer's outcome) against Redis and the database:
// no oversell, no user twice, every confirmed order exactly one row of its
// user, no row that was not a reservation some buyer made, booked = live
// units. It returns the number of order rows.
func (x *run) checkAll(ctx context.Context, confirmed map[string]string, outs []outcome) (rows int) {
	total := x.sc.total
	booked, err := x.stock(ctx, lua.FieldBooked)
	if err != nil {
		x.problem("reading booked from Redis: %v", err)
	}
	live, err := x.c.db.LiveOrders(ctx, x.sale)
	if err != nil {
		x.problem("reading live orders: %v", err)
		return 0
	}
	released, err := x.c.db.ReleasedOrders(ctx, x.sale)
	if err != nil {
		x.problem("reading released orders: %v", err)
		return 0
	}
	fig, err := x.c.db.Figures(ctx, x.sale)
	if err != nil {
		x.problem("reading figures: %v", err)
		return 0
	}
	rows = len(live) + len(released)
	if int64(rows) != fig.Persisted {
		x.problem("live %d + released %d rows, but the database counts %d", len(live), len(released), fig.Persisted)
	}
	final := map[string]outcome{}
	for _, o := range outs {
		final[o.user] = o
	}
	holders := map[string]string{}
	for _, o := range live {
		if prev, dup := holders[o.UserID]; dup {
			x.problem("USER TWICE: user %s holds two live orders, %s and %s", o.UserID, prev, o.ID)
		}
		holders[o.UserID] = o.ID
	}
	perID := map[string]int{}
	unanswered := 0
	for _, o := range append(append([]flashgate.Order(nil), live...), released...) {
		perID[o.ID]++
		user, ok := confirmed[o.ID]
		switch {
		case ok && user != o.UserID:
			x.problem("ROW MISMATCH: row %s belongs to %s, but its order was confirmed to %s", o.ID, o.UserID, user)
		case !ok:
			b, known := final[o.UserID]
			if known && strings.HasPrefix(b.final, "gave up") {
				// The reserve happened but no answer reached the buyer
				// before they gave up: a reservation, not a ghost row.
				unanswered++
				continue
			}
			x.problem("ROW WITHOUT RESERVATION: row %s (user %s, %s) was never confirmed to its buyer (buyer's answer: %q)", o.ID, o.UserID, o.Status, b.final)
		}
		if o.SaleID != x.sale || o.Quantity != 1 {
			x.problem("row %+v: want one unit of %s", o, x.sale)
		}
	}
	if unanswered > 0 {
		x.notef("%d rows are reservations whose buyer gave up before an answer came", unanswered)
	}
	lost, destroyed := 0, 0
	var example string
	sent := map[string]time.Time{} // order id → when the attempt that got it was sent
	for _, o := range outs {
		if o.orderID != "" && len(o.attempts) > 0 {
			sent[o.orderID] = o.attempts[len(o.attempts)-1].start
		}
	}
	x.mu.Lock()
	flushed, flushDone := x.flushedAt, x.flushDone
	aofFrom, aofTo := x.aofFrom, x.aofTo
	x.mu.Unlock()
	aofLost := 0
	if flushDone.IsZero() {
		flushDone = flushed
	}
	for id, user := range confirmed {
		if perID[id] == 1 {
			continue
		}
		if perID[id] == 0 && !flushed.IsZero() && sent[id].Before(flushDone) {
			// Asked for before the FLUSHALL returned (Redis may have run
			// the reserve before the flush: a loaded machine delays the
			// command) and not yet drained: the flush destroyed the stream
			// entry (Redis is the write path). A purchase sent after the
			// flush returned must be a row.
			destroyed++
			continue
		}
		if perID[id] == 0 && !aofTo.IsZero() && !sent[id].Before(aofFrom) && sent[id].Before(aofTo) {
			// Sent in the 2s before a kill -9 of the Redis primary under
			// appendfsync everysec: Redis answered it, and its AOF held
			// the write back (aofLoss).
			destroyed++
			aofLost++
			continue
		}
		lost++
		example = fmt.Sprintf("order %s of %s is %d rows", id, user, perID[id])
		if !flushed.IsZero() {
			example += fmt.Sprintf(", its purchase sent %v after the flush", sent[id].Sub(flushed).Round(time.Millisecond))
		}
	}
	if lost > 0 {
		x.problem("LOST 201: %d confirmed orders are not exactly one row in the database (e.g. %s)", lost, example)
	}
	x.mu.Lock()
	x.destroyed, x.aofLost = destroyed, aofLost
	x.mu.Unlock()
	if aofLost > 0 {
		x.notef("%d orders confirmed in the 2s before the kill were lost with the writes the AOF held back (appendfsync everysec; README's \"Redis restart with AOF\" row)", aofLost)
	}
	// Refunded, cancelled and expired orders gave their unit back.
	// Orders a FLUSHALL destroyed before they were rows hold no unit: the
	// re-sync rebuilt the stock from the database without them.
	if held := int64(len(confirmed) - len(released) - destroyed); held > total || booked > total || fig.LiveUnits > total {
		x.problem("OVERSELL: %d orders confirmed to buyers and not given back, booked %d, %d live units in the database, for %d units", held, booked, fig.LiveUnits, total)
	}
	if booked != fig.LiveUnits {
		x.problem("STOCK: booked %d in Redis after drain and re-sync, but %d live units in the database", booked, fig.LiveUnits)
	}
	return rows
}

// confirmedOf collects the orders buyers were told about (order id → user);
// a user with two confirmed orders is a problem.
func (x *run) confirmedOf(into map[string]string, outs []outcome) {
	perUser := map[string]string{}
	for id, u := range into {
		perUser[u] = id
	}
	for _, o := range outs {
		if o.orderID == "" {
			continue
		}
		if prev, dup := perUser[o.user]; dup && prev != o.orderID {
			x.problem("USER TWICE: %s was confirmed two orders, %s and %s", o.user, prev, o.orderID)
		}
		if prev, dup := into[o.orderID]; dup && prev != o.user {
			x.problem("order %s was confirmed to both %s and %s", o.orderID, prev, o.user)
		}
		perUser[o.user] = o.orderID
		into[o.orderID] = o.user
	}
}
