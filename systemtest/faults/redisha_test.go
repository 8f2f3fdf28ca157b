//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// The Redis failovers with default flags (issue 26): every tier runs with
// its defaults (--wait-replicas auto) on a Redis that fails over by itself,
// Sentinel (a primary, a replica, one Sentinel) or Redis Cluster (three
// primaries with a replica each), and a crowd buys while the sale's primary
// is killed (kill -9) 1.5 s into it; the replica takes over, the tiers
// follow it, the control plane rebuilds the sale from the database (the
// failover fence) and the crowd buys on. Every 201 (and every
// already_purchased naming an order) must be a row, no unit sold twice, no
// buyer with two live orders, and the history is checked (history.go) with
// no loss window.
const (
	haUnits  = 300
	haBuyers = 400
)

var (
	sentinelFailover = scenario{name: "sentinel-failover",
		fault: "kill -9 of the Redis primary under Sentinel mid-crowd, default flags: the Sentinel promotes the replica (SQLite)",
		needs: "26 (a 201 is kept)", own: func(t *testing.T, s *suite, sc scenario) result { return haFailover(t, s, sc, false) }}
	clusterPrimaryKill = scenario{name: "cluster-primary-kill9",
		fault: "kill -9 of the sale's primary in a Redis Cluster (3 primaries, 3 replicas) mid-crowd, default flags: its replica takes over (SQLite)",
		needs: "26 (a 201 is kept)", own: func(t *testing.T, s *suite, sc scenario) result { return haFailover(t, s, sc, true) }}
)

// haFailover is the scenarios' own run.
func haFailover(t *testing.T, s *suite, sc scenario, onCluster bool) (r result) {
	r = result{name: sc.name, fault: sc.fault, needs: sc.needs, outage: "–", recovery: "–"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	dir := s.freshDir(sc.name)
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	const sale = "ha"
	var redisURL, sentinelAddr, sentinelName string
	var kill func() string // kills the sale's primary, returns what it killed
	var heir string        // the killed primary's replica, the one promoted
	// announced, on Sentinel, notes when the Sentinel names heir the primary.
	announced := func() time.Time { return time.Time{} }
	var data redis.UniversalClient
	if onCluster {
		cl := redistest.StartCluster(t)
		redisURL = "redis+cluster://" + strings.Join(cl.Addrs, ",")
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
		data = cc
		kill = func() string {
			m, err := cc.MasterForKey(ctx, lua.SaleKey(sale))
			if err != nil {
				return "no primary: " + err.Error()
			}
			addr := m.Options().Addr
			heir = replicaOf(ctx, addr)
			cl.Node(addr).Stop()
			return addr
		}
	} else {
		st := redistest.StartSentinel(t)
		sentinelAddr, sentinelName = st.Addr, st.Name
		redisURL = st.URL()
		data = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.Name, SentinelAddrs: []string{st.Addr}})
		kill = func() string { heir = st.Replica.Addr; st.Primary.Stop(); return st.Primary.Addr }
	}
	t.Cleanup(func() { _ = data.Close() })

	c := &cluster{t: t, dir: dir, jwt: []byte(randomHex(32)), admin: randomHex(32), dbKind: "sqlite",
		dbURL: "sqlite://" + filepath.Join(dir, "orders.db"), hist: newHistory()}
	// down closes these: the checker reads through data.
	c.rdb, c.rep = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(c.down)
	startDefaultTiers(ctx, t, s, c, redisURL)
	db := c.db

	c.openSale(ctx, sale, haUnits)
	// The tiers' count of the primary's replicas is up to a second old.
	time.Sleep(1100 * time.Millisecond)
	cr := &crowd{c: c, sale: sale, prefix: "ha-", n: haBuyers, spread: 5 * time.Second, inFlight: 32, budget: 30 * time.Second}
	var killedAt time.Time
	var killed string
	done := make(chan []outcome, 1)
	start := time.Now()
	rowsSeen := startRowWatch(ctx, db, sale) // recovery_test.go
	go func() { done <- cr.run(ctx) }()
	select {
	case <-time.After(1500 * time.Millisecond):
	case <-ctx.Done():
	}
	before := 0
	if f, err := db.Figures(ctx, sale); err == nil {
		before = int(f.Persisted)
	}
	killed, killedAt = kill(), time.Now()
	promoted := watchPromotion(ctx, heir, time.Minute)
	if !onCluster {
		announced = watchAnnounce(ctx, sentinelAddr, sentinelName, heir, time.Minute)
	}
	outs := <-done
	// The fault ends with the promotion: the detection before it (Sentinel's
	// down-after-milliseconds, the Cluster's node timeout) is time no tier
	// can act in. Without a promotion seen the kill ends it.
	promotedAt := promoted()
	faultEnd := promotedAt
	if faultEnd.IsZero() {
		faultEnd = killedAt
		r.problems = append(r.problems, fmt.Sprintf("the replica %s never said role:master within a minute of the kill", heir))
	} else {
		t.Logf("the replica %s said role:master %v after the kill", heir, promotedAt.Sub(killedAt).Round(10*time.Millisecond))
	}
	t.Logf("killed the primary %s %v into the crowd (%d rows then); the crowd ended with %s", killed,
		killedAt.Sub(start).Round(10*time.Millisecond), before, countList(stats(outs).finals))

	// Every order reaches the database.
	var backlog struct {
		StreamBacklog int64 `json:"stream_backlog"`
		State         string
	}
	if _, ok := testwait.For(60*time.Second, func() bool {
		err := c.adminDo(ctx, http.MethodGet, "/admin/sales/"+sale, nil, &backlog)
		return err == nil && backlog.StreamBacklog == 0
	}); !ok {
		r.problems = append(r.problems, fmt.Sprintf("the sale's stream never drained (%+v)", backlog))
	}
	// The recovery figures as for the suite's own crowds, the fault ending
	// with the promotion (as each round's in lagging-replica-failover).
	rowsSeen.end()
	fig := recoveryAt(faultEnd, outs, rowsSeen)
	r.sellAgain, r.rowLag = fig.cells(true)
	t.Logf("recovery: sells again %s after the promotion; every 201 a row within %s of the later of its answer and the promotion (%v of its answer)",
		r.sellAgain, r.rowLag, fig.rawLag.Round(10*time.Millisecond))
	// The same moments by the wall clock, to line them up with the tiers'
	// logs (FAULTS_WORKDIR keeps them).
	wall := func(at time.Time) string {
		if at.IsZero() {
			return "never"
		}
		return at.UTC().Format("15:04:05.000")
	}
	namedAt := announced() // once: it waits for the watch's end
	firstSale := time.Time{}
	if fig.sellAgain >= 0 {
		firstSale = faultEnd.Add(fig.sellAgain)
	}
	t.Logf("wall clock (UTC): killed %s, promoted %s, named by the Sentinel %s, first 201 after the promotion %s",
		wall(killedAt), wall(promotedAt), wall(namedAt), wall(firstSale))
	readCall := time.Now()
	live, err := db.LiveOrders(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	released, err := db.ReleasedOrders(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	readRet := time.Now()
	c.hist.finish(sale, finalRows(released, live), readCall, readRet)
	hc := c.hist.check(sale, haUnits, readCall, time.Minute, filepath.Join(t.ArtifactDir(), sc.name))
	r.history = hc.String()
	if !hc.ok() {
		r.problems = append(r.problems, "HISTORY: "+hc.String())
	}
	rows := map[string]bool{}
	per := map[string]int{}
	units := 0
	for _, o := range live {
		rows[o.ID] = true
		per[o.UserID]++
		units += int(o.Quantity)
	}
	if units > haUnits {
		r.problems = append(r.problems, fmt.Sprintf("OVERSELL: %d live units of %d", units, haUnits))
	}
	for u, n := range per {
		if n > 1 {
			r.problems = append(r.problems, fmt.Sprintf("TWICE: %s holds %d live orders", u, n))
		}
	}
	var created int
	var recovery time.Duration
	for _, o := range outs {
		r.requests += len(o.attempts)
		for _, a := range o.attempts {
			if a.status == http.StatusCreated {
				created++
				if at := a.end.Sub(killedAt); at > 0 && (recovery == 0 || at < recovery) {
					recovery = at
				}
			}
		}
		if o.orderID != "" && !rows[o.orderID] {
			r.losses++
			r.problems = append(r.problems, fmt.Sprintf("LOSS: %s's %s (order %s) has no row", o.user, o.final, o.orderID))
		}
	}
	r.created, r.rows = created, len(live)
	if recovery > 0 {
		r.recovery = fmt.Sprintf("%v (first 201 after the kill)", recovery.Round(10*time.Millisecond))
	}
	promotion := "never seen"
	if !promotedAt.IsZero() {
		promotion = fmt.Sprintf("at t=%v (detection and election took %v)", promotedAt.Sub(start).Round(10*time.Millisecond),
			promotedAt.Sub(killedAt).Round(10*time.Millisecond))
	}
	if at := namedAt; !at.IsZero() {
		promotion += fmt.Sprintf(", named by the Sentinel at t=%v (%v after the promotion)", at.Sub(start).Round(10*time.Millisecond),
			at.Sub(promotedAt).Round(10*time.Millisecond))
	}
	r.happened = fmt.Sprintf("in %v: primary %s killed at t=%v into the crowd (%d rows then), its replica %s promoted %s; %d 201s, %d live orders for %d units, %d confirmed orders without a row; the crowd ended with %s",
		time.Since(began).Round(time.Second), killed, killedAt.Sub(start).Round(10*time.Millisecond), before, heir, promotion,
		created, len(live), haUnits, r.losses, countList(stats(outs).finals))
	if len(live) < haUnits {
		// Not a broken promise of this scenario (sold_out is always allowed):
		// as in lagging-replica-failover, the attempts the fence turned away
		// count against the admission cap until a re-sync raises it.
		r.happened += fmt.Sprintf("; %d units unsold: later attempts were answered sold_out by the admission cap", haUnits-len(live))
	}
	for _, p := range r.problems {
		t.Error(p)
	}
	return r
}

// replicaOf returns the address of the Cluster node that replicates the
// primary at addr ("" when it has none), from the primary's CLUSTER
// REPLICAS.
func replicaOf(ctx context.Context, addr string) string {
	n := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer n.Close()
	id, err := n.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return ""
	}
	lines, err := n.Do(ctx, "CLUSTER", "REPLICAS", id).StringSlice()
	if err != nil || len(lines) == 0 {
		return ""
	}
	// "<id> <ip:port@bus[,hostname]> <flags> ...".
	f := strings.Fields(lines[0])
	if len(f) < 2 {
		return ""
	}
	a, _, _ := strings.Cut(f[1], "@")
	return a
}

// watchPromotion notes when the replica at addr first says role:master,
// polling its ROLE from now for at most limit; the returned func waits for
// the end and gives that moment (zero: never, or addr is "").
func watchPromotion(ctx context.Context, addr string, limit time.Duration) func() time.Time {
	if addr == "" {
		return func() time.Time { return time.Time{} }
	}
	n := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	return watchUntil(ctx, limit, func() bool {
		role, err := n.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	}, n.Close)
}

// watchAnnounce notes when the Sentinel at sentinel first names addr as
// master's primary (SENTINEL get-master-addr-by-name): when a client asking
// it can find the promoted replica.
func watchAnnounce(ctx context.Context, sentinel, master, addr string, limit time.Duration) func() time.Time {
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel, MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	return watchUntil(ctx, limit, func() bool {
		a, err := sc.GetMasterAddrByName(ctx, master).Result()
		return err == nil && len(a) == 2 && a[0]+":"+a[1] == addr
	}, sc.Close)
}

// watchUntil calls cond in a goroutine until it holds, for at most limit
// (testwait's pace), then calls done; the returned func waits for the end
// and gives when cond first held (zero: never).
func watchUntil(ctx context.Context, limit time.Duration, cond func() bool, done func() error) func() time.Time {
	res := make(chan time.Time, 1)
	go func() {
		defer func() { _ = done() }()
		var at time.Time
		testwait.For(limit, func() bool {
			if cond() {
				at = time.Now()
				return true
			}
			return ctx.Err() != nil
		})
		res <- at
	}()
	return func() time.Time { return <-res }
}
