package conns

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// lazyConn makes the deadlines of a request cheap. fasthttp, given read,
// idle and write timeouts, reads the clock three times a request to set
// three deadlines (the idle timeout, then the read and write timeouts), and
// each is a timer update in the runtime's poller.
//
// It is hand-written where fasthttp's own ReadTimeout, IdleTimeout and
// WriteTimeout would do because a benchmark shows it matters on the
// purchase path: with fasthttp's timeouts (and Split handing fasthttp
// the raw connections) the server spent 1.12 times the CPU per purchase
// (geometric mean over 36 alternating rounds, median 1.11) and answered
// 0.93 times the purchases a second (54 rounds). On a sold-out rejection
// lazyConn showed no gain (with fasthttp's timeouts: CPU per request 0.97,
// requests a second 0.99): the margin is the purchase's alone, and thin.
// Measured on a shared 2-core VM with
// scripts/abcompare.sh BUILD_WITH_LAZYCONN BUILD_WITH_FASTHTTP_TIMEOUTS;
// measure again before changing either.
//
// So the gateway gives fasthttp no timeouts and lazyConn applies them
// itself (to, Timeouts): each Read and Write computes its deadline
// from a coarse clock that costs an atomic load, and passes it to the
// socket only when it is earlier than the one armed there;
// a later one is only recorded. A read or write that the armed deadline
// cuts short while the recorded one is still ahead is re-armed to the
// recorded deadline and carried on, so the deadline in force is always the
// one computed last, as on a plain connection. On a busy keep-alive
// connection the socket's deadline thus moves about once per ReadTimeout
// instead of three times a request. Deadlines set with Set*Deadline (any
// caller, with or without to) are kept the same lazy way.
//
// With to, the timeouts mean what fasthttp's mean: a new connection's first
// request must arrive within ReadTimeout of the accept; on a keep-alive
// connection the wait for the next request's first byte is bounded by
// IdleTimeout, and the rest of that request must arrive within ReadTimeout
// of its first byte; each write of a response ends within WriteTimeout (a
// response is one write unless it outgrows the 4 KB write buffer). Each is
// short of its exact value by at most the coarse clock's lag, less than a
// tick.
type lazyConn struct {
	net.Conn
	// to, when its clock is set, are the timeouts Read and Write apply: a
	// copy, so that a request reads them from the connection's own cache
	// lines.
	// reading and reqEnd belong to the goroutine serving the connection:
	// reading is true from a request's first byte (or the accept) to its
	// answer, and reqEnd (Unix nanoseconds, 0 for none) is when its
	// reading must end.
	to      Timeouts
	reading bool
	reqEnd  int64
	rd, wd  lazyDeadline
}

// init makes l wrap c; with to, it enforces to's timeouts from now on.
func (l *lazyConn) init(c net.Conn, to *Timeouts) {
	l.Conn = c
	if to != nil {
		l.to = *to
		l.reading, l.reqEnd = true, to.after(to.read)
	}
}

// timed reports whether c enforces timeouts (init was given some).
func (c *lazyConn) timed() bool { return c.to.clock != nil }

// Timeouts are the timeouts lazyConn enforces in place of fasthttp's;
// zero durations mean none, and so does a nil clock (no timeouts at all).
type Timeouts struct {
	read, idle, write time.Duration
	clock             *Clock
}

// NewTimeouts returns the timeouts read, idle and write (zero: none), on
// clock (nil: no timeouts at all).
func NewTimeouts(read, idle, write time.Duration, clock *Clock) *Timeouts {
	return &Timeouts{read: read, idle: idle, write: write, clock: clock}
}

// after returns the deadline d from the coarse clock's now (Unix
// nanoseconds), or 0 for none when d is zero.
func (t *Timeouts) after(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return t.clock.Nanos() + int64(d)
}

// Clock is a clock read from memory: Run stores the time every tick,
// so a reading costs an atomic load where time.Now reads the clock twice.
// A reading lags the time by less than a tick (plus the ticker's
// scheduling delay), never leads it.
type Clock struct {
	// The padding keeps the clock, which every request reads, off cache
	// lines that something else writes.
	_       [64]byte
	now     atomic.Int64 // Unix nanoseconds
	running atomic.Bool  // Run is moving now on
	tick    time.Duration
	_       [64]byte
}

// NewClock returns a clock that reads now until Run moves it on.
func NewClock(tick time.Duration) *Clock {
	c := &Clock{tick: tick}
	c.now.Store(time.Now().UnixNano())
	return c
}

// Nanos returns the clock's reading, in Unix nanoseconds.
func (c *Clock) Nanos() int64 { return c.now.Load() }

// Running reports whether Run is moving the clock on.
func (c *Clock) Running() bool { return c.running.Load() }

// Run moves the clock on every tick until ctx ends.
func (c *Clock) Run(ctx context.Context) {
	t := time.NewTicker(c.tick)
	defer t.Stop()
	c.now.Store(time.Now().UnixNano())
	c.running.Store(true)
	defer c.running.Store(false)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.now.Store(now.UnixNano())
		}
	}
}

// Tick is the coarse clock's tick for these timeouts: a twentieth of
// the shortest, between 1 ms and 250 ms.
func Tick(ds ...time.Duration) time.Duration {
	tick := 250 * time.Millisecond
	for _, d := range ds {
		if d > 0 {
			tick = min(tick, d/20)
		}
	}
	return max(tick, time.Millisecond)
}

// lazyDeadline is one direction's deadlines, in Unix nanoseconds with 0 for
// none. want and armed change only under mu (a deadline may be set from
// another goroutine); set reads them without it to see that a deadline
// equal to the one last set changes nothing, the common case.
type lazyDeadline struct {
	mu    sync.Mutex
	want  atomic.Int64 // the deadline last set
	armed atomic.Int64 // the deadline the socket holds
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixNano(), 1)
}

// earlier reports whether deadline a comes before b (0 is never).
func earlier(a, b int64) bool { return a != 0 && (b == 0 || a < b) }

// set records w (Unix nanoseconds, 0 for none) and reports whether the
// socket must be armed with it now.
func (d *lazyDeadline) set(w int64) bool {
	if w == d.want.Load() && !earlier(w, d.armed.Load()) {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.want.Store(w)
	if earlier(w, d.armed.Load()) {
		d.armed.Store(w)
		return true
	}
	return false
}

// rearm is called after the socket's deadline fired: it returns the
// deadline to arm and true when the one set last is later and not yet
// past, false when the timeout stands.
func (d *lazyDeadline) rearm(now time.Time) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want := d.want.Load()
	if want == d.armed.Load() || want != 0 && want <= now.UnixNano() {
		return time.Time{}, false
	}
	d.armed.Store(want)
	return fromNano(want), true
}

func (c *lazyConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}

func (c *lazyConn) SetReadDeadline(t time.Time) error {
	if c.rd.set(unixNano(t)) {
		return c.Conn.SetReadDeadline(t)
	}
	return nil
}

func (c *lazyConn) SetWriteDeadline(t time.Time) error {
	if c.wd.set(unixNano(t)) {
		return c.Conn.SetWriteDeadline(t)
	}
	return nil
}

// fromNano is the time.Time of a deadline in Unix nanoseconds (0: none).
func fromNano(w int64) time.Time {
	if w == 0 {
		return time.Time{}
	}
	return time.Unix(0, w)
}

func (c *lazyConn) Read(p []byte) (int, error) {
	if c.timed() {
		w := c.reqEnd
		if !c.reading {
			w = c.to.after(c.to.idle)
		}
		if c.rd.set(w) {
			if err := c.Conn.SetReadDeadline(fromNano(w)); err != nil {
				return 0, err
			}
		}
	}
	for {
		n, err := c.Conn.Read(p)
		if n > 0 && c.timed() && !c.reading {
			// A request's first byte: the rest must follow within
			// ReadTimeout.
			c.reading, c.reqEnd = true, c.to.after(c.to.read)
		}
		if n > 0 || err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		t, again := c.rd.rearm(time.Now())
		if !again {
			return n, err
		}
		if err := c.Conn.SetReadDeadline(t); err != nil {
			return n, err
		}
	}
}

func (c *lazyConn) Write(p []byte) (int, error) {
	if c.timed() {
		// An answer: the next read waits for a new request.
		c.reading = false
		if w := c.to.after(c.to.write); c.wd.set(w) {
			if err := c.Conn.SetWriteDeadline(fromNano(w)); err != nil {
				return 0, err
			}
		}
	}
	written := 0
	for {
		n, err := c.Conn.Write(p[written:])
		written += n
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return written, err
		}
		t, again := c.wd.rearm(time.Now())
		if !again {
			return written, err
		}
		if err := c.Conn.SetWriteDeadline(t); err != nil {
			return written, err
		}
	}
}

// Listener hands out connections enforcing its timeouts.
type Listener struct {
	net.Listener
	to *Timeouts
}

// NewListener returns ln handing out connections that enforce to.
func NewListener(ln net.Listener, to *Timeouts) Listener { return Listener{ln, to} }

func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &lazyConn{}
	lc.init(c, l.to)
	return lc, nil
}
