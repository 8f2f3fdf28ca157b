package conns

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Split hands each accepted connection to one of two fasthttp servers
// that share the handler: while fewer than limit connections are open on
// the fast one, new connections go there and keep their read and write
// buffers (about 16 KB) between requests; the rest go to the lean one,
// which holds no buffers while a connection idles (fasthttp's
// ReduceMemoryUsage: about 4 KB an idle connection, for one more read
// system call per request). A crowd of idle keep-alive connections thus
// costs little memory, and the busy ones stay fast.
type Split struct {
	ln         net.Listener
	to         *Timeouts // the timeouts every connection enforces
	limit      int64
	open       atomic.Int64 // connections open on fast
	fast, lean *chanListener
}

// NewSplit splits ln's connections: the first limit open ones to Fast,
// the rest to Lean, each enforcing to.
func NewSplit(ln net.Listener, limit int, to *Timeouts) *Split {
	return &Split{
		ln:    ln,
		to:    to,
		limit: int64(limit),
		fast:  newChanListener(ln.Addr()),
		lean:  newChanListener(ln.Addr()),
	}
}

// Fast is the listener of the connections that keep their buffers.
func (c *Split) Fast() net.Listener { return c.fast }

// Lean is the listener of the rest.
func (c *Split) Lean() net.Listener { return c.lean }

// Run accepts until the listener fails or closes, then closes both
// halves.
func (c *Split) Run() error {
	defer c.fast.Close()
	defer c.lean.Close()
	var delay time.Duration
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: back off as
				// net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		delay = 0
		to := c.lean
		if c.open.Load() < c.limit {
			c.open.Add(1)
			cc := &countedConn{open: &c.open}
			cc.init(conn, c.to)
			conn, to = cc, c.fast
		} else {
			lc := &lazyConn{}
			lc.init(conn, c.to)
			conn = lc
		}
		if !to.hand(conn) {
			_ = conn.Close()
			return nil
		}
	}
}

// countedConn gives back its place among the fast connections on Close.
type countedConn struct {
	lazyConn
	once sync.Once
	open *atomic.Int64
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// chanListener is a net.Listener fed by Split.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) hand(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// Accept returns the next connection, or net.ErrClosed (which fasthttp
// takes for a normal end) once closed.
func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
