package gateway

// --sale-rate is the whole deployment's rate, not each gateway's. With
// Config.ShareEvery set, each gateway announces itself in Redis and takes
// 1/n of SaleRate and SaleBurst, n being the gateways that announced
// themselves recently:
//
//   - Every ShareEvery a gateway runs, in one MULTI on the single key
//     lua.GatewaysKey() (a sorted set, so Redis Cluster is fine: no command
//     names two keys), ZADD of its own id scored with the time, ZREMRANGEBYSCORE
//     of members older than 3 × ShareEvery, ZCARD, and a PEXPIRE so the key
//     goes away with the last gateway. It sets its per-sale limiters to
//     SaleRate / n and ceil(SaleBurst / n) (at least 1).
//   - A gateway starting takes its share before it serves (the first
//     heartbeat runs inside Start); a gateway closing removes its member.
//
// Staleness, with e = ShareEvery (1 s in the command line's gateways):
//
//   - A gateway joining is counted by the others within e: for at most e the
//     deployment lets through up to SaleRate × (1 + 1/(n+1)).
//   - A gateway leaving cleanly is dropped by the others within e; a gateway
//     that dies is dropped within 3e + e. Meanwhile the deployment lets
//     through less than SaleRate (the dead gateway's share is unused).
//   - While Redis does not answer, each gateway keeps its last share.
//   - Scores are each gateway's own clock: clocks must agree within e (NTP
//     keeps them within milliseconds); a gateway whose clock runs ahead by
//     more would drop live peers' members and take more than its share.
//
// Each gateway's share of the rate is exact only when the load balancer
// spreads a sale's buyers evenly over the gateways (round robin, or hashing
// on the buyer's token over many buyers); a gateway that gets more than its
// share of the traffic turns the excess away with 429 rate_limited.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/flashgate/flashgate/lua"
)

// shareTTLs is how many heartbeat intervals a member stays counted without
// a new heartbeat.
const shareTTLs = 3

// shareState is this gateway's part of the deployment's sale rate.
type shareState struct {
	id   string
	live atomic.Int64 // gateways counted at the last heartbeat; 0 = not yet (1)
}

// saleShare returns the rate and burst a sale's limiter gets here: SaleRate
// and SaleBurst divided by the live gateways.
func (s *Server) saleShare() (rate.Limit, int) {
	n := max(s.share.live.Load(), 1)
	return rate.Limit(s.cfg.SaleRate / float64(n)),
		max(int(math.Ceil(float64(s.cfg.SaleBurst)/float64(n))), 1)
}

// setLive records n live gateways and gives every cached sale's limiter
// the new share. A sale created meanwhile reads the new share itself: live
// is stored before the sales are listed, under the lock newSale runs in.
func (s *Server) setLive(n int64) {
	if old := s.share.live.Swap(n); old == n {
		return
	}
	if s.cfg.SaleRate <= 0 {
		return
	}
	r, b := s.saleShare()
	now := s.clock.Now()
	for _, e := range s.snapshot(true) {
		if e.limiter != nil {
			e.limiter.SetLimitAt(now, r)
			e.limiter.SetBurstAt(now, b)
		}
	}
	s.log.Info("gateway: sale rate shared", "live_gateways", n, "sale_rate", float64(r), "sale_burst", b)
}

// startShare runs the first heartbeat and starts the heartbeat loop, when
// ShareEvery is set. Start calls it.
func (s *Server) startShare() {
	every := s.cfg.ShareEvery
	if every <= 0 {
		return
	}
	s.share.id = gatewayID()
	s.heartbeat(s.base)
	s.wg.Add(1)
	go s.loop(every, s.heartbeat, s.leaveShare)
}

// leaveShare removes this gateway from the live gateways, on Close.
func (s *Server) leaveShare(ctx context.Context) {
	if err := s.cfg.Primary.ZRem(ctx, lua.GatewaysKey(), s.share.id).Err(); err != nil {
		s.log.Warn("gateway: leaving the live gateways", "err", err)
	}
}

// heartbeat announces this gateway, counts the live ones and takes its
// share; on a Redis error it keeps the last share.
func (s *Server) heartbeat(parent context.Context) {
	n, err := s.countLive(parent)
	if err != nil {
		if parent.Err() == nil {
			s.log.Warn("gateway: heartbeat; keeping the last sale rate share", "err", err)
		}
		return
	}
	s.setLive(n)
}

// countLive writes this gateway's heartbeat and returns the number of
// gateways whose last heartbeat is younger than shareTTLs intervals.
func (s *Server) countLive(parent context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(parent, s.cfg.RedisTimeout)
	defer cancel()
	now := s.clock.Now().UnixMilli()
	ttl := int64(shareTTLs) * s.cfg.ShareEvery.Milliseconds()
	key := lua.GatewaysKey()
	var card *redis.IntCmd
	_, err := s.cfg.Primary.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, key, redis.Z{Score: float64(now), Member: s.share.id})
		p.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(now-ttl, 10))
		card = p.ZCard(ctx, key)
		p.PExpire(ctx, key, time.Duration(10*ttl)*time.Millisecond)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return max(card.Val(), 1), nil
}

// gatewayID names this gateway in the live set: the host name (for people
// reading the set) and random bytes (two gateways on one host differ).
func gatewayID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	if host == "" {
		host = "gateway"
	}
	return host + "-" + hex.EncodeToString(b[:])
}
