package controlplane

import (
	"context"
	"errors"
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

// WithFencingToken returns ctx whose writes (Start, Stop, Resync,
// ExpireDue) carry fencing token tok instead of one of their own, as the
// leader's loops do with their lease's: for tools and tests that act as a
// leader holding tok.
func WithFencingToken(ctx context.Context, tok int64) context.Context {
	t := &fenceToken{}
	t.v.Store(tok)
	return withFence(ctx, t)
}

// fenceAttempts bounds the tries of an admin call whose writes a newer
// token refused.
const fenceAttempts = 3

// fencedCall runs f with a fencing token. Under ctx's own (the leader's
// loops) f runs once. Otherwise (an admin call's Start, Stop, Resync or
// ExpireDue) it runs with the lease's token when this control plane leads
// (its term is live), else with a fresh one (lua.TakeFence), and again with
// a fresh one, up to fenceAttempts times in all, while a newer token
// refuses its writes.
//
// A fresh token outranks every token before it, the leader's included: a
// leader paused past its lease stays fenced off from what the call wrote,
// and the current leader's writes there are refused until it takes a newer
// token at its next renewal (lead), a tick later; an admin call that meets
// the leader's newer token then tries again.
func (s *Service) fencedCall(ctx context.Context, f func(context.Context) error) error {
	if fenceOf(ctx) > 0 {
		return f(ctx)
	}
	var err error
	for i := range fenceAttempts {
		tok := int64(0)
		if i == 0 {
			tok = s.termFence()
		}
		if tok < 1 {
			var terr error
			if tok, terr = s.takeFence(ctx); terr != nil {
				return terr
			}
		}
		if err = f(WithFencingToken(ctx, tok)); !errors.Is(err, flashgate.ErrFenced) {
			return err
		}
	}
	return err
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
