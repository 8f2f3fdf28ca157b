package sqldb

import (
	"context"
	"reflect"
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
