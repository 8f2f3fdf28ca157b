package flashgate

import (
	"errors"
	"testing"
	"time"
)

func TestValidateDraw(t *testing.T) {
	open := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	closeAt := open.Add(time.Hour)
	before := open.Add(-time.Minute)
	later := closeAt.Add(time.Hour)
	auto := true
	for _, c := range []struct {
		name  string
		s     Sale
		field string // "" valid
	}{
		{"first come", Sale{}, ""},
		{"fair", Sale{Queue: QueueFair}, ""},
		{"window without draw", Sale{EntriesOpenAt: &open}, "entries_open_at"},
		{"close without draw", Sale{Queue: QueueFair, EntriesCloseAt: &closeAt}, "entries_close_at"},
		{"draw", Sale{Queue: QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}, ""},
		{"draw without open", Sale{Queue: QueueDraw, EntriesCloseAt: &closeAt}, "entries_open_at"},
		{"draw without close", Sale{Queue: QueueDraw, EntriesOpenAt: &open}, "entries_close_at"},
		{"close before open", Sale{Queue: QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &before}, "entries_close_at"},
		{"close at open", Sale{Queue: QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &open}, "entries_close_at"},
		{"ends at the close", Sale{Queue: QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt, EndsAt: &closeAt}, "ends_at"},
		{"ends after the close", Sale{Queue: QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt, EndsAt: &later}, ""},
		{"bucketed", Sale{Queue: QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt, Buckets: 2}, "buckets"},
		{"queue settings", Sale{Queue: QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt, ChallengeAuto: &auto}, "queue"},
	} {
		err := c.s.ValidateDraw()
		var fe *FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: got %v, want nil", c.name, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ErrBadRequest)):
			t.Errorf("%s: got %v, want a bad request naming %s", c.name, err, c.field)
		}
	}
}

func TestEntriesOpen(t *testing.T) {
	open := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	closeAt := open.Add(time.Hour)
	s := Sale{Queue: QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}
	for _, c := range []struct {
		at   time.Time
		want bool
	}{{open.Add(-time.Nanosecond), false}, {open, true}, {closeAt.Add(-time.Nanosecond), true}, {closeAt, false}} {
		if got := s.EntriesOpen(c.at); got != c.want {
			t.Errorf("EntriesOpen(%v): got %v, want %v", c.at, got, c.want)
		}
	}
	if (Sale{EntriesOpenAt: &open, EntriesCloseAt: &closeAt}).EntriesOpen(open) {
		t.Error("a sale that is no draw takes entries")
	}
}

func TestValidateEntry(t *testing.T) {
	sized := Sale{Queue: QueueDraw, PerUser: 2, Variants: []Variant{{ID: "S", Name: "S", Total: 1}, {ID: "M", Name: "M", Total: 1}}}
	plain := Sale{Queue: QueueDraw}
	for _, c := range []struct {
		name    string
		s       Sale
		variant string
		qty     int64
		want    error
		field   string
	}{
		{"sized ok", sized, "M", 2, nil, ""},
		{"unknown size", sized, "XL", 1, ErrBadRequest, "variant"},
		{"no size", sized, "", 1, ErrBadRequest, "variant"},
		{"over per_user", sized, "S", 3, ErrBadRequest, "quantity"},
		{"zero", sized, "S", 0, ErrBadRequest, "quantity"},
		{"plain ok", plain, "", 1, nil, ""},
		{"plain over its one", plain, "", 2, ErrBadRequest, "quantity"},
		{"plain with a size", plain, "S", 1, ErrBadRequest, "variant"},
		{"not a draw", Sale{}, "", 1, ErrNotFound, ""},
	} {
		err := c.s.ValidateEntry(c.variant, c.qty)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
			continue
		}
		var fe *FieldError
		if c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field) {
			t.Errorf("%s: got %v, want the field %s", c.name, err, c.field)
		}
	}
}

func TestDrawEntryStates(t *testing.T) {
	for _, st := range drawStates {
		if !st.Valid() {
			t.Errorf("%s: not valid", st)
		}
		if st.Live() && st.Final() {
			t.Errorf("%s: live and final", st)
		}
	}
	if DrawEntryState("bogus").Valid() {
		t.Error("bogus is valid")
	}
	if !DrawPending.Live() || !DrawEntered.Live() || DrawWithdrawn.Live() || DrawWon.Live() {
		t.Error("live states: pending and entered only")
	}
}

// TestDrawEntryRank: every move an entry makes (lua.DrawSet,
// lua.DrawWithdraw) goes to a higher rank, which the database's rows rely
// on to refuse a change older than theirs whatever its time.
func TestDrawEntryRank(t *testing.T) {
	for _, m := range []struct{ from, to DrawEntryState }{
		{DrawPending, DrawEntered}, {DrawPending, DrawWithdrawn}, {DrawEntered, DrawWithdrawn},
		{DrawEntered, DrawWon}, {DrawEntered, DrawLost}, {DrawWon, DrawCaptured}, {DrawLost, DrawCaptured},
		{DrawWon, DrawReleased}, {DrawLost, DrawReleased}, {DrawWithdrawn, DrawReleased},
	} {
		if m.to.Rank() <= m.from.Rank() {
			t.Errorf("%s → %s: got ranks %d → %d, want a higher one", m.from, m.to, m.from.Rank(), m.to.Rank())
		}
	}
	for _, st := range drawStates {
		if st.Rank() < 0 {
			t.Errorf("%s: got rank %d, want one", st, st.Rank())
		}
	}
	if got := DrawEntryState("bogus").Rank(); got != -1 {
		t.Errorf("bogus: got rank %d, want -1", got)
	}
}
