package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// crowdSpec is one crowd: Users distinct buyers, each pressing "buy" once.
type crowdSpec struct {
	Target      string // gateway base URL
	Sale        string
	Secret      []byte
	UserPrefix  string // user ids are UserPrefix + index
	Users       int
	Concurrency int
	Rate        float64 // arrivals per second; 0 = closed loop
	Quantity    int64
	Variants    []string // the sale's variant ids; nil = a sale without variants
	Choice      []int    // Choice[i] is user i's index in Variants (with Variants)
	Timeout     time.Duration
	Progress    io.Writer // nil = no bar
	SourceAddrs string    // --source-addrs: local addresses to dial from; "" = the system's choice
}

// crowdResult is what the crowd saw.
type crowdResult struct {
	Requests   int
	Elapsed    time.Duration
	ByAnswer   map[string]int    // "201", "409 sold_out", "transport error", …
	Orders     map[string]string // order id → user id, from the 201 answers
	Latencies  []time.Duration   // sorted
	CreatedLat []time.Duration   // the 201 answers' latencies, sorted
	Errors     int               // transport errors and timeouts
	FirstErr   error             // the first transport error, to name the cause
	// Variants are the crowd's variants in order, with the buyers who
	// wanted each (Wanted) and the 201s each got (ByVariant).
	Variants     []string
	Wanted       map[string]int
	ByVariant    map[string]int
	OrderVariant map[string]string // order id → the variant its 201 was for
}

// Created is the number of 201 answers.
func (r *crowdResult) Created() int { return r.ByAnswer["201"] }

// runCrowdSpec mints a token per user, then sends every user's purchase
// through the gateway over real HTTP and collects the answers.
func runCrowdSpec(ctx context.Context, s crowdSpec) (*crowdResult, error) {
	u, err := url.Parse(s.Target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("crowd: bad target %q", s.Target)
	}
	sources, err := parseSourceAddrs(s.SourceAddrs)
	if err != nil {
		return nil, err
	}
	tokens, err := mintTokens(s.Secret, s.UserPrefix, s.Users, time.Now().Add(time.Hour))
	if err != nil {
		return nil, err
	}
	// clients holds one client per source address (one in all without
	// --source-addrs). With at least as many workers as addresses, worker
	// w keeps to clients[w mod n], whose MaxConns covers the workers it
	// serves: an address is never asked for more requests at once than it
	// has connections (request i mod n could ask one for more: "no free
	// connections" errors in a closed loop). With fewer workers, request i
	// goes through clients[i mod n], each with a connection per worker, so
	// that every address is used.
	newClient := func(conns int) *fasthttp.HostClient {
		return &fasthttp.HostClient{
			Addr:                          u.Host,
			IsTLS:                         u.Scheme == "https",
			MaxConns:                      conns,
			ReadTimeout:                   s.Timeout,
			WriteTimeout:                  s.Timeout,
			MaxIdemponentCallAttempts:     1,
			NoDefaultUserAgentHeader:      true,
			DisableHeaderNamesNormalizing: true,
		}
	}
	var clients []*fasthttp.HostClient
	if len(sources) == 0 {
		clients = []*fasthttp.HostClient{newClient(s.Concurrency)}
	}
	perWorker := len(sources) > 0 && s.Concurrency >= len(sources)
	for _, a := range sources {
		conns := s.Concurrency
		if perWorker {
			conns = (s.Concurrency + len(sources) - 1) / len(sources)
		}
		c := newClient(conns)
		c.Dial = sourceDialer([]netip.Addr{a}, s.Timeout)
		clients = append(clients, c)
	}
	defer func() {
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()
	path := "/api/sales/" + s.Sale + "/orders"
	body := purchaseBody("", s.Quantity)
	var bodies [][]byte // per variant, with Variants
	for _, v := range s.Variants {
		bodies = append(bodies, purchaseBody(v, s.Quantity))
	}

	lat := make([]time.Duration, s.Users)
	answers := make([]string, s.Users)
	var orders, orderVariant sync.Map
	var firstErr atomic.Pointer[error]
	var next, done atomic.Int64
	stopBar := startBar(s.Progress, s.Users, &done)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < s.Concurrency; w++ {
		wg.Add(1)
		go func() {
			client := func(i int) *fasthttp.HostClient {
				if perWorker {
					return clients[w%len(clients)]
				}
				return clients[i%len(clients)]
			}
			defer wg.Done()
			req := fasthttp.AcquireRequest()
			resp := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= s.Users {
					return
				}
				// With a rate, latency counts from when the request was due,
				// so that waiting for a free connection counts too (an open
				// model, without coordinated omission).
				var due time.Time
				if s.Rate > 0 {
					due = start.Add(time.Duration(float64(i) / s.Rate * float64(time.Second)))
					if d := time.Until(due); d > 0 {
						time.Sleep(d)
					}
				}
				req.Reset()
				req.Header.SetMethod(fasthttp.MethodPost)
				req.SetRequestURI(path)
				req.Header.SetHost(u.Host)
				req.Header.Set("Authorization", "Bearer "+tokens[i])
				b := body
				if bodies != nil {
					b = bodies[s.Choice[i]]
				}
				if b != nil {
					req.Header.SetContentType("application/json")
					req.SetBody(b)
				}
				t0 := time.Now()
				if !due.IsZero() && due.Before(t0) {
					t0 = due
				}
				err := client(i).DoTimeout(req, resp, s.Timeout)
				lat[i] = time.Since(t0)
				done.Add(1)
				if err != nil {
					answers[i] = "transport error"
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				answers[i] = answerOf(resp.StatusCode(), resp.Body())
				if resp.StatusCode() == fasthttp.StatusCreated {
					var v struct {
						OrderID string `json:"order_id"`
					}
					if json.Unmarshal(resp.Body(), &v) == nil && v.OrderID != "" {
						orders.Store(v.OrderID, s.UserPrefix+strconv.Itoa(i))
						if s.Variants != nil {
							orderVariant.Store(v.OrderID, s.Variants[s.Choice[i]])
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopBar()

	r := &crowdResult{Elapsed: elapsed, ByAnswer: map[string]int{}, Orders: map[string]string{}}
	if s.Variants != nil {
		r.Variants, r.Wanted, r.ByVariant, r.OrderVariant = s.Variants, map[string]int{}, map[string]int{}, map[string]string{}
		orderVariant.Range(func(k, v any) bool { r.OrderVariant[k.(string)] = v.(string); return true })
	}
	for i, a := range answers {
		if a == "" { // not sent: the context ended first
			continue
		}
		r.Requests++
		r.ByAnswer[a]++
		if s.Variants != nil {
			v := s.Variants[s.Choice[i]]
			r.Wanted[v]++
			if a == "201" {
				r.ByVariant[v]++
			}
		}
		r.Latencies = append(r.Latencies, lat[i])
		if a == "201" {
			r.CreatedLat = append(r.CreatedLat, lat[i])
		}
		if a == "transport error" {
			r.Errors++
		}
	}
	orders.Range(func(k, v any) bool { r.Orders[k.(string)] = v.(string); return true })
	if e := firstErr.Load(); e != nil {
		r.FirstErr = *e
	}
	sort.Slice(r.Latencies, func(i, j int) bool { return r.Latencies[i] < r.Latencies[j] })
	sort.Slice(r.CreatedLat, func(i, j int) bool { return r.CreatedLat[i] < r.CreatedLat[j] })
	if r.Requests == 0 && ctx.Err() != nil {
		return r, ctx.Err()
	}
	return r, nil
}

// mintTokens signs n tokens in parallel, before the clock starts.
func mintTokens(secret []byte, prefix string, n int, exp time.Time) ([]string, error) {
	toks := make([]string, n)
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += workers {
				t, err := mintToken(secret, prefix+strconv.Itoa(i), exp)
				if err != nil {
					errs <- err
					return
				}
				toks[i] = t
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("minting tokens: %w", err)
	}
	return toks, nil
}

// answerOf names an answer: the status, and the error code for errors.
func answerOf(status int, body []byte) string {
	s := strconv.Itoa(status)
	if status < 400 {
		return s
	}
	if i := bytes.Index(body, []byte(`"error":"`)); i >= 0 {
		rest := body[i+len(`"error":"`):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 && j < 40 {
			return s + " " + string(rest[:j])
		}
	}
	return s
}

// adminFigures is the part of GET /admin/sales/{id} the cross-check reads.
type adminFigures struct {
	State         string `json:"state"`
	Total         int64  `json:"total"`
	Booked        int64  `json:"booked"`
	Admitted      int64  `json:"admitted"`
	StreamBacklog int64  `json:"stream_backlog"`
	Orders        struct {
		Persisted int64 `json:"persisted"`
	} `json:"orders"`
}

func getAdminFigures(base, token, sale string) (adminFigures, error) {
	var f adminFigures
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(strings.TrimRight(base, "/") + "/admin/sales/" + url.PathEscape(sale))
	req.Header.Set("Authorization", "Bearer "+token)
	if err := fasthttp.DoTimeout(req, resp, 5*time.Second); err != nil {
		return f, fmt.Errorf("admin figures: %w", err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return f, fmt.Errorf("admin figures: %s", answerOf(resp.StatusCode(), resp.Body()))
	}
	if err := json.Unmarshal(resp.Body(), &f); err != nil {
		return f, fmt.Errorf("admin figures: %w", err)
	}
	return f, nil
}

// waitDrained polls the admin figures until the sale's stream backlog is
// empty, at most for limit.
func waitDrained(ctx context.Context, get func() (adminFigures, error), limit time.Duration) (adminFigures, error) {
	deadline := time.Now().Add(limit)
	for {
		f, err := get()
		if err == nil && f.StreamBacklog == 0 {
			return f, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("stream backlog still %d after %s", f.StreamBacklog, limit)
			}
			return f, err
		}
		select {
		case <-ctx.Done():
			return f, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func runCrowd(ctx context.Context, cfg *Config, stdout, stderr io.Writer) error {
	var before adminFigures
	if cfg.Admin != "" {
		if cfg.AdminToken == "" {
			return &usageError{"--admin-token is required with --admin"}
		}
		var err error
		if before, err = getAdminFigures(cfg.Admin, cfg.AdminToken, cfg.Sale); err != nil {
			return err
		}
	}
	var bar io.Writer
	if cfg.Progress {
		bar = stderr
	}
	variants, err := parseVariantIDs(cfg.Variants)
	if err != nil {
		return &usageError{err.Error()}
	}
	r, err := runCrowdSpec(ctx, crowdSpec{
		Variants: variants, Choice: variantChoices(variants, cfg.Users, cfg.VariantSkew, cfg.VariantSeed),
		Target: cfg.Target, Sale: cfg.Sale, Secret: []byte(cfg.JWTSecret),
		UserPrefix: "crowd-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-",
		Users:      cfg.Users, Concurrency: cfg.Concurrency, Rate: cfg.ArrivalRate,
		Quantity: cfg.Quantity, Timeout: cfg.Timeout, Progress: bar,
		SourceAddrs: cfg.SourceAddrs,
	})
	if err != nil {
		return err
	}
	printCrowd(stdout, r)
	if r.Requests > 0 && r.Errors == r.Requests {
		return fmt.Errorf("no request reached the gateway at %s: %v", cfg.Target, r.FirstErr)
	}
	if cfg.Admin == "" {
		return nil
	}
	after, err := waitDrained(ctx, func() (adminFigures, error) {
		return getAdminFigures(cfg.Admin, cfg.AdminToken, cfg.Sale)
	}, 30*time.Second)
	if err != nil {
		return err
	}
	created := int64(r.Created())
	sold := after.Booked - before.Booked
	rows := after.Orders.Persisted - before.Orders.Persisted
	fmt.Fprintf(stdout, "cross-check   201s %d, units booked %+d, DB rows %+d, admitted %+d\n",
		created, sold, rows, after.Admitted-before.Admitted)
	var bad []string
	if sold != created*cfg.Quantity {
		bad = append(bad, fmt.Sprintf("booked moved by %d, want %d", sold, created*cfg.Quantity))
	}
	if rows != created {
		bad = append(bad, fmt.Sprintf("DB rows moved by %d, want %d", rows, created))
	}
	if after.Booked > after.Total {
		bad = append(bad, fmt.Sprintf("oversold: booked %d > total %d", after.Booked, after.Total))
	}
	if len(bad) > 0 {
		return errors.New("cross-check failed: " + strings.Join(bad, "; "))
	}
	fmt.Fprintln(stdout, "cross-check   ok")
	return nil
}
