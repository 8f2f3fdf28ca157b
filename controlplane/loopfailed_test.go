package controlplane

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
)

// TestLoopFailedLevel: a leader loop's write refused by a newer fencing
// token (an admin call's, taken while the term was live; the demo's start
// can race its first tick) is said at info, since the next renewal takes a
// newer token; any other failure warns.
func TestLoopFailedLevel(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("expiring orders: leader fence above token 7: %w", flashgate.ErrFenced), "level=INFO"},
		{fmt.Errorf("expiring orders: %w", flashgate.ErrUnavailable), "level=WARN"},
		{errors.New("disk full"), "level=WARN"},
	}
	for _, c := range cases {
		logs := &lockedBuffer{}
		s := &Service{log: slog.New(slog.NewTextHandler(logs, nil))}
		s.loopFailed("expiry", c.err)
		if logs.lines(c.want) != 1 || logs.lines("level=") != 1 {
			t.Errorf("loopFailed(%v): got %q, want one line at %s", c.err, logs.b.String(), c.want)
		}
	}
}

// TestLogResyncLevel: a re-sync pass a newer fencing token refused (the
// demo's start or the failover watch took one while the term was live) and
// a pass cut short by a release backlog are said at info; any other failure
// warns.
func TestLogResyncLevel(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("re-syncing sale demo with fencing token 7: %w", flashgate.ErrFenced), "level=INFO"},
		{fmt.Errorf("re-syncing: %w", salehash.ErrReleaseBacklog), "level=INFO"},
		{fmt.Errorf("re-syncing: %w", flashgate.ErrUnavailable), "level=WARN"},
		{errors.New("disk full"), "level=WARN"},
	}
	for _, c := range cases {
		logs := &lockedBuffer{}
		s := &Service{log: slog.New(slog.NewTextHandler(logs, nil))}
		s.logResync("demo", c.err)
		if logs.lines(c.want) != 1 || logs.lines("level=") != 1 {
			t.Errorf("logResync(%v): got %q, want one line at %s", c.err, logs.b.String(), c.want)
		}
	}
	logs := &lockedBuffer{}
	s := &Service{log: slog.New(slog.NewTextHandler(logs, nil))}
	if s.logResync("demo", nil); logs.b.Len() != 0 {
		t.Errorf("logResync(nil): got %q, want nothing", logs.b.String())
	}
}
