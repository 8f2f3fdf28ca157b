//go:build faults

package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/draw"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// The draw scenarios: a draw in three sizes whose entrants hold their
// cards at the stand-in provider through the gateways, then a close under
// faults; judged by the draw's model (history_draw.go). Every scenario's
// webhooks go through a relay that delivers each event to both gateways,
// each copy after its own random delay (so duplicated and reordered), and
// at the close delivers every event of the entry window once more (stale
// holds arriving while captures run).
var (
	drawLeaderKill = scenario{name: "draw-leader-kill9",
		fault: "a draw: two control planes; kill -9 of the leader while the close captures, the other takes over; the provider's next 10 answers 500 at the close; " +
			"webhooks duplicated, reordered and replayed stale (SQLite)",
		opts: clusterOpts{controlPlanes: 2}, own: drawScenario(drawKillLeader)}
	drawProviderFaults = scenario{name: "draw-provider-faults",
		fault: "a draw: the provider limited to 15 requests/s and 5/s per endpoint (429, Retry-After) under the close's 30/s, its next 20 answers 500 at the close, " +
			"every answer 500ms slow for 3s from 2s in; webhooks duplicated, reordered and replayed stale (PostgreSQL)",
		opts: clusterOpts{postgres: true}, own: drawScenario(drawProviderTrouble)}
)

const (
	drawEntrants = 200
	drawWindow   = 5 * time.Second // entries open for this long
	// drawRate and drawCaptureRate are the close's pace (--draw-rate,
	// --draw-capture-rate): slow enough that the close lasts a few
	// seconds, for the faults to land in it.
	drawRate        = 30
	drawCaptureRate = 10
)

// drawSizes are the draw's variants: 40 units for 200 entrants.
var drawSizes = []variantSize{{"S", 20}, {"M", 12}, {"L", 8}}

// drawRun is one draw scenario's run.
type drawRun struct {
	t       *testing.T
	c       *cluster
	stand   *stripelocal.Server
	sale    string
	closeAt time.Time
	// captured counts the sale's captured intents at the provider,
	// polled during the close.
	captured atomic.Int64

	mu       sync.Mutex
	happened []string
	problems []string
	recovery string
}

func (d *drawRun) event(format string, args ...any) {
	msg := fmt.Sprintf("t=close%+.1fs ", time.Since(d.closeAt).Seconds()) + fmt.Sprintf(format, args...)
	d.mu.Lock()
	d.happened = append(d.happened, msg)
	d.mu.Unlock()
	d.t.Log(msg)
}

func (d *drawRun) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.mu.Lock()
	d.problems = append(d.problems, msg)
	d.mu.Unlock()
	d.t.Error(msg)
}

// drawKillLeader kill -9s the leading control plane once a quarter of the
// units are captured; the other control plane takes the lease and
// finishes the close.
func drawKillLeader(ctx context.Context, d *drawRun) {
	d.stand.FailNext(10)
	var total int64
	for _, v := range drawSizes {
		total += v.total
	}
	if _, ok := testwait.For(60*time.Second, func() bool { return d.captured.Load() >= total/4 || ctx.Err() != nil }); !ok {
		d.problem("the close captured %d of %d units in 60s: nothing to kill mid-draw", d.captured.Load(), total)
		return
	}
	var leader *proc
	if _, ok := testwait.For(10*time.Second, func() bool { leader = leaderOf(ctx, d.c); return leader != nil }); !ok {
		d.problem("no control plane holds the leader lease")
		return
	}
	n := d.captured.Load()
	if err := leader.kill9(); err != nil {
		d.problem("kill -9 %s: %v", leader.name, err)
		return
	}
	killed := time.Now()
	d.event("kill -9 %s (the leader) after %d captures", leader.name, n)
	// A capture the dead leader had sent may still land: count the next
	// leader's from its taking the lease.
	var next *proc
	if _, ok := testwait.For(60*time.Second, func() bool {
		next = leaderOf(ctx, d.c)
		return (next != nil && next != leader) || ctx.Err() != nil
	}); !ok || ctx.Err() != nil {
		d.problem("no control plane took the lease within 60s of the kill")
		return
	}
	took, m := time.Since(killed), d.captured.Load()
	d.event("%s took the lease %v after the kill, %d captures then", next.name, took.Round(10*time.Millisecond), m)
	if _, ok := testwait.For(60*time.Second, func() bool { return d.captured.Load() > m || ctx.Err() != nil }); ok && ctx.Err() == nil {
		first := time.Since(killed)
		d.event("its first capture %v after the kill", first.Round(10*time.Millisecond))
		d.mu.Lock()
		d.recovery = fmt.Sprintf("%v (kill -9 → the next leader's first capture; lease taken in %v)", first.Round(10*time.Millisecond), took.Round(10*time.Millisecond))
		d.mu.Unlock()
	}
}

// drawProviderTrouble limits the provider below the close's pace, fails
// its next answers and slows it for a while.
func drawProviderTrouble(ctx context.Context, d *drawRun) {
	d.stand.Limits(15, 5)
	d.stand.FailNext(20)
	d.event("provider limited to 15/s, 5/s per endpoint; its next 20 answers 500")
	select {
	case <-time.After(time.Until(d.closeAt.Add(2 * time.Second))):
	case <-ctx.Done():
		return
	}
	d.stand.Stall(500 * time.Millisecond)
	d.event("provider slow (every answer 500ms late)")
	select {
	case <-time.After(3 * time.Second): // how long the provider stays slow
	case <-ctx.Done():
	}
	d.stand.Stall(0)
	d.event("provider fast again")
}

// leaderOf is the control plane that holds the leader lease now, or nil.
func leaderOf(ctx context.Context, c *cluster) *proc {
	v, err := c.rdb.Get(ctx, lua.LeaderKey()).Result()
	if err != nil {
		return nil
	}
	for _, p := range []*proc{c.cp, c.cp2} {
		if p != nil && p.pid() != 0 && strings.Contains(v, "-"+strconv.Itoa(p.pid())+"-") {
			return p
		}
	}
	return nil
}

// webhookRelay receives the stand-in's events and delivers each to both
// gateways, each copy after its own random delay (0–400ms); Replay
// delivers every event received so far once more.
type webhookRelay struct {
	c         *cluster
	wg        sync.WaitGroup
	mu        sync.Mutex
	events    [][]byte
	sigs      []string
	delivered atomic.Int64
	refused   atomic.Int64 // deliveries never taken after 20 tries
}

func (w *webhookRelay) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		rw.WriteHeader(http.StatusBadRequest)
		return
	}
	sig := r.Header.Get("Stripe-Signature")
	w.mu.Lock()
	w.events = append(w.events, body)
	w.sigs = append(w.sigs, sig)
	w.mu.Unlock()
	w.send(body, sig)
	rw.WriteHeader(http.StatusOK)
}

// send delivers one event to both gateways, each after a random delay.
func (w *webhookRelay) send(body []byte, sig string) {
	for g := range w.c.gwURL {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond) // the reordering, not a synchronisation
			for try := 0; try < 20; try++ {
				req, _ := http.NewRequest(http.MethodPost, w.c.gwURL[g]+"/webhooks/stripe", bytes.NewReader(body))
				req.Header.Set("Stripe-Signature", sig)
				req.Header.Set("Content-Type", "application/json")
				if res, err := probeClient.Do(req); err == nil {
					_ = res.Body.Close()
					if res.StatusCode == http.StatusOK {
						w.delivered.Add(1)
						return
					}
				}
				time.Sleep(200 * time.Millisecond) // the provider's retry
			}
			w.refused.Add(1)
		}()
	}
}

// replay delivers every event received so far once more.
func (w *webhookRelay) replay() int {
	w.mu.Lock()
	evs, sigs := append([][]byte(nil), w.events...), append([]string(nil), w.sigs...)
	w.mu.Unlock()
	for i := range evs {
		w.send(evs[i], sigs[i])
	}
	return len(evs)
}

// drawAdminStatus is the part of GET /admin/sales/{id} the scenario reads.
type drawAdminStatus struct {
	Draw *struct {
		Entered, Withdrawn, Captured, Released, Winners, Promoted int64
		Closed                                                    bool
	} `json:"draw"`
}

// drawAdmin calls the admin API of whichever control plane answers.
func drawAdmin(ctx context.Context, c *cluster, method, path string, body any) (int, []byte) {
	for _, base := range []string{c.adminURL, c.admin2URL} {
		if base == "" {
			continue
		}
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, base+path, rd)
		req.Header.Set("Authorization", "Bearer "+c.admin)
		req.Header.Set("Content-Type", "application/json")
		res, err := probeClient.Do(req)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 8<<20))
		_ = res.Body.Close()
		return res.StatusCode, b
	}
	return 0, nil
}

// drawScenario runs a draw: 200 entrants over three sizes for 40 units,
// each holding a card at the stand-in (one in 25 with a card whose
// capture the provider declines, so that the next entrant is promoted),
// one in 10 withdrawing before the close; inject runs from the close.
func drawScenario(inject func(ctx context.Context, d *drawRun)) func(t *testing.T, s *suite, sc scenario) result {
	return func(t *testing.T, s *suite, sc scenario) (r result) {
		r = result{name: sc.name, fault: sc.fault, outage: "–", recovery: "–", sellAgain: "–", rowLag: "–"}
		d := &drawRun{t: t}
		defer func() {
			d.mu.Lock()
			r.problems = append(r.problems, d.problems...)
			r.happened = strings.Join(d.happened, "; ")
			if d.recovery != "" {
				r.recovery = d.recovery
			}
			d.mu.Unlock()
			if t.Failed() && len(r.problems) == 0 {
				r.problems = []string{"the scenario could not run (see its log)"}
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		stand := stripelocal.New("sk_test_draw", "whsec_draw")
		ts := httptest.NewServer(stand)
		defer ts.Close()
		o := sc.opts
		o.env = []string{"FLASHGATE_PAYMENTS=stripe", "FLASHGATE_STRIPE_KEY=" + stand.Key, "FLASHGATE_STRIPE_WEBHOOK_SECRET=" + stand.WebhookSecret,
			"FLASHGATE_STRIPE_API_BASE=" + ts.URL, "FLASHGATE_DRAW_RATE=" + strconv.Itoa(drawRate), "FLASHGATE_DRAW_CAPTURE_RATE=" + strconv.Itoa(drawCaptureRate)}
		c := s.startCluster(t, sc.name, o)
		d.c, d.stand, d.sale = c, stand, "draw-"+strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
		relay := &webhookRelay{c: c}
		rs := httptest.NewServer(relay)
		defer rs.Close()
		stand.SetWebhookURL(rs.URL)

		open := time.Now()
		d.closeAt = open.Add(drawWindow).Truncate(time.Second)
		var vs []map[string]any
		stock := map[string]int{}
		for _, v := range drawSizes {
			vs = append(vs, map[string]any{"id": v.id, "name": "Size " + v.id, "total": v.total})
			stock[v.id] = int(v.total)
		}
		if code, b := drawAdmin(ctx, c, http.MethodPost, "/admin/sales", map[string]any{"id": d.sale, "name": "Fault draw", "price_cents": 4900,
			"mode": "draw", "per_user": 1, "variants": vs, "entries_open_at": open.Format(time.RFC3339Nano),
			"entries_close_at": d.closeAt.Format(time.RFC3339Nano)}); code != http.StatusCreated && code != http.StatusOK {
			t.Fatalf("creating the draw: %d %s", code, b)
		}

		// The entrants.
		es := make([]drawEntrant, drawEntrants)
		var requests, made atomic.Int64
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= drawEntrants || ctx.Err() != nil {
						return
					}
					es[i] = d.enter(ctx, i, &requests, &made)
				}
			})
		}
		wg.Wait()
		var withdrawn, declines int
		for _, e := range es {
			withdrawn += boolInt(e.Withdrawn)
			declines += boolInt(e.Declines)
		}
		r.requests, r.created = int(requests.Load()), int(made.Load())
		want := int64(drawEntrants - withdrawn)
		var st drawAdminStatus
		entered := func() bool {
			code, b := drawAdmin(ctx, c, http.MethodGet, "/admin/sales/"+d.sale, nil)
			return code == http.StatusOK && json.Unmarshal(b, &st) == nil && st.Draw != nil && st.Draw.Entered == want
		}
		if _, ok := testwait.For(time.Until(d.closeAt), entered); !ok {
			d.problem("entries: %d entered of %d before the close (webhooks of the holds lost?)", drawEntered(st), want)
		}
		d.event("%d entries made (%d withdrawn, %d with a card whose capture is declined), %d entered, in %v of the %v window",
			r.created, withdrawn, declines, drawEntered(st), time.Since(open).Round(100*time.Millisecond), drawWindow)

		// The close, with the fault, stale webhooks and the ledger polled.
		select {
		case <-time.After(time.Until(d.closeAt)):
		case <-ctx.Done():
		}
		faultDone := make(chan struct{})
		go func() { defer close(faultDone); inject(ctx, d) }()
		replayed := relay.replay()
		d.event("%d webhook events of the entry window delivered again to both gateways", replayed)
		var lastCapture, lastHeld time.Time
		var prevCap int64
		closed := false
		testwait.For(150*time.Second, func() bool {
			cp, held := drawLedger(stand, d.sale)
			now := time.Now()
			if cp != prevCap {
				lastCapture, prevCap = now, cp
			}
			if held > 0 {
				lastHeld = now
			}
			d.captured.Store(cp)
			code, b := drawAdmin(ctx, c, http.MethodGet, "/admin/sales/"+d.sale, nil)
			closed = code == http.StatusOK && json.Unmarshal(b, &st) == nil && st.Draw != nil && st.Draw.Closed
			return closed || ctx.Err() != nil
		})
		<-faultDone
		if !closed {
			d.problem("the draw did not close within 150s of its close")
		}
		toCaptured, toReleased := time.Duration(0), time.Duration(0)
		if !lastCapture.IsZero() {
			toCaptured = lastCapture.Sub(d.closeAt)
		}
		if !lastHeld.IsZero() {
			toReleased = lastHeld.Sub(d.closeAt)
		}
		stand.Deliveries.Wait()
		relay.wg.Wait()
		d.event("close → all captured %v, → all released %v (ledger polled every 20ms); %d answers 429; %d webhook deliveries taken, %d refused",
			toCaptured.Round(10*time.Millisecond), toReleased.Round(10*time.Millisecond), stand.Limited(), relay.delivered.Load(), relay.refused.Load())
		if relay.refused.Load() > 0 {
			d.problem("%d webhook deliveries refused 20 times", relay.refused.Load())
		}

		// The final state, judged by the draw's model.
		f := drawFinal{Stock: stock, Entrants: es, Orders: map[string]flashgate.Order{}}
		if code, b := drawAdmin(ctx, c, http.MethodGet, "/admin/sales/"+d.sale+"/draw.txt", nil); code == http.StatusOK {
			file, err := draw.Read(bytes.NewReader(b))
			if err != nil {
				d.problem("reading the entries file: %v", err)
			}
			f.File = file
		} else {
			d.problem("GET draw.txt: %d %s", code, b)
		}
		for _, in := range stand.Intents() {
			if in.Metadata["sale_id"] == d.sale {
				f.Intents = append(f.Intents, drawIntent{ID: in.ID, EntryID: in.Metadata["entry_id"], Status: in.Status})
			}
		}
		for _, stt := range []flashgate.OrderStatus{flashgate.StatusPaid, flashgate.StatusPendingPayment, flashgate.StatusExpired, flashgate.StatusCancelled, flashgate.StatusRefunded} {
			page, err := c.db.OrdersPage(ctx, d.sale, stt, "", 1000)
			if err != nil {
				t.Fatalf("reading orders: %v", err)
			}
			for _, o := range page {
				f.Orders[o.ID] = o
			}
		}
		v := checkDraw(f)
		r.rows = 0
		for _, o := range f.Orders {
			r.rows += boolInt(o.Status == flashgate.StatusPaid)
		}
		r.history = "draw's model: " + v.String()
		t.Log(r.history)
		for _, p := range v.problems {
			d.problem("%s", p)
		}
		if !v.ok() && len(v.problems) == 0 {
			d.problem("draw: %s", v)
		}
		return r
	}
}

func drawEntered(st drawAdminStatus) int64 {
	if st.Draw == nil {
		return 0
	}
	return st.Draw.Entered
}

// drawLedger counts the sale's intents captured and still held at the
// stand-in.
func drawLedger(stand *stripelocal.Server, sale string) (captured, held int64) {
	for _, in := range stand.Intents() {
		if in.Metadata["sale_id"] != sale {
			continue
		}
		switch in.Status {
		case flashgate.IntentSucceeded:
			captured++
		case flashgate.IntentRequiresCapture:
			held++
		}
	}
	return captured, held
}

// enter makes entrant i's entry through the gateways (retrying on no
// answer or a 5xx, on the other gateway), confirms its hold at the
// stand-in as the Payment Element would, and withdraws one in ten.
func (d *drawRun) enter(ctx context.Context, i int, requests, made *atomic.Int64) drawEntrant {
	e := drawEntrant{User: "entrant-" + strconv.Itoa(i), Variant: drawSizes[i%len(drawSizes)].id, Declines: i%25 == 7}
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": e.User, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(d.c.jwt)
	call := func(method, path string, body []byte) (int, map[string]any) {
		for try := 0; try < 10; try++ {
			requests.Add(1)
			req, _ := http.NewRequestWithContext(ctx, method, d.c.gwURL[(i+try)%len(d.c.gwURL)]+path, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok)
			res, err := probeClient.Do(req)
			if err != nil {
				time.Sleep(100 * time.Millisecond) // a client's back-off
				continue
			}
			var out map[string]any
			_ = json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&out)
			_ = res.Body.Close()
			if res.StatusCode >= 500 || res.StatusCode == http.StatusTooManyRequests {
				time.Sleep(100 * time.Millisecond) // a client's back-off
				continue
			}
			if res.StatusCode == http.StatusCreated && method == http.MethodPost {
				made.Add(1)
			}
			return res.StatusCode, out
		}
		return 0, nil
	}
	path := "/api/sales/" + d.sale + "/entry"
	code, out := call(http.MethodPost, path, []byte(`{"variant":"`+e.Variant+`"}`))
	if code != http.StatusCreated && code != http.StatusOK {
		d.problem("entrant %s: entering answered %d %v", e.User, code, out)
		return e
	}
	e.ID, _ = out["entry_id"].(string)
	e.Intent, _ = out["payment_intent"].(string)
	if e.Intent == "" {
		code, out = call(http.MethodPost, path+"/pay", nil)
		e.Intent, _ = out["payment_intent"].(string)
		if e.Intent == "" {
			d.problem("entrant %s: no hold (%d %v)", e.User, code, out)
			return e
		}
	}
	card := "4242424242424242"
	if e.Declines {
		card = stripelocal.CaptureDeclineCard
	}
	if _, err := d.stand.Confirm(e.Intent, card); err != nil {
		d.problem("entrant %s: confirming the hold: %v", e.User, err)
		return e
	}
	if i%10 == 3 {
		if code, out := call(http.MethodDelete, path, nil); code == http.StatusOK {
			e.Withdrawn = true
		} else {
			d.problem("entrant %s: withdrawing answered %d %v", e.User, code, out)
		}
	}
	return e
}
