package ordersink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// commit makes sure the batches reached the replicas, when configured, and
// then stores them.
func (d *Drainer) commit(ctx context.Context, batches []batch) (int, error) {
	if len(batches) == 0 {
		return 0, nil
	}
	if err := d.awaitReplicas(ctx, batches); err != nil {
		if errors.Is(err, ErrReplicasBehind) {
			d.m.batch("replicas_behind")
		}
		return 0, err
	}
	total := 0
	var failed []error
	for _, b := range batches {
		n, err := d.process(ctx, b.sale, b.msgs)
		total += n
		if isStoreError(err) {
			failed = append(failed, err)
			continue
		}
		if err != nil {
			return total, errors.Join(append(failed, err)...)
		}
	}
	return total, errors.Join(failed...)
}

// splitAfter is how many failed inserts in a row of one batch make the
// drainer store its orders one at a time, so that one order the store
// fails without calling it a refusal holds up only itself.
const splitAfter = 3

// storeError is a failure of the store (not of Redis) for one sale's
// batch: the pass goes on with the other sales.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }

func (e *storeError) Unwrap() error { return e.err }

// isStoreError reports whether err is one or more storeErrors and nothing
// else.
func isStoreError(err error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !isStoreError(e) {
				return false
			}
		}
		return true
	}
	var se *storeError
	return errors.As(err, &se)
}

// process stores the orders of msgs, read from sale's stream, and only then
// acknowledges and removes their entries (ackDel). Malformed entries, and
// those the store refuses (flashgate.ErrBadRequest), move to the sale's
// dead-letter stream at once, so they never block the stream: a batch the
// store refuses is stored again one order at a time, and so is a batch
// whose insert failed splitAfter times in a row for another reason than
// the store out of reach (flashgate.ErrUnavailable), which never splits a
// batch. Other failures are returned as a storeError; the batch stays
// pending and is never dead-lettered for them.
func (d *Drainer) process(ctx context.Context, sale string, msgs []redis.XMessage) (int, error) {
	orders := make([]flashgate.Order, 0, len(msgs))
	kept := make([]redis.XMessage, 0, len(msgs))
	var dead []deadEntry
	for _, m := range msgs {
		o, err := parseEntry(sale, m.Values)
		if err != nil {
			dead = append(dead, deadEntry{m, "malformed entry: " + err.Error()})
			continue
		}
		orders = append(orders, o)
		kept = append(kept, m)
	}
	if err := d.deadLetter(ctx, sale, dead); err != nil {
		return 0, err
	}
	if len(orders) == 0 {
		return 0, nil
	}
	first := msgs[0].ID
	if d.failed[sale][first] < splitAfter && !d.holdsSuspect(sale, kept) {
		inserted, err := d.store.InsertOrders(ctx, orders)
		switch {
		case err == nil:
			delete(d.failed[sale], first)
			d.m.batch("ok")
			d.m.stored(inserted, orders, d.cfg.Clock.Now())
			if err := d.ackDel(ctx, sale, ids(kept)); err != nil {
				return 0, err
			}
			return len(kept), nil
		case errors.Is(err, flashgate.ErrBadRequest):
			// The store refused the batch for some order's sake.
		case errors.Is(err, flashgate.ErrUnavailable):
			// The database is out of reach (sqldb: no connection to be
			// had at BEGIN, before any order was sent; a connection lost
			// with the batch in flight is not this): no
			// order of the batch is to blame, so the failure does not
			// count toward splitting it, and the batch is tried whole
			// again soon (unreachableBackoff), so that once the database
			// is back the backlog goes in batches, not one order a
			// commit.
			d.m.batch("error")
			return 0, d.backOffUnreachable(sale, fmt.Errorf("ordersink: storing %d orders of sale %s: %w", len(orders), sale, err))
		default:
			d.m.batch("error")
			tries := d.fail(sale, first)
			if tries < splitAfter {
				return 0, d.backOff(sale, fmt.Errorf("ordersink: storing %d orders of sale %s: %w", len(orders), sale, err))
			}
			d.log.Warn("storing a batch one order at a time after failed inserts", "sale", sale, "orders", len(orders), "tries", tries, "err", err)
		}
	}
	// Store the orders one by one: dead-letter those the store refuses,
	// keep those it fails pending.
	stored, dead, inserted, err := d.oneByOne(ctx, sale, orders, kept)
	if err := d.deadLetter(ctx, sale, dead); err != nil {
		return 0, err
	}
	if ackErr := d.ackDel(ctx, sale, ids(stored)); ackErr != nil {
		return 0, ackErr
	}
	if err != nil {
		d.m.batch("error")
		err = fmt.Errorf("ordersink: storing orders of sale %s one at a time: %w", sale, err)
		if errors.Is(err, flashgate.ErrUnavailable) {
			return len(stored), d.backOffUnreachable(sale, err)
		}
		return len(stored), d.backOff(sale, err)
	}
	delete(d.failed[sale], first)
	d.m.batch("ok")
	d.m.stored(inserted, orders, d.cfg.Clock.Now())
	return len(stored), nil
}

// backOff sets when Run tries sale again after the store failed its
// orders with err (twice the last wait, between BackoffMin and
// BackoffMax), logs it, and returns err as a storeError. A sale's backoff
// ends when its pending list is found empty.
func (d *Drainer) backOff(sale string, err error) error {
	return d.backOffUpTo(sale, err, d.cfg.BackoffMax)
}

// unreachableBackoff is the longest wait between retries of a sale while
// the store is out of reach (flashgate.ErrUnavailable): a retry then costs
// one refused connection, and the wait is how late the sink may notice the
// database is back.
const unreachableBackoff = 200 * time.Millisecond

// backOffUnreachable is backOff for a store out of reach: the wait grows
// to unreachableBackoff at most (BackoffMax if shorter).
func (d *Drainer) backOffUnreachable(sale string, err error) error {
	return d.backOffUpTo(sale, err, max(d.cfg.BackoffMin, min(d.cfg.BackoffMax, unreachableBackoff)))
}

// backOffUpTo is backOff with the wait capped at most instead of
// BackoffMax.
func (d *Drainer) backOffUpTo(sale string, err error, most time.Duration) error {
	r := d.retry[sale]
	r.wait = max(d.cfg.BackoffMin, min(2*r.wait, most))
	r.at = time.Now().Add(r.wait)
	d.retry[sale] = r
	d.log.Warn("storing orders failed; retrying the sale later", "sale", sale, "err", err, "wait", r.wait)
	return &storeError{err}
}

// fail counts a failed insert of sale's batch whose first entry is first
// and returns the failures in a row so far.
func (d *Drainer) fail(sale, first string) int {
	m := d.failed[sale]
	if m == nil {
		m = map[string]int{}
		d.failed[sale] = m
	}
	m[first]++
	return m[first]
}

// holdsSuspect reports whether msgs hold an entry of sale whose insert
// alone failed before.
func (d *Drainer) holdsSuspect(sale string, msgs []redis.XMessage) bool {
	sus := d.suspect[sale]
	if len(sus) == 0 {
		return false
	}
	for _, m := range msgs {
		if sus[m.ID] {
			return true
		}
	}
	return false
}

func ids(msgs []redis.XMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// oneByOne stores orders (read as msgs) of sale one at a time and returns
// the entries of those stored (to be acknowledged) and of those the store
// refuses (to be dead-lettered). An order the store fails otherwise stays
// pending and becomes a suspect, its error is returned, and the others are
// tried; suspects are tried last, so that orders that fail do not keep the
// others out. After splitAfter such failures in a row (the store is down,
// most likely) it stops, and at the first failure that says the store is
// out of reach (flashgate.ErrUnavailable), which makes no suspect.
func (d *Drainer) oneByOne(ctx context.Context, sale string, orders []flashgate.Order, msgs []redis.XMessage) (stored []redis.XMessage, dead []deadEntry, inserted int, err error) {
	sus := d.suspect[sale]
	if sus == nil {
		sus = map[string]bool{}
		d.suspect[sale] = sus
	}
	order := make([]int, 0, len(orders))
	for i := range orders {
		if !sus[msgs[i].ID] {
			order = append(order, i)
		}
	}
	for i := range orders {
		if sus[msgs[i].ID] {
			order = append(order, i)
		}
	}
	inARow := 0
	for _, i := range order {
		n, ierr := d.store.InsertOrders(ctx, []flashgate.Order{orders[i]})
		switch {
		case ierr == nil:
			inARow = 0
			inserted += n
			stored = append(stored, msgs[i])
			delete(sus, msgs[i].ID)
		case errors.Is(ierr, flashgate.ErrBadRequest):
			inARow = 0
			dead = append(dead, deadEntry{msgs[i], "refused by the database: " + ierr.Error()})
			delete(sus, msgs[i].ID)
		case errors.Is(ierr, flashgate.ErrUnavailable):
			// The database is out of reach: the order is not to blame
			// (no suspect), and the others would fail alike.
			return stored, dead, inserted, ierr
		default:
			err = ierr
			inARow++
			sus[msgs[i].ID] = true
		}
		if inARow >= splitAfter || ctx.Err() != nil {
			break
		}
	}
	return stored, dead, inserted, err
}

// ackDel acknowledges entries whose rows are committed and removes them
// from the stream, so a stream's length is its backlog of orders not yet in
// the database: one lua.AckTrim, which trims the stream below the group's
// oldest pending entry (XTRIM MINID) and deletes one by one only the entries
// committed ahead of an older batch still pending elsewhere.
func (d *Drainer) ackDel(ctx context.Context, sale string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	// The rows are committed: acknowledge even while shutting down, or the
	// entries would be delivered (harmlessly, but needlessly) again.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	args := make([]any, 1+len(ids))
	args[0] = lua.SinkGroup
	for i, id := range ids {
		args[1+i] = id
	}
	if err := lua.AckTrim.Run(ctx, d.rdb, lua.AckTrimKeys(sale), args...).Err(); err != nil {
		return fmt.Errorf("ordersink: acknowledging %d entries of %s: %w", len(ids), lua.OrdersKey(sale), err)
	}
	return nil
}
