package fencing

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/flashgate/flashgate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestToken(t *testing.T) {
	ctx := context.Background()
	if got := Of(ctx); got != 0 {
		t.Errorf("Of a bare context: got %d, want 0", got)
	}
	if got := Of(WithValue(ctx, 7)); got != 7 {
		t.Errorf("Of WithValue 7: got %d, want 7", got)
	}
	if TermOf(WithValue(ctx, 7)) != nil {
		t.Errorf("TermOf an admin call's token: got a term, want nil")
	}
	term, cancel := context.WithCancel(ctx)
	defer cancel()
	tok := &Token{Term: term}
	tctx := With(ctx, tok)
	tok.V.Store(9) // the leader raises its token: every context carrying it sees the new one
	if got := Of(tctx); got != 9 {
		t.Errorf("Of after a raise: got %d, want 9", got)
	}
	if TermOf(tctx) != term {
		t.Errorf("TermOf: got another context, want the term's")
	}
	if err := Err("writing", 9); !errors.Is(err, flashgate.ErrFenced) {
		t.Errorf("Err: got %v, want ErrFenced", err)
	}
}
