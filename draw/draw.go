// Package draw is a draw sale's draw, done so that anyone can redo it:
// the winners of each variant are its entrants first in the order of a
// seed committed when entries opened and revealed at the close, under the
// fair queue's rank rule (fairqueue.Ranker: HMAC-SHA256 of
// "<sale>/<entry id>" keyed with the seed, smallest first), and a draw's
// entries file (Write, Read) carries everything needed to check it
// (Verify): the sale, the commitment, the seed, the stock of each variant
// and every entry's id, variant, quantity and published result, without
// personal data.
//
// It imports the root package and fairqueue only.
package draw

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
)

// Entry is one entry of a draw: its id, the variant it asks for ("" on a
// sale without variants) and how many units (1..the sale's per_user).
type Entry struct {
	ID       string
	Variant  string
	Quantity int
	// Won is the published result of the entry in an entries file
	// (Write, Read); Winners ignores it.
	Won bool
	// IntentID is the entry's card hold at the provider, for Settle;
	// never written to an entries file.
	IntentID string
}

// ErrInvalid is a draw's input that breaks its rules (a malformed entry, a
// duplicate id, a variant without stock, a file that does not parse).
// ErrMismatch is a file whose seed does not hash to its commitment or
// whose published results are not the draw's.
var (
	ErrInvalid  = errors.New("draw: invalid")
	ErrMismatch = errors.New("draw: does not verify")
)

// ranked is an entry's place: the first 8 bytes of its rank key, and its
// index in the entries. Keys that agree on those 8 bytes (about one pair
// in a draw of a million: n²/2⁶⁵) are ordered by their whole keys,
// computed again; so the sort moves 16 bytes an entry and compares
// integers, not 36 bytes and byte strings.
type ranked struct {
	hi uint64
	i  int32
}

// MaxEntries is the most entries one draw takes (indexes are 32 bits).
const MaxEntries = 1 << 30

// rank returns the entries in the seed's order, smallest rank key first;
// an entry id twice is ErrInvalid (equal ids rank side by side).
func rank(sale string, seed []byte, entries []Entry) ([]ranked, error) {
	if len(entries) > MaxEntries {
		return nil, fmt.Errorf("%w: %d entries, at most %d", ErrInvalid, len(entries), MaxEntries)
	}
	r := make([]ranked, len(entries))
	// Each worker keys its share with its own Ranker (a Ranker is not
	// safe for concurrent use).
	workers := min(runtime.GOMAXPROCS(0), max(1, len(entries)/10_000))
	per := (len(entries) + workers - 1) / workers
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*per, min((w+1)*per, len(entries))
		wg.Go(func() {
			rk := fairqueue.NewRanker(seed)
			var k [fairqueue.RankKeySize]byte
			for i := lo; i < hi; i++ {
				rk.Key(sale, entries[i].ID, &k)
				r[i] = ranked{hi: binary.BigEndian.Uint64(k[:8]), i: int32(i)}
			}
		})
	}
	wg.Wait()
	rk := fairqueue.NewRanker(seed)
	var ka, kb [fairqueue.RankKeySize]byte
	full := func(a, b ranked) int {
		rk.Key(sale, entries[a.i].ID, &ka)
		rk.Key(sale, entries[b.i].ID, &kb)
		return fairqueue.CompareKeys(&ka, &kb)
	}
	slices.SortFunc(r, func(a, b ranked) int {
		if a.hi != b.hi {
			return cmp.Compare(a.hi, b.hi)
		}
		return full(a, b)
	})
	for j := 1; j < len(r); j++ {
		if r[j].hi == r[j-1].hi && full(r[j-1], r[j]) == 0 {
			return nil, fmt.Errorf("%w: entry %q twice", ErrInvalid, entries[r[j].i].ID)
		}
	}
	return r, nil
}

// Order returns the entries in the seed's order: the fair queue's rank
// rule, smallest rank key of "<sale>/<entry id>" first. An entry id twice
// is ErrInvalid.
func Order(sale string, seed []byte, entries []Entry) ([]Entry, error) {
	r, err := rank(sale, seed, entries)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(r))
	for j, x := range r {
		out[j] = entries[x.i]
	}
	return out, nil
}

// Winners draws: walking the entries in the seed's order (Order), an
// entry wins when its quantity fits in the units its variant has left,
// which it then takes; one that does not fit loses, and the walk goes on
// (a smaller entry after it may still fit) until the variant has none
// left. stock holds the units of each variant entered ("" on a sale
// without variants). It returns each variant's winners in the seed's
// order, with Won set. An entry with a malformed id (flashgate.ValidID)
// or variant, a quantity under 1, a variant without stock, or an id twice
// is ErrInvalid.
func Winners(sale string, seed []byte, entries []Entry, stock map[string]int) (map[string][]Entry, error) {
	if !flashgate.ValidSaleID(sale) {
		return nil, fmt.Errorf("%w: sale id %q", ErrInvalid, sale)
	}
	left := make(map[string]int, len(stock))
	for v, n := range stock {
		if v != "" && !flashgate.ValidVariantID(v) || n < 0 {
			return nil, fmt.Errorf("%w: stock %q=%d", ErrInvalid, v, n)
		}
		left[v] = n
	}
	for _, e := range entries {
		if err := e.check(); err != nil {
			return nil, err
		}
		if _, ok := left[e.Variant]; !ok {
			return nil, fmt.Errorf("%w: entry %q: variant %q has no stock", ErrInvalid, e.ID, e.Variant)
		}
	}
	r, err := rank(sale, seed, entries)
	if err != nil {
		return nil, err
	}
	won := make(map[string][]Entry, len(left))
	for _, x := range r {
		e := entries[x.i]
		if n := left[e.Variant]; e.Quantity <= n {
			left[e.Variant] = n - e.Quantity
			e.Won = true
			won[e.Variant] = append(won[e.Variant], e)
		}
	}
	return won, nil
}

// check reports whether e is well formed.
func (e Entry) check() error {
	switch {
	case !flashgate.ValidID(e.ID):
		return fmt.Errorf("%w: entry id %q", ErrInvalid, e.ID)
	case e.Variant != "" && !flashgate.ValidVariantID(e.Variant):
		return fmt.Errorf("%w: entry %q: variant %q", ErrInvalid, e.ID, e.Variant)
	case e.Quantity < 1:
		return fmt.Errorf("%w: entry %q: quantity %d", ErrInvalid, e.ID, e.Quantity)
	}
	return nil
}
