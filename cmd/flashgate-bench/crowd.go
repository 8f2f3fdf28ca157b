package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// crowdResult is the crowd phase's part of the report.
type crowdResult struct {
	gate, row         []crowdRun
	gateSold, rowSold []int64 // units sold, round by round
	rss               rssFigures
	open              []*openRun
	notes             []string
}

type rssFigures struct {
	Idle, Conns, AfterCrowd, AfterAll, Peak float64 // MB, of flashgate serve
	ConnsOpen, FDs                          int
	RowIdle, RowAfter                       float64 // MB, of rowlock
}

func (b *bench) crowdPhase(ctx context.Context) error {
	res := &crowdResult{}
	b.rep.crowd = res
	fgDB, err := b.createDB(ctx, "bench_flashgate")
	if err != nil {
		return err
	}
	rowDB, err := b.createDB(ctx, "bench_rowlock")
	if err != nil {
		return err
	}
	b.r.alias(fgDB, "$PG/bench_flashgate")
	b.r.alias(rowDB, "$PG/bench_rowlock")
	st, err := b.startStack(ctx, "crowd", fgDB)
	if err != nil {
		return err
	}
	rowAddr, err := freeAddr()
	if err != nil {
		return err
	}
	b.r.alias(rowAddr, "$ROWLOCK")
	row, err := b.r.start("rowlock", nil, b.rowbin, "-listen", rowAddr, "-db", rowDB, "-max-conns", "64")
	if err != nil {
		return err
	}
	if err := waitTCP(ctx, rowAddr, row, 30*time.Second); err != nil {
		return err
	}
	pg, err := pgx.Connect(ctx, rowDB)
	if err != nil {
		return err
	}
	defer pg.Close(context.Background())

	// RSS: idle, then with CONNS keep-alive connections open.
	time.Sleep(2 * time.Second)
	res.rss.Idle, res.rss.RowIdle = rss(st.serve.Pid()), rss(row.Pid())
	if b.cfg.Conns > 0 {
		b.logf("  opening %d keep-alive connections", b.cfg.Conns)
		conns, err := holdConns(ctx, st.gw, b.cfg.Conns)
		if err != nil {
			res.notes = append(res.notes, fmt.Sprintf("keep-alive connections: %v", err))
		} else {
			time.Sleep(time.Second)
			res.rss.Conns, res.rss.ConnsOpen, res.rss.FDs = rss(st.serve.Pid()), len(conns), openFDs(st.serve.Pid())
			closeAll(conns)
			time.Sleep(time.Second)
		}
	}

	u, c := b.cfg.CrowdUsers, b.cfg.CrowdConc
	for r := 1; r <= b.cfg.CrowdRounds && ctx.Err() == nil; r++ {
		sale := "crowd-" + strconv.Itoa(r)
		if err := b.createSale(st, sale, int64(b.cfg.CrowdUnits), true); err != nil {
			return err
		}
		if _, err := pg.Exec(ctx, `INSERT INTO items (id, price_cents, "left") VALUES ($1, 2500, $2)`, sale, b.cfg.CrowdUnits); err != nil {
			return fmt.Errorf("rowlock item: %w", err)
		}
		time.Sleep(300 * time.Millisecond)
		gate := func() error {
			b.logf("  crowd %d: flashgate", r)
			cr, err := b.crowdOn(ctx, st.serve.Pid(), st.gw, sale, u, c, 0, st)
			if err != nil {
				return fmt.Errorf("crowd against flashgate: %w", err)
			}
			f, err := b.figures(st, sale)
			if err != nil {
				return err
			}
			res.gate, res.gateSold = append(res.gate, cr), append(res.gateSold, f.Booked)
			if r == 1 {
				res.rss.AfterCrowd = rss(st.serve.Pid())
			}
			return nil
		}
		rowl := func() error {
			b.logf("  crowd %d: rowlock", r)
			cr, err := b.crowdOn(ctx, row.Pid(), rowAddr, sale, u, c, 0, nil)
			if err != nil {
				return fmt.Errorf("crowd against rowlock: %w", err)
			}
			var n int64
			if err := pg.QueryRow(ctx, `SELECT count(*) FROM orders WHERE sale_id = $1`, sale).Scan(&n); err != nil {
				return err
			}
			res.row, res.rowSold = append(res.row, cr), append(res.rowSold, n)
			return nil
		}
		first, second := gate, rowl
		if r%2 == 0 {
			first, second = rowl, gate
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
	}
	res.rss.RowAfter = rss(row.Pid())

	// Open model: the crowd's shape arriving at half the peak each server
	// reached in the closed-loop crowds above.
	for _, o := range []struct {
		name, addr, sale string
		runs             []crowdRun
	}{{"flashgate", st.gw, "open-flashgate", res.gate}, {"rowlock", rowAddr, "open-rowlock", res.row}} {
		var rs []float64
		for _, c := range o.runs {
			rs = append(rs, c.Rate)
		}
		peak := statOf(rs).Med
		if peak <= 0 || ctx.Err() != nil {
			continue
		}
		if o.name == "flashgate" {
			if err := b.createSale(st, o.sale, int64(b.cfg.CrowdUnits), true); err != nil {
				return err
			}
		} else if _, err := pg.Exec(ctx, `INSERT INTO items (id, price_cents, "left") VALUES ($1, 2500, $2)`, o.sale, b.cfg.CrowdUnits); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond)
		rate := peak / 2
		b.logf("  open model: %s at %.0f/s", o.name, rate)
		cr, err := b.crowd(ctx, o.addr, o.sale, max(1, int(rate)*b.cfg.OpenSeconds), 2*c, rate, nil)
		if err != nil {
			return fmt.Errorf("open model against %s: %w", o.name, err)
		}
		res.open = append(res.open, &openRun{What: fmt.Sprintf("flash crowd, %d units", b.cfg.CrowdUnits), Rate: rate, Of: peak, Run: cr, Server: o.name})
	}
	res.rss.AfterAll, res.rss.Peak = rss(st.serve.Pid()), peakRSS(st.serve.Pid())
	return nil
}

// holdConns opens n keep-alive connections to addr, each after one
// answered GET /healthz, and returns them open.
func holdConns(ctx context.Context, addr string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	var next int
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	req := []byte("GET /healthz HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				i := next
				next++
				stop := i >= n || firstErr != nil
				mu.Unlock()
				if stop {
					return
				}
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err == nil {
					c.SetDeadline(time.Now().Add(10 * time.Second))
					if _, err = c.Write(req); err == nil {
						var resp *http.Response
						if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err == nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					}
					c.SetDeadline(time.Time{})
				}
				if err != nil {
					if c != nil {
						c.Close()
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("connection %d: %w", i, err)
					}
					mu.Unlock()
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	var open []net.Conn
	for _, c := range conns {
		if c != nil {
			open = append(open, c)
		}
	}
	if firstErr != nil {
		closeAll(open)
		return nil, firstErr
	}
	return open, ctx.Err()
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}
