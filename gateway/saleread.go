package gateway

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/gateway/queueedge"
	"github.com/flashgate/flashgate/lua"
)

// stateFields are the sale hash fields one refresh reads (with
// lua.ReadHash).
var stateFields = []string{
	lua.FieldTotal, lua.FieldBooked, lua.FieldStart, lua.FieldClosed,
	lua.FieldCount, lua.FieldAccess, lua.FieldPrice, lua.FieldResume,
	lua.FieldLayout, // see sumBuckets
}

// saleState is one reading of a sale's Redis hash. It is immutable once
// stored in sale.state.
type saleState struct {
	found                               bool // the hash exists
	start, closed                       bool
	resume                              bool // paused by a failover until re-synced
	total, booked, count, access, price int64
	// base is sale.flushed when the reading started: admissions counted
	// locally after it are not in access yet.
	base int64
	// q is a fair queue's reading (queue_state.go); nil for a first-come sale.
	q *queueedge.View
	// vs is the variants (of the sale's catalog entry) whose figures were
	// read, nil for none; vtotal and vbooked hold each one's, in vs's order.
	vs              *variantSet
	vtotal, vbooked []int64
}

// variantSoldOut reports whether the cached figures of vs's variant i say
// it has no unit left. Figures read for other variants than vs (the
// catalog entry changed since) say nothing.
func (st *saleState) variantSoldOut(vs *variantSet, i int) bool {
	return st.vs == vs && st.vbooked[i] >= st.vtotal[i]
}

// readStates reads the state of each sale with one pipeline on the replica
// while it is healthy (see replicaUsable), else on the primary. Each
// attempt has its own RedisTimeout.
func (s *Server) readStates(parent context.Context, list []*sale) ([]*saleState, error) {
	try := func(c redis.UniversalClient) ([]*saleState, error) {
		ctx, cancel := context.WithTimeout(parent, s.cfg.RedisTimeout)
		defer cancel()
		return s.readFrom(ctx, c, list)
	}
	if s.cfg.Replica == s.cfg.Primary {
		return try(s.cfg.Primary)
	}
	if s.replicaUsable(parent) {
		states, err := try(s.cfg.Replica)
		if err == nil {
			if s.replicaFailed.Swap(false) {
				s.log.Info("gateway: replica in sync again, reading from it")
			}
			s.confirmMissing(parent, list, states)
			return states, nil
		}
		s.replicaDown(err)
	}
	s.m.replicaFallback()
	return try(s.cfg.Primary)
}

// confirmMissing re-reads on the primary the sales that the replica does
// not hold but the catalog knows, replacing their states: a replica lags
// its primary, and "not found" for a sale just created would turn its
// first buyers away for good (a 404 is final). Ids no one created cost no primary
// read. On error the replica's reading stands.
func (s *Server) confirmMissing(parent context.Context, list []*sale, states []*saleState) {
	var idx []int
	var miss []*sale
	for i, st := range states {
		if m := list[i].meta.Load(); !st.found && m != nil && m.found {
			idx = append(idx, i)
			miss = append(miss, list[i])
		}
	}
	if len(miss) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.RedisTimeout)
	defer cancel()
	fresh, err := s.readFrom(ctx, s.cfg.Primary, miss)
	if err != nil {
		return
	}
	for k, i := range idx {
		states[i] = fresh[k]
	}
}

func (s *Server) readFrom(ctx context.Context, c redis.UniversalClient, list []*sale) ([]*saleState, error) {
	bases := make([]int64, len(list))
	cmds := make([]*redis.SliceCmd, len(list))
	vsets := make([]*variantSet, len(list))
	vcmds := make([]*redis.SliceCmd, len(list))
	var qcmds []*redis.SliceCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range list {
			bases[i] = e.flushed.Load()
			cmds[i] = p.HMGet(ctx, lua.SaleKey(e.id), stateFields...)
			if m := e.meta.Load(); m != nil && m.vs != nil {
				vsets[i] = m.vs
				vcmds[i] = p.HMGet(ctx, lua.SaleKey(e.id), m.vs.fields...)
			}
		}
		qcmds = queueReads(ctx, p, list) // queue_state.go
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]*saleState, len(list))
	for i, cmd := range cmds {
		st := &saleState{base: bases[i]}
		if h, ok := lua.ReadHash(stateFields, cmd.Val()); ok && h.Has(lua.FieldTotal) {
			st.found = true
			st.total = h.Int(lua.FieldTotal)
			st.booked = h.Int(lua.FieldBooked)
			st.start = h.Int(lua.FieldStart) == 1
			st.closed = h.Int(lua.FieldClosed) == 1
			st.count = h.Int(lua.FieldCount)
			st.access = h.Int(lua.FieldAccess)
			st.price = h.Int(lua.FieldPrice)
			st.resume = h.Int(lua.FieldResume) >= 1
			readVariants(st, vsets[i], vcmds[i])
		}
		out[i] = st
	}
	applyQueue(qcmds, out)
	if err := s.sumBuckets(ctx, c, list, cmds, out); err != nil {
		return nil, err
	}
	return out, nil
}

// readVariants fills st's per-variant figures from cmd, the reading of
// vs.fields; it leaves them out when the hash holds none of them (a sale
// prepared before its variants were).
func readVariants(st *saleState, vs *variantSet, cmd *redis.SliceCmd) {
	if vs == nil {
		return
	}
	h, ok := lua.ReadHash(vs.fields, cmd.Val())
	if !ok || !h.Has(vs.fields[0]) {
		return
	}
	st.vs = vs
	st.vtotal = make([]int64, len(vs.ids))
	st.vbooked = make([]int64, len(vs.ids))
	for k := range vs.ids {
		st.vtotal[k] = h.Int(vs.fields[2*k])
		st.vbooked[k] = h.Int(vs.fields[2*k+1])
	}
}
