package main

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// TestServeSellsAfterSentinelPromotion runs `serve` (every tier, wired as
// in production) on a Sentinel set-up, kills (kill -9) the primary while a
// crowd buys, eight at a time, and checks that the sale sells again (a 201)
// once the Sentinel has promoted the replica. It logs the time from the
// promotion (the replica's INFO says role:master) and from the Sentinel's
// naming of it to the first 201; nothing of it is asserted: the control
// plane's rebuild after a failover (controlplane/failover) comes between,
// so which purchase first sells is no check of one client.
func TestServeSellsAfterSentinelPromotion(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	sen := redistest.StartSentinel(t)
	waitDialProbesEnd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errb bytes.Buffer
	cfg, err := parseConfig("serve", []string{"--redis", sen.URL(),
		"--db", "sqlite://" + filepath.Join(t.TempDir(), "fg.db"),
		"--jwt-secret", "follow-secret", "--admin-token", "follow-admin",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--user-rate", "0", "--state-refresh", "20ms", "--log-level", "error"}, &errb, env(nil))
	if err != nil {
		t.Fatalf("parseConfig: %v (%s)", err, errb.String())
	}
	st := newStack(cfg, &errb)
	defer st.close()
	s, _, g, public, _, err := serveAll(ctx, st, cfg)
	if err != nil {
		t.Fatalf("serveAll: %v", err)
	}
	defer func() { g.cancel(); _ = g.wait() }()
	const sale = "follow"
	if _, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: sale, Name: sale, PriceCents: 100, Total: 1_000_000, AdmitRatio: 3}); err != nil {
		t.Fatalf("CreateSale: %v", err)
	}
	if err := s.cp.Start(ctx, sale); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := waitOpen(ctx, public, sale, 20*time.Second); err != nil {
		t.Fatal(err)
	}

	hc := &http.Client{Timeout: 20 * time.Second}
	var users atomic.Int64
	buy := func() int {
		tok, err := mintToken([]byte(cfg.JWTSecret), "u"+strconv.FormatInt(users.Add(1), 10), time.Now().Add(time.Hour))
		if err != nil {
			t.Error(err)
			return 0
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", public+"/api/sales/"+sale+"/orders", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := hc.Do(req)
		if err != nil {
			return 0
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	burst := func() []int {
		got := make([]int, 8)
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() { got[i] = buy() })
		}
		wg.Wait()
		return got
	}
	for i, code := range burst() {
		if code != http.StatusCreated {
			t.Fatalf("purchase %d before the kill: got %d, want 201", i, code)
		}
	}

	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.Addr})
	defer sc.Close()
	replica := sen.Replica.Client(t)
	var promoted, named time.Time
	sen.Primary.Stop() // SIGKILL
	killed := time.Now()
	failed, sent := 0, 0
	var first time.Time
	if _, ok := testwait.For(60*time.Second, func() bool {
		if promoted.IsZero() {
			if info, err := replica.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "role:master") {
				promoted = time.Now()
			}
		}
		if named.IsZero() {
			if addr, err := sc.GetMasterAddrByName(ctx, sen.Name).Result(); err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == sen.Replica.Addr {
				named = time.Now()
			}
		}
		for _, code := range burst() {
			sent++
			if code != http.StatusCreated {
				failed++
			} else if !named.IsZero() && first.IsZero() {
				first = time.Now()
			}
		}
		return !first.IsZero()
	}); !ok {
		t.Fatalf("no purchase answered 201 within a minute of the kill (%d of %d failed; promoted %v, named %v after the kill)",
			failed, sent, !promoted.IsZero(), named.Sub(killed).Round(time.Millisecond))
	}
	t.Logf("kill → promotion %v, promotion → naming %v, naming → first 201 %v (promotion → first 201 %v); %d of %d purchases failed meanwhile",
		promoted.Sub(killed).Round(time.Millisecond), named.Sub(promoted).Round(time.Millisecond),
		first.Sub(named).Round(time.Millisecond), first.Sub(promoted).Round(time.Millisecond), failed, sent)
}
