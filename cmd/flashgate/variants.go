package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/flashgate/flashgate"
)

// parseVariantIDs splits --variants into its ids: each a valid variant id,
// unique, at most flashgate.MaxVariants; "" is none.
func parseVariantIDs(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	ids := strings.Split(s, ",")
	if len(ids) > flashgate.MaxVariants {
		return nil, fmt.Errorf("--variants: %d ids, want at most %d", len(ids), flashgate.MaxVariants)
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !flashgate.ValidVariantID(id) {
			return nil, fmt.Errorf("--variants: %q: want 1-%d characters of A-Z a-z 0-9 _ -", id, flashgate.MaxVariantIDLen)
		}
		if seen[id] {
			return nil, fmt.Errorf("--variants: %q twice", id)
		}
		seen[id] = true
	}
	return ids, nil
}

// variantPicker picks a variant index per buyer from a Zipf-like
// distribution: the k-th variant (from 1) has weight 1/k^skew, so with a
// skew above 0 most buyers want the first few. It is deterministic for a
// seed.
type variantPicker struct {
	cum []float64 // cumulative weights, normalized to end at 1
	rng *rand.Rand
}

// newVariantPicker returns a picker among n variants (n ≥ 1).
func newVariantPicker(n int, skew float64, seed int64) *variantPicker {
	cum := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), skew)
		cum[k] = sum
	}
	for k := range cum {
		cum[k] /= sum
	}
	return &variantPicker{cum: cum, rng: rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))}
}

// pick returns the next buyer's variant index.
func (p *variantPicker) pick() int {
	x := p.rng.Float64()
	i := sort.SearchFloat64s(p.cum, x)
	return min(i, len(p.cum)-1)
}

// variantChoices returns each of users buyers' variant index among ids
// (nil without ids).
func variantChoices(ids []string, users int, skew float64, seed int64) []int {
	if len(ids) == 0 {
		return nil
	}
	p := newVariantPicker(len(ids), skew, seed)
	out := make([]int, users)
	for i := range out {
		out[i] = p.pick()
	}
	return out
}

// purchaseBody is the JSON body of a purchase of quantity units of variant
// ("" for none); nil when the default body (one unit, no variant) does.
func purchaseBody(variant string, quantity int64) []byte {
	switch {
	case variant == "" && quantity <= 1:
		return nil
	case variant == "":
		return fmt.Appendf(nil, `{"quantity":%d}`, quantity)
	case quantity <= 1:
		return fmt.Appendf(nil, `{"variant":%q}`, variant)
	}
	return fmt.Appendf(nil, `{"variant":%q,"quantity":%d}`, variant, quantity)
}

// splitUnits shares units among the variants ids evenly, the first ones
// taking the remainder (nil without ids).
func splitUnits(ids []string, units int64) []flashgate.Variant {
	if len(ids) == 0 {
		return nil
	}
	out := make([]flashgate.Variant, len(ids))
	n := int64(len(ids))
	for i, id := range ids {
		out[i] = flashgate.Variant{ID: id, Name: "Size " + id, Total: units / n}
		if int64(i) < units%n {
			out[i].Total++
		}
	}
	return out
}

// variantChecks are the demo's checks per variant: each variant's live
// units within its total, and every 201 a row of the variant it was for.
func variantChecks(variants []flashgate.Variant, live []flashgate.Order, orderVariant map[string]string) []check {
	units := map[string]int64{}
	for _, o := range live {
		units[o.Variant] += max(o.Quantity, 1)
	}
	var out []check
	for _, v := range variants {
		out = append(out, check{fmt.Sprintf("variant %s: live units %d <= its total %d", v.ID, units[v.ID], v.Total), units[v.ID] <= v.Total})
		delete(units, v.ID)
	}
	stray := int64(0)
	for _, n := range units {
		stray += n
	}
	out = append(out, check{fmt.Sprintf("every live unit is of one of the sale's variants (%d are not)", stray), stray == 0})
	rowVariant := make(map[string]string, len(live))
	for _, o := range live {
		rowVariant[o.ID] = o.Variant
	}
	wrong := 0
	for id, v := range orderVariant {
		if got, ok := rowVariant[id]; !ok || got != v {
			wrong++
		}
	}
	out = append(out, check{fmt.Sprintf("every 201 is a row of the variant it was for (%d are not)", wrong), wrong == 0})
	return out
}
