package controlplane

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// fenceKey is the context key of the fencing token that the writes under a
// context carry.
type fenceKey struct{}

// fenceToken is a fencing token: a leadership term's (which lead raises
// when the lease holds and a newer token was handed out meanwhile) or an
// admin call's.
type fenceToken struct {
	v atomic.Int64
	// term is the context of the leadership term that holds the token; nil
	// for an admin call's.
	term context.Context
}

// withFence returns ctx carrying token t.
func withFence(ctx context.Context, t *fenceToken) context.Context {
	return context.WithValue(ctx, fenceKey{}, t)
}

// fenceOf is the fencing token ctx carries, 0 when none.
func fenceOf(ctx context.Context) int64 {
	if t, ok := ctx.Value(fenceKey{}).(*fenceToken); ok {
		return t.v.Load()
	}
	return 0
}

// termOf is the context of the leadership term whose token ctx carries,
// nil when none.
func termOf(ctx context.Context) context.Context {
	if t, ok := ctx.Value(fenceKey{}).(*fenceToken); ok {
		return t.term
	}
	return nil
}

// fenced returns ctx carrying a fencing token: ctx's own when it has one
// (the leader's loops), else a fresh one (an admin call's Start, Stop,
// Resync or ExpireDue, on whichever control plane serves it). A fresh
// token outranks every token before it, the leader's included: a leader
// paused past its lease stays fenced off from what the call wrote, and the
// current leader's writes there are refused until it takes a newer token at
// its next renewal (lead), a tick later.
func (s *Service) fenced(ctx context.Context) (context.Context, error) {
	if fenceOf(ctx) > 0 {
		return ctx, nil
	}
	tok, err := s.takeFence(ctx)
	if err != nil {
		return ctx, err
	}
	t := &fenceToken{}
	t.v.Store(tok)
	return withFence(ctx, t), nil
}

// takeFence takes a fresh fencing token (lua.TakeFence).
func (s *Service) takeFence(ctx context.Context) (int64, error) {
	tok, err := lua.TakeFence.Run(ctx, s.rdb, lua.FenceKeys(), time.Now().UnixMilli()).Int64()
	if err != nil {
		return 0, fmt.Errorf("taking a fencing token: %w: %w", flashgate.ErrUnavailable, err)
	}
	return tok, nil
}

// errFenced is the error of a write that Redis refused for a stale
// fencing token.
func errFenced(what string, token int64) error {
	return fmt.Errorf("%s with fencing token %d: %w", what, token, flashgate.ErrFenced)
}

// mark sets pairs of fields of a sale or bucket hash under ctx's fencing
// token (lua.Mark); a missing hash is left alone.
func (s *Service) mark(ctx context.Context, tag string, pairs ...any) error {
	tok := fenceOf(ctx)
	n, err := lua.Mark.Run(ctx, s.rdb, lua.SaleKeys(tag), append([]any{tok}, pairs...)...).Int()
	if err != nil {
		return fmt.Errorf("%w: %w", flashgate.ErrUnavailable, err)
	}
	if n == lua.MarkFenced {
		return errFenced("marking "+tag, tok)
	}
	return nil
}
