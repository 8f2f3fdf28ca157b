package systemtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/sqldb"
)

// goTB lets redistest's Restart and WaitReplica run on a fault goroutine:
// a fatal error there fails the test and ends that goroutine only.
type goTB struct{ testing.TB }

func (g goTB) Fatal(args ...any) { g.TB.Error(args...); runtime.Goexit() }
func (g goTB) Fatalf(format string, args ...any) {
	g.TB.Errorf(format, args...)
	runtime.Goexit()
}
func (g goTB) FailNow() { g.TB.Fail(); runtime.Goexit() }

// stallStore is the sink's database; once stalled, InsertOrders holds its
// batch until the drainer's context ends, so a drainer killed then dies
// with the entries it read pending and unacknowledged.
type stallStore struct {
	ordersink.Store
	stall   atomic.Bool
	holding chan struct{} // closed when a stalled insert holds a batch
	once    sync.Once
}

func (s *stallStore) InsertOrders(ctx context.Context, orders []flashgate.Order) (int, error) {
	if s.stall.Load() {
		s.once.Do(func() { close(s.holding) })
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return s.Store.InsertOrders(ctx, orders)
}

// faultSystem is every tier in-process: a redis-server primary and a real
// replica (or a Redis Cluster), SQLite, inventory, control plane, an order
// sink that can be killed and replaced, and a gateway on loopback that can
// be restarted.
type faultSystem struct {
	t       *testing.T
	ctx     context.Context
	primary *redistest.Server     // nil on a cluster
	replica *redistest.Server     // nil on a cluster
	cluster *redistest.Cluster    // nil on a single primary
	rdb     redis.UniversalClient // primary (primaries on a cluster)
	rep     redis.UniversalClient // replica (ReadOnly on a cluster), for the gateways' reads
	db      *sqldb.DB
	inv     *inventory.Service
	cp      *controlplane.Service
	jwtS    []byte
	metrics *prometheus.Registry // shared by every gateway

	base atomic.Pointer[string] // the serving gateway's http://127.0.0.1:port

	mu       sync.Mutex
	gw       *gateway.Server
	wg       sync.WaitGroup // serving gateways, sinks and the control plane
	sinkStop []context.CancelFunc
}

// startFaultSystem starts every tier on backend: "single" (a primary and
// its replica) or "cluster" (the package's shared Redis Cluster, emptied).
func startFaultSystem(t *testing.T, backend string) *faultSystem {
	t.Helper()
	ctx := context.Background()
	db, err := sqldb.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s := &faultSystem{
		t: t, ctx: ctx, db: db,
		jwtS: []byte(randomHex(t, 32)), metrics: prometheus.NewRegistry(),
	}
	if backend == "cluster" {
		s.cluster = testCluster.Get(t)
		s.rdb, s.rep = s.cluster.Client(t, false), readOnlyClient(t, s.cluster)
	} else {
		s.primary = redistest.Start(t)
		s.replica = redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(s.primary.Port))
		s.replica.WaitReplica(t)
		s.rdb, s.rep = s.primary.Client(t), s.replica.Client(t)
	}
	s.inv = inventory.New(s.rdb, inventory.Config{Logger: quiet})
	s.cp, err = controlplane.New(controlplane.Config{
		Redis: s.rdb, Store: db, Releaser: s.inv, AdminToken: randomHex(t, 32), Logger: quiet,
		ResyncEvery: 100 * time.Millisecond, TickEvery: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	cpCtx, stopCP := context.WithCancel(ctx)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.cp.Run(cpCtx); err != nil {
			t.Errorf("controlplane: %v", err)
		}
	}()
	t.Cleanup(func() {
		s.mu.Lock()
		gw := s.gw
		stops := s.sinkStop
		s.mu.Unlock()
		if gw != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := gw.Shutdown(sctx); err != nil {
				t.Errorf("gateway shutdown: %v", err)
			}
			cancel()
		}
		for _, stop := range stops {
			stop()
		}
		stopCP()
		s.wg.Wait()
	})
	return s
}

// startGateway serves a new gateway on a new loopback port and points the
// buyers at it.
func (s *faultSystem) startGateway(tb testing.TB) {
	gw, err := gateway.New(gateway.Config{
		Primary: s.rdb, Replica: s.rep, Reserver: s.inv, Catalog: s.db, Orders: s.cp,
		JWTSecret: s.jwtS, Logger: quiet, Metrics: s.metrics, ShutdownDelay: -1, RedisTimeout: 500 * time.Millisecond,
	})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s.mu.Lock()
	s.gw = gw
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := gw.Serve(ln); err != nil {
			s.t.Errorf("gateway: %v", err)
		}
	}()
	u := "http://" + ln.Addr().String()
	s.base.Store(&u)
}

// stopGateway shuts the serving gateway down; buyers get connection errors
// until startGateway runs.
func (s *faultSystem) stopGateway(tb testing.TB) {
	s.mu.Lock()
	gw := s.gw
	s.gw = nil
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := gw.Shutdown(ctx); err != nil {
		tb.Errorf("gateway shutdown: %v", err)
	}
}

// startSink runs an order sink named consumer over store; the returned
// function kills it (cancels its Run) and waits until it returned.
func (s *faultSystem) startSink(consumer string, store ordersink.Store) (*ordersink.Drainer, func()) {
	var rdb redis.UniversalClient
	if s.cluster != nil {
		rdb = s.cluster.Client(s.t, false)
	} else {
		rdb = s.primary.Client(s.t)
	}
	d := ordersink.New(rdb, store, ordersink.Config{
		Consumer: consumer, Batch: 16, Block: 50 * time.Millisecond, ClaimIdle: 200 * time.Millisecond,
		RefreshSales: 100 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Logger: quiet,
	})
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		if err := d.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			s.t.Errorf("ordersink %s: %v", consumer, err)
		}
	}()
	kill := func() { cancel(); <-done }
	s.mu.Lock()
	s.sinkStop = append(s.sinkStop, cancel)
	s.mu.Unlock()
	return d, kill
}

func (s *faultSystem) token(tb testing.TB, user string) string {
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": user, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(s.jwtS)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// replicaFallbacks is how many sale-state reads the gateways sent to the
// primary because the replica failed.
func (s *faultSystem) replicaFallbacks(tb testing.TB) float64 {
	mfs, err := s.metrics.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "flashgate_gateway_replica_fallback_total" {
			var n float64
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
			return n
		}
	}
	return 0
}

func (s *faultSystem) booked(tb testing.TB, sale string) int64 {
	n, err := s.rdb.HGet(s.ctx, lua.SaleKey(sale), lua.FieldBooked).Int64()
	if err != nil {
		tb.Fatalf("reading booked: %v", err)
	}
	return n
}

// buyOutcome is what one buyer ended with.
type buyOutcome struct {
	user     string
	answer   string // "201", "409 sold_out", "transport error", …
	orderID  string // from a 201, or a 409 already_purchased naming the user's order
	attempts int
	// variant is the variant the buyer asked for (crowd.order), and
	// named is the one the final answer named ("" if none).
	variant, named string
}

// crowd sends each user's purchase once over real HTTP to the current
// gateway, retrying transport errors and 503s as a client would; paced(i)
// is user i's arrival offset. done counts buyers with a final answer.
type crowd struct {
	s       *faultSystem
	sale    string
	users   []string
	workers int
	paced   func(i int) time.Duration
	// order, when set, is what user asks for: the purchase body then
	// names the quantity and the variant; nil sends no body (one unit).
	order func(user string) (qty int64, variant string)
	done  atomic.Int64
}

const buyAttempts = 6

func (c *crowd) run(ctx context.Context, tb testing.TB) []buyOutcome {
	tokens := make([]string, len(c.users))
	for i, u := range c.users {
		tokens[i] = c.s.token(tb, u)
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: c.workers, MaxConnsPerHost: 2 * c.workers},
	}
	defer client.CloseIdleConnections()
	out := make([]buyOutcome, len(c.users))
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < c.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(c.users) {
					return
				}
				if c.paced != nil {
					if d := time.Until(start.Add(c.paced(i))); d > 0 {
						time.Sleep(d) // not a synchronisation: the crowd's arrival schedule
					}
				}
				out[i] = c.buy(ctx, client, c.users[i], tokens[i])
				c.done.Add(1)
			}
		}()
	}
	wg.Wait()
	return out
}

func (c *crowd) buy(ctx context.Context, client *http.Client, user, tok string) buyOutcome {
	o := buyOutcome{user: user}
	var reqBody string
	if c.order != nil {
		var qty int64
		qty, o.variant = c.order(user)
		reqBody = fmt.Sprintf(`{"quantity":%d,"variant":%q}`, qty, o.variant)
	}
	for o.attempts < buyAttempts && ctx.Err() == nil {
		if o.attempts > 0 {
			// Not a synchronisation: the buyer's backoff between tries, 40ms … 640ms.
			time.Sleep(time.Duration(20<<o.attempts) * time.Millisecond)
		}
		o.attempts++
		var rb io.Reader
		if reqBody != "" {
			rb = strings.NewReader(reqBody)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, *c.s.base.Load()+"/api/sales/"+c.sale+"/orders", rb)
		if err != nil {
			o.answer = "bad request: " + err.Error()
			return o
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client.Do(req)
		if err != nil {
			o.answer = "transport error"
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			o.answer = "transport error"
			continue
		}
		var v struct {
			Error   string `json:"error"`
			OrderID string `json:"order_id"`
			UserID  string `json:"user_id"`
			SaleID  string `json:"sale_id"`
			Variant string `json:"variant"`
		}
		_ = json.Unmarshal(body, &v)
		o.named = v.Variant
		o.answer = strconv.Itoa(resp.StatusCode)
		if v.Error != "" {
			o.answer += " " + v.Error
		}
		switch {
		case resp.StatusCode == http.StatusCreated:
			if v.OrderID == "" || v.UserID != user || v.SaleID != c.sale {
				o.answer = fmt.Sprintf("bad 201 for %s: %s", user, body)
				return o
			}
			o.orderID = v.OrderID
			return o
		case resp.StatusCode == http.StatusConflict && v.Error == "already_purchased":
			// An earlier attempt reserved but its answer was lost: this is
			// the user's confirmed order.
			o.orderID = v.OrderID
			return o
		case resp.StatusCode == http.StatusServiceUnavailable:
			continue
		}
		return o
	}
	return o
}

// tally counts the final answers, and collects the confirmed orders (order
// id → user); two confirmed orders for one user fail tb.
func tally(tb testing.TB, outs []buyOutcome) (byAnswer map[string]int, confirmed map[string]string, retried int) {
	byAnswer = map[string]int{}
	confirmed = map[string]string{}
	perUser := map[string]string{}
	for _, o := range outs {
		if o.user == "" { // never sent: the crowd's time ran out
			byAnswer["not sent"]++
			continue
		}
		byAnswer[o.answer]++
		if o.attempts > 1 {
			retried++
		}
		if o.orderID == "" {
			continue
		}
		if prev, dup := perUser[o.user]; dup {
			tb.Errorf("user %s confirmed twice: %s and %s", o.user, prev, o.orderID)
		}
		if prevUser, dup := confirmed[o.orderID]; dup {
			tb.Errorf("order %s confirmed to %s and %s", o.orderID, prevUser, o.user)
		}
		perUser[o.user] = o.orderID
		confirmed[o.orderID] = o.user
	}
	return byAnswer, confirmed, retried
}

func answers(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := ""
	for _, k := range keys {
		out += fmt.Sprintf(" [%s]=%d", k, m[k])
	}
	return out
}

// drainAndResync waits until every order stream is drained, then re-syncs
// the sale once.
func (s *faultSystem) drainAndResync(t *testing.T, sale string) {
	t.Helper()
	row, err := s.db.Sale(s.ctx, sale)
	if err != nil {
		t.Fatalf("reading sale: %v", err)
	}
	var backlog int64
	if _, ok := testwait.For(15*time.Second, func() bool {
		backlog = 0
		for _, tag := range append([]string{sale}, bucketTags(row)...) {
			n, err := s.rdb.XLen(s.ctx, lua.OrdersKey(tag)).Result()
			if err != nil {
				return false
			}
			backlog += n
		}
		return backlog == 0
	}); !ok {
		t.Fatalf("order stream backlog still %d after 15s", backlog)
	}
	if _, _, err := s.cp.Resync(s.ctx, sale); err != nil {
		t.Fatalf("resync: %v", err)
	}
}

// bucketTags are the hash tags of a bucketed sale's buckets (none for a
// sale of one hash).
func bucketTags(sale flashgate.Sale) []string {
	if !sale.Bucketed() {
		return nil
	}
	return lua.Layout{Sale: sale.ID, Salts: sale.BucketSalts}.Tags()
}

// checkRows checks invariants 2 and 3 against the database: at most one
// live row per user; every confirmed order is exactly one row of its user
// and sale; every row was confirmed to its user.
func (s *faultSystem) checkRows(t *testing.T, sale string, confirmed map[string]string) (live []flashgate.Order) {
	t.Helper()
	live, err := s.db.LiveOrders(s.ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	released, err := s.db.ReleasedOrders(s.ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	fig, err := s.db.Figures(s.ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if got := int64(len(live) + len(released)); got != fig.Persisted {
		t.Errorf("live %d + released %d rows, but the sale has %d rows", len(live), len(released), fig.Persisted)
	}
	holders := map[string]string{}
	for _, o := range live {
		if prev, dup := holders[o.UserID]; dup {
			t.Errorf("invariant 2: user %s holds two live orders, %s and %s", o.UserID, prev, o.ID)
		}
		holders[o.UserID] = o.ID
	}
	rows := map[string]int{}
	for _, o := range append(append([]flashgate.Order(nil), live...), released...) {
		rows[o.ID]++
		user, ok := confirmed[o.ID]
		switch {
		case !ok:
			t.Errorf("invariant 3: row %s (user %s, %s) was never answered 201", o.ID, o.UserID, o.Status)
		case user != o.UserID:
			t.Errorf("invariant 3: row %s belongs to %s, its 201 went to %s", o.ID, o.UserID, user)
		}
		if o.SaleID != sale || o.Quantity != 1 {
			t.Errorf("row %+v: want one unit of %s", o, sale)
		}
	}
	for id, user := range confirmed {
		if rows[id] != 1 {
			t.Errorf("invariant 3: order %s confirmed to %s is %d rows, want 1", id, user, rows[id])
		}
	}
	return live
}

// TestInvariantsUnderFaults runs a crowd of buyers over real HTTP against
// every tier while a replica dies and comes back, the order sink is killed
// holding a batch (a new one claims it) and the gateway restarts on a new
// port, then checks docs/design.md's invariants 1–4; then refunds a few orders
// and checks exactly those units sell again.
//
// On a Redis Cluster the tiers share a cluster client (the gateways read
// through a ReadOnly one), and the replica that dies is the replica of the
// sale's shard.
func TestInvariantsUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("system test under faults")
	}
	for _, backend := range []string{"single", "cluster"} {
		t.Run(backend, func(t *testing.T) { testInvariantsUnderFaults(t, backend) })
	}
}

func testInvariantsUnderFaults(t *testing.T, backend string) {
	const (
		sale    = "fault-drop"
		total   = 100
		buyers  = 3000
		workers = 32
		refunds = 5
		late    = 50
	)
	s := startFaultSystem(t, backend)
	replica, shardPrimary := s.replica, ""
	if s.cluster != nil {
		var addr string
		shardPrimary, addr = shardNodes(t, s.rdb, lua.SaleKey(sale))
		replica = s.cluster.Node(addr)
	}
	if _, err := s.cp.CreateSale(s.ctx, flashgate.Sale{
		ID: sale, Name: "Faulty sneakers", PriceCents: 9900, Total: total, PerUser: 1,
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.cp.Start(s.ctx, sale); err != nil {
		t.Fatal(err)
	}
	s.startGateway(t)
	firstStore := &stallStore{Store: s.db, holding: make(chan struct{})}
	_, killFirstSink := s.startSink("sink-a", firstStore)

	users := make([]string, buyers)
	for i := range users {
		users[i] = "buyer-" + strconv.Itoa(i)
	}
	// The first 240 buyers arrive at 80/s, so that the faults below land
	// while units are still selling; the rest arrive at once.
	c := &crowd{s: s, sale: sale, users: users, workers: workers, paced: func(i int) time.Duration {
		return time.Duration(min(i, 240)) * time.Second / 80
	}}
	crowdCtx, stopCrowd := context.WithTimeout(s.ctx, 60*time.Second)
	defer stopCrowd()
	crowdDone := make(chan struct{})

	// reached waits until n buyers have a final answer, the crowd ended, or
	// 20s passed.
	reached := func(n int64) {
		deadline := time.After(20 * time.Second)
		for c.done.Load() < n {
			select {
			case <-crowdDone:
				return
			case <-deadline:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}

	// Invariant 1 at every moment: booked and the database's live units
	// never exceed the total.
	var monitor sync.WaitGroup
	monitor.Add(1)
	go func() {
		defer monitor.Done()
		for i := 0; ; i++ {
			select {
			case <-crowdDone:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if b, err := s.rdb.HGet(s.ctx, lua.SaleKey(sale), lua.FieldBooked).Int64(); err == nil && b > total {
				t.Errorf("invariant 1: booked %d > total %d during the crowd", b, total)
			}
			if i%5 == 0 {
				if f, err := s.db.Figures(s.ctx, sale); err == nil && f.LiveUnits > total {
					t.Errorf("invariant 1: %d live units in the database > total %d during the crowd", f.LiveUnits, total)
				}
			}
		}
	}()

	var faults sync.WaitGroup
	var heldEntries atomic.Int64
	var fallbacksWhileDown float64
	var primaryReadsWhileDown bool // on a cluster: go-redis routed them there
	ftb := goTB{t}
	var logMu sync.Mutex
	var faultLog []string
	note := func(what string) {
		b, _ := s.rdb.HGet(s.ctx, lua.SaleKey(sale), lua.FieldBooked).Int64()
		logMu.Lock()
		faultLog = append(faultLog, fmt.Sprintf("%s (buyers answered %d, booked %d)", what, c.done.Load(), b))
		logMu.Unlock()
	}
	faults.Add(3)
	// Fault 1: the replica dies; the gateway reads from the primary until
	// it is back and synced.
	go func() {
		defer faults.Done()
		reached(15)
		if s.cluster != nil && stateReadsOn(ftb, shardPrimary) {
			t.Errorf("the gateway read sale state on the shard's primary while its replica was up")
		}
		replica.Stop()
		note("replica stopped")
		reached(60)
		// A busy crowd can answer 45 buyers between two state refreshes:
		// give the gateway up to 3 s to need the primary.
		testwait.For(3*time.Second, func() bool {
			if s.cluster != nil && !primaryReadsWhileDown {
				primaryReadsWhileDown = stateReadsOn(ftb, shardPrimary)
			}
			fallbacksWhileDown = s.replicaFallbacks(ftb)
			return fallbacksWhileDown > 0 || primaryReadsWhileDown
		})
		replica.Restart(ftb)
		replica.WaitReplica(ftb)
		if s.cluster != nil {
			s.cluster.WaitOK(ftb)
		}
		note("replica restarted and synced")
	}()
	// Fault 2: the order sink is killed holding a batch it read and never
	// acknowledged; a new sink under another name claims it.
	go func() {
		defer faults.Done()
		reached(25)
		firstStore.stall.Store(true)
		select {
		case <-firstStore.holding:
		case <-time.After(10 * time.Second):
			t.Errorf("the first order sink never read a batch to hold")
		}
		killFirstSink()
		note("sink-a killed holding a batch")
		p, err := s.rdb.XPending(s.ctx, lua.OrdersKey(sale), lua.SinkGroup).Result()
		if err != nil {
			t.Errorf("XPENDING: %v", err)
		} else {
			heldEntries.Store(p.Consumers["sink-a"])
		}
		reached(c.done.Load() + 30) // orders pile up with no sink at all
		s.startSink("sink-b", s.db)
		note("sink-b started")
	}()
	// Fault 3: the gateway restarts on another port.
	go func() {
		defer faults.Done()
		reached(90)
		s.stopGateway(ftb)
		note("gateway stopped")
		s.startGateway(ftb)
		note("gateway restarted on a new port")
	}()

	began := time.Now()
	outs := c.run(crowdCtx, t)
	close(crowdDone)
	crowdTook := time.Since(began)
	faults.Wait()
	monitor.Wait()
	if t.Failed() {
		t.FailNow()
	}

	byAnswer, confirmed, retried := tally(t, outs)
	for _, l := range faultLog {
		t.Log("fault: " + l)
	}
	t.Logf("crowd of %d in %v, %d retried:%s", buyers, crowdTook.Round(time.Millisecond), retried, answers(byAnswer))
	t.Logf("%v state reads fell back to the primary while the replica was down (cluster client reading on the shard's primary: %v); sink-a died holding %d entries",
		fallbacksWhileDown, primaryReadsWhileDown, heldEntries.Load())
	if fallbacksWhileDown == 0 && !primaryReadsWhileDown {
		t.Errorf("the gateway never read from the primary while the replica was down")
	}
	if heldEntries.Load() == 0 {
		t.Errorf("the killed order sink held no pending entries: the fault did nothing")
	}

	s.drainAndResync(t, sale)
	if p, err := s.rdb.XPending(s.ctx, lua.OrdersKey(sale), lua.SinkGroup).Result(); err != nil || p.Count != 0 {
		t.Errorf("after the drain: %v entries pending (%v), want 0", p, err)
	}

	// Invariant 1.
	if n := byAnswer["201"]; n > total {
		t.Errorf("invariant 1: %d answers 201 for %d units", n, total)
	}
	booked := s.booked(t, sale)
	fig, err := s.db.Figures(s.ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if booked > total || fig.LiveUnits > total {
		t.Errorf("invariant 1: booked %d, live units %d, total %d", booked, fig.LiveUnits, total)
	}
	// Invariants 2 and 3.
	live := s.checkRows(t, sale, confirmed)
	// Invariant 4, and with 30 buyers a unit, every unit sold.
	if booked != fig.LiveUnits {
		t.Errorf("invariant 4: booked %d after drain and re-sync, database live units %d", booked, fig.LiveUnits)
	}
	if len(confirmed) != total || fig.LiveUnits != total || booked != total {
		t.Errorf("sold: %d confirmed orders, %d live units, booked %d; want all %d units sold", len(confirmed), fig.LiveUnits, booked, total)
	}
	if t.Failed() {
		t.FailNow()
	}

	// Refund a few orders: their units, and only theirs, sell again.
	for _, o := range live[:refunds] {
		got, err := s.cp.Refund(s.ctx, o.ID)
		if err != nil || got.Status != flashgate.StatusRefunded {
			t.Fatalf("refund %s: %+v, %v", o.ID, got, err)
		}
	}
	if _, _, err := s.cp.Resync(s.ctx, sale); err != nil {
		t.Fatalf("resync after refunds: %v", err)
	}
	if b := s.booked(t, sale); b != total-refunds {
		t.Fatalf("after %d refunds and a re-sync: booked %d, want %d", refunds, b, total-refunds)
	}
	// The gateway learns of the freed units from the replica.
	var seen string
	if _, ok := testwait.For(10*time.Second, func() bool {
		resp, err := http.Get(*s.base.Load() + "/api/sales/" + sale)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v struct {
			Remaining int64 `json:"remaining"`
		}
		b, _ := io.ReadAll(resp.Body)
		seen = string(b)
		return json.Unmarshal(b, &v) == nil && v.Remaining == refunds
	}); !ok {
		t.Fatalf("the gateway never showed %d units remaining: %s", refunds, seen)
	}

	lateUsers := make([]string, late)
	for i := range lateUsers {
		lateUsers[i] = "late-" + strconv.Itoa(i)
	}
	c2 := &crowd{s: s, sale: sale, users: lateUsers, workers: 8}
	lateCtx, stopLate := context.WithTimeout(s.ctx, 20*time.Second)
	defer stopLate()
	lateAnswers, lateConfirmed, _ := tally(t, c2.run(lateCtx, t))
	t.Logf("late crowd of %d:%s", late, answers(lateAnswers))
	if n := lateAnswers["201"]; n != refunds || len(lateConfirmed) != refunds {
		t.Errorf("after %d refunds: %d answers 201 (%d confirmed orders), want exactly %d", refunds, n, len(lateConfirmed), refunds)
	}
	for id, user := range lateConfirmed {
		confirmed[id] = user
	}
	s.drainAndResync(t, sale)
	s.checkRows(t, sale, confirmed)
	booked = s.booked(t, sale)
	if fig, err = s.db.Figures(s.ctx, sale); err != nil {
		t.Fatal(err)
	}
	if booked != total || fig.LiveUnits != total || fig.Refunded != refunds {
		t.Errorf("at the end: booked %d, live units %d, refunded %d; want %d, %d, %d", booked, fig.LiveUnits, fig.Refunded, total, total, refunds)
	}
}
