package main

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// maxSourceAddrs bounds --source-addrs: more addresses than connections are
// of no use, and a typo like 127.0.0.1-127.255.255.255 should not allocate
// millions.
const maxSourceAddrs = 4096

// parseSourceAddrs reads --source-addrs: a comma-separated list of IP
// addresses and ranges FIRST-LAST (both ends included, same family), for
// example "127.0.0.2-127.0.0.20". An empty string means none.
func parseSourceAddrs(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, part := range splitList(s) {
		first, last, isRange := strings.Cut(part, "-")
		a, err := netip.ParseAddr(strings.TrimSpace(first))
		if err != nil {
			return nil, fmt.Errorf("--source-addrs: %q is not an IP address", first)
		}
		b := a
		if isRange {
			if b, err = netip.ParseAddr(strings.TrimSpace(last)); err != nil {
				return nil, fmt.Errorf("--source-addrs: %q is not an IP address", last)
			}
			if a.Is4() != b.Is4() || b.Less(a) {
				return nil, fmt.Errorf("--source-addrs: %q is not a range FIRST-LAST of one family", part)
			}
		}
		for ip := a; ; ip = ip.Next() {
			if len(out) == maxSourceAddrs {
				return nil, fmt.Errorf("--source-addrs: more than %d addresses", maxSourceAddrs)
			}
			out = append(out, ip)
			if ip == b {
				break
			}
		}
	}
	return out, nil
}

// sourceDialer returns a fasthttp dial function that binds each new
// connection to the next of addrs in turn, so a load balancer's per-address
// limits see the crowd as len(addrs) clients. On loopback every address of
// 127.0.0.0/8 is local without any set-up.
func sourceDialer(addrs []netip.Addr, timeout time.Duration) fasthttp.DialFunc {
	var next atomic.Uint64
	return func(addr string) (net.Conn, error) {
		ip := addrs[(next.Add(1)-1)%uint64(len(addrs))]
		d := net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: ip.AsSlice()}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("dialing %s from %s: %w", addr, ip, err)
		}
		return c, nil
	}
}
