package draw

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/flashgate/flashgate/fairqueue"
)

// File is a draw's entries file: what anyone needs to redo the draw and
// check its published results, and nothing about the entrants but their
// entry ids. Its text form (Write, Read) is, line by line:
//
//	flashgate draw v1
//	sale <sale id>
//	seed_sha256 <the commitment: 64 hex, published when entries opened>
//	seed <the seed, hex, revealed at the close>
//	stock <variant>=<units> …   (variant "." on a sale without variants)
//	entries <n>
//	<entry id> <variant or "."> <quantity> won|lost   (n lines, in the seed's order)
type File struct {
	Sale string
	// SeedSHA256 is the commitment (fairqueue.Commitment of Seed).
	SeedSHA256 string
	Seed       []byte
	// Stock is the units of each variant ("" on a sale without
	// variants).
	Stock map[string]int
	// Entries are every entry with its published result (Won), in the
	// seed's order as New writes them (any order verifies).
	Entries []Entry
}

// magic is a file's first line.
const magic = "flashgate draw v1"

// noVariant stands for the variant "" in a file: not a variant id.
const noVariant = "."

// New draws (Winners) and returns the draw's file: the commitment of seed,
// and the entries in the seed's order with their results.
func New(sale string, seed []byte, stock map[string]int, entries []Entry) (*File, error) {
	ordered, err := results(sale, seed, entries, stock)
	if err != nil {
		return nil, err
	}
	return &File{Sale: sale, SeedSHA256: fairqueue.Commitment(seed), Seed: slices.Clone(seed), Stock: stock, Entries: ordered}, nil
}

// results returns entries in the seed's order with Won set by the draw.
func results(sale string, seed []byte, entries []Entry, stock map[string]int) ([]Entry, error) {
	won, err := Winners(sale, seed, entries, stock)
	if err != nil {
		return nil, err
	}
	ordered, err := Order(sale, seed, entries)
	if err != nil {
		return nil, err
	}
	// Each variant's winners are in the seed's order too: one walk marks
	// them.
	next := make(map[string]int, len(won))
	for i := range ordered {
		e := &ordered[i]
		w := won[e.Variant]
		k := next[e.Variant]
		e.Won = k < len(w) && w[k].ID == e.ID
		if e.Won {
			next[e.Variant] = k + 1
		}
	}
	return ordered, nil
}

// Write writes f in its text form.
func Write(w io.Writer, f *File) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	fmt.Fprintf(bw, "%s\nsale %s\nseed_sha256 %s\nseed %s\nstock", magic, f.Sale, f.SeedSHA256, hex.EncodeToString(f.Seed))
	variants := make([]string, 0, len(f.Stock))
	for v := range f.Stock {
		variants = append(variants, v)
	}
	slices.Sort(variants)
	for _, v := range variants {
		fmt.Fprintf(bw, " %s=%d", variantText(v), f.Stock[v])
	}
	fmt.Fprintf(bw, "\nentries %d\n", len(f.Entries))
	var line []byte
	for _, e := range f.Entries {
		line = append(line[:0], e.ID...)
		line = append(append(line, ' '), variantText(e.Variant)...)
		line = strconv.AppendInt(append(line, ' '), int64(e.Quantity), 10)
		if e.Won {
			line = append(line, " won\n"...)
		} else {
			line = append(line, " lost\n"...)
		}
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func variantText(v string) string {
	if v == "" {
		return noVariant
	}
	return v
}

// Read reads a file in its text form; one that does not parse is
// ErrInvalid naming its line. It checks the form only: Verify checks the
// draw.
func Read(r io.Reader) (*File, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading the entries file: %w", err)
	}
	// One string holds the whole file; every id is a piece of it, so a
	// million entries cost no allocation each.
	s := string(b)
	f := &File{}
	n := 0
	next := func() (string, bool) {
		n++
		if s == "" {
			return "", false
		}
		line, rest, _ := strings.Cut(s, "\n")
		s = rest
		return strings.TrimSuffix(line, "\r"), true
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: line %d: %s", ErrInvalid, n, fmt.Sprintf(format, a...))
	}
	field := func(name string) (string, error) {
		line, ok := next()
		v, found := strings.CutPrefix(line, name+" ")
		if !ok || !found || v == "" {
			return "", bad("want %q", name+" …")
		}
		return v, nil
	}
	if line, ok := next(); !ok || line != magic {
		return nil, bad("want %q: not a draw's entries file", magic)
	}
	if f.Sale, err = field("sale"); err != nil {
		return nil, err
	}
	if f.SeedSHA256, err = field("seed_sha256"); err != nil {
		return nil, err
	}
	if sum, err := hex.DecodeString(f.SeedSHA256); err != nil || len(sum) != 32 || strings.ToLower(f.SeedSHA256) != f.SeedSHA256 {
		return nil, bad("seed_sha256 is not 64 lowercase hex")
	}
	seed, err := field("seed")
	if err != nil {
		return nil, err
	}
	if f.Seed, err = hex.DecodeString(seed); err != nil || len(f.Seed) == 0 {
		return nil, bad("seed is not hex")
	}
	stock, err := field("stock")
	if err != nil {
		return nil, err
	}
	f.Stock = map[string]int{}
	for _, kv := range strings.Fields(stock) {
		v, units, ok := strings.Cut(kv, "=")
		u, err := strconv.Atoi(units)
		if !ok || err != nil || u < 0 {
			return nil, bad("stock %q: want <variant>=<units>", kv)
		}
		if v == noVariant {
			v = ""
		}
		if _, dup := f.Stock[v]; dup {
			return nil, bad("stock of %q twice", kv)
		}
		f.Stock[v] = u
	}
	count, err := field("entries")
	if err != nil {
		return nil, err
	}
	total, err := strconv.Atoi(count)
	if err != nil || total < 0 || total > MaxEntries {
		return nil, bad("entries %q: want a count", count)
	}
	f.Entries = make([]Entry, 0, total)
	for {
		line, ok := next()
		if !ok {
			break
		}
		id, rest, _ := strings.Cut(line, " ")
		v, rest, _ := strings.Cut(rest, " ")
		q, res, _ := strings.Cut(rest, " ")
		qty, err := strconv.Atoi(q)
		if id == "" || v == "" || err != nil || (res != "won" && res != "lost") {
			return nil, bad("want <entry id> <variant> <quantity> won|lost")
		}
		if v == noVariant {
			v = ""
		}
		if len(f.Entries) == total {
			return nil, bad("more entries than the %d the header says", total)
		}
		f.Entries = append(f.Entries, Entry{ID: id, Variant: v, Quantity: qty, Won: res == "won"})
	}
	if len(f.Entries) != total {
		return nil, fmt.Errorf("%w: %d entries, the header says %d", ErrInvalid, len(f.Entries), total)
	}
	return f, nil
}

// Verify redoes the draw of a file (Read): the seed must hash to the
// commitment, and every entry's published result must be the draw's. It
// returns the winners of each variant in the seed's order. A file that
// breaks the draw's rules is ErrInvalid; a seed that is not the committed
// one, or a result that is not the draw's, ErrMismatch.
func Verify(f *File) (map[string][]Entry, error) {
	if got := fairqueue.Commitment(f.Seed); got != f.SeedSHA256 {
		return nil, fmt.Errorf("%w: the seed's SHA-256 is %s, not the commitment %s", ErrMismatch, got, f.SeedSHA256)
	}
	won, err := Winners(f.Sale, f.Seed, f.Entries, f.Stock)
	if err != nil {
		return nil, err
	}
	winners := make(map[string]bool, len(won))
	for _, w := range won {
		for _, e := range w {
			winners[e.ID] = true
		}
	}
	for _, e := range f.Entries {
		if e.Won != winners[e.ID] {
			want := "lost"
			if winners[e.ID] {
				want = "won"
			}
			return nil, fmt.Errorf("%w: entry %s is published as %s; the draw says %s", ErrMismatch, e.ID, result(e.Won), want)
		}
	}
	return won, nil
}

func result(won bool) string {
	if won {
		return "won"
	}
	return "lost"
}
