package gateway

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// sumBuckets completes the states of bucketed sales (their hash has a
// layout, lua.FieldLayout): their stock lives in their buckets, so booked
// becomes the sum of the buckets' booked, read in one more pipeline on the
// same client. total stays the sale's (the buckets' totals add up to at
// most it), so sold-out and remaining are the whole sale's. A sale sold in
// variants also sums each variant's booked over the buckets, its totals
// staying the sale's own. Unbucketed sales cost nothing here.
func (s *Server) sumBuckets(ctx context.Context, c redis.UniversalClient, list []*sale, cmds []*redis.SliceCmd, out []*saleState) error {
	type pending struct {
		i     int
		cmds  []*redis.StringCmd
		vcmds []*redis.SliceCmd
	}
	var todo []pending
	var pipe redis.Pipeliner
	for i, cmd := range cmds {
		h, ok := lua.ReadHash(stateFields, cmd.Val())
		if !ok || !out[i].found {
			continue
		}
		str := h.Str(lua.FieldLayout)
		if str == "" {
			continue
		}
		l, ok := lua.ParseLayout(list[i].id, str)
		if !ok || !l.Bucketed() {
			continue
		}
		if pipe == nil {
			pipe = c.Pipeline()
		}
		p := pending{i: i}
		for _, tag := range l.Tags() {
			p.cmds = append(p.cmds, pipe.HGet(ctx, lua.SaleKey(tag), lua.FieldBooked))
			if vs := out[i].vs; vs != nil {
				p.vcmds = append(p.vcmds, pipe.HMGet(ctx, lua.SaleKey(tag), vs.fields...))
			}
		}
		todo = append(todo, p)
	}
	if pipe == nil {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for _, p := range todo {
		var booked int64
		for _, cmd := range p.cmds {
			booked += lua.Int(cmd.Val())
		}
		st := out[p.i]
		st.booked = booked
		if p.vcmds != nil {
			// vs.fields hold each variant's total, then its booked.
			clear(st.vbooked)
			for _, cmd := range p.vcmds {
				for k, v := range cmd.Val() {
					if k%2 == 1 {
						st.vbooked[k/2] += lua.Int(v)
					}
				}
			}
		}
	}
	return nil
}
