package main

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseSourceAddrs(t *testing.T) {
	tests := []struct {
		in   string
		want string // addresses joined by spaces, or the error's start
	}{
		{"", ""},
		{"127.0.0.2", "127.0.0.2"},
		{"127.0.0.2-127.0.0.4", "127.0.0.2 127.0.0.3 127.0.0.4"},
		{"127.0.0.9, 127.0.1.255-127.0.2.0", "127.0.0.9 127.0.1.255 127.0.2.0"},
		{"::1", "::1"},
		{"127.0.0.4-127.0.0.2", `--source-addrs: "127.0.0.4-127.0.0.2" is not a range`},
		{"127.0.0.1-::1", `--source-addrs: "127.0.0.1-::1" is not a range`},
		{"localhost", `--source-addrs: "localhost" is not an IP address`},
		{"127.0.0.1-", `--source-addrs: "" is not an IP address`},
		{"127.0.0.0-127.255.255.255", "--source-addrs: more than 4096 addresses"},
	}
	for _, tt := range tests {
		got, err := parseSourceAddrs(tt.in)
		var s string
		if err != nil {
			s = err.Error()
		} else {
			parts := make([]string, len(got))
			for i, a := range got {
				parts[i] = a.String()
			}
			s = strings.Join(parts, " ")
		}
		if !strings.HasPrefix(s, tt.want) || (err == nil && s != tt.want) {
			t.Errorf("parseSourceAddrs(%q): got %q, want %q", tt.in, s, tt.want)
		}
	}
}

// TestSourceDialer: connections come from the given loopback addresses in
// turn, as the server sees them.
func TestSourceDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addrs, err := parseSourceAddrs("127.0.0.2-127.0.0.4")
	if err != nil {
		t.Fatal(err)
	}
	dial := sourceDialer(addrs, time.Second)
	var got []string
	for range 6 {
		c, err := dial(ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, netip.MustParseAddrPort(s.RemoteAddr().String()).Addr().String())
		c.Close()
		s.Close()
	}
	want := "127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.2 127.0.0.3 127.0.0.4"
	if g := strings.Join(got, " "); g != want {
		t.Errorf("server saw %s, want %s", g, want)
	}
}
