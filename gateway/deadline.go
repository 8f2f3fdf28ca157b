package gateway

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// lazyConn makes the deadlines fasthttp sets on every request cheap. The
// server sets a read deadline twice and a write deadline once per request
// (the idle timeout, then the read and write timeouts), and each is a timer
// update in the runtime's poller: about 5% of a rejection's CPU. lazyConn
// passes a deadline to the socket only when it is earlier than the one
// armed there; a later one is only recorded. A read or write that the armed
// deadline cuts short while the recorded one is still ahead is re-armed to
// the recorded deadline and carried on, so the deadline in force is always
// the one set last, as on a plain connection. On a busy keep-alive
// connection the socket's deadline thus moves about once per ReadTimeout
// instead of three times a request.
type lazyConn struct {
	net.Conn
	rd, wd lazyDeadline
}

// lazyDeadline is one direction's deadlines, in Unix nanoseconds with 0 for
// none. mu guards both: Shutdown may set a deadline from another goroutine.
type lazyDeadline struct {
	mu    sync.Mutex
	want  int64 // the deadline last set
	armed int64 // the deadline the socket holds
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixNano(), 1)
}

// earlier reports whether deadline a comes before b (0 is never).
func earlier(a, b int64) bool { return a != 0 && (b == 0 || a < b) }

// set records t and reports whether the socket must be armed with it now.
func (d *lazyDeadline) set(t time.Time) bool {
	w := unixNano(t)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.want = w
	if earlier(w, d.armed) {
		d.armed = w
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
	if d.want == d.armed || d.want != 0 && d.want <= now.UnixNano() {
		return time.Time{}, false
	}
	d.armed = d.want
	if d.want == 0 {
		return time.Time{}, true
	}
	return time.Unix(0, d.want), true
}

func (c *lazyConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}

func (c *lazyConn) SetReadDeadline(t time.Time) error {
	if c.rd.set(t) {
		return c.Conn.SetReadDeadline(t)
	}
	return nil
}

func (c *lazyConn) SetWriteDeadline(t time.Time) error {
	if c.wd.set(t) {
		return c.Conn.SetWriteDeadline(t)
	}
	return nil
}

func (c *lazyConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
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

// lazyListener hands out lazyConns.
type lazyListener struct{ net.Listener }

func (l lazyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lazyConn{Conn: c}, nil
}
