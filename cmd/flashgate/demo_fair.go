package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/lua"
)

// fairDrop is the shape of `flashgate demo --fair`: people who enter at a
// random moment of a short pre-queue and react to their admission after a
// human reaction time, and scalpers whose accounts enter the moment the
// queue opens and poll fast; everyone pays a proof of work.
type fairDrop struct {
	people, scalpers, accounts int
	units                      int64
	prequeue                   time.Duration
	maxnumber                  int64
}

// fairDropSale is the fair demo's sale id.
const fairDropSale = "drop"

// dropBuyer is one account of the fair demo's crowd.
type dropBuyer struct {
	user, token, ticket string
	scalper             bool
	arrive, react       time.Duration
	late                bool // entered after the start
	admitted, bought    bool
	refused             bool // admitted, then told sold_out
}

// dropReport is what the fair demo found: the public queue's commitment at
// the opening and seed at the end, and the crowd.
type dropReport struct {
	commitment, seed string
	soldIn           time.Duration // from the start until sold out
	crowd            []*dropBuyer
}

// runFairDemo runs the fair drop on the demo's tiers (base: the gateway,
// admin: the control plane) and prints its report; it fails unless every
// invariant held.
func runFairDemo(ctx context.Context, cfg *Config, stdout io.Writer, s *system, c conns, base, admin string) error {
	d := fairDrop{people: 3000, scalpers: cfg.Scalpers, accounts: cfg.Accounts, units: cfg.Units, prequeue: 5 * time.Second, maxnumber: 500}
	if cfg.set["users"] {
		d.people = cfg.Users
	}
	began := time.Now()
	fmt.Fprintf(stdout, "flashgate demo --fair: %d units, %d people and %d scalpers with %d accounts each, a %v pre-queue, gateway %s, embedded store and SQLite\n",
		d.units, d.people, d.scalpers, d.accounts, d.prequeue, base)
	r, err := d.run(ctx, cfg, s, base)
	if err != nil {
		return err
	}
	fig, err := waitDrained(ctx, func() (adminFigures, error) { return getAdminFigures(admin, cfg.AdminToken, fairDropSale) }, 30*time.Second)
	if err != nil {
		return fmt.Errorf("waiting for the orders to reach the database: %w", err)
	}
	printDrop(stdout, d, r)
	checks := dropChecks(ctx, d, c, r, fig.Orders.Persisted)
	if failed := printChecks(stdout, checks); failed > 0 {
		return fmt.Errorf("demo --fair: %d of %d invariant checks failed", failed, len(checks))
	}
	fmt.Fprintf(stdout, "demo --fair: every invariant held (%s)\n", time.Since(began).Round(time.Millisecond))
	return nil
}

// run creates the fair sale, lets the crowd enter, wait and buy until it
// sells out (at most a minute past the start), and reads the commitment
// and the seed from the sale's public JSON.
func (d fairDrop) run(ctx context.Context, cfg *Config, s *system, base string) (*dropReport, error) {
	starts := time.Now().Add(d.prequeue).Truncate(time.Second).Add(time.Second)
	off := false
	if _, err := s.cp.CreateSale(ctx, flashgate.Sale{
		ID: fairDropSale, Name: "Limited drop", PriceCents: 12900, Total: d.units, StartsAt: &starts,
		Queue: flashgate.QueueFair, PrequeueSeconds: int(math.Ceil((d.prequeue + time.Second).Seconds())),
		ChallengeMaxNumber: d.maxnumber, ChallengeAuto: &off, AdmitSeconds: 30,
	}); err != nil {
		return nil, fmt.Errorf("creating the fair sale: %w", err)
	}
	cl := &fasthttp.Client{MaxConnsPerHost: 1024, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	r := &dropReport{}
	var opened time.Time
	for deadline := time.Now().Add(10 * time.Second); ; {
		if q, err := publicQueue(cl, base); err == nil && q.Open && q.SeedSHA256 != "" {
			r.commitment, opened = q.SeedSHA256, time.Now()
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the fair queue did not open within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 27))
	exp := starts.Add(time.Hour)
	secret := []byte(cfg.JWTSecret)
	add := func(user string, scalper bool, arrive, react time.Duration) error {
		tok, err := mintToken(secret, user, exp)
		r.crowd = append(r.crowd, &dropBuyer{user: user, token: tok, scalper: scalper, arrive: arrive, react: react})
		return err
	}
	window := time.Until(starts) - 500*time.Millisecond // everyone enters before the start
	for i := range d.people {
		react := time.Duration(0.7 * math.Exp(0.4*rng.NormFloat64()) * float64(time.Second))
		if err := add(fmt.Sprintf("person-%05d", i), false, time.Duration(rng.Int64N(int64(window))), react); err != nil {
			return nil, err
		}
	}
	for sc := range d.scalpers {
		for a := range d.accounts {
			if err := add(fmt.Sprintf("scalper-%02d-%02d", sc, a), true, time.Duration(rng.Int64N(int64(100*time.Millisecond))), 0); err != nil {
				return nil, err
			}
		}
	}

	var soldOut atomic.Bool
	var soldAt atomic.Int64
	crowdCtx, cancel := context.WithTimeout(ctx, time.Until(starts)+time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for _, b := range r.crowd {
		wg.Go(func() { b.run(crowdCtx, cl, base, opened, &soldOut) })
	}
	wg.Go(func() { // the monitor: sold out ends the crowd
		for crowdCtx.Err() == nil {
			if st, err := publicState(cl, base); err == nil && st == string(flashgate.StateSoldOut) {
				soldAt.Store(time.Now().UnixNano())
				soldOut.Store(true)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	wg.Wait()
	if !soldOut.Load() {
		return nil, fmt.Errorf("the fair drop did not sell out within a minute of its start")
	}
	r.soldIn = time.Unix(0, soldAt.Load()).Sub(starts)
	q, err := publicQueue(cl, base)
	if err != nil {
		return nil, err
	}
	r.seed = q.Seed
	return r, nil
}

// dropQueue is the queue part of the fair sale's public JSON.
type dropQueue struct {
	Open       bool   `json:"open"`
	SeedSHA256 string `json:"seed_sha256"`
	Seed       string `json:"seed"`
}

// publicQueue reads the fair sale's public queue fields.
func publicQueue(cl *fasthttp.Client, base string) (dropQueue, error) {
	var v struct{ Queue dropQueue }
	code, body, err := dropCall(cl, "GET", base+"/api/sales/"+fairDropSale, "", "", "", nil)
	if err == nil && code != 200 {
		err = fmt.Errorf("GET /api/sales/%s: %d", fairDropSale, code)
	}
	if err == nil {
		err = json.Unmarshal(body, &v)
	}
	return v.Queue, err
}

// publicState reads the fair sale's public state.
func publicState(cl *fasthttp.Client, base string) (string, error) {
	var v struct{ State string }
	_, body, err := dropCall(cl, "GET", base+"/api/sales/"+fairDropSale, "", "", "", nil)
	if err == nil {
		err = json.Unmarshal(body, &v)
	}
	return v.State, err
}

// dropCall sends one request; the answer's X-Queue-Ticket, when there is
// one, goes to *newTicket.
func dropCall(cl *fasthttp.Client, method, url, token, ticket, body string, newTicket *string) (int, []byte, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(url)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ticket != "" {
		req.Header.Set("X-Queue-Ticket", ticket)
	}
	if body != "" {
		req.SetBodyString(body)
	}
	if err := cl.DoTimeout(req, resp, 5*time.Second); err != nil {
		return 0, nil, err
	}
	if t := resp.Header.Peek("X-Queue-Ticket"); len(t) > 0 && newTicket != nil {
		*newTicket = string(t)
	}
	return resp.StatusCode(), slices.Clone(resp.Body()), nil
}

// run is one account: it enters at its arrival (a challenge, the work, the
// entry), then polls its place (a scalper every 50 ms, a person as the
// answer asks, within 100 ms–1 s) and buys once admitted (a person after a
// reaction time), until it bought, was refused, or the sale sold out.
func (b *dropBuyer) run(ctx context.Context, cl *fasthttp.Client, base string, opened time.Time, soldOut *atomic.Bool) {
	sale := base + "/api/sales/" + fairDropSale
	if !sleepCtx(ctx, time.Until(opened.Add(b.arrive))) {
		return
	}
	for b.ticket == "" {
		if ctx.Err() != nil || soldOut.Load() {
			return
		}
		code, body, err := dropCall(cl, "GET", sale+"/challenge", b.token, "", "", nil)
		if err != nil || code != 200 {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		code, body, err = dropCall(cl, "POST", sale+"/queue", b.token, "", solveChallenge(body), nil)
		var v struct{ State, Ticket string }
		if err == nil && (code == 201 || code == 200) && json.Unmarshal(body, &v) == nil {
			b.ticket, b.late = v.Ticket, v.State != "prequeue"
			break
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	for ctx.Err() == nil && !soldOut.Load() {
		code, body, err := dropCall(cl, "GET", sale+"/queue", b.token, b.ticket, "", &b.ticket)
		var v struct {
			State       string
			PollAfterMS int64 `json:"poll_after_ms"`
		}
		if err == nil && code == 200 && json.Unmarshal(body, &v) == nil {
			switch v.State {
			case "admitted":
				b.admitted = true
				if !sleepCtx(ctx, b.react) {
					return
				}
				code, body, err = dropCall(cl, "POST", sale+"/orders", b.token, b.ticket, "", nil)
				switch {
				case err != nil:
				case code == 201:
					b.bought = true
					return
				case code == 409 && jsonError(body) == "sold_out":
					b.refused = true
					return
				}
			case "purchased", "closed", "expired":
				return
			}
		}
		wait := 50 * time.Millisecond
		if !b.scalper {
			wait = min(max(time.Duration(v.PollAfterMS)*time.Millisecond, 100*time.Millisecond), time.Second)
		}
		sleepCtx(ctx, wait)
	}
}

// jsonError is the "error" of an error answer.
func jsonError(body []byte) string {
	var v struct{ Error string }
	_ = json.Unmarshal(body, &v)
	return v.Error
}

// sleepCtx sleeps for d unless ctx ends first; it reports whether it slept.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// solveChallenge finds a challenge's number (ALTCHA: the SHA-256 of salt
// and number) and returns the entry's body; "" when there is none.
func solveChallenge(challenge []byte) string {
	var c struct {
		Algorithm, Challenge, Salt, Signature string
		MaxNumber                             int64 `json:"maxnumber"`
	}
	if json.Unmarshal(challenge, &c) != nil {
		return ""
	}
	buf := make([]byte, 0, len(c.Salt)+20)
	for n := int64(0); n <= c.MaxNumber; n++ {
		buf = strconv.AppendInt(append(buf[:0], c.Salt...), n, 10)
		sum := sha256.Sum256(buf)
		if hex.EncodeToString(sum[:]) == c.Challenge {
			p, _ := json.Marshal(map[string]any{"algorithm": c.Algorithm, "challenge": c.Challenge, "number": n, "salt": c.Salt, "signature": c.Signature})
			return `{"payload":"` + base64.StdEncoding.EncodeToString(p) + `"}`
		}
	}
	return ""
}

// printDrop prints the units by group and the seed check anyone can redo.
func printDrop(w io.Writer, d fairDrop, r *dropReport) {
	var people, scalpers, peopleUnits, scalperUnits, late int
	for _, b := range r.crowd {
		if b.scalper {
			scalpers++
		} else {
			people++
		}
		if b.bought && b.scalper {
			scalperUnits++
		} else if b.bought {
			peopleUnits++
		}
		if b.late {
			late++
		}
	}
	all, units := float64(people+scalpers), float64(max(peopleUnits+scalperUnits, 1))
	fmt.Fprintf(w, "entered       %d (%d after the start); sold out %v after the start\n", people+scalpers, late, r.soldIn.Round(time.Millisecond))
	fmt.Fprintf(w, "units by group  %-20s %8s %7s %7s %7s\n", "", "entrants", "share", "units", "share")
	row := func(name string, n, u int) {
		fmt.Fprintf(w, "  %-33s %8d %6.1f%% %7d %6.1f%%\n", name, n, 100*float64(n)/all, u, 100*float64(u)/units)
	}
	row("people", people, peopleUnits)
	row(fmt.Sprintf("scalpers (%d × %d accounts)", d.scalpers, d.accounts), scalpers, scalperUnits)
	fmt.Fprintln(w, "seed check (anyone can redo it from the sale's public JSON)")
	fmt.Fprintf(w, "  commitment at the opening  %s\n", r.commitment)
	fmt.Fprintf(w, "  seed revealed at the start %s\n", r.seed)
	fmt.Fprintf(w, "  redo it: printf %%s %s | xxd -r -p | sha256sum\n", r.seed)
	fmt.Fprintf(w, "  a buyer's rank key: printf %%s %s/<user id> | openssl dgst -sha256 -mac HMAC -macopt hexkey:%s\n", fairDropSale, r.seed)
}

// dropChecks checks the fair drop's invariants against what the crowd was
// told, Redis and the database (persisted: the orders the sink stored).
func dropChecks(ctx context.Context, d fairDrop, c conns, r *dropReport, persisted int64) []check {
	var out []check
	add := func(ok bool, format string, a ...any) { out = append(out, check{fmt.Sprintf(format, a...), ok}) }

	seed, err := hex.DecodeString(r.seed)
	sum := sha256.Sum256(seed)
	add(err == nil && len(seed) == 32 && hex.EncodeToString(sum[:]) == r.commitment,
		"the revealed seed's SHA-256 is the commitment published at the opening")

	var bought, refused int64
	for _, b := range r.crowd {
		if b.bought {
			bought++
		}
		if b.refused {
			refused++
		}
	}
	booked, err := c.primary.HGet(ctx, lua.SaleKey(fairDropSale), lua.FieldBooked).Int64()
	add(bought == d.units && err == nil && booked == d.units && persisted == d.units,
		"units sold = total: %d answers 201, Redis booked %d, %d orders in the database, total %d", bought, booked, persisted, d.units)

	live, err := c.db.LiveOrders(ctx, fairDropSale)
	users := map[string]bool{}
	for _, o := range live {
		users[o.UserID] = true
	}
	add(err == nil && len(users) == len(live), "none to the same person twice: %d live orders of %d buyers", len(live), len(users))

	// Admitted in rank order: the pre-start entrants in the seed's order,
	// then the late ones; everyone admitted comes before everyone who was
	// not.
	order := slices.Clone(r.crowd)
	keys := map[*dropBuyer]string{}
	for _, b := range order {
		keys[b] = fairqueue.Rank(seed, fairDropSale, b.user)
	}
	slices.SortStableFunc(order, func(a, b *dropBuyer) int {
		switch {
		case a.late != b.late:
			if a.late {
				return 1
			}
			return -1
		case a.late:
			return 0
		}
		return strings.Compare(keys[a], keys[b])
	})
	last, first := -1, len(order)
	admitted := 0
	for i, b := range order {
		if b.admitted || b.bought {
			last = i
			admitted++
		} else if first == len(order) {
			first = i
		}
	}
	add(last < first, "admitted in rank order: the %d admitted are the first %d in the seed's order (last admitted at %d, first not admitted at %d)",
		admitted, admitted, last+1, first+1)
	add(refused == 0, "no admitted buyer refused sold_out (%d)", refused)
	return out
}
