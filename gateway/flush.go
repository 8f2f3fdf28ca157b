package gateway

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// flush adds the admissions and rejections counted since the last flush to
// each sale's hash on the primary, in one pipeline.
func (s *Server) flush(ctx context.Context) { s.flushCounts(ctx, true) }

// flushTick is the flusher's step: admissions every time, rejections with
// them or once RejectedFlushInterval has passed since they last went.
func (s *Server) flushTick(ctx context.Context) {
	now := s.clock.Now().UnixNano()
	due := now >= s.rejectedDue.Load()
	if due {
		s.rejectedDue.Store(now + int64(s.cfg.RejectedFlushInterval))
	}
	s.flushCounts(ctx, due)
}

// flushCounts adds the admissions counted since the last flush to each
// sale's hash on the primary in one pipeline, and the rejections of every
// sale when rejected is true, else only of those with admissions to add.
func (s *Server) flushCounts(ctx context.Context, rejected bool) {
	list := s.snapshot(true)
	type delta struct {
		e                  *sale
		admitted, rejected int64
	}
	var ds []delta
	for _, e := range list {
		a := e.admitted.Load() - e.flushed.Load()
		r := e.rejected.Load() - e.rejectedFlushed.Load()
		if a == 0 && !rejected {
			r = 0
		}
		if a != 0 || r != 0 {
			if st := e.state.Load(); st == nil || !st.found {
				// No hash to count in: incrementing would create one.
				e.flushed.Add(a)
				e.rejectedFlushed.Add(r)
				continue
			}
			ds = append(ds, delta{e, a, r})
		}
	}
	if len(ds) > 0 {
		// lua.Tally adds only to a hash that has its total: after a Redis
		// loss, counters must not recreate a partial sale hash, which the
		// re-sync would take for the whole sale. A count whose sale is gone
		// is dropped (the rebuild starts access again from 0).
		ctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
		cmds := make([]*redis.Cmd, len(ds))
		tally := func(eval bool) error {
			_, err := s.cfg.Primary.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, d := range ds {
					if eval && !redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
						continue
					}
					keys := lua.SaleKeys(d.e.id)
					if eval {
						cmds[i] = lua.Tally.Eval(ctx, p, keys, d.admitted, d.rejected)
					} else {
						cmds[i] = lua.Tally.EvalSha(ctx, p, keys, d.admitted, d.rejected)
					}
				}
				return nil
			})
			return err
		}
		err := tally(false)
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			err = tally(true) // a restarted or flushed Redis: send the source
		}
		cancel()
		failed := 0
		for i, d := range ds {
			if cmds[i].Err() != nil {
				failed++
				continue
			}
			d.e.flushed.Add(d.admitted)
			d.e.rejectedFlushed.Add(d.rejected)
		}
		if failed > 0 && s.base.Err() == nil {
			s.log.Warn("gateway: flushing admission counters", "sales", failed, "err", err)
		}
	}
	s.mu.Lock()
	if len(s.retired) > 0 {
		kept := s.retired[:0]
		for _, e := range s.retired {
			if e.admitted.Load() != e.flushed.Load() || e.rejected.Load() != e.rejectedFlushed.Load() {
				kept = append(kept, e)
			}
		}
		s.retired = kept
	}
	s.mu.Unlock()
}
