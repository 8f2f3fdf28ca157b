package draw_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/draw"
	"github.com/flashgate/flashgate/fairqueue"
)

var seed = bytes.Repeat([]byte{7}, 32)

// byRank is the oracle: the entries sorted by the fair queue's published
// rank key (fairqueue.Rank, lowercase hex), computed apart from the draw.
func byRank(sale string, entries []draw.Entry) []draw.Entry {
	out := slices.Clone(entries)
	slices.SortFunc(out, func(a, b draw.Entry) int {
		return strings.Compare(fairqueue.Rank(seed, sale, a.ID), fairqueue.Rank(seed, sale, b.ID))
	})
	return out
}

func ids(es []draw.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func entries(n int, variants ...string) []draw.Entry {
	out := make([]draw.Entry, n)
	for i := range out {
		out[i] = draw.Entry{ID: fmt.Sprintf("e%04d", i), Quantity: 1}
		if len(variants) > 0 {
			out[i].Variant = variants[i%len(variants)]
		}
	}
	return out
}

// TestWinners: each variant's winners are its entrants first in the
// seed's order (the fair queue's rank keys), as many as its units; an
// entry too large for what is left loses and the walk goes on.
func TestWinners(t *testing.T) {
	three := entries(300, "S", "M", "L")
	cases := []struct {
		name    string
		entries []draw.Entry
		stock   map[string]int
		want    func() map[string][]string
	}{
		{name: "one stock", entries: entries(50), stock: map[string]int{"": 7}, want: func() map[string][]string {
			return map[string][]string{"": ids(byRank("s1", entries(50))[:7])}
		}},
		{name: "more units than entries", entries: entries(5), stock: map[string]int{"": 9}, want: func() map[string][]string {
			return map[string][]string{"": ids(byRank("s1", entries(5)))}
		}},
		{name: "no units", entries: entries(5), stock: map[string]int{"": 0}, want: func() map[string][]string { return map[string][]string{} }},
		{name: "three sizes", entries: three, stock: map[string]int{"S": 3, "M": 1, "L": 20}, want: func() map[string][]string {
			out := map[string][]string{}
			for _, e := range byRank("s1", three) {
				if n := map[string]int{"S": 3, "M": 1, "L": 20}[e.Variant]; len(out[e.Variant]) < n {
					out[e.Variant] = append(out[e.Variant], e.ID)
				}
			}
			return out
		}},
		{name: "a size nobody entered", entries: entries(4, "S"), stock: map[string]int{"S": 1, "XL": 5}, want: func() map[string][]string {
			return map[string][]string{"S": ids(byRank("s1", entries(4, "S"))[:1])}
		}},
	}
	for _, tc := range cases {
		got, err := draw.Winners("s1", seed, tc.entries, tc.stock)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		gotIDs := map[string][]string{}
		for v, w := range got {
			gotIDs[v] = ids(w)
			for _, e := range w {
				if !e.Won {
					t.Errorf("%s: winner %s without Won", tc.name, e.ID)
				}
			}
		}
		if want := tc.want(); !maps.EqualFunc(gotIDs, want, slices.Equal) {
			t.Errorf("%s: got %v, want %v", tc.name, gotIDs, want)
		}
	}

	// Quantities: 3 units; in the seed's order entries of 2, 2, 1: the
	// second does not fit (1 left) and loses, the third takes the last.
	es := entries(3)
	ordered := byRank("s1", es)
	qty := map[string]int{ordered[0].ID: 2, ordered[1].ID: 2, ordered[2].ID: 1}
	for i := range es {
		es[i].Quantity = qty[es[i].ID]
	}
	got, err := draw.Winners("s1", seed, es, map[string]int{"": 3})
	if want := []string{ordered[0].ID, ordered[2].ID}; err != nil || !slices.Equal(ids(got[""]), want) {
		t.Errorf("quantities: got %v, %v; want %v", ids(got[""]), err, want)
	}
}

// TestWinnersInvalid: malformed input is ErrInvalid.
func TestWinnersInvalid(t *testing.T) {
	ok := map[string]int{"": 1}
	cases := []struct {
		name    string
		sale    string
		entries []draw.Entry
		stock   map[string]int
	}{
		{"an id twice", "s1", []draw.Entry{{ID: "a", Quantity: 1}, {ID: "b", Quantity: 1}, {ID: "a", Quantity: 1}}, ok},
		{"a malformed id", "s1", []draw.Entry{{ID: "a b", Quantity: 1}}, ok},
		{"no quantity", "s1", []draw.Entry{{ID: "a"}}, ok},
		{"a variant without stock", "s1", []draw.Entry{{ID: "a", Variant: "S", Quantity: 1}}, ok},
		{"a malformed variant", "s1", []draw.Entry{{ID: "a", Variant: "S M", Quantity: 1}}, map[string]int{"S M": 1}},
		{"negative stock", "s1", nil, map[string]int{"": -1}},
		{"a malformed sale", "s 1", nil, ok},
	}
	for _, tc := range cases {
		if _, err := draw.Winners(tc.sale, seed, tc.entries, tc.stock); !errors.Is(err, draw.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", tc.name, err)
		}
	}
}

// TestOrder: the order is the fair queue's rank rule, smallest key first.
func TestOrder(t *testing.T) {
	es := entries(1000, "S", "M")
	got, err := draw.Order("drop", seed, es)
	if err != nil {
		t.Fatal(err)
	}
	if want := ids(byRank("drop", es)); !slices.Equal(ids(got), want) {
		t.Errorf("order differs from the rank keys' order")
	}
}

func newFile(t *testing.T) *draw.File {
	t.Helper()
	f, err := draw.New("drop", seed, map[string]int{"S": 5, "M": 5, "L": 5}, entries(60, "S", "M", "L"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFileVerifies: a draw's file written and read back verifies, with
// the same winners; a sale without variants too.
func TestFileVerifies(t *testing.T) {
	for _, f := range []*draw.File{newFile(t), func() *draw.File {
		f, err := draw.New("plain", seed, map[string]int{"": 4}, entries(10))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}()} {
		var buf bytes.Buffer
		if err := draw.Write(&buf, f); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(buf.String(), "user") {
			t.Errorf("the file names users:\n%s", buf.String())
		}
		back, err := draw.Read(&buf)
		if err != nil {
			t.Fatal(err)
		}
		got, err := draw.Verify(back)
		if err != nil {
			t.Fatalf("%s: %v", f.Sale, err)
		}
		want, _ := draw.Winners(f.Sale, f.Seed, f.Entries, f.Stock)
		if !maps.EqualFunc(got, want, slices.Equal) || back.Sale != f.Sale || back.SeedSHA256 != fairqueue.Commitment(seed) {
			t.Errorf("%s: read back: got %+v, want %+v", f.Sale, got, want)
		}
		won := 0
		for _, e := range back.Entries {
			if e.Won {
				won++
			}
		}
		if total := f.Stock[""] + f.Stock["S"] + f.Stock["M"] + f.Stock["L"]; won != total {
			t.Errorf("%s: %d published winners, want %d", f.Sale, won, total)
		}
	}
}

// TestFileTampered: a file whose seed, results, entries or stock were
// changed after the draw does not verify.
func TestFileTampered(t *testing.T) {
	var buf bytes.Buffer
	if err := draw.Write(&buf, newFile(t)); err != nil {
		t.Fatal(err)
	}
	orig := buf.String()
	lines := strings.Split(orig, "\n")
	firstWon, firstLost := -1, -1
	for i, l := range lines {
		if strings.HasSuffix(l, " won") && firstWon < 0 {
			firstWon = i
		}
		if strings.HasSuffix(l, " lost") && firstLost < 0 {
			firstLost = i
		}
	}
	edit := func(f func([]string) []string) string {
		return strings.Join(f(slices.Clone(lines)), "\n")
	}
	cases := []struct {
		name string
		text string
		want error
	}{
		{"another seed", edit(func(l []string) []string { l[3] = "seed " + strings.Repeat("08", 32); return l }), draw.ErrMismatch},
		{"another commitment", edit(func(l []string) []string { l[2] = "seed_sha256 " + fairqueue.Commitment([]byte("x")); return l }), draw.ErrMismatch},
		{"a winner published as lost", edit(func(l []string) []string {
			l[firstWon] = strings.TrimSuffix(l[firstWon], "won") + "lost"
			return l
		}), draw.ErrMismatch},
		{"a loser published as won", edit(func(l []string) []string {
			l[firstLost] = strings.TrimSuffix(l[firstLost], "lost") + "won"
			return l
		}), draw.ErrMismatch},
		{"an entry removed", edit(func(l []string) []string { return slices.Delete(l, firstWon, firstWon+1) }), draw.ErrInvalid},
		{"an entry removed and the count changed", edit(func(l []string) []string {
			l[5] = "entries 59"
			return slices.Delete(l, firstWon, firstWon+1)
		}), draw.ErrMismatch},
		{"an entry twice", edit(func(l []string) []string {
			l[5] = "entries 61"
			return slices.Insert(l, firstLost, l[firstLost])
		}), draw.ErrInvalid},
		{"more stock", edit(func(l []string) []string { l[4] = "stock L=6 M=5 S=5"; return l }), draw.ErrMismatch},
		{"a variant unknown", edit(func(l []string) []string { l[4] = "stock L=5 M=5"; return l }), draw.ErrInvalid},
		{"not a draw file", "hello\n", draw.ErrInvalid},
		{"a garbled entry", edit(func(l []string) []string { l[firstLost] = "e1 S one lost"; return l }), draw.ErrInvalid},
		{"empty", "", draw.ErrInvalid},
	}
	for _, tc := range cases {
		f, err := draw.Read(strings.NewReader(tc.text))
		if err == nil {
			_, err = draw.Verify(f)
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	f, err := draw.Read(strings.NewReader(orig))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := draw.Verify(f); err != nil {
		t.Errorf("the untouched file: %v", err)
	}
}

// million is 1,000,000 entries over three sizes, 10,000 units.
func million() ([]draw.Entry, map[string]int) {
	es := make([]draw.Entry, 1_000_000)
	sizes := []string{"S", "M", "L"}
	for i := range es {
		es[i] = draw.Entry{ID: fmt.Sprintf("01JE%022d", i), Variant: sizes[i%3], Quantity: 1}
	}
	return es, map[string]int{"S": 3334, "M": 3333, "L": 3333}
}

// BenchmarkWinners: the draw of 1,000,000 entries (three sizes, 10,000
// units): one rank key each, one sort.
func BenchmarkWinners(b *testing.B) {
	es, stock := million()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := draw.Winners("drop", seed, es, stock); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify: reading and verifying the entries file of 1,000,000
// entries (about 40 MB).
func BenchmarkVerify(b *testing.B) {
	es, stock := million()
	f, err := draw.New("drop", seed, stock, es)
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if err := draw.Write(&buf, f); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		f, err := draw.Read(bytes.NewReader(buf.Bytes()))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := draw.Verify(f); err != nil {
			b.Fatal(err)
		}
	}
}
