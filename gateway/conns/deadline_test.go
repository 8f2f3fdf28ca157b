package conns

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestLazyConnExtendedDeadline checks that a read the armed deadline would
// have cut short carries on to the later deadline set after it.
func TestLazyConnExtendedDeadline(t *testing.T) {
	client, server := tcpPair(t)
	c := &lazyConn{Conn: server}
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)) // armed
	c.SetReadDeadline(time.Now().Add(5 * time.Second))       // recorded only
	go func() {
		// Not a synchronisation: the byte must come after the armed 50 ms deadline has passed.
		time.Sleep(300 * time.Millisecond)
		client.Write([]byte("x"))
	}()
	buf := make([]byte, 1)
	if n, err := c.Read(buf); n != 1 || err != nil {
		t.Fatalf("got %d, %v; want the byte sent after the first deadline", n, err)
	}
}

// TestLazyConnDeadlineInForce checks that a read times out at the deadline
// set last, never at an earlier one still armed, and at once when the last
// one is earlier than the armed one.
func TestLazyConnDeadlineInForce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first time.Duration
		last  time.Duration
	}{
		{"later", 50 * time.Millisecond, 400 * time.Millisecond},
		{"earlier", 10 * time.Second, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, server := tcpPair(t)
			c := &lazyConn{Conn: server}
			start := time.Now()
			c.SetReadDeadline(start.Add(tc.first))
			c.SetReadDeadline(start.Add(tc.last))
			_, err := c.Read(make([]byte, 1))
			took := time.Since(start)
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("got %v, want a deadline error", err)
			}
			if took < tc.last {
				t.Fatalf("timed out after %s, want no sooner than the last deadline, %s", took, tc.last)
			}
			if took > 5*time.Second {
				t.Fatalf("timed out after %s, want about %s", took, tc.last)
			}
		})
	}
}

// TestLazyConnClearedDeadline checks that a zero deadline set after one
// armed leaves the read without a deadline.
func TestLazyConnClearedDeadline(t *testing.T) {
	client, server := tcpPair(t)
	c := &lazyConn{Conn: server}
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	c.SetReadDeadline(time.Time{})
	go func() {
		// Not a synchronisation: the byte must come after the cleared 50 ms deadline would have fired.
		time.Sleep(250 * time.Millisecond)
		client.Write([]byte("x"))
	}()
	if n, err := c.Read(make([]byte, 1)); n != 1 || err != nil {
		t.Fatalf("got %d, %v; want the byte", n, err)
	}
}

// TestLazyConnWriteExtended checks that a write the armed deadline cuts
// short carries on to the later deadline and writes everything.
func TestLazyConnWriteExtended(t *testing.T) {
	client, server := tcpPair(t)
	c := &lazyConn{Conn: server}
	c.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	const size = 32 << 20 // more than the socket buffers hold
	got := make(chan int64, 1)
	go func() {
		// Not a synchronisation: the peer reads only after the armed 20 ms deadline has passed.
		time.Sleep(300 * time.Millisecond)
		n, _ := io.Copy(io.Discard, io.LimitReader(client, size))
		got <- n
	}()
	n, err := c.Write(make([]byte, size))
	if n != size || err != nil {
		t.Fatalf("got %d, %v; want %d written", n, err, size)
	}
	if r := <-got; r != size {
		t.Fatalf("peer read %d, want %d", r, size)
	}
}

// countingConn counts the deadlines that reach the socket.
type countingConn struct {
	net.Conn
	reads, writes atomic.Int64
}

func (c *countingConn) SetReadDeadline(t time.Time) error {
	c.reads.Add(1)
	return c.Conn.SetReadDeadline(t)
}

func (c *countingConn) SetWriteDeadline(t time.Time) error {
	c.writes.Add(1)
	return c.Conn.SetWriteDeadline(t)
}

// TestLazyConnFewDeadlines checks the point of lazyConn: requests served
// in a row on one connection, under read, idle and write timeouts, move
// the socket's deadlines a few times, not three times a request; and so
// do deadlines set as fasthttp sets its own.
func TestLazyConnFewDeadlines(t *testing.T) {
	for _, tc := range []struct {
		name string
		to   *Timeouts
	}{
		{"timeouts", &Timeouts{read: 5 * time.Second, idle: 60 * time.Second, write: 5 * time.Second, clock: NewClock(time.Millisecond)}},
		{"set deadlines", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := tcpPair(t)
			counted := &countingConn{Conn: server}
			c := &lazyConn{}
			c.init(counted, tc.to)
			const requests = 1000
			go func() {
				buf := make([]byte, 16)
				for range requests {
					client.Write([]byte("q"))
					io.ReadFull(client, buf[:1])
				}
			}()
			buf := make([]byte, 1)
			for i := range requests {
				if tc.to != nil {
					// Time passes as on a busy connection.
					tc.to.clock.now.Add(int64(time.Millisecond))
				}
				if i > 0 && tc.to == nil {
					c.SetReadDeadline(time.Now().Add(60 * time.Second)) // idle
				}
				if _, err := c.Read(buf); err != nil {
					t.Fatal(err)
				}
				if tc.to == nil {
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				}
				if _, err := c.Write(buf); err != nil {
					t.Fatal(err)
				}
			}
			if r, w := counted.reads.Load(), counted.writes.Load(); r > 4 || w > 4 {
				t.Fatalf("got %d read and %d write deadlines on the socket for %d requests, want a few", r, w, requests)
			}
		})
	}
}

// TestLazyConnTimeouts checks the timeouts a lazyConn enforces itself: a
// new connection's first request within ReadTimeout, a keep-alive
// connection's wait for the next request within IdleTimeout, and the rest
// of a request within ReadTimeout of its first byte, however the bytes
// trickle.
func TestLazyConnTimeouts(t *testing.T) {
	const read, idle = 300 * time.Millisecond, 900 * time.Millisecond
	// newConn returns a lazyConn under the timeouts, its clock moving on
	// by itself when run is set and only as the test moves it otherwise.
	newConn := func(t *testing.T, run bool) (client net.Conn, c *lazyConn, clock *Clock) {
		client, server := tcpPair(t)
		clock = NewClock(Tick(read, idle))
		if run {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { clock.Run(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
		}
		c = &lazyConn{}
		c.init(server, &Timeouts{read: read, idle: idle, write: 5 * time.Second, clock: clock})
		return client, c, clock
	}
	// answer serves one one-byte request on c.
	answer := func(t *testing.T, client net.Conn, c *lazyConn) {
		t.Helper()
		client.Write([]byte("q"))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("a")); err != nil {
			t.Fatal(err)
		}
	}
	// readUntilTimeout reads until the deadline error and returns when
	// it came, measured from start.
	readUntilTimeout := func(t *testing.T, c *lazyConn, start time.Time) time.Duration {
		t.Helper()
		buf := make([]byte, 64)
		for {
			_, err := c.Read(buf)
			if err == nil {
				continue
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("got %v, want a deadline error", err)
			}
			return time.Since(start)
		}
	}
	within := func(t *testing.T, got, want, tick time.Duration) {
		t.Helper()
		// The coarse clock lags by less than a tick (and its ticker's
		// scheduling delay): a timeout comes at most that much early.
		if got < want-2*tick || got > want+2*time.Second {
			t.Fatalf("timed out after %s, want about %s", got, want)
		}
	}
	t.Run("new connection", func(t *testing.T) {
		_, c, clock := newConn(t, true)
		within(t, readUntilTimeout(t, c, time.Now()), read, clock.tick)
	})
	t.Run("trickled request", func(t *testing.T) {
		client, c, clock := newConn(t, true)
		start := time.Now()
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			// A byte every 50 ms: each read is quick, the request never ends.
			tk := time.NewTicker(50 * time.Millisecond)
			defer tk.Stop()
			for range 100 {
				select {
				case <-stop:
					return
				case <-tk.C:
					client.Write([]byte("G"))
				}
			}
		}()
		within(t, readUntilTimeout(t, c, start), read, clock.tick)
	})
	t.Run("idle after an answer", func(t *testing.T) {
		client, c, clock := newConn(t, true)
		start := time.Now()
		answer(t, client, c)
		within(t, readUntilTimeout(t, c, start), idle, clock.tick)
	})
	t.Run("request after an idle wait", func(t *testing.T) {
		// The next request's first byte comes, by the connection's clock,
		// more than ReadTimeout into the idle wait: its rest must follow
		// within ReadTimeout of that byte, not of the wait's start.
		client, c, clock := newConn(t, false)
		answer(t, client, c)
		clock.now.Add(int64(read + 100*time.Millisecond))
		client.Write([]byte("G"))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatalf("got %v, want the first byte within the idle timeout", err)
		}
		if got, want := c.reqEnd, clock.Nanos()+int64(read); got != want {
			t.Fatalf("got the request's reading to end at %d, want %d: ReadTimeout after its first byte", got, want)
		}
		within(t, readUntilTimeout(t, c, time.Now()), read, clock.tick)
	})
}
