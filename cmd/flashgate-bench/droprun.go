package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// dropRun is the drop phase's tiers.
type dropRun struct {
	ctx   context.Context
	rdb   *redis.Client
	db    *sqldb.DB
	cp    *controlplane.Service
	gw    *gateway.Server
	clock *testclock.Clock
	opens time.Time // the clock's start: the crowd's pre-queue opens
	fence int64
}

func (d *dropRun) call(method, path, token, ticket, body string) (int, []byte, *fasthttp.ResponseHeader) {
	var rq fasthttp.Request
	rq.Header.SetMethod(method)
	rq.SetRequestURI(path)
	if token != "" {
		rq.Header.Set("Authorization", "Bearer "+token)
	}
	if ticket != "" {
		rq.Header.Set("X-Queue-Ticket", ticket)
	}
	if body != "" {
		rq.SetBodyString(body)
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&rq, nil, nil)
	d.gw.Handler()(&ctx)
	h := &fasthttp.ResponseHeader{}
	ctx.Response.Header.CopyTo(h)
	return ctx.Response.StatusCode(), append([]byte(nil), ctx.Response.Body()...), h
}

// step runs one QueueStep and waits (bounded) until the gateway's cache
// holds the frontier it wrote.
func (d *dropRun) step(id string) error {
	sale, err := d.db.Sale(d.ctx, id)
	if err != nil {
		return err
	}
	if err := d.cp.QueueStep(d.ctx, sale, d.fence); err != nil {
		return err
	}
	k, _ := d.rdb.HGet(d.ctx, lua.SaleKey(id), lua.FieldQueueAdmitted).Result()
	open, _ := d.rdb.HGet(d.ctx, lua.SaleKey(id), lua.FieldQueueOpen).Result()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		_, body, _ := d.call("GET", "/api/sales/"+id, "", "", "")
		var v struct {
			Queue struct {
				Open             bool  `json:"open"`
				AdmittedPosition int64 `json:"admitted_position"`
			} `json:"queue"`
		}
		if json.Unmarshal(body, &v) == nil && strconv.FormatInt(v.Queue.AdmittedPosition, 10) == orZero(k) && v.Queue.Open == (open == "1") {
			return nil
		}
	}
	return errors.New("the gateway's cache never caught up with the queue")
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

func (d *dropRun) waitOpen(id string) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if _, body, _ := d.call("GET", "/api/sales/"+id, "", "", ""); strings.Contains(string(body), `"state":"open"`) {
			return nil
		}
	}
	return fmt.Errorf("sale %s never open at the gateway", id)
}

// enter solves a challenge and enters a.
func (d *dropRun) enter(id string, a *dropAccount) error {
	code, body, _ := d.call("GET", "/api/sales/"+id+"/challenge", "", "", "")
	var c struct {
		Algorithm, Challenge, Salt, Signature string
		MaxNumber                             int64 `json:"maxnumber"`
	}
	if code != 200 || json.Unmarshal(body, &c) != nil {
		return fmt.Errorf("challenge: %d %s", code, body)
	}
	n := int64(-1)
	for i := int64(0); i <= c.MaxNumber; i++ {
		sum := sha256.Sum256([]byte(c.Salt + strconv.FormatInt(i, 10)))
		if hex.EncodeToString(sum[:]) == c.Challenge {
			n = i
			break
		}
	}
	p, _ := json.Marshal(map[string]any{"algorithm": c.Algorithm, "challenge": c.Challenge, "number": n, "salt": c.Salt, "signature": c.Signature})
	code, body, _ = d.call("POST", "/api/sales/"+id+"/queue", a.token, "", `{"payload":"`+base64.StdEncoding.EncodeToString(p)+`"}`)
	var st struct{ Ticket string }
	if code != 201 || json.Unmarshal(body, &st) != nil {
		return fmt.Errorf("%s enters: %d %s", a.user, code, body)
	}
	a.ticket = st.Ticket
	return nil
}

// memory enters n synthetic entrants into a fresh fair sale (after its
// start when late) with lua.QueueEnter, 1,000 per pipeline, and returns
// what fill returns.
func (d *dropRun) memory(id string, n int, late bool) (perEntrant, keysPerEntrant, journalPerEntrant float64, err error) {
	if late {
		if err := d.fakeOpen(id); err != nil {
			return 0, 0, 0, err
		}
	}
	return d.fill(id, n)
}

// fakeOpen puts a fair sale with an open, started queue into Redis by its
// scripts, with a seed commitment no control plane derived (a queue never
// ranked).
func (d *dropRun) fakeOpen(id string) error {
	ctx := d.ctx
	if err := lua.Prepare.Run(ctx, d.rdb, lua.SaleKeys(id), 100, 150, 1, 100, "", "fair").Err(); err != nil {
		return err
	}
	if err := lua.QueueOpen.Run(ctx, d.rdb, lua.SaleKeys(id), strings.Repeat("ab", 32), "00", 0, 60).Err(); err != nil {
		return err
	}
	return lua.QueueStart.Run(ctx, d.rdb, lua.SaleKeys(id), strings.Repeat("ab", 32)).Err()
}

// fill enters n synthetic entrants into the open queue of sale id, 1,000
// per pipeline of lua.QueueEnter, then deletes the journal stream the
// entries joined (the leader writes it to the database and trims it at its
// next step; a million entries would be a hundred steps of SQLite writes
// here). It returns, per entrant, used_memory's delta without the journal,
// the queue keys' MEMORY USAGE, and what the journal stream held.
func (d *dropRun) fill(id string, n int) (perEntrant, keysPerEntrant, journalPerEntrant float64, err error) {
	ctx := d.ctx
	if err := lua.QueueEnter.Load(ctx, d.rdb).Err(); err != nil {
		return 0, 0, 0, err
	}
	before, err := d.usedMemory()
	if err != nil {
		return 0, 0, 0, err
	}
	for i := 0; i < n; i += 1000 {
		pipe := d.rdb.Pipeline()
		for j := i; j < min(i+1000, n); j++ {
			lua.QueueEnter.EvalSha(ctx, pipe, lua.QueueEnterKeys(id, "none"), fmt.Sprintf("user-%08d", j), 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, 0, 0, fmt.Errorf("entering: %w", err)
		}
	}
	withJournal, err := d.usedMemory()
	if err != nil {
		return 0, 0, 0, err
	}
	if err := d.rdb.Del(ctx, lua.QueueJournalKey(id)).Err(); err != nil {
		return 0, 0, 0, err
	}
	after, err := d.usedMemory()
	if err != nil {
		return 0, 0, 0, err
	}
	var keys int64
	for _, k := range []string{lua.QueueKey(id), lua.QueueLateKey(id)} {
		m, err := d.rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, 0, 0, err
		}
		keys += m
	}
	return float64(after-before) / float64(n), float64(keys) / float64(n), float64(withJournal-after) / float64(n), nil
}

// usedMemory is INFO memory's used_memory.
func (d *dropRun) usedMemory() (int64, error) {
	info, err := d.rdb.Info(d.ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("no used_memory in INFO memory")
}

// admitAndArchive times the first admission tick of the started fair sale
// sale (its queue ranked), then closes it, runs the control plane's leader
// loop until it archives the sale (bounded), and records the memory the
// archive gave back; base is used_memory before the queue's entrants.
func (d *dropRun) admitAndArchive(sale flashgate.Sale, base int64, res *dropResult) error {
	ctx := d.ctx
	if err := d.cp.Start(ctx, sale.ID); err != nil {
		return err
	}
	t := time.Now()
	if err := d.cp.QueueStep(ctx, sale, d.fence); err != nil {
		return fmt.Errorf("admitting: %w", err)
	}
	res.AdmitElapsed = time.Since(t)
	if err := d.cp.Stop(ctx, sale.ID); err != nil {
		return err
	}
	held, err := d.usedMemory()
	if err != nil {
		return err
	}
	res.ArchiveHeld = held - base
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.cp.Run(runCtx) }()
	t = time.Now()
	archived := false
	for time.Since(t) < 2*time.Minute && !archived {
		s, err := d.db.Sale(ctx, sale.ID)
		if err != nil {
			stop()
			<-done
			return err
		}
		if archived = s.Archived; !archived {
			time.Sleep(50 * time.Millisecond) // the leader's re-sync pass runs every second
		}
	}
	res.ArchiveElapsed = time.Since(t)
	stop()
	if err := <-done; err != nil {
		return err
	}
	if !archived {
		return fmt.Errorf("sale %s not archived %v after its close", sale.ID, res.ArchiveElapsed.Round(time.Second))
	}
	after, err := d.usedMemory()
	if err != nil {
		return err
	}
	res.ArchiveFreed = held - after
	return nil
}
