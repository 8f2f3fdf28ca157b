package controlplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/lua"
)

// Causes of the end of a leadership term.
var (
	errLeaseLost     = errors.New("leader lease lost")
	errRenewFailed   = errors.New("leader lease renewal failed")
	errLeaseRanOut   = errors.New("leader lease ran out before a renewal")
	errLeaseResigned = errors.New("leader lease given up")
)

// term is one leadership term. Its context carries the lease's fencing
// token and ends when a renewal fails, when the lease is lost, or when the
// lease's time runs out by the local clock before a renewal; every loop of
// the term, and a restore that outlives its pass, runs under it.
type term struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	fence  *fencing.Token
	sent   time.Time // when the last renewal was sent; guarded by Service.mu
}

// lead renews the leader lease this Service holds, or takes a free one,
// and returns the term's context (nil when it does not lead). The term is
// the parent's child: it ends with it.
//
// A new lease gets a new fencing token (lua.TakeFence), which counts only
// once a renewal after it succeeded: every leader after that one takes its
// token later, so a higher one. A lease holder that finds a newer token
// handed out (an admin call's) takes a newer one the same way.
func (s *Service) lead(parent context.Context) (context.Context, error) {
	ctx, cancel := context.WithTimeout(parent, s.leaderTTL)
	defer cancel()
	sent := time.Now()
	ok, err := s.renew(ctx)
	if err != nil {
		s.endTerm(errRenewFailed)
		return nil, fmt.Errorf("renewing leader lease: %w", err)
	}
	if ok {
		tok, err := s.refreshFence(ctx)
		if err != nil {
			s.endTerm(errRenewFailed)
			return nil, err
		}
		return s.holdTerm(parent, sent, tok), nil
	}
	s.endTerm(errLeaseLost)
	took, err := s.rdb.SetNX(ctx, lua.LeaderKey(), s.leaseToken, s.leaderTTL).Result()
	if err != nil {
		return nil, fmt.Errorf("taking leader lease: %w", err)
	}
	if !took {
		return nil, nil
	}
	tok, err := s.takeFence(ctx)
	if err != nil {
		return nil, err
	}
	// The token counts only if the lease is still this Service's after it
	// was taken.
	if ok, err := s.renew(ctx); err != nil || !ok {
		return nil, err
	}
	s.fence.Store(tok)
	return s.holdTerm(parent, sent, tok), nil
}

// renew extends the lease if this Service holds it (lua.Extend).
func (s *Service) renew(ctx context.Context) (bool, error) {
	n, err := lua.Extend.Run(ctx, s.rdb, lua.LeaderKeys(), s.leaseToken, s.leaderTTL.Milliseconds()).Int()
	return n == 1, err
}

// refreshFence takes a newer fencing token for the lease this Service
// holds when one was handed out after its own (an admin call's, or that of
// a lease taker whose check failed), so that its writes are not refused,
// or when it holds none (its last try to take one failed), or when the
// counter is below its own: Redis lost the increments up to it (a failover
// that the lease outlived, its renewal waiting for the promoted replica;
// or a restart), and the next token handed out would be no newer than
// this term's. The new token is above its own (lua.TakeFence's floor), and
// so is every token after it. It returns the token the lease now holds.
func (s *Service) refreshFence(ctx context.Context) (int64, error) {
	cur, err := s.rdb.Get(ctx, lua.FenceKey()).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("reading fencing token: %w", err)
	}
	mine := s.fence.Load()
	if mine > 0 && cur == mine {
		return mine, nil
	}
	tok, err := s.takeFenceAbove(ctx, mine)
	if err != nil {
		return 0, err
	}
	if ok, err := s.renew(ctx); err != nil || !ok {
		if err == nil {
			err = errLeaseLost
		}
		return 0, fmt.Errorf("renewing leader lease: %w", err)
	}
	s.fence.Store(tok)
	return tok, nil
}

// holdTerm starts a term, or extends the current one, after a renewal sent
// at sent, with the lease's token tok: the term ends by itself LeaderTTL
// after sent, before Redis lets the lease go, unless a later renewal
// extends it. A new term gets a keeper (keepTerm), which Close waits for;
// after Close the term ends at once. tok is the renewal's own: the term's
// timer may have ended the last term meanwhile and cleared the Service's
// token.
func (s *Service) holdTerm(parent context.Context, sent time.Time, tok int64) context.Context {
	left := time.Until(sent.Add(s.leaderTTL))
	s.mu.Lock()
	t := s.term
	if t == nil || t.ctx.Err() != nil {
		ctx, cancel := context.WithCancelCause(parent)
		t = &term{cancel: cancel, fence: &fencing.Token{Term: ctx}}
		t.ctx = fencing.With(ctx, t.fence)
		t.timer = time.AfterFunc(left, func() { s.endTermOf(t, errLeaseRanOut) })
		s.term = t
		if s.closed {
			// A closed Service keeps no term: the loops under it stop.
			t.timer.Stop()
			t.cancel(errClosed)
			s.term = nil
			s.mu.Unlock()
			return t.ctx
		}
		s.wg.Add(1) // under mu, after checking closed: see runContext
		go func() {
			defer s.wg.Done()
			s.keepTerm(t)
		}()
	} else {
		t.timer.Reset(left)
	}
	t.sent = sent
	t.fence.V.Store(tok)
	s.fence.Store(tok)
	s.mu.Unlock()
	s.setLeading(true)
	return t.ctx
}

// keepTerm renews the lease of term t whenever no renewal was sent for a
// tick (TickEvery): the tick loop renews it between rounds, this keeps it
// while one round takes long (a restore of a big sale, a storm of
// expiries), so that the term's work goes on while the lease holds. A
// renewal that fails or finds the lease gone ends t.
func (s *Service) keepTerm(t *term) {
	tick := time.NewTicker(s.tickEvery)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		last := t.sent
		s.mu.Unlock()
		if time.Since(last) < s.tickEvery {
			continue
		}
		ctx, cancel := context.WithTimeout(t.ctx, s.leaderTTL)
		sent := time.Now()
		ok, err := s.renew(ctx)
		cancel()
		if t.ctx.Err() != nil {
			return
		}
		if err != nil || !ok {
			cause := errLeaseLost
			if err != nil {
				cause = errRenewFailed
				s.log.Warn("leader lease", "err", fmt.Errorf("renewing leader lease: %w", err))
			}
			s.endTermOf(t, cause)
			return
		}
		s.mu.Lock()
		if s.term == t && t.ctx.Err() == nil {
			t.timer.Reset(time.Until(sent.Add(s.leaderTTL)))
			t.sent = sent
		}
		s.mu.Unlock()
	}
}

// termFence is the fencing token of the current term, 0 when there is no
// live term.
func (s *Service) termFence() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term == nil || s.term.ctx.Err() != nil {
		return 0
	}
	return s.term.fence.V.Load()
}

// endTerm ends the current term, if any, with cause: every loop and
// restore under it stops at its next step, and none of its writes is
// accepted after a newer token's.
func (s *Service) endTerm(cause error) {
	s.mu.Lock()
	if t := s.term; t != nil {
		t.timer.Stop()
		t.cancel(cause)
		s.term = nil
	}
	s.mu.Unlock()
	s.setLeading(false)
}

// endTermOf ends term t with cause if it is still the current one.
func (s *Service) endTermOf(t *term, cause error) {
	s.mu.Lock()
	if s.term != t {
		s.mu.Unlock()
		return
	}
	t.timer.Stop()
	t.cancel(cause)
	s.term = nil
	s.mu.Unlock()
	s.setLeading(false)
}

func (s *Service) setLeading(v bool) {
	if !v {
		s.fence.Store(0)
	}
	s.mu.Lock()
	was := s.leading
	s.leading = v
	s.mu.Unlock()
	if v != was {
		if v {
			s.log.Info("control plane leads the loops", "node", s.nodeID, "fence", s.fence.Load())
		} else {
			s.log.Info("control plane no longer leads", "node", s.nodeID)
		}
	}
}

// Leading reports whether this Service held the leader lease at its last
// tick.
func (s *Service) Leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading
}

// resign gives the lease up, if this Service holds it.
func (s *Service) resign() {
	s.endTerm(errLeaseResigned)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = lua.Unlock.Run(ctx, s.rdb, lua.LeaderKeys(), s.leaseToken).Err()
}
