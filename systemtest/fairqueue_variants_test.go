package systemtest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
)

// TestFairQueueVariants runs a fair-queue drop of a sale sold in three
// variants, most entrants wanting the smallest stock first. Admission is
// per sale, so a buyer admitted when their variant has sold out must still
// buy another ("a sure unit" is a unit of some variant): runDrop fails on
// any admitted buyer who cannot. Then: each variant's live units within
// its total and all sold, one live order per buyer, every buyer's row of
// the variant they bought, and some buyers did turn to another variant.
func TestFairQueueVariants(t *testing.T) {
	s := startDropSystem(t, time.Now().Truncate(time.Second))
	rng := rand.New(rand.NewPCG(dropSeed(t), 31))
	variants := []flashgate.Variant{{ID: "S", Name: "Small", Total: 2}, {ID: "M", Name: "Medium", Total: 5}, {ID: "L", Name: "Large", Total: 8}}
	spec := dropSpec{id: "dropV", total: 15, pre: 40, late: 10, buyShare: 1, variants: variants}
	crowd, seed := runDrop(t, s, spec, rng)
	checkDrop(t, s, spec.id, spec.total, crowd, seed)

	live, err := s.db.LiveOrders(s.ctx, spec.id)
	if err != nil {
		t.Fatal(err)
	}
	byUser := map[string]flashgate.Order{}
	units := map[string]int64{}
	for _, o := range live {
		if _, dup := byUser[o.UserID]; dup {
			t.Errorf("%s holds two live orders", o.UserID)
		}
		byUser[o.UserID] = o
		units[o.Variant] += o.Quantity
	}
	for _, v := range variants {
		if units[v.ID] != v.Total {
			t.Errorf("variant %s: %d live units, want all %d sold (no more)", v.ID, units[v.ID], v.Total)
		}
	}
	switched := 0
	for _, en := range crowd {
		if !en.bought {
			continue
		}
		if o, ok := byUser[en.user]; !ok || o.Variant != en.got {
			t.Errorf("%s bought %s: row %+v", en.user, en.got, o)
		}
		if en.got != en.wants {
			switched++
		}
	}
	if switched == 0 {
		t.Errorf("no admitted buyer turned to another variant: the drop does not try the promise")
	}
	t.Logf("live units per variant %v; %d buyers bought another variant than the one they wanted first", units, switched)
}
