package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisKind is how flashgate reaches Redis: one primary, a Redis Cluster, or
// a primary found through Sentinel.
type redisKind int

const (
	redisSingle   redisKind = iota // redis://host:port/db
	redisCluster                   // redis+cluster://h1:p1,h2:p2 or redis://h1:p1?addr=h2:p2
	redisSentinel                  // redis+sentinel://s1:p1,s2:p2/master[/db]
)

// redisTarget is a parsed --redis: exactly one of the options is set, as
// kind says.
type redisTarget struct {
	kind     redisKind
	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// errRedisURL is the one-line hint every malformed --redis gets.
var errRedisURL = errors.New("want redis://host:port/db, redis+cluster://host:port[,host:port…] or redis+sentinel://host:port[,host:port…]/master[/db]")

// parseRedisURL parses the three forms of --redis:
//
//   - redis://[user:pass@]host:port/db (or rediss://): one primary;
//   - redis+cluster://[user:pass@]h1:p1,h2:p2[?opts] (or rediss+cluster://),
//     or go-redis's cluster form redis://h1:p1?addr=h2:p2&addr=h3:p3: seed
//     nodes of a Redis Cluster;
//   - redis+sentinel://[user:pass@]s1:p1,s2:p2/master[/db][?opts] (or
//     rediss+sentinel://): Sentinels and the name of the master they watch;
//     the user and password are the Sentinels', the data nodes' come from
//     the username and password options.
//
// Options are go-redis's URL options (ParseURL, ParseClusterURL,
// ParseFailoverURL), for example dial_timeout=3s.
func parseRedisURL(raw string) (redisTarget, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return redisTarget{}, errRedisURL
	}
	base, mode, _ := strings.Cut(u.Scheme, "+")
	if base != "redis" && base != "rediss" {
		return redisTarget{}, errRedisURL
	}
	hosts := strings.Split(u.Host, ",")
	for _, h := range hosts {
		if host, port, err := net.SplitHostPort(h); err != nil || host == "" || port == "" {
			if mode != "" || len(hosts) > 1 {
				return redisTarget{}, fmt.Errorf("address %q: want host:port", h)
			}
		}
	}
	q := u.Query()
	if mode == "" && len(hosts) == 1 && !q.Has("addr") {
		opt, err := redis.ParseURL(raw)
		if err != nil {
			return redisTarget{}, err
		}
		return redisTarget{kind: redisSingle, single: opt}, nil
	}
	// Rewrite to go-redis's own form: the first address as the host, the
	// others as addr options.
	u.Scheme = base
	u.Host = hosts[0]
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	switch mode {
	case "", "cluster":
		if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
			return redisTarget{}, fmt.Errorf("a cluster has only database 0, not %q", p)
		}
		u.Path = ""
		u.RawQuery = q.Encode()
		opt, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return redisTarget{}, err
		}
		return redisTarget{kind: redisCluster, cluster: opt}, nil
	case "sentinel":
		parts := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
		if len(parts) == 0 || len(parts) > 2 {
			return redisTarget{}, errors.New("want the master's name as the path: redis+sentinel://host:port/master[/db]")
		}
		q.Set("master_name", parts[0])
		u.Path = ""
		if len(parts) == 2 {
			u.Path = "/" + parts[1]
		}
		u.RawQuery = q.Encode()
		opt, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return redisTarget{}, err
		}
		return redisTarget{kind: redisSentinel, failover: opt}, nil
	default:
		return redisTarget{}, errRedisURL
	}
}

// addrs names the servers t starts from, for error messages.
func (t redisTarget) addrs() string {
	switch t.kind {
	case redisCluster:
		return strings.Join(t.cluster.Addrs, ",")
	case redisSentinel:
		return t.failover.MasterName + " via sentinels " + strings.Join(t.failover.SentinelAddrs, ",")
	default:
		return t.single.Addr
	}
}
