package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/procgroup"
)

func lookPath(name string) (string, error) { return exec.LookPath(name) }

// stack is one redis-server and one `flashgate serve` on it.
type stack struct {
	name      string
	redis     *procgroup.Proc
	serve     *procgroup.Proc
	redisAddr string
	gw, admin string // host:port
	db        string
	rdb       *redis.Client
}

// startStack starts a fresh redis-server and `flashgate serve` on it.
func (b *bench) startStack(ctx context.Context, name, db string, extra ...string) (*stack, error) {
	// No persistence: the figures are of flashgate, not of the disk.
	return b.startStackRedis(ctx, name, db, []string{"--save", "", "--appendonly", "no"}, extra...)
}

// startStackRedis is startStack with redisArgs for its redis-server.
func (b *bench) startStackRedis(ctx context.Context, name, db string, redisArgs []string, extra ...string) (*stack, error) {
	st := &stack{name: name, db: db}
	var err error
	if st.redisAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(st.redisAddr)
	b.r.alias(st.redisAddr, "$REDIS_"+strings.ToUpper(name))
	b.r.alias(" "+port+" ", " $REDIS_"+strings.ToUpper(name)+"_PORT ")
	rdir := b.path("redis-" + name)
	os.MkdirAll(rdir, 0o755)
	if st.redis, err = b.r.start("redis-"+name, nil, append([]string{"redis-server", "--port", port, "--bind", host,
		"--dir", rdir}, redisArgs...)...); err != nil {
		return nil, err
	}
	if err := waitTCP(ctx, st.redisAddr, st.redis, 10*time.Second); err != nil {
		return nil, err
	}
	st.rdb = redis.NewClient(&redis.Options{Addr: st.redisAddr})
	if err := b.startServe(ctx, st, extra...); err != nil {
		return nil, err
	}
	return st, nil
}

// serveArgs are the flags of every `flashgate serve` of the run, in one
// place; SERVE_FLAGS adds to them.
func (b *bench) serveArgs(st *stack, extra []string) []string {
	args := []string{b.flashbin, "serve",
		"--redis", "redis://" + st.redisAddr + "/0", "--db", st.db,
		"--listen", st.gw, "--admin-listen", st.admin, "--log-level", "warn"}
	args = append(args, extra...)
	return append(args, b.cfg.ServeFlags...)
}

// startServe (re)starts the stack's `flashgate serve`, on new ports.
func (b *bench) startServe(ctx context.Context, st *stack, extra ...string) error {
	if st.serve != nil {
		stop(st.serve)
	}
	var err error
	if st.gw, err = freeAddr(); err != nil {
		return err
	}
	if st.admin, err = freeAddr(); err != nil {
		return err
	}
	up := strings.ToUpper(st.name)
	b.r.alias(st.gw, "$GW_"+up)
	b.r.alias(st.admin, "$ADMIN_"+up)
	if st.serve, err = b.r.start("serve-"+st.name, nil, b.serveArgs(st, extra)...); err != nil {
		return err
	}
	if err := waitHTTP(ctx, "http://"+st.gw+"/readyz", st.serve, 30*time.Second); err != nil {
		return err
	}
	return waitHTTP(ctx, "http://"+st.gw+"/healthz", st.serve, 5*time.Second)
}

// adminCall calls the admin API; out, when not nil, gets the JSON answer.
func (b *bench) adminCall(st *stack, method, path string, body string, out any) error {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, "http://"+st.admin+path, rd)
	req.Header.Set("Authorization", "Bearer "+b.adminTok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("admin %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("admin %s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// createSale creates a sale and, if open, starts it.
func (b *bench) createSale(st *stack, id string, total int64, open bool) error {
	body := fmt.Sprintf(`{"id":%q,"name":"Bench %s","price_cents":2500,"total":%d,"per_user":1}`, id, id, total)
	if err := b.adminCall(st, "POST", "/admin/sales", body, nil); err != nil {
		return err
	}
	if open {
		return b.adminCall(st, "POST", "/admin/sales/"+id+"/start", "", nil)
	}
	return nil
}

// createVariantSale creates and starts sale id in n variants v01 … vNN of
// each units, but the last, which has last units.
func (b *bench) createVariantSale(st *stack, id string, n int, each, last int64) error {
	var vs strings.Builder
	for i := 1; i <= n; i++ {
		units := each
		if i == n {
			units = last
		}
		if i > 1 {
			vs.WriteByte(',')
		}
		fmt.Fprintf(&vs, `{"id":"v%02d","name":"Size %d","total":%d}`, i, i, units)
	}
	body := fmt.Sprintf(`{"id":%q,"name":"Bench %s","price_cents":2500,"per_user":1,"variants":[%s]}`, id, id, vs.String())
	if err := b.adminCall(st, "POST", "/admin/sales", body, nil); err != nil {
		return err
	}
	return b.adminCall(st, "POST", "/admin/sales/"+id+"/start", "", nil)
}

// saleFigures is the part of GET /admin/sales/{id} the run reads.
type saleFigures struct {
	State         string `json:"state"`
	Total         int64  `json:"total"`
	Booked        int64  `json:"booked"`
	StreamBacklog int64  `json:"stream_backlog"`
	Orders        struct {
		Persisted      int64 `json:"persisted"`
		PendingPayment int64 `json:"pending_payment"`
		Expired        int64 `json:"expired"`
	} `json:"orders"`
}

func (b *bench) figures(st *stack, id string) (saleFigures, error) {
	var f saleFigures
	err := b.adminCall(st, "GET", "/admin/sales/"+id, "", &f)
	return f, err
}

// waitFigures polls a sale's figures until ok says so, at most for limit.
func (b *bench) waitFigures(ctx context.Context, st *stack, id string, limit time.Duration, ok func(saleFigures) bool) (saleFigures, error) {
	deadline := time.Now().Add(limit)
	for {
		f, err := b.figures(st, id)
		if err == nil && ok(f) {
			return f, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("sale %s not there after %s: %+v", id, limit, f)
			}
			return f, err
		}
		select {
		case <-ctx.Done():
			return f, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// createDB creates a database on the PostgreSQL server and returns its URL.
func (b *bench) createDB(ctx context.Context, name string) (string, error) {
	if b.cfg.Postgres == "" {
		return "", fmt.Errorf("no PostgreSQL: run under scripts/with-testenv.sh (make bench does) or set FLASHGATE_BENCH_POSTGRES")
	}
	c, err := pgx.Connect(ctx, b.cfg.Postgres)
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	u, err := url.Parse(b.cfg.Postgres)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// dbURL is the database of the wrk and storm phases.
func (b *bench) dbURL(ctx context.Context, name string) (string, error) {
	if b.cfg.DB == "postgres" {
		return b.createDB(ctx, name)
	}
	return "sqlite://" + b.path(name+".db"), nil
}
