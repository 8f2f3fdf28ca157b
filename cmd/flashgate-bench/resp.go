package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// reserveLoad runs reserves of sale layout l for d: bucketsConns
// connections spread evenly over the primaries of its buckets (all on the
// sale's one primary when unbucketed), each sending bucketsPipeline
// reserves of new buyers per round trip, batch reserves per EVALSHA (sha is
// lua.Reserve's for 1, lua.ReserveMany's above).
func reserveLoad(ctx context.Context, cc *redis.ClusterClient, sha string, batch int, l lua.Layout, d time.Duration) (bucketsRun, error) {
	run := bucketsRun{Sale: l.Sale, Buckets: l.N(), Batch: batch, PerNode: map[string]int64{}, NodeCPU: map[string]float64{}}
	type target struct {
		addr   string
		tag    string
		bucket int
	}
	var targets []target
	nodes := map[string]bool{}
	for b, t := range l.Tags() {
		m, err := cc.MasterForKey(ctx, lua.SaleKey(t))
		if err != nil {
			return run, err
		}
		targets = append(targets, target{m.Options().Addr, t, b})
		nodes[m.Options().Addr] = true
	}
	run.Primaries = len(nodes)
	before, err := nodeStats(ctx, cc, false)
	if err != nil {
		return run, err
	}
	rbefore, err := nodeStats(ctx, cc, true)
	if err != nil {
		return run, err
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range bucketsConns {
		t := targets[i%len(targets)]
		c, err := net.Dial("tcp", t.addr)
		if err != nil {
			return run, err
		}
		conns = append(conns, c)
	}
	var total atomic.Int64
	var firstErr atomic.Pointer[error]
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i, c := range conns {
		t := targets[i%len(targets)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := reserveConn(ctx, c, sha, batch, l.Sale, t.tag, t.bucket, l.Bucketed(), i, deadline)
			total.Add(n)
			if err != nil {
				firstErr.CompareAndSwap(nil, &err)
			}
		}()
	}
	wg.Wait()
	run.Elapsed = time.Since(start)
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	if e := firstErr.Load(); e != nil {
		return run, *e
	}
	after, err := nodeStats(ctx, cc, false)
	if err != nil {
		return run, err
	}
	rafter, err := nodeStats(ctx, cc, true)
	if err != nil {
		return run, err
	}
	for addr, a := range rafter {
		run.ReplCPU += (a.cpu - rbefore[addr].cpu) / run.Elapsed.Seconds()
	}
	run.Scripts = total.Load()
	run.Rate = float64(run.Scripts) / run.Elapsed.Seconds()
	run.GenCPU = (tvSeconds(ru1.Utime) + tvSeconds(ru1.Stime) - tvSeconds(ru0.Utime) - tvSeconds(ru0.Stime)) / run.Elapsed.Seconds()
	for addr, a := range after {
		run.PerNode[addr] = a.evalsha - before[addr].evalsha
		run.NodeCPU[addr] = (a.cpu - before[addr].cpu) / run.Elapsed.Seconds()
	}
	return run, nil
}

func tvSeconds(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

// perOrder is how many arguments each order takes in a call of batch
// orders: lua.Reserve's three, lua.ReserveMany's four (with the variant).
func perOrder(batch int) int {
	if batch == 1 {
		return 3
	}
	return 4
}

// reserveConn sends pipelines of reserves of new buyers on c until
// deadline, bucketsPipeline reserves per round trip and batch reserves per
// EVALSHA (sha is lua.Reserve's for 1, lua.ReserveMany's above), and
// returns how many reserved; any other answer is an error. Every call but
// its orders' ids is the same: the parts before and after them are built
// once.
func reserveConn(ctx context.Context, c net.Conn, sha string, batch int, sale, tag string, bucket int, bucketed bool, conn int, deadline time.Time) (int64, error) {
	keys := lua.ReserveKeys(tag)
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	b := ""
	if bucketed {
		b = strconv.Itoa(bucket)
	}
	// lua.Reserve: order, user, qty, now, sale[, bucket]; lua.ReserveMany:
	// now, sale, bucket, then order, user, qty, variant ("": one stock) for
	// each order.
	before, after := []string{now, sale, b}, []string(nil)
	if batch == 1 {
		before, after = nil, []string{now, sale}
		if bucketed {
			after = append(after, b)
		}
	}
	var head []byte
	head = append(head, '*')
	head = strconv.AppendInt(head, int64(3+len(keys)+len(before)+perOrder(batch)*batch+len(after)), 10)
	head = append(head, "\r\n"...)
	for _, a := range append(append([]string{"EVALSHA", sha, strconv.Itoa(len(keys))}, keys...), before...) {
		head = bulk(head, a)
	}
	var tail []byte
	for _, a := range after {
		tail = bulk(tail, a)
	}
	calls := max(bucketsPipeline/batch, 1)
	prefix := bucketsGeneratorPrefix + strconv.Itoa(conn) + "-"
	w := bufio.NewWriterSize(c, 64<<10)
	r := bufio.NewReaderSize(c, 64<<10)
	buf := make([]byte, 0, 64<<10)
	var n, seq int64
	for time.Now().Before(deadline) && ctx.Err() == nil {
		buf = buf[:0]
		for range calls {
			buf = append(buf, head...)
			for range batch {
				seq++
				id := strconv.AppendInt([]byte(prefix), seq, 10)
				buf = bulkBytes(buf, append([]byte("o"), id...)) // order id
				buf = bulkBytes(buf, append([]byte("u"), id...)) // user id
				buf = bulk(buf, "1")                             // quantity
				if batch > 1 {
					buf = bulk(buf, "") // variant: none
				}
			}
			buf = append(buf, tail...)
		}
		if _, err := w.Write(buf); err != nil {
			return n, err
		}
		if err := w.Flush(); err != nil {
			return n, err
		}
		for range calls {
			codes, err := readReserveReply(r, batch)
			if err != nil {
				return n, err
			}
			for _, code := range codes {
				if code != lua.ReserveOK {
					return n, fmt.Errorf("reserve script answered code %d, want %d (reserved)", code, lua.ReserveOK)
				}
				n++
			}
		}
	}
	return n, nil
}

// readReserveReply reads one reply of a reserve script for k orders
// ({code, order id} k times, flat: lua.Reserve's for k = 1) and returns
// the codes.
func readReserveReply(r *bufio.Reader, k int) ([]int64, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if want := "*" + strconv.Itoa(2*k) + "\r\n"; string(line) != want {
		return nil, fmt.Errorf("reserve reply: %q, want %q", strings.TrimSpace(string(line)), strings.TrimSpace(want))
	}
	codes := make([]int64, 0, k)
	for range k {
		code, err := readCodeAndOrder(r)
		if err != nil {
			return nil, err
		}
		codes = append(codes, code)
	}
	return codes, nil
}

func bulk(b []byte, s string) []byte { return bulkBytes(b, []byte(s)) }

func bulkBytes(b, s []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, "\r\n"...)
	b = append(b, s...)
	return append(b, "\r\n"...)
}

// readCodeAndOrder reads a reserve answer's code and order id (after the
// array header) and returns the code.
func readCodeAndOrder(r *bufio.Reader) (int64, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if line[0] != ':' {
		return 0, fmt.Errorf("reserve reply code: %q", strings.TrimSpace(string(line)))
	}
	code, err := strconv.ParseInt(string(line[1:len(line)-2]), 10, 64)
	if err != nil {
		return 0, err
	}
	line, err = r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if line[0] != '$' {
		return 0, errors.New("reserve reply: no order id")
	}
	size, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil {
		return 0, err
	}
	if _, err := r.Discard(size + 2); err != nil {
		return 0, err
	}
	return code, nil
}
