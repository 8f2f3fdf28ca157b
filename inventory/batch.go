package inventory

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/flashgate/flashgate/lua"
)

// Reserves of one sale (or one bucket of a bucketed sale: one tag) that
// arrive while that tag's script calls are in flight are combined into one
// lua.ReserveMany call, like a database's group commit: a crowd's reserves
// then cost one script call per batch in redis-server, not one per buyer,
// and a lone buyer still goes out at once. Each order is answered exactly
// as its own lua.Reserve would have answered it, in the order the batch
// lists them.

// reserveReq is one reserve waiting in a batch; the batch's runner sets
// its answer (code and existing, or err) before closing the batch's done.
type reserveReq struct {
	order, user string
	qty         int64
	variant     string // "" for a sale of one stock
	code        int64
	existing    string
	err         error // errWaitShort when WAIT fell short of this reserve
}

// reserveBatch is the reserves of one tag sent in one script call.
type reserveBatch struct {
	tag    string
	keys   []string // lua.ReserveKeys(tag)
	sale   string
	bucket string // the bucket index on a bucketed sale, else ""
	reqs   []*reserveReq
	err    error         // set when the call failed: every request fails
	done   chan struct{} // closed once code, existing or err are set
	// turn, of a batch that waits behind its lane's calls, gets one value
	// when the batch is to be sent: the caller that takes it sends the
	// batch (handOff). waiters counts the callers still waiting for it
	// (guarded by Service.batchMu).
	turn    chan struct{}
	waiters int
}

// lane is one tag's batches. Invariant (under Service.batchMu): batches
// wait (in waiting) only while inflight == Service.batchInFlight; the last
// waiting batch takes new requests until it holds batchMax.
type lane struct {
	inflight int
	waiting  []*reserveBatch
}

// reserveBatched runs one home reserve through its tag's lane and returns
// its answer as reserveIn does.
func (s *Service) reserveBatched(ctx context.Context, tag, sale, bucket, orderID, userID, variant string, qty int64) (code int64, existing string, err error) {
	start := time.Now()
	r := &reserveReq{order: orderID, user: userID, qty: qty, variant: variant}
	b, lead := s.join(tag, sale, bucket, r)
	if lead {
		s.runBatch(ctx, b)
	} else {
		select {
		case <-b.done:
		case <-b.turn:
			// The call before it returned: this caller sends the batch.
			s.runBatch(ctx, b)
		case <-ctx.Done():
			// The reserve may still run with its batch: the buyer hears
			// unavailable, and a retry finds the order.
			s.leave(ctx, b)
			s.m.call(opReserve, start)
			s.m.outcome(outError)
			return 0, "", s.redisError("reserving", ctx.Err())
		}
	}
	s.m.call(opReserve, start)
	if err := cmp.Or(b.err, r.err); err != nil {
		s.m.outcome(outError)
		return 0, "", err
	}
	return r.code, r.existing, nil
}

// join adds r to its tag's lane. It reports lead when r's batch is to be
// sent now, by the caller; otherwise the batch goes when a call of the tag
// returns (finish), and the caller waits for done.
func (s *Service) join(tag, sale, bucket string, r *reserveReq) (b *reserveBatch, lead bool) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	ln := s.lanes[tag]
	if ln == nil {
		ln = &lane{}
		s.lanes[tag] = ln
	}
	if ln.inflight < s.batchInFlight {
		ln.inflight++
		b = s.newBatch(tag, sale, bucket)
		b.reqs = append(b.reqs, r)
		return b, true
	}
	if k := len(ln.waiting); k > 0 && len(ln.waiting[k-1].reqs) < s.batchMax {
		b = ln.waiting[k-1]
	} else {
		b = s.newBatch(tag, sale, bucket)
		b.turn = make(chan struct{}, 1)
		ln.waiting = append(ln.waiting, b)
	}
	b.reqs = append(b.reqs, r)
	b.waiters++
	return b, false
}

// leave is a waiting caller's of b giving up. Should b's turn have come
// already, the turn goes to another caller still waiting, or with none
// left the batch goes as one every caller gave up (handOff).
func (s *Service) leave(ctx context.Context, b *reserveBatch) {
	s.batchMu.Lock()
	b.waiters--
	var mine bool
	select {
	case <-b.turn:
		mine = true
	default:
	}
	if !mine {
		s.batchMu.Unlock()
		return
	}
	run := s.handOff(ctx, b)
	s.batchMu.Unlock()
	if run {
		s.runBatch(ctx, b)
	}
}

func (s *Service) newBatch(tag, sale, bucket string) *reserveBatch {
	return &reserveBatch{tag: tag, keys: lua.ReserveKeys(tag), sale: sale, bucket: bucket, done: make(chan struct{})}
}

// finish ends a call of tag's lane and sends the batch that waited behind
// it, if one did (handOff); it returns that batch when it is to go on the
// caller's goroutine. A lane with nothing in flight is dropped, so lanes
// stay as many as the tags being bought right now.
func (s *Service) finish(ctx context.Context, tag string) (next *reserveBatch) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	ln := s.lanes[tag]
	if len(ln.waiting) > 0 {
		next = ln.waiting[0]
		ln.waiting[0] = nil
		ln.waiting = ln.waiting[1:]
		if s.handOff(ctx, next) {
			return next
		}
		return nil
	}
	ln.inflight--
	if ln.inflight == 0 {
		delete(s.lanes, tag)
	}
	return nil
}

// handOff sends b, whose turn has come, under batchMu: on the goroutine
// of one of its callers still waiting (b.turn), who is then woken once,
// with a stack grown already; with none left, on a goroutine of the
// Service's own, counted in s.batches; once Close was called, it reports
// that the batch goes on the caller's goroutine instead (no new goroutine
// starts).
func (s *Service) handOff(ctx context.Context, b *reserveBatch) (caller bool) {
	switch {
	case b.waiters > 0:
		b.turn <- struct{}{} // b's one turn: the channel has room
		return false
	case s.closed:
		return true
	}
	// Counted under batchMu after checking closed, so every Add happens
	// before Close's Wait.
	s.batches.Add(1)
	go func() {
		defer s.batches.Done()
		s.runBatch(ctx, b)
	}()
	return false
}

// runBatch sends b, answers its requests and sends the batch that waited
// behind it (finish). The call does not stop when the caller goes away:
// the other requests of the batch wait for it.
func (s *Service) runBatch(ctx context.Context, b *reserveBatch) {
	ctx = context.WithoutCancel(ctx)
	for b != nil {
		s.send(ctx, b)
		close(b.done)
		b = s.finish(ctx, b.tag)
	}
}

// Close waits for the batches of reserves still being sent on goroutines
// of the Service's own (each reserve's caller waits for its answer; a
// batch that waited behind another is sent by one of its callers, or on a
// new goroutine when all of them gave up), and makes any such batch
// queued after it go on the goroutine of the caller that ends the call
// before it instead. The
// Service still answers calls after Close; it starts no goroutine. It
// never closes the Redis client, which belongs to the caller. Calling it
// again waits again and returns nil.
func (s *Service) Close() error {
	s.batchMu.Lock()
	s.closed = true
	s.batchMu.Unlock()
	s.batches.Wait()
	return nil
}

// send runs lua.ReserveMany for b (lua.Reserve for a batch of one, whose
// answer is ReserveMany's for one order) and sets each request's answer,
// or b.err.
func (s *Service) send(ctx context.Context, b *reserveBatch) {
	now := s.clock.Now().UnixMilli()
	script, args := lua.ReserveMany, make([]any, 0, 3+4*len(b.reqs))
	if len(b.reqs) == 1 {
		r := b.reqs[0]
		script, args = lua.Reserve, append(args, r.order, r.user, r.qty, now, b.sale)
		if r.variant != "" {
			args = append(args, b.bucket, "", r.variant)
		} else if b.bucket != "" {
			args = append(args, b.bucket)
		}
	} else {
		args = append(args, now, b.sale, b.bucket)
		for _, r := range b.reqs {
			args = append(args, r.order, r.user, r.qty, r.variant)
		}
	}
	// A lane's call goes on a pooled connection, from this goroutine,
	// never through the auto-pipeliner: the lane has batched its reserves
	// already, and the pipeliner would add a hand-off to its flusher and
	// a new goroutine per flush (whose stack then grows through go-redis'
	// calls) to every call.
	res, acked, want, err := s.runReserve(ctx, s.rdb, script, b.tag, b.keys, args...)
	if err != nil {
		b.err = s.redisError("reserving", err)
		return
	}
	vals, ok := res.([]any)
	if !ok || len(vals) != 2*len(b.reqs) {
		b.err = fmt.Errorf("reserving: unexpected script answer %v for %d orders", res, len(b.reqs))
		return
	}
	for i, r := range b.reqs {
		code, ok1 := vals[2*i].(int64)
		existing, ok2 := vals[2*i+1].(string)
		if !ok1 || !ok2 {
			b.err = fmt.Errorf("reserving: unexpected script answer %v for order %d", vals[2*i:2*i+2], i)
			return
		}
		r.code, r.existing = code, existing
		r.err = s.confirm(ctx, b.sale, acked, want, code, existing, r.order)
	}
}

// confirm returns errWaitShort, and logs it, when a reserve answered code
// and existing for order stands in Redis unconfirmed: it reserved, or found
// the user's order already purchased, and WAIT counted fewer replicas than
// the want it asked for; acked < 0 means no WAIT was sent. A found order
// is held back as well: it may be the unconfirmed reserve of an earlier
// attempt, and a 409 naming it would confirm it.
func (s *Service) confirm(ctx context.Context, sale string, acked int64, want int, code int64, existing, order string) error {
	if acked < 0 || acked >= int64(want) {
		return nil
	}
	if code != lua.ReserveOK && code != lua.ReservePurchased {
		return nil
	}
	s.log.WarnContext(ctx, "reserve not acknowledged by enough replicas",
		"sale", sale, "order", order, "existing", existing, "acked", acked, "want", want)
	return errWaitShort
}

// bucketArg is the ARGV of a bucket index, "" for an unbucketed sale.
func bucketArg(bucketed bool, b int) string {
	if !bucketed {
		return ""
	}
	return strconv.Itoa(b)
}
