package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The fair queue's wrk scenarios (q: the status poll, na: a purchase by an
// entrant not yet admitted) need entrants who really entered: a fair sale
// with one unit whose pre-queue is open, QUEUE_ENTRANTS buyers who enter
// it through the API (each paying a proof of work at QUEUE_MAXNUMBER)
// before its start, then the start, where the control plane admits one
// position for an hour (admit_seconds 3,600) and nobody else. Every
// entrant the gateway then says is waiting goes into the wrk file.

// fairSale is the sale of the queue scenarios.
const fairSale = "fair"

// queueEnv is the queue scenarios' entrants.
type queueEnv struct {
	file          string // "<token> <ticket>" a line, each entrant waiting
	token, ticket string // the first of them, for the captures
	waiting, all  int
	pre           int64 // entrants before the start
	admitted      int64 // admitted_position at the start
	maxnum        int64 // the challenges' maxnumber
}

// queueSettings are QUEUE_ENTRANTS (default 12,000 per second of DURATION,
// at least 20,000: a not-admitted purchase passes each user's rate limit,
// 5 at once and 2 a second, so each entrant answers about 5 + 2 × DURATION
// requests of a run as not_admitted before the limit would answer 429
// instead) and QUEUE_MAXNUMBER (the proof of work's difficulty; 10).
func (b *bench) queueSettings() (entrants, maxnum int, err error) {
	if entrants, err = envInt("QUEUE_ENTRANTS", max(20000, 12000*int(b.cfg.Duration/time.Second))); err != nil {
		return 0, 0, err
	}
	if maxnum, err = envInt("QUEUE_MAXNUMBER", 10); err != nil {
		return 0, 0, err
	}
	if entrants < 1 {
		return 0, 0, errors.New("QUEUE_ENTRANTS must be at least 1")
	}
	return entrants, maxnum, nil
}

// wantQueue reports whether the run has a queue scenario.
func (b *bench) wantQueue() bool {
	for _, sc := range b.scenarios("") {
		if sc.Entrants && b.cfg.wantScenario(sc.Key) {
			return true
		}
	}
	return false
}

// createFairSale creates the queue scenarios' sale, its pre-queue open at
// once and its start far enough ahead for n entrants to enter first.
func (b *bench) createFairSale(st *stack, n, maxnum int) (time.Time, error) {
	// Entering takes a challenge and an entry per entrant: 2,000 a second
	// is half what a loaded 2-core machine did (an entrant who comes after
	// the start is a late entrant, still real; the log says so).
	starts := time.Now().Add(10*time.Second + time.Duration(n)*500*time.Microsecond).Truncate(time.Second).Add(time.Second)
	body := fmt.Sprintf(`{"id":%q,"name":"Bench fair queue","price_cents":2500,"total":1,"per_user":1,"starts_at":%q,`+
		`"queue":"fair","prequeue_seconds":600,"challenge_maxnumber":%d,"challenge_auto":false,"admit_seconds":3600}`,
		fairSale, starts.UTC().Format(time.RFC3339), maxnum)
	return starts, b.adminCall(st, "POST", "/admin/sales", body, nil)
}

// publicQueue is the part of GET /api/sales/{id} the queue setup reads.
type publicQueue struct {
	State string `json:"state"`
	Queue struct {
		Open             bool  `json:"open"`
		Started          bool  `json:"started"`
		Entrants         int64 `json:"entrants"`
		Pre              int64 `json:"prequeue_entrants"`
		AdmittedPosition int64 `json:"admitted_position"`
		MaxNumber        int64 `json:"challenge_maxnumber"`
	} `json:"queue"`
}

// enterQueue enters n new buyers into the fair sale, waits for its start
// and writes the entrants the gateway says are waiting to a file.
func (b *bench) enterQueue(ctx context.Context, st *stack, n int, starts time.Time) (*queueEnv, error) {
	base := "http://" + st.gw
	cl := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer cl.CloseIdleConnections()
	var pub publicQueue
	if err := b.waitPublic(ctx, cl, base, 30*time.Second, &pub, func() bool { return pub.Queue.Open }); err != nil {
		return nil, fmt.Errorf("the fair queue never opened: %w", err)
	}
	tokFile, err := b.tokens(ctx, "entrant-", n)
	if err != nil {
		return nil, err
	}
	defer os.Remove(tokFile)
	raw, err := os.ReadFile(tokFile)
	if err != nil {
		return nil, err
	}
	toks := strings.Fields(string(raw))
	if len(toks) != n {
		return nil, fmt.Errorf("flashgate token printed %d tokens, want %d", len(toks), n)
	}
	tickets := make([]string, n)
	t0 := time.Now()
	err = parallel(ctx, 32, n, func(i int) error {
		t, err := enter(ctx, cl, base, toks[i])
		tickets[i] = t
		return err
	})
	if err != nil {
		return nil, err
	}
	b.logf("  %d entrants entered the fair queue in %s", n, time.Since(t0).Round(time.Millisecond))
	if time.Now().After(starts) {
		b.logf("  the fair sale started while they entered: the latest are late entrants (raise the margin in createFairSale)")
	}
	if err := b.waitPublic(ctx, cl, base, time.Until(starts)+60*time.Second, &pub, func() bool {
		return pub.State == "open" && pub.Queue.Started && pub.Queue.AdmittedPosition > 0
	}); err != nil {
		return nil, fmt.Errorf("the fair sale never started and admitted: %w", err)
	}
	env := &queueEnv{all: n, pre: pub.Queue.Pre, admitted: pub.Queue.AdmittedPosition, maxnum: pub.Queue.MaxNumber}
	// Only waiting entrants go to wrk: the gateway judges each one. Their
	// first poll after the start answers the ticket a client uses from
	// then on (carrying the rank key, bound to the entrant's token:
	// docs/api.md, "Fair queue").
	states := make([]string, n)
	err = parallel(ctx, 32, n, func(i int) error {
		var s struct{ State string }
		code, body, reissued, err := pollStatus(ctx, cl, base+"/api/sales/"+fairSale+"/queue", toks[i], tickets[i])
		if err != nil || code != 200 || json.Unmarshal(body, &s) != nil {
			return fmt.Errorf("entrant %d's status: %d %s %v", i, code, body, err)
		}
		states[i] = s.State
		if reissued != "" {
			tickets[i] = reissued
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	f, err := os.Create(b.path("entrants.txt"))
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(f)
	for i := range n {
		if states[i] != "waiting" {
			continue
		}
		if env.waiting == 0 {
			env.token, env.ticket = toks[i], tickets[i]
		}
		env.waiting++
		fmt.Fprintf(w, "%s %s\n", toks[i], tickets[i])
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	env.file = f.Name()
	b.logf("  fair queue: %d entrants (%d before the start), admitted position %d, %d waiting", n, env.pre, env.admitted, env.waiting)
	if env.waiting == 0 {
		return nil, errors.New("no entrant of the fair queue is waiting")
	}
	return env, nil
}

// waitPublic polls GET /api/sales/{fairSale} into pub until ok, at most
// for limit.
func (b *bench) waitPublic(ctx context.Context, cl *http.Client, base string, limit time.Duration, pub *publicQueue, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for {
		code, body, err := call(ctx, cl, "GET", base+"/api/sales/"+fairSale, "", "", "")
		if err == nil && code == 200 {
			*pub = publicQueue{}
			if err = json.Unmarshal(body, pub); err == nil && ok() {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %d %s %v", limit, code, body, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// enter solves the sale's challenge for one buyer and enters them; it
// returns their ticket.
func enter(ctx context.Context, cl *http.Client, base, tok string) (string, error) {
	code, body, err := call(ctx, cl, "GET", base+"/api/sales/"+fairSale+"/challenge", "", "", "")
	var c struct {
		Algorithm, Challenge, Salt, Signature string
		MaxNumber                             int64 `json:"maxnumber"`
	}
	if err != nil || code != 200 || json.Unmarshal(body, &c) != nil {
		return "", fmt.Errorf("challenge: %d %s %v", code, body, err)
	}
	number := int64(-1)
	for i := int64(0); i <= c.MaxNumber; i++ {
		sum := sha256.Sum256([]byte(c.Salt + strconv.FormatInt(i, 10)))
		if hex.EncodeToString(sum[:]) == c.Challenge {
			number = i
			break
		}
	}
	if number < 0 {
		return "", fmt.Errorf("challenge %s has no solution up to %d", c.Challenge, c.MaxNumber)
	}
	p, _ := json.Marshal(map[string]any{"algorithm": c.Algorithm, "challenge": c.Challenge, "number": number, "salt": c.Salt, "signature": c.Signature})
	code, body, err = call(ctx, cl, "POST", base+"/api/sales/"+fairSale+"/queue", tok, "", `{"payload":"`+base64.StdEncoding.EncodeToString(p)+`"}`)
	var st struct{ Ticket string }
	if err != nil || code != 201 || json.Unmarshal(body, &st) != nil || st.Ticket == "" {
		return "", fmt.Errorf("entering: %d %s %v", code, body, err)
	}
	return st.Ticket, nil
}

// call makes one request to the gateway and returns its status and body.
func call(ctx context.Context, cl *http.Client, method, url, tok, ticket, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if ticket != "" {
		req.Header.Set("X-Queue-Ticket", ticket)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// pollStatus is one status poll; it returns the ticket the answer
// reissued in X-Queue-Ticket, if any.
func pollStatus(ctx context.Context, cl *http.Client, url, tok, ticket string) (int, []byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("X-Queue-Ticket", ticket)
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, resp.Header.Get("X-Queue-Ticket"), err
}

// parallel runs f(0…n-1) on conc goroutines and returns the first error.
func parallel(ctx context.Context, conc, n int, f func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					cancel(err)
				}
			}
		}()
	}
loop:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break loop
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// admissionCounts reads flashgate_admission_total by decision from the
// stack's /metrics.
func (b *bench) admissionCounts(st *stack) (map[string]float64, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + st.admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	const prefix = `flashgate_admission_total{decision="`
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		name, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}
