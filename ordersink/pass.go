package ordersink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// pass drains every sale stream once. Blocking passes (Run) poll each stream
// for new entries once, pausing for Block when none came, and re-read
// pending lists and claim only when needed; non-blocking passes (DrainOnce)
// do all and read until the streams are empty.
func (d *Drainer) pass(ctx context.Context, blocking bool) (total int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() {
		if err != nil {
			// Whatever was read and not acknowledged is in this consumer's
			// pending list: read it again first next time.
			for _, s := range d.sales {
				d.needPending[s] = true
			}
			if isNoGroup(err) {
				clear(d.groups)
			}
		}
	}()
	if err := d.refresh(ctx, !blocking); err != nil {
		return 0, err
	}
	if len(d.sales) == 0 {
		if blocking {
			sleep(ctx, d.cfg.Block)
		}
		return 0, nil
	}
	for _, s := range d.sales {
		if err := d.ensureGroup(ctx, s); err != nil {
			return 0, err
		}
	}
	// One sale whose orders the store fails does not hold up the others:
	// its error is kept (and returned, so that Run backs off) and the pass
	// goes on; any other error (Redis) ends the pass.
	var failed []error
	defer func() {
		if len(failed) > 0 {
			err = errors.Join(append(failed, err)...)
		}
	}()
	// A blocking pass leaves alone the sales whose backoff (backOff) has
	// not ended when it starts; a sale whose backoff ends now is tried
	// whole: its pending entries, and its new ones even if those fail.
	var skip map[string]bool
	if blocking && len(d.retry) > 0 {
		skip = map[string]bool{}
		for s, r := range d.retry {
			if time.Now().Before(r.at) {
				skip[s] = true
			}
		}
	}
	// Every sweep (claimEvery) a blocking pass re-reads each sale's own
	// pending list as well as claiming others': an entry can be delivered to
	// this consumer without the sink knowing. A read whose reply was lost (a
	// read timeout, the process frozen past its deadline, the primary killed
	// with the reply on the wire) is sent again by the Redis client on a new
	// connection and answers what is left, nothing: what the first read
	// delivered sits in this consumer's pending list, and no error said so.
	// Left there it waited for another sink's claim (ClaimIdle, 30 s), and a
	// failover's rebuild, which waits for the stream to drain, with it.
	now := time.Now()
	sweep := !blocking || now.Sub(d.claimedAt) >= d.claimEvery()
	if blocking && sweep {
		for _, s := range d.sales {
			d.needPending[s] = true
		}
	}
	for _, s := range d.sales {
		if blocking && (!d.needPending[s] || skip[s]) {
			continue
		}
		n, err := d.drainPending(ctx, s)
		total += n
		if isStoreError(err) {
			failed = append(failed, err)
			continue
		}
		if err != nil {
			return total, err
		}
		delete(d.needPending, s)
	}
	if sweep {
		for _, s := range d.sales {
			if skip[s] {
				continue
			}
			n, err := d.claim(ctx, s)
			total += n
			if isStoreError(err) {
				failed = append(failed, err)
				continue
			}
			if err != nil {
				return total, err
			}
		}
		d.claimedAt = now
	}
	// A blocking pass polls once; DrainOnce reads what the streams held when
	// it started (the longest, in Batch-sized reads, plus one read to see
	// them empty), not what keeps arriving.
	rounds := 1
	if !blocking {
		longest, err := d.longestStream(ctx)
		if err != nil {
			return total, err
		}
		rounds = int(longest/int64(d.cfg.Batch)) + 2
	}
	for round := 0; round < rounds; round++ {
		polled := time.Now()
		read, full, n, err := d.readNew(ctx, !blocking, skip)
		total += n
		if isStoreError(err) {
			failed = append(failed, err)
			continue
		}
		if err != nil {
			return total, err
		}
		if read == 0 {
			if blocking {
				sleep(ctx, d.cfg.Block)
			}
			break
		}
		if wait := d.cfg.Linger - time.Since(polled); blocking && !full && wait > 0 {
			sleep(ctx, wait)
		}
	}
	return total, nil
}

// claimEvery is how often a blocking pass sweeps: claims the entries idle
// in other consumers and re-reads its own pending lists.
func (d *Drainer) claimEvery() time.Duration {
	return min(d.cfg.ClaimIdle/2, time.Second)
}

// refresh re-reads the set of sales when RefreshSales has passed, or always
// when force is set, and then updates the backlog gauge.
func (d *Drainer) refresh(ctx context.Context, force bool) error {
	now := time.Now()
	if !force && d.sales != nil && now.Sub(d.salesAt) < d.cfg.RefreshSales {
		return nil
	}
	sales, err := d.rdb.SMembers(ctx, lua.SalesKey()).Result()
	if err != nil {
		return fmt.Errorf("ordersink: listing sales: %w", err)
	}
	if sales == nil {
		sales = []string{}
	}
	for _, s := range sales {
		if !slices.Contains(d.sales, s) {
			d.needPending[s] = true
		}
	}
	for s := range d.quiet {
		if !slices.Contains(sales, s) {
			delete(d.quiet, s)
		}
	}
	for s := range d.failed {
		if !slices.Contains(sales, s) {
			delete(d.failed, s)
		}
	}
	for s := range d.suspect {
		if !slices.Contains(sales, s) {
			delete(d.suspect, s)
		}
	}
	for s := range d.retry {
		if !slices.Contains(sales, s) {
			delete(d.retry, s)
		}
	}
	d.sales, d.salesAt = sales, now
	if d.m != nil {
		n, err := d.pendingHere(ctx, sales)
		if err != nil {
			return fmt.Errorf("ordersink: pending entries: %w", err)
		}
		d.m.setBacklog(n)
	}
	return nil
}

// ensureGroup creates the sink's consumer group on a sale stream (and the
// stream) unless it is known to exist; a Redis that lost its data gets it
// back after the first NOGROUP.
func (d *Drainer) ensureGroup(ctx context.Context, sale string) error {
	if d.groups[sale] {
		return nil
	}
	err := d.rdb.XGroupCreateMkStream(ctx, lua.OrdersKey(sale), lua.SinkGroup, "0").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("ordersink: creating group on %s: %w", lua.OrdersKey(sale), err)
	}
	d.groups[sale] = true
	return nil
}

// isNoGroup reports whether err is, or wraps, Redis's NOGROUP: the stream or
// its consumer group is gone (Redis lost its data).
func isNoGroup(err error) bool {
	return redis.HasErrorPrefix(err, "NOGROUP")
}
