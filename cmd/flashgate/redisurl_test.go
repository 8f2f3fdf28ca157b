package main

import (
	"slices"
	"strings"
	"testing"
)

func TestParseRedisURL(t *testing.T) {
	cases := []struct {
		name, url string
		kind      redisKind
		addrs     []string // cluster seeds or sentinels; single: the address
		master    string
		db        int
		wantErr   string
	}{
		{"single", "redis://127.0.0.1:6379/2", redisSingle, []string{"127.0.0.1:6379"}, "", 2, ""},
		{"single tls", "rediss://u:p@h:6380/0", redisSingle, []string{"h:6380"}, "", 0, ""},
		{"cluster scheme", "redis+cluster://a:1,b:2,c:3", redisCluster, []string{"a:1", "b:2", "c:3"}, "", 0, ""},
		{"cluster go-redis form", "redis://a:1?addr=b:2&addr=c:3", redisCluster, []string{"a:1", "b:2", "c:3"}, "", 0, ""},
		{"cluster with options", "redis+cluster://a:1?dial_timeout=3s", redisCluster, []string{"a:1"}, "", 0, ""},
		{"sentinel", "redis+sentinel://s1:26379,s2:26380/mymaster", redisSentinel, []string{"s1:26379", "s2:26380"}, "mymaster", 0, ""},
		{"sentinel with db", "redis+sentinel://s1:26379/mymaster/3", redisSentinel, []string{"s1:26379"}, "mymaster", 3, ""},
		{"sentinel without master", "redis+sentinel://s1:26379", 0, nil, "", 0, "master's name"},
		{"cluster db", "redis+cluster://a:1/4", 0, nil, "", 0, "only database 0"},
		{"cluster bad address", "redis+cluster://a:1,b:x:2", 0, nil, "", 0, "want"},
		{"unknown mode", "redis+proxy://a:1", 0, nil, "", 0, "want redis://"},
		{"no scheme", "localhost:6379", 0, nil, "", 0, "want redis://"},
		{"unknown option", "redis+cluster://a:1?bogus=1", 0, nil, "", 0, "unexpected option"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRedisURL(tc.url)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseRedisURL(%q): got %v, want an error containing %q", tc.url, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseRedisURL(%q): %v", tc.url, err)
			}
			if got.kind != tc.kind {
				t.Fatalf("kind: got %v, want %v", got.kind, tc.kind)
			}
			var addrs []string
			var master string
			var db int
			switch got.kind {
			case redisSingle:
				addrs, db = []string{got.single.Addr}, got.single.DB
			case redisCluster:
				addrs = got.cluster.Addrs
			case redisSentinel:
				addrs, master, db = got.failover.SentinelAddrs, got.failover.MasterName, got.failover.DB
			}
			if !slices.Equal(addrs, tc.addrs) || master != tc.master || db != tc.db {
				t.Errorf("got %v %q db %d, want %v %q db %d", addrs, master, db, tc.addrs, tc.master, tc.db)
			}
		})
	}
}
