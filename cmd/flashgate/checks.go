package main

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/sqldb"
)

// The checks validate runs on flag values, each naming the flag in its
// error.

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func checkRedisURL(flagName, s string) error {
	if _, err := parseRedisURL(s); err != nil {
		return fmt.Errorf("%s %q: %v", flagName, s, err)
	}
	return nil
}

func checkDBURL(s string) error {
	if err := sqldb.CheckURL(s); err != nil {
		return fmt.Errorf("--db: %w", err)
	}
	return nil
}

func checkHTTPURL(flagName, s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q: want http://host:port", flagName, s)
	}
	return nil
}

func checkListen(flagName, s string) error {
	if _, _, err := net.SplitHostPort(s); err != nil {
		return fmt.Errorf("%s %q: want host:port", flagName, s)
	}
	return nil
}

// userIDRule is docs/api.md's user id rule (flashgate.ValidUserID), for
// error messages.
var userIDRule = fmt.Sprintf("1–%d bytes of UTF-8 without control characters (docs/api.md, \"Buyer identity\")", flashgate.MaxUserID)
