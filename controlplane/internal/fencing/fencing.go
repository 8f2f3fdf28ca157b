// Package fencing carries the control plane's fencing tokens: a context
// holds the token its writes carry (a leadership term's or an admin
// call's), and every fenced write to Redis names it, so that Redis refuses
// the writes of a leader that lost its lease once a newer token wrote.
// controlplane takes and renews the tokens; controlplane/buckets writes
// under them.
package fencing

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// key is the context key of the fencing token that the writes under a
// context carry.
type key struct{}

// Token is a fencing token: a leadership term's (which the leader raises
// when its lease holds and a newer token was handed out meanwhile) or an
// admin call's.
type Token struct {
	V atomic.Int64
	// Term is the context of the leadership term that holds the token; nil
	// for an admin call's.
	Term context.Context
}

// With returns ctx carrying token t.
func With(ctx context.Context, t *Token) context.Context {
	return context.WithValue(ctx, key{}, t)
}

// WithValue returns ctx carrying a token of value tok and no term.
func WithValue(ctx context.Context, tok int64) context.Context {
	t := &Token{}
	t.V.Store(tok)
	return With(ctx, t)
}

// Of is the fencing token ctx carries, 0 when none.
func Of(ctx context.Context) int64 {
	if t, ok := ctx.Value(key{}).(*Token); ok {
		return t.V.Load()
	}
	return 0
}

// TermOf is the context of the leadership term whose token ctx carries,
// nil when none.
func TermOf(ctx context.Context) context.Context {
	if t, ok := ctx.Value(key{}).(*Token); ok {
		return t.Term
	}
	return nil
}

// Err is the error of a write that Redis refused for a stale fencing
// token.
func Err(what string, token int64) error {
	return fmt.Errorf("%s with fencing token %d: %w", what, token, flashgate.ErrFenced)
}

// Mark sets pairs of fields of a sale or bucket hash under ctx's fencing
// token (lua.Mark); a missing hash is left alone.
func Mark(ctx context.Context, rdb redis.Scripter, tag string, pairs ...any) error {
	tok := Of(ctx)
	n, err := lua.Mark.Run(ctx, rdb, lua.SaleKeys(tag), append([]any{tok}, pairs...)...).Int()
	if err != nil {
		return fmt.Errorf("%w: %w", flashgate.ErrUnavailable, err)
	}
	if n == lua.MarkFenced {
		return Err("marking "+tag, tok)
	}
	return nil
}
