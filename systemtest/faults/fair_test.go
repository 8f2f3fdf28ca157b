//go:build faults

package faults

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/golang-jwt/jwt/v5"

	"github.com/flashgate/flashgate/lua"
)

// A fair scenario sells fairUnits units through a fair queue to fairBuyers
// buyers who enter during a pre-queue of fairPrequeue with a proof of work
// (solved natively, as a bot would), poll their place and buy once
// admitted, while a fault hits; every queue answer goes into a queue
// history that the queue model (history_queue.go) checks.
const (
	fairUnits    = 40
	fairBuyers   = 150
	fairPrequeue = 6 * time.Second
)

// fairRun is one fair scenario's run.
type fairRun struct {
	*run
	qh       *qHistory
	startsAt time.Time
	sold     atomic.Int64

	buysMu sync.Mutex
	buys   []outcome // the 201s, for the recovery figures (recoveryAt)
}

// fairScenario runs a fair sale with inject beside its crowd, on the
// scenario's cluster (startCluster).
func fairScenario(inject func(ctx context.Context, f *fairRun)) func(t *testing.T, s *suite, sc scenario) result {
	return fairScenarioOn(func(t *testing.T, s *suite, sc scenario) *cluster { return s.startCluster(t, sc.name, sc.opts) },
		func(rng *rand.Rand, f *fairRun) time.Duration {
			return time.Duration(rng.Int64N(int64(fairPrequeue - 2*time.Second)))
		}, inject)
}

// fairScenarioOn runs a fair sale with inject beside its crowd on the
// cluster start returns; each buyer arrives when arrive says (from the
// crowd's start).
func fairScenarioOn(start func(t *testing.T, s *suite, sc scenario) *cluster, arrive func(rng *rand.Rand, f *fairRun) time.Duration, inject func(ctx context.Context, f *fairRun)) func(t *testing.T, s *suite, sc scenario) result {
	return func(t *testing.T, s *suite, sc scenario) (r result) {
		r = result{name: sc.name, fault: sc.fault, needs: sc.needs}
		x := &run{t: t, s: s, sc: sc, sale: "fair-" + strings.ReplaceAll(sc.name, "-", "")}
		f := &fairRun{run: x, qh: newQHistory()}
		defer func() {
			x.mu.Lock()
			r.problems = append([]string(nil), x.problems...)
			x.mu.Unlock()
			if t.Failed() && len(r.problems) == 0 {
				r.problems = []string{"the scenario could not run (see its log)"}
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		x.c = start(t, s, sc)
		x.crowd = &crowd{c: x.c}
		f.startsAt = time.Now().Add(fairPrequeue).Truncate(time.Second).Add(time.Second)
		x.c.must(x.c.adminDo(ctx, http.MethodPost, "/admin/sales", map[string]any{"id": x.sale, "name": "Fair fault sneakers",
			"price_cents": 4900, "total": fairUnits, "starts_at": f.startsAt.UTC().Format(time.RFC3339), "queue": "fair",
			"prequeue_seconds": int((fairPrequeue + 2*time.Second) / time.Second), "challenge_maxnumber": 2000, "admit_seconds": 30}, nil))
		x.start = time.Now()
		rowsSeen := x.watchRows(ctx) // recovery_test.go
		defer rowsSeen.end()
		crowdCtx, stop := context.WithTimeout(ctx, 75*time.Second)
		defer stop()
		var bg sync.WaitGroup
		if inject != nil {
			bg.Go(func() { inject(crowdCtx, f) })
		}
		var wg sync.WaitGroup
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 27))
		for i := range fairBuyers {
			at := arrive(rng, f)
			wg.Go(func() { f.buyer(crowdCtx, i, at) })
		}
		wg.Wait()
		bg.Wait()
		// The final read: every entrant the queue holds.
		users, err := x.c.rdb.HKeys(ctx, lua.QueueKey(x.sale)).Result()
		if err != nil {
			x.problem("reading the entrants: %v", err)
		}
		res, _ := f.qh.check(fairUnits, users, time.Now(), time.Minute)
		t.Logf("queue history: %d operations, %d units sold, %d entrants in Redis: %s", len(f.qh.ops), f.sold.Load(), len(users), res)
		if lost := f.qh.lostEntries(users); len(lost) > 0 {
			t.Logf("acknowledged entries not in the queue at the end: %s", strings.Join(lost, ", "))
		}
		if res != porcupine.Ok {
			t.Logf("rejected partitions: %s", strings.Join(f.qh.diagnose(fairUnits, users, time.Now()), "; "))
			x.problem("queue history NOT linearizable against the queue model (%s): %d of %d units sold; %d entries acknowledged (201) and not in the queue at the end",
				res, f.sold.Load(), fairUnits, f.qh.lost(users))
		}
		if n := f.sold.Load(); n < fairUnits && len(users) > fairUnits {
			x.problem("only %d of %d units sold in %v to %d entrants who all buy once admitted", n, fairUnits, time.Since(x.start).Round(time.Second), len(users))
		}
		booked, _ := x.c.rdb.HGet(ctx, lua.SaleKey(x.sale), lua.FieldBooked).Int64()
		if booked > fairUnits {
			x.problem("OVERSELL: booked %d of %d", booked, fairUnits)
		}
		f.fairStock(ctx)
		r.requests, r.created = len(f.qh.ops), int(f.sold.Load())
		// The recovery figures as for the suite's own crowds; nobody can
		// buy before the start, so a fault that ends earlier (in the
		// pre-queue) is counted from the start.
		rowsSeen.end()
		end := x.faultEnd()
		if !end.IsZero() && end.Before(f.startsAt) {
			end = f.startsAt
		}
		f.buysMu.Lock()
		fig := recoveryAt(end, f.buys, rowsSeen)
		f.buysMu.Unlock()
		r.sellAgain, r.rowLag = fig.cells(!end.IsZero())
		t.Logf("recovery: sells again %s after the fault's end (or the start); every 201 a row within %s of the later of its answer and the fault's end (%v of its answer)",
			r.sellAgain, r.rowLag, fig.rawLag.Round(10*time.Millisecond))
		return r
	}
}

// buyer enters at arrive after the start of the run, polls and buys once
// admitted; it stops when it bought, the stock is sold, or ctx ends.
func (f *fairRun) buyer(ctx context.Context, i int, arrive time.Duration) {
	user := fmt.Sprintf("fair-%d", i)
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": user, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(f.c.jwt)
	client := &http.Client{Timeout: 3 * time.Second}
	f.at(ctx, arrive)
	gw := i % len(f.c.gwURL)
	ticket := ""
	for ticket == "" && ctx.Err() == nil { // enter, retrying a queue not open yet or a 5xx
		code, body, _ := f.do(ctx, client, "GET", gw, "/api/sales/"+f.sale+"/challenge", tok, "", "")
		if code != 200 {
			time.Sleep(100 * time.Millisecond) // a client's retry
			continue
		}
		payload := solve(body)
		call := time.Now()
		code, body, _ = f.do(ctx, client, "POST", gw, "/api/sales/"+f.sale+"/queue", tok, "", payload)
		var st struct{ Ticket string }
		_ = json.Unmarshal(body, &st)
		switch {
		case code == 201 || code == 200:
			// 200: entered before (a retry of an entry whose answer was
			// lost or 503); its ticket is as good a promise as a 201's.
			f.qh.add(qIn{kind: qEnter, user: user}, qOK, call, time.Now())
			ticket = st.Ticket
		case code == 0 || code >= 500:
			f.qh.add(qIn{kind: qEnter, user: user}, qNone, call, time.Time{})
			time.Sleep(100 * time.Millisecond)
		default:
			time.Sleep(100 * time.Millisecond)
		}
	}
	for ctx.Err() == nil && f.sold.Load() < fairUnits {
		call := time.Now()
		code, body, h := f.do(ctx, client, "GET", gw, "/api/sales/"+f.sale+"/queue", tok, ticket, "")
		var st struct {
			State       string
			Position    *int64
			PollAfterMS int64 `json:"poll_after_ms"`
		}
		_ = json.Unmarshal(body, &st)
		if t := h.Get("X-Queue-Ticket"); t != "" {
			ticket = t
		}
		in := qIn{kind: qStatus, user: user, src: strconv.Itoa(gw)}
		if st.Position != nil {
			in.pos = *st.Position
		}
		switch {
		case code == 409 && strings.Contains(string(body), "queue_reset"):
			f.qh.add(in, qGone, call, time.Now())
			return
		case code != 200:
			// 404 while a lost sale is rebuilt, 503 while its queue is
			// restored: the same ticket is tried again.
			time.Sleep(200 * time.Millisecond)
			continue
		case st.State == "waiting" && st.Position != nil:
			f.qh.add(in, qWaiting, call, time.Now())
		case st.State == "admitted" && st.Position != nil:
			f.qh.add(in, qAdmitted, call, time.Now())
			call = time.Now()
			code, body, _ = f.do(ctx, client, "POST", gw, "/api/sales/"+f.sale+"/orders", tok, ticket, "")
			switch {
			case code == 201:
				end := time.Now()
				f.sold.Add(1)
				f.qh.add(qIn{kind: qBuy, user: user}, qOK, call, end)
				var o struct {
					ID string `json:"order_id"`
				}
				_ = json.Unmarshal(body, &o)
				f.buysMu.Lock()
				f.buys = append(f.buys, outcome{user: user, final: "201", orderID: o.ID,
					attempts: []attempt{{gw: gw, start: call, end: end, status: 201}}})
				f.buysMu.Unlock()
				return
			case code == 409 && strings.Contains(string(body), `"sold_out"`):
				f.qh.add(qIn{kind: qBuy, user: user}, qSoldOut, call, time.Now())
				return
			case code == 0 || code >= 500:
				f.qh.add(qIn{kind: qBuy, user: user}, qNone, call, time.Time{})
			}
		case st.State == "purchased" || st.State == "closed" || st.State == "expired":
			return
		}
		// A bot polls faster than poll_after_ms asks: 100-300 ms.
		time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
	}
}

// do sends one request to gateway gw; code 0 is no answer.
func (f *fairRun) do(ctx context.Context, client *http.Client, method string, gw int, path, tok, ticket, body string) (int, []byte, http.Header) {
	req, err := http.NewRequestWithContext(ctx, method, f.c.gwURL[gw]+path, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if ticket != "" {
		req.Header.Set("X-Queue-Ticket", ticket)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, http.Header{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// solve finds a challenge's number natively and returns the entry's body.
func solve(challenge []byte) string {
	var c struct {
		Algorithm, Challenge, Salt, Signature string
		MaxNumber                             int64 `json:"maxnumber"`
	}
	if json.Unmarshal(challenge, &c) != nil {
		return ""
	}
	for n := int64(0); n <= c.MaxNumber; n++ {
		sum := sha256.Sum256([]byte(c.Salt + strconv.FormatInt(n, 10)))
		if hex.EncodeToString(sum[:]) == c.Challenge {
			p, _ := json.Marshal(map[string]any{"algorithm": c.Algorithm, "challenge": c.Challenge, "number": n, "salt": c.Salt, "signature": c.Signature})
			return `{"payload":"` + base64.StdEncoding.EncodeToString(p) + `"}`
		}
	}
	return ""
}

// fairFlushPrequeue sends FLUSHALL to the primary in the middle of the
// pre-queue.
func fairFlushPrequeue(ctx context.Context, f *fairRun) {
	f.at(ctx, fairPrequeue/2)
	sent := time.Now()
	if err := f.c.rdb.FlushAll(ctx).Err(); err != nil {
		f.problem("FLUSHALL: %v", err)
		return
	}
	done := time.Now()
	f.mu.Lock()
	f.flushDone = done // the fault's end, for the recovery figures
	f.mu.Unlock()
	f.event("FLUSHALL sent at %s, returned at %s", sent.Format("15:04:05.000"), done.Format("15:04:05.000"))
	// docs/api.md's failure table: the entries of the leader's last step
	// before the loss (a tick, 200ms) may be lost; one second is allowed.
	f.qh.mayLose(sent.Add(-time.Second), time.Now())
	f.event("FLUSHALL during the pre-queue")
}

// fairResync runs an admin re-sync of the sale while it admits.
func fairResync(ctx context.Context, f *fairRun) {
	select {
	case <-time.After(time.Until(f.startsAt.Add(time.Second))):
	case <-ctx.Done():
		return
	}
	// The re-sync is the fault; its return, its end (repair records it).
	f.repair("admin re-sync during admission", func() error {
		return f.c.adminDo(ctx, http.MethodPost, "/admin/sales/"+f.sale+"/resync", nil, nil)
	})
	if q, _ := f.c.rdb.HGet(ctx, lua.SaleKey(f.sale), "queue").Result(); q != "fair" {
		f.problem("after the re-sync the sale's hash says queue=%q, want fair", q)
	}
}

// fairLeaderStop SIGSTOPs the control plane (the queue's leader) for 3s
// while it admits.
func fairLeaderStop(ctx context.Context, f *fairRun) {
	select {
	case <-time.After(time.Until(f.startsAt.Add(time.Second))):
	case <-ctx.Done():
		return
	}
	if err := f.c.cp.signal(syscall.SIGSTOP); err != nil {
		f.problem("SIGSTOP the control plane: %v", err)
		return
	}
	f.event("SIGSTOP the control plane during admission")
	time.Sleep(3 * time.Second) // how long it stays frozen
	f.repair("SIGCONT the control plane", func() error { return f.c.cp.signal(syscall.SIGCONT) })
}
