package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
)

// TestScalpPurchaseFloodDefaultLimits: with serve's default rate limits,
// one account floods the purchase route over 40 connections, each
// pipelining 10 purchases (every variant, both quantities, odd bodies
// among them), while 60 other buyers each try once: the account gets one
// order, every bystander gets theirs (none turned away by the flood), odd
// bodies are 400 or 429, nothing is 5xx.
func TestScalpPurchaseFloodDefaultLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Minute)
	if _, err := p.s.cp.CreateSale(p.ctx, flashgate.Sale{ID: "fl", Name: "fl", PriceCents: 500, Total: 300, PerUser: 2, AdmitRatio: 3,
		Variants: []flashgate.Variant{{ID: "S", Name: "S", Total: 100}, {ID: "M", Name: "M", Total: 100}, {ID: "L", Name: "L", Total: 100}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.s.cp.Start(p.ctx, "fl"); err != nil {
		t.Fatal(err)
	}
	if err := waitOpen(ctx, p.public, "fl", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	tok := p.token("flooder")
	bodies := []string{`{"variant":"S"}`, `{"variant":"M","quantity":2}`, `{"variant":"L","quantity":1}`,
		`{"variant":"S","variant":"M"}`, `{"variant":"S","quantity":3}`, `{"variant":"\u0053"}`, `{"variant":"S","quantity":1,"Quantity":2}`,
		`{"variant":"M","quantity":100000000000000000000}`, `{"variant":"L"}{}`, `{"variant":"S","quantity":2}`}
	var mu sync.Mutex
	byStatus := map[int]int{}
	var bad []string
	var wg sync.WaitGroup
	for c := 0; c < 40; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			conn, err := net.Dial("tcp", strings.TrimPrefix(p.public, "http://"))
			if err != nil {
				mu.Lock()
				bad = append(bad, err.Error())
				mu.Unlock()
				return
			}
			defer conn.Close()
			var reqs strings.Builder
			for i := 0; i < 10; i++ {
				b := bodies[(c+i)%len(bodies)]
				fmt.Fprintf(&reqs, "POST /api/sales/fl/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tok, len(b), b)
			}
			if _, err := conn.Write([]byte(reqs.String())); err != nil {
				return
			}
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			br := bufio.NewReader(conn)
			for i := 0; i < 10; i++ {
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("conn %d answer %d: %v", c, i, err))
					mu.Unlock()
					return
				}
				raw, _ := io.ReadAll(res.Body)
				res.Body.Close()
				mu.Lock()
				byStatus[res.StatusCode]++
				if res.StatusCode >= 500 {
					bad = append(bad, fmt.Sprintf("%d %s", res.StatusCode, raw))
				}
				mu.Unlock()
			}
		}(c)
	}
	others := make([]payAnswer, 60)
	for i := range others {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			others[i] = p.tryDo("POST", p.public+"/api/sales/fl/orders", p.token(fmt.Sprintf("bystander%d", i)),
				[]byte(fmt.Sprintf(`{"variant":%q}`, []string{"S", "M", "L"}[i%3])))
		}(i)
	}
	wg.Wait()
	t.Logf("flood by one account: %v", byStatus)
	for _, b := range bad {
		t.Errorf("flood: %s", b)
	}
	if byStatus[201] != 1 {
		t.Errorf("flood by one account: got %d orders, want 1", byStatus[201])
	}
	for i, a := range others {
		if a.status != 201 {
			t.Errorf("bystander%d during the flood: got %d %s, want 201", i, a.status, a.raw)
		}
	}
}
