package main

import (
	"slices"
	"testing"

	"github.com/flashgate/flashgate"
)

func TestParseVariantIDs(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		ok   bool
	}{
		{"", nil, true},
		{"S,M,L", []string{"S", "M", "L"}, true},
		{"42,43_x,a-b", []string{"42", "43_x", "a-b"}, true},
		{"S,,L", nil, false},
		{"S,S", nil, false},
		{"S M", nil, false},
		{"abcdefghijklmnopq", nil, false}, // 17 characters
	}
	for _, tt := range tests {
		got, err := parseVariantIDs(tt.in)
		if (err == nil) != tt.ok || !slices.Equal(got, tt.want) {
			t.Errorf("parseVariantIDs(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestVariantChoicesSkew(t *testing.T) {
	ids := []string{"S", "M", "L", "XL", "XXL"}
	const users = 20000
	a := variantChoices(ids, users, 1.1, 7)
	if b := variantChoices(ids, users, 1.1, 7); !slices.Equal(a, b) {
		t.Fatal("the same seed gave other choices")
	}
	if c := variantChoices(ids, users, 1.1, 8); slices.Equal(a, c) {
		t.Fatal("another seed gave the same choices")
	}
	count := make([]int, len(ids))
	for _, k := range a {
		count[k]++
	}
	// Zipf with exponent 1.1 over 5: weights 1, 0.47, 0.30, 0.22, 0.17 of
	// 2.16, so the first takes about 46%, the last about 8%.
	for k := 1; k < len(count); k++ {
		if count[k] >= count[k-1] {
			t.Errorf("variant %s wanted by %d, not fewer than %s's %d", ids[k], count[k], ids[k-1], count[k-1])
		}
	}
	if got := float64(count[0]) / users; got < 0.42 || got > 0.50 {
		t.Errorf("first variant's share: got %.3f, want about 0.46", got)
	}
	if got := float64(count[4]) / users; got < 0.06 || got > 0.10 {
		t.Errorf("last variant's share: got %.3f, want about 0.08", got)
	}
	u := make([]int, len(ids))
	for _, k := range variantChoices(ids, users, 0, 7) {
		u[k]++
	}
	for k, n := range u {
		if got := float64(n) / users; got < 0.18 || got > 0.22 {
			t.Errorf("skew 0: variant %s's share %.3f, want about 0.2", ids[k], got)
		}
	}
}

func TestPurchaseBody(t *testing.T) {
	tests := []struct {
		variant string
		q       int64
		want    string
	}{
		{"", 1, ""},
		{"", 3, `{"quantity":3}`},
		{"42", 1, `{"variant":"42"}`},
		{"M", 2, `{"variant":"M","quantity":2}`},
	}
	for _, tt := range tests {
		if got := string(purchaseBody(tt.variant, tt.q)); got != tt.want {
			t.Errorf("purchaseBody(%q, %d) = %s, want %s", tt.variant, tt.q, got, tt.want)
		}
	}
}

func TestVariantChecks(t *testing.T) {
	vs := splitUnits([]string{"S", "M", "L"}, 10)
	if got := []int64{vs[0].Total, vs[1].Total, vs[2].Total}; !slices.Equal(got, []int64{4, 3, 3}) {
		t.Fatalf("splitUnits: got %v, want [4 3 3]", got)
	}
	row := func(id, v string) flashgate.Order { return flashgate.Order{ID: id, Variant: v, Quantity: 1} }
	failed := func(cs []check) (n int) {
		for _, c := range cs {
			if !c.ok {
				n++
			}
		}
		return n
	}
	good := []flashgate.Order{row("a", "S"), row("b", "S"), row("c", "M")}
	if n := failed(variantChecks(vs, good, map[string]string{"a": "S", "b": "S", "c": "M"})); n != 0 {
		t.Errorf("a legal sale: %d checks failed, want 0", n)
	}
	var over []flashgate.Order
	for _, id := range []string{"a", "b", "c", "d"} {
		over = append(over, row(id, "M")) // 4 > M's 3, though 4 <= 10
	}
	if n := failed(variantChecks(vs, over, nil)); n != 1 {
		t.Errorf("M oversold: %d checks failed, want 1", n)
	}
	if n := failed(variantChecks(vs, good, map[string]string{"a": "M"})); n != 1 {
		t.Errorf("a 201 for M stored as S: %d checks failed, want 1", n)
	}
	if n := failed(variantChecks(vs, []flashgate.Order{row("a", "")}, nil)); n != 1 {
		t.Errorf("a row without its variant: %d checks failed, want 1", n)
	}
}
