package inventory

import (
	"context"

	"github.com/flashgate/flashgate/lua"
)

// layoutFields are the sale hash fields layout reads.
var layoutFields = []string{lua.FieldTotal, lua.FieldLayout}

// layout returns the bucket layout of sale, from the sale hash's layout
// field (lua.FieldLayout). A layout is fixed for the sale's life, so it is
// read once per sale and kept; a sale Redis does not hold (no total) is
// not kept, and answers the unbucketed layout, whose reserve then finds no
// sale.
func (s *Service) layout(ctx context.Context, sale string) (lua.Layout, error) {
	s.layoutMu.RLock()
	l, ok := s.layouts[sale]
	s.layoutMu.RUnlock()
	if ok {
		return l, nil
	}
	v, err := s.rdb.HMGet(ctx, lua.SaleKey(sale), layoutFields...).Result()
	if err != nil {
		return lua.Layout{Sale: sale}, s.redisError("reading sale layout", err)
	}
	h, ok := lua.ReadHash(layoutFields, v)
	if !ok || !h.Has(lua.FieldTotal) {
		return lua.Layout{Sale: sale}, nil
	}
	str := h.Str(lua.FieldLayout)
	l, ok = lua.ParseLayout(sale, str)
	if !ok {
		s.log.Error("malformed bucket layout", "sale", sale, "layout", str)
		return lua.Layout{Sale: sale}, nil
	}
	s.layoutMu.Lock()
	if s.layouts == nil {
		s.layouts = make(map[string]lua.Layout)
	}
	s.layouts[sale] = l
	s.layoutMu.Unlock()
	return l, nil
}

// tagOf is the tag whose keys hold an order of sale in bucket: its bucket's in a bucketed
// sale, else the sale's own.
func (s *Service) tagOf(ctx context.Context, sale string, bucket int) (string, error) {
	l, err := s.layout(ctx, sale)
	if err != nil {
		return "", err
	}
	if !l.Bucketed() {
		return sale, nil
	}
	if bucket < 0 || bucket >= l.N() {
		return "", errBadBucket
	}
	return l.Tag(bucket), nil
}
