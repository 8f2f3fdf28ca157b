package sqldb

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/flashgate/flashgate"
)

// TestSaleQueueSettings: a fair queue's settings survive the round trip on
// both dialects, challenge_auto's default (nil, true) and an explicit false
// included.
func TestSaleQueueSettings(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		start := t0
		off := false
		for _, want := range []flashgate.Sale{
			{ID: "fair", Name: "F", Total: 5, StartsAt: &start, Queue: flashgate.QueueFair, PrequeueSeconds: 900,
				ChallengeMaxNumber: 50000, ChallengeAuto: &off, AdmitPerMinute: 120, AdmitSeconds: 45},
			{ID: "fair-defaults", Name: "D", Total: 5, StartsAt: &start, Queue: flashgate.QueueFair},
			{ID: "first-come", Name: "C", Total: 5},
		} {
			if err := db.CreateSale(ctx, want); err != nil {
				t.Fatalf("CreateSale(%s): %v", want.ID, err)
			}
			got, err := db.Sale(ctx, want.ID)
			if err != nil {
				t.Fatal(err)
			}
			g := [6]any{got.Queue, got.PrequeueSeconds, got.ChallengeMaxNumber, got.ChallengeAutoOn(), got.AdmitPerMinute, got.AdmitSeconds}
			w := [6]any{want.Queue, want.PrequeueSeconds, want.ChallengeMaxNumber, want.ChallengeAutoOn(), want.AdmitPerMinute, want.AdmitSeconds}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s: got %v, want %v", want.ID, g, w)
			}
		}
	})
}

// TestQueueJournal: a fair queue's journal on both dialects keeps each
// entrant's first entry, lets the frontiers only grow (with the windows
// that go with the greater one), and a mark of another epoch replaces the
// old queue.
func TestQueueJournal(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		if _, _, ok, err := db.QueueJournal(ctx, "q"); ok || err != nil {
			t.Fatalf("no journal: got ok %v, %v", ok, err)
		}
		m := flashgate.QueueMark{Epoch: "1", SeedSHA: "aa", K: 3, E: 1, Windows: "3 100 t"}
		a := []flashgate.QueueEntrant{{User: "alice", Entry: "p"}, {User: "bob", Entry: "l1"}}
		if err := db.JournalQueue(ctx, "q", m, a); err != nil {
			t.Fatal(err)
		}
		older := flashgate.QueueMark{Epoch: "1", SeedSHA: "aa", K: 2, E: 0, Windows: "2 50 s"}
		if err := db.JournalQueue(ctx, "q", older, []flashgate.QueueEntrant{{User: "bob", Entry: "l7"}, {User: "carol", Entry: "l2"}}); err != nil {
			t.Fatal(err)
		}
		got, es, ok, err := db.QueueJournal(ctx, "q")
		if err != nil || !ok {
			t.Fatalf("QueueJournal: %v %v", ok, err)
		}
		if got != m {
			t.Errorf("after an older mark: got %+v, want %+v", got, m)
		}
		slices.SortFunc(es, func(a, b flashgate.QueueEntrant) int { return strings.Compare(a.User, b.User) })
		want := []flashgate.QueueEntrant{{User: "alice", Entry: "p"}, {User: "bob", Entry: "l1"}, {User: "carol", Entry: "l2"}}
		if !reflect.DeepEqual(es, want) {
			t.Errorf("entrants: got %v, want %v", es, want)
		}
		anew := flashgate.QueueMark{Epoch: "2", SeedSHA: "bb"}
		if err := db.JournalQueue(ctx, "q", anew, []flashgate.QueueEntrant{{User: "dave", Entry: "p"}}); err != nil {
			t.Fatal(err)
		}
		got, es, _, err = db.QueueJournal(ctx, "q")
		if err != nil || got != anew || !reflect.DeepEqual(es, []flashgate.QueueEntrant{{User: "dave", Entry: "p"}}) {
			t.Errorf("another epoch: got %+v %v %v, want %+v and dave alone", got, es, err, anew)
		}
	})
}
