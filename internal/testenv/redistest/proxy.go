package redistest

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from 127.0.0.1:<Port> to a target address
// and can hold their bytes back: tests put it between a replica and its
// primary to keep writes off the replica for as long as they like.
type Proxy struct {
	Port int
	Addr string

	target string
	ln     net.Listener
	mu     sync.Mutex
	paused bool
	resume chan struct{} // closed on Resume
	conns  []net.Conn
	gen    int           // connections opened before the last Switch have a lower one
	closed chan struct{} // closed on Close
}

// StartProxy starts a Proxy to target for tb and closes it in tb.Cleanup.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{target: target, ln: ln, Port: ln.Addr().(*net.TCPAddr).Port, Addr: ln.Addr().String(), resume: make(chan struct{}), closed: make(chan struct{})}
	close(p.resume)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target, gen := p.target, p.gen
		p.mu.Unlock()
		out, err := net.Dial("tcp", target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go p.pipe(out, in, gen)
		go p.pipe(in, out, gen)
	}
}

// pipe copies src to dst, waiting before each write while paused; a
// connection opened before a Switch forwards nothing more until Close.
func (p *Proxy) pipe(dst, src net.Conn, gen int) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate, cut := p.resume, gen < p.gen
			p.mu.Unlock()
			if cut {
				<-p.closed
				return
			}
			<-gate
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Pause holds back every byte read from now on, in both directions, until
// Resume.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused = true
		p.resume = make(chan struct{})
	}
}

// Resume lets held-back bytes through again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.resume)
	}
}

// Switch sends the connections opened from now on to target, and cuts off
// those opened before: they stay open and forward nothing more, as to a
// primary partitioned away while a failover promotes another behind the
// same address.
func (p *Proxy) Switch(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	p.gen++
}

// Close stops accepting, drops the held-back bytes and closes every
// connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
	default:
		close(p.closed)
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	if p.paused {
		// Release the writers so that their goroutines end; the
		// connections are closed, so nothing is delivered.
		p.paused = false
		close(p.resume)
	}
}
