//go:build faults

package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// redisKill kill -9s the Redis primary at 1.5s and restarts it from its
// AOF 1s later.
func redisKill(ctx context.Context, x *run) {
	killRestart(primary, time.Second)(ctx, x)
	if !x.sc.opts.fsyncAlways {
		x.aofLoss(x.c.primary.killedAt())
	}
	if _, ok := testwait.For(30*time.Second, func() bool { return x.c.replica.ready(ctx) == nil }); !ok {
		x.problem("the replica did not resync with the restarted primary in 30s")
		return
	}
	x.event("replica linked to the restarted primary again")
}

// aofLoss records that the purchases sent in the 2s before killed, a kill
// -9 of the Redis primary under appendfsync everysec, may have been lost
// with the writes its AOF held back (run.aofFrom): checkAll counts them
// apart, and the history lets them be lost in that window. A purchase
// sent earlier, or after the kill, must still be a row.
func (x *run) aofLoss(killed time.Time) {
	if killed.IsZero() {
		return
	}
	from := killed.Add(-2 * time.Second)
	x.mu.Lock()
	x.aofFrom, x.aofTo = from, killed
	x.mu.Unlock()
	x.c.hist.flushed(from, killed)
}

// replicaKill kill -9s the replica at 1.5s and restarts it 1s later (it
// is ready once its link to the primary is up). Meanwhile the primary's
// replication backlog is cut to 16 kB, as if the replica had been down
// longer than the backlog covers: the restarted replica loads the RDB its
// directory kept, then needs a full sync, and serves what it loaded until
// the sync ends. A gateway must not read that stale state.
func replicaKill(ctx context.Context, x *run) {
	x.at(ctx, 1500*time.Millisecond)
	if err := x.c.replica.kill9(); err != nil {
		x.problem("kill -9 redis-replica: %v", err)
		return
	}
	x.event("kill -9 redis-replica")
	if err := x.c.rdb.ConfigSet(ctx, "repl-backlog-size", "16384").Err(); err != nil {
		x.problem("CONFIG SET repl-backlog-size: %v", err)
	}
	time.Sleep(time.Second) // not a synchronisation: the replica stays down a second of sales
	// What the restarted replica itself answers for the sale until its link
	// is up: a missing hash is state older than the sale.
	probe := redis.NewClient(&redis.Options{Addr: x.c.rep.Options().Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer probe.Close()
	stop := make(chan struct{})
	var stale, loading atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			n, err := probe.Exists(ctx, lua.SaleKey(x.sale)).Result()
			switch {
			case redis.IsLoadingError(err):
				loading.Add(1)
			case err == nil && n == 0:
				stale.Add(1)
			}
		}
	}()
	x.repair("restarted redis-replica", func() error { return x.c.replica.start(30 * time.Second) })
	close(stop)
	wg.Wait()
	if err := x.c.rdb.ConfigSet(ctx, "repl-backlog-size", "64mb").Err(); err != nil {
		x.problem("CONFIG SET repl-backlog-size: %v", err)
	}
	x.event("until its link was up the restarted replica answered LOADING %d times and served state without the sale %d times (5ms probes)", loading.Load(), stale.Load())
}

func replicaFreeze(ctx context.Context, x *run) {
	x.at(ctx, 1500*time.Millisecond)
	if err := x.c.replica.signal(syscall.SIGSTOP); err != nil {
		x.problem("SIGSTOP replica: %v", err)
		return
	}
	x.event("SIGSTOP redis-replica")
	time.Sleep(3 * time.Second) // not a synchronisation: the freeze lasts 3 s
	x.repair("SIGCONT redis-replica", func() error { return x.c.replica.signal(syscall.SIGCONT) })
}

// pgSignal sends sig to the postmaster and every child of it: PostgreSQL's
// backends each run in their own process group.
func (s *suite) pgSignal(sig syscall.Signal) error {
	pm := s.pg.pid()
	if pm == 0 {
		return fmt.Errorf("postgres is not running")
	}
	pids := []int{pm}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces, so split after ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == pm {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH {
			return fmt.Errorf("kill -%d %d: %w", sig, pid, err)
		}
	}
	return nil
}

func postgresFreeze(ctx context.Context, x *run) {
	x.at(ctx, 1500*time.Millisecond)
	if err := x.s.pgSignal(syscall.SIGSTOP); err != nil {
		x.problem("freezing PostgreSQL: %v", err)
		return
	}
	x.event("SIGSTOP every PostgreSQL process")
	time.Sleep(3 * time.Second) // not a synchronisation: the freeze lasts 3 s
	x.repair("SIGCONT PostgreSQL", func() error { return x.s.pgSignal(syscall.SIGCONT) })
	x.rowsCaughtUp(ctx)
}

func postgresStop(ctx context.Context, x *run) {
	x.at(ctx, 1500*time.Millisecond)
	if err := x.s.pg.stop(syscall.SIGINT, 20*time.Second); err != nil {
		x.problem("stopping PostgreSQL: %v", err)
	}
	x.event("PostgreSQL stopped (fast shutdown)")
	time.Sleep(3 * time.Second) // not a synchronisation: PostgreSQL stays down 3 s
	x.repair("PostgreSQL started", func() error { return x.s.pg.start(60 * time.Second) })
	x.rowsCaughtUp(ctx)
}

// rowsCaughtUp notes how long after the repair the database held every
// order reserved before it: the order stream holds no entry up to its last
// one at the repair's end (the sinks delete an entry once its row is
// committed), though buyers may still be adding new ones.
func (x *run) rowsCaughtUp(ctx context.Context) {
	key := lua.OrdersKey(x.sale)
	last, err := x.c.rdb.XRevRangeN(ctx, key, "+", "-", 1).Result()
	if err != nil {
		x.problem("reading the order stream's last entry: %v", err)
		return
	}
	if len(last) == 0 {
		x.event("order stream empty at the repair: every reserved order a row")
		return
	}
	d, ok := testwait.For(20*time.Second, func() bool {
		left, err := x.c.rdb.XRangeN(ctx, key, "-", last[0].ID, 1).Result()
		return err == nil && len(left) == 0
	})
	x.mu.Lock()
	since := time.Since(x.repairAt)
	x.mu.Unlock()
	if ok {
		x.event("every order reserved before the repair a row %v after the repair", since.Round(10*time.Millisecond))
	} else {
		x.event("orders reserved before the repair still not rows %v after the repair", d.Round(time.Second))
	}
}

// flushAll runs FLUSHALL on the primary at 1.5s; the sale must answer as
// open again, its hash rebuilt, within 2s.
func flushAll(ctx context.Context, x *run) {
	x.at(ctx, 1500*time.Millisecond)
	flushed := time.Now()
	x.mu.Lock()
	x.flushedAt = flushed
	x.mu.Unlock()
	if err := x.c.rdb.FlushAll(ctx).Err(); err != nil {
		x.problem("FLUSHALL: %v", err)
		return
	}
	done := time.Now()
	x.mu.Lock()
	x.flushDone = done
	x.mu.Unlock()
	x.c.hist.flushed(flushed, done)
	x.event("FLUSHALL")
	var states []string
	var total string
	d, ok := testwait.For(10*time.Second, func() bool {
		states = states[:0]
		open := true
		for _, u := range x.c.gwURL {
			st := saleState(ctx, u, x.sale)
			states = append(states, st)
			open = open && st == "open"
		}
		total, _ = x.c.rdb.HGet(ctx, lua.SaleKey(x.sale), lua.FieldTotal).Result()
		return open && total == strconv.FormatInt(x.sc.total, 10)
	})
	x.mu.Lock()
	x.recovery, x.recWhat = d, "sale open on both gateways, hash rebuilt"
	x.mu.Unlock()
	h, _ := x.c.rdb.HGetAll(ctx, lua.SaleKey(x.sale)).Result()
	switch {
	case !ok:
		x.problem("FLUSHALL: 10s after the flush the gateways answer %v for the open sale and its hash is %v (total %q): the sale never came back",
			states, h, total)
		x.recWhat = "never (10s)"
	case d > 2*time.Second:
		x.problem("FLUSHALL: the sale answered open again only %v after the flush, want within 2s", d.Round(10*time.Millisecond))
	default:
		x.mu.Lock()
		x.recoveredInTime = true
		x.mu.Unlock()
		x.event("sale open again on both gateways with its hash rebuilt %v after the flush", time.Since(flushed).Round(10*time.Millisecond))
	}
}

// slowloris opens 1,000 connections to gateway-1 at 0.5s, each sending a
// request's headers one line a second and never ending them; the gateway
// must cut them (its read timeout) while honest buyers are served.
func slowloris(ctx context.Context, x *run) {
	const conns = 1000
	x.at(ctx, 500*time.Millisecond)
	addr := strings.TrimPrefix(x.c.gwURL[0], "http://")
	opened := time.Now()
	var open, cut, refused atomic.Int64
	var lastCut atomic.Int64 // ns after opened
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				refused.Add(1)
				return
			}
			defer c.Close()
			open.Add(1)
			_, err = fmt.Fprintf(c, "POST /api/sales/%s/orders HTTP/1.1\r\nHost: slow\r\n", x.sale)
			for j := 0; err == nil && j < 12; j++ {
				time.Sleep(time.Second) // not a synchronisation: the slow client sends a header a second
				_, err = fmt.Fprintf(c, "X-Slow-%d: %d\r\n", j, j)
				if err == nil {
					_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
					var b [1]byte
					if _, rerr := c.Read(b[:]); rerr != nil && !os.IsTimeout(rerr) {
						err = rerr
					}
				}
			}
			if err != nil {
				cut.Add(1)
				lastCut.Store(max(lastCut.Load(), int64(time.Since(opened))))
			}
		}()
	}
	wg.Wait()
	x.event("slowloris: %d connections opened (%d refused), %d cut by the gateway, the last %v after opening",
		open.Load(), refused.Load(), cut.Load(), time.Duration(lastCut.Load()).Round(100*time.Millisecond))
	if cut.Load() < open.Load() {
		x.problem("SLOWLORIS: %d of %d half-open connections were still open after 12s", open.Load()-cut.Load(), open.Load())
	}
}

// refunds refunds 25 live orders through the admin API, re-syncs, and
// checks the stock figures again; the second crowd then buys those units.
func refunds(ctx context.Context, x *run) {
	const n = 25
	live, err := x.c.db.LiveOrders(ctx, x.sale)
	if err != nil || len(live) < n {
		x.problem("refunds: %d live orders (%v), want at least %d", len(live), err, n)
		return
	}
	before, _ := x.c.rdb.HGet(ctx, lua.SaleKey(x.sale), lua.FieldBooked).Int64()
	for _, o := range live[:n] {
		if err := x.c.adminDo(ctx, http.MethodPost, "/admin/orders/"+o.ID+"/refund", nil, nil); err != nil {
			x.problem("refund %s: %v", o.ID, err)
		}
	}
	if err := x.c.adminDo(ctx, http.MethodPost, "/admin/sales/"+x.sale+"/resync", nil, nil); err != nil {
		x.problem("re-sync after the refunds: %v", err)
	}
	after, _ := x.c.rdb.HGet(ctx, lua.SaleKey(x.sale), lua.FieldBooked).Int64()
	fig, err := x.c.db.Figures(ctx, x.sale)
	if err != nil {
		x.problem("figures: %v", err)
		return
	}
	x.notef("refunded %d orders: booked %d → %d after re-sync, %d live units, %d refunded rows", n, before, after, fig.LiveUnits, fig.Refunded)
	if after != before-n || fig.Refunded != n || after != fig.LiveUnits {
		x.problem("REFUNDS: after %d refunds and a re-sync booked went %d → %d, the database holds %d live units and %d refunded rows; want booked %d = live units, %d refunded",
			n, before, after, fig.LiveUnits, fig.Refunded, before-n, n)
	}
}

// idleKeepAlive holds, per gateway, 10 keep-alive connections idle for 7s
// after one request each and 10 opened with nothing sent (a browser's or a
// proxy's preconnect): the gateway may close them, silently, but must not
// write an answer nobody asked for.
func idleKeepAlive(ctx context.Context, x *run) {
	x.at(ctx, 200*time.Millisecond)
	var wg sync.WaitGroup
	var closed, open, unsolicited atomic.Int64
	var mu sync.Mutex
	var example string
	for g, u := range x.c.gwURL {
		for i := 0; i < 20; i++ {
			fresh := i >= 10 // opened, nothing sent: a preconnect
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.DialTimeout("tcp", strings.TrimPrefix(u, "http://"), 2*time.Second)
				if err != nil {
					x.problem("idle keep-alive: dialing gateway-%d: %v", g+1, err)
					return
				}
				defer c.Close()
				br := bufio.NewReader(c)
				if !fresh {
					fmt.Fprintf(c, "GET /api/sales/%s HTTP/1.1\r\nHost: idle\r\n\r\n", x.sale)
					_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						x.problem("idle keep-alive: first request to gateway-%d: %v", g+1, err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				_ = c.SetReadDeadline(time.Now().Add(7 * time.Second))
				b, err := br.ReadByte()
				switch {
				case err == nil:
					_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
					rest, _ := br.Peek(br.Buffered())
					unsolicited.Add(1)
					mu.Lock()
					kind := "after a request"
					if fresh {
						kind = "with nothing sent"
					}
					example = fmt.Sprintf("gateway-%d wrote %q on a connection idle %s", g+1, string(b)+strings.SplitN(string(rest), "\r\n", 2)[0], kind)
					mu.Unlock()
				case os.IsTimeout(err):
					open.Add(1)
				default:
					closed.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	x.event("idle keep-alive connections after 7s idle: %d closed silently, %d still open, %d got an unsolicited answer", closed.Load(), open.Load(), unsolicited.Load())
	if unsolicited.Load() > 0 {
		x.problem("IDLE 400: %d of 40 idle keep-alive connections got an answer to no request when the gateway timed them out (%s)", unsolicited.Load(), example)
	}
}

// inventoryRestart restarts inventory-1 at 1.5s and inventory-2 at 3.5s
// (SIGTERM, then start on the same port).
func inventoryRestart(ctx context.Context, x *run) {
	for i, at := range []time.Duration{1500 * time.Millisecond, 3500 * time.Millisecond} {
		p := x.c.invs[i]
		x.at(ctx, at)
		if err := p.stop(syscall.SIGTERM, 10*time.Second); err != nil {
			x.problem("stopping %s: %v", p.name, err)
		}
		x.event("%s stopped (SIGTERM)", p.name)
		x.repair("restarted "+p.name, func() error { return p.start(30 * time.Second) })
	}
}

// sinkRestart: ordersink-2 is stalled (SIGSTOP) from the start, so that
// only ordersink-1 reads the stream; at 1.5s PostgreSQL freezes, so that
// ordersink-1 holds a batch it read but cannot insert; it is killed with
// -9, PostgreSQL thaws, and ordersink-1 restarts. The entries it held must
// be rows within 2s of its restart, before ordersink-2 comes back at all.
func sinkRestart(ctx context.Context, x *run) {
	s1, s2 := x.c.sinks[0], x.c.sinks[1]
	if err := s2.signal(syscall.SIGSTOP); err != nil {
		x.problem("SIGSTOP ordersink-2: %v", err)
		return
	}
	defer func() {
		if err := s2.signal(syscall.SIGCONT); err != nil {
			x.problem("SIGCONT ordersink-2: %v", err)
		}
		x.event("SIGCONT ordersink-2")
	}()
	x.event("SIGSTOP ordersink-2")
	x.at(ctx, 1500*time.Millisecond)
	if err := x.s.pgSignal(syscall.SIGSTOP); err != nil {
		x.problem("freezing PostgreSQL: %v", err)
		return
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := x.s.pgSignal(syscall.SIGCONT); err != nil {
				x.problem("thawing PostgreSQL: %v", err)
			}
		}
	}
	defer thaw()
	stream := lua.OrdersKey(x.sale)
	var held []redis.XPendingExt
	if _, ok := testwait.For(3*time.Second, func() bool {
		p, err := x.c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: lua.SinkGroup, Start: "-", End: "+", Count: 10000}).Result()
		held = p
		return err == nil && len(p) > 0
	}); !ok {
		x.problem("ordersink-1 never held a batch while PostgreSQL was frozen: the fault did nothing")
		return
	}
	// The sink takes the batch it is inserting, no more: once it is stuck
	// in the frozen database it leaves the stream alone, and the consumer's
	// idle time (XINFO CONSUMERS) grows past anything a running sink shows.
	if _, ok := testwait.For(3*time.Second, func() bool {
		cs, err := x.c.rdb.XInfoConsumers(ctx, stream, lua.SinkGroup).Result()
		if err != nil {
			return false
		}
		for _, c := range cs {
			if c.Name == held[0].Consumer {
				return c.Idle >= 200*time.Millisecond
			}
		}
		return false
	}); !ok {
		x.problem("ordersink-1 kept reading the stream while PostgreSQL was frozen")
		return
	}
	held, _ = x.c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: lua.SinkGroup, Start: "-", End: "+", Count: 10000}).Result()
	orders := map[string]string{} // entry id → order id
	for _, h := range held {
		if e, err := x.c.rdb.XRange(ctx, stream, h.ID, h.ID).Result(); err == nil && len(e) == 1 {
			en, _ := lua.ReadEntry(e[0].Values)
			orders[h.ID] = en.Order
		}
	}
	consumer := ""
	if len(held) > 0 {
		consumer = held[0].Consumer
	}
	if err := s1.kill9(); err != nil {
		x.problem("kill -9 ordersink-1: %v", err)
		return
	}
	x.event("PostgreSQL frozen, kill -9 ordersink-1 holding %d pending entries (consumer %s)", len(held), consumer)
	thaw()
	x.repair("restarted ordersink-1", func() error { return s1.start(30 * time.Second) })
	x.mu.Lock()
	since := x.repairAt
	x.mu.Unlock()
	var missing int
	d, ok := testwait.For(6*time.Second, func() bool {
		missing = 0
		for _, id := range orders {
			if _, err := x.c.db.Order(ctx, id); err != nil {
				missing++
			}
		}
		return missing == 0
	})
	took := time.Since(since)
	x.mu.Lock()
	x.recovery, x.recWhat = took, "held entries in the database"
	x.mu.Unlock()
	switch {
	case !ok:
		x.problem("SINK RESTART: %d of the %d entries the killed ordersink-1 held were still not rows %v after its restart (the restarted sink does not re-read its own pending entries; consumer was %s)",
			missing, len(orders), took.Round(10*time.Millisecond), consumer)
		x.mu.Lock()
		x.recWhat = "held entries not in the database after 6s"
		x.mu.Unlock()
	case took > 2*time.Second:
		x.problem("SINK RESTART: the %d entries the killed ordersink-1 held became rows %v after its restart, want within 2s", len(orders), took.Round(10*time.Millisecond))
	default:
		x.event("the %d held entries were rows %v after the restart (%v after it was ready)", len(orders), took.Round(10*time.Millisecond), d.Round(10*time.Millisecond))
	}
}

// deadLetter adds to the sale's order stream, at 1.5s, an entry the order
// sink cannot store (its quantity is not a number), as a reserve script
// never would: the sink must neither stall on it nor drop it without a
// trace, but keep it where an operator sees it — the sale's dead letters
// on the admin API (GET /admin/sales/{id}/dead-letters).
func deadLetter(ctx context.Context, x *run) {
	x.at(ctx, 1500*time.Millisecond)
	poison := "poison-" + x.sale
	id, err := x.c.rdb.XAdd(ctx, &redis.XAddArgs{Stream: lua.OrdersKey(x.sale), Values: []any{
		lua.EntryOrder, poison, lua.EntrySale, x.sale, lua.EntryUser, "poison-user",
		lua.EntryQuantity, "not-a-number", lua.EntryPrice, "4900", lua.EntryTime, strconv.FormatInt(time.Now().UnixMilli(), 10),
	}}).Result()
	if err != nil {
		x.problem("XADD the unstorable entry: %v", err)
		return
	}
	x.event("XADD an order entry the sink cannot store (%s, order %s)", id, poison)
	var last string
	d, ok := testwait.For(5*time.Second, func() bool {
		var v map[string]any
		if err := x.c.adminDo(ctx, http.MethodGet, "/admin/sales/"+x.sale+"/dead-letters", nil, &v); err != nil {
			last = err.Error()
			return false
		}
		b, _ := json.Marshal(v)
		last = string(b)
		return strings.Contains(last, poison)
	})
	if !ok {
		if len(last) > 300 {
			last = last[:300] + "…"
		}
		x.problem("DEAD LETTER: 5s after the order sink met an entry it cannot store, the admin API's dead letters do not hold it (last answer: %s); see the order sinks' logs for what became of it", last)
		return
	}
	x.mu.Lock()
	x.recovery, x.recWhat = d, "entry listed as a dead letter"
	x.mu.Unlock()
	x.event("the unstorable entry is listed in the sale's dead letters")
}
