package controlplane

import (
	"context"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/controlplane/resync"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/lua"
)

// Limits of CreateSale's validation.
const (
	maxNameLen    = 200
	maxTotal      = 1_000_000
	maxAdmitRatio = 100
	// maxVariantNameLen is the longest variant name, in characters.
	maxVariantNameLen = 100
)

// ResyncFigures are a sale's Redis figures before or after a re-sync.
type ResyncFigures = resync.Figures

// BucketStatus is one bucket's live figures in GET /admin/sales/{id}.
type BucketStatus = buckets.Status

func validateSale(s flashgate.Sale) error {
	switch {
	case !flashgate.ValidSaleID(s.ID):
		return &flashgate.FieldError{Field: "id", Reason: "1-64 characters of [A-Za-z0-9_-]"}
	case s.Name == "" || utf8.RuneCountInString(s.Name) > maxNameLen:
		return &flashgate.FieldError{Field: "name", Reason: "1-200 characters"}
	case s.PriceCents < 0:
		return &flashgate.FieldError{Field: "price_cents", Reason: "negative"}
	case !flashgate.ValidCurrency(s.Currency):
		return &flashgate.FieldError{Field: "currency", Reason: "3 lower-case letters (ISO 4217), or absent"}
	}
	if err := validateVariants(s); err != nil {
		return err
	}
	switch {
	case s.Total < 1 || s.Total > maxTotal:
		return &flashgate.FieldError{Field: "total", Reason: "outside 1..1000000"}
	case s.AdmitRatio != 0 && (s.AdmitRatio < 1 || s.AdmitRatio > maxAdmitRatio) || s.AdmitRatio != s.AdmitRatio:
		return &flashgate.FieldError{Field: "admit_ratio", Reason: "0 or 1..100"}
	case s.PerUser < 0 || s.PerUser > s.Total:
		return &flashgate.FieldError{Field: "per_user", Reason: "outside 0..total"}
	case s.PriceCents > flashgate.MaxAmountCents/salehash.PerUser(s):
		// The most one order can charge must fit a payment's amount.
		return &flashgate.FieldError{Field: "price_cents", Reason: "price_cents × per_user over 999999999999"}
	case s.Buckets < 0 || s.Buckets > flashgate.MaxBuckets:
		return &flashgate.FieldError{Field: "buckets", Reason: "outside 1..64"}
	case int64(s.Buckets) > s.Total:
		return &flashgate.FieldError{Field: "buckets", Reason: "more buckets than units"}
	case s.StartsAt != nil && s.EndsAt != nil && !s.EndsAt.After(*s.StartsAt):
		return &flashgate.FieldError{Field: "ends_at", Reason: "not after starts_at"}
	}
	if err := s.ValidateDraw(); err != nil {
		return err
	}
	if s.Draw() {
		// A draw's entries pay the fair queue's proof of work, at a fixed
		// difficulty.
		if s.ChallengeMaxNumber < 0 || s.ChallengeMaxNumber > fairqueue.MaxChallengeNumber {
			return &flashgate.FieldError{Field: "challenge_maxnumber", Reason: "outside 0.." + strconv.Itoa(fairqueue.MaxChallengeNumber)}
		}
		return nil
	}
	return fairqueue.Validate(s)
}

// validateVariants checks a sale's variants: 1..MaxVariants of them (or
// none), ids valid and unique, names 1..maxVariantNameLen characters,
// totals 1..maxTotal summing to the sale's total, and no buckets.
func validateVariants(s flashgate.Sale) error {
	if s.Variants == nil {
		return nil
	}
	if len(s.Variants) == 0 || len(s.Variants) > flashgate.MaxVariants {
		return &flashgate.FieldError{Field: "variants", Reason: "1-100 of them, or absent"}
	}
	seen := make(map[string]bool, len(s.Variants))
	var sum int64
	for i, v := range s.Variants {
		switch {
		case !flashgate.ValidVariantID(v.ID):
			return &flashgate.FieldError{Field: fmt.Sprintf("variants[%d].id", i), Reason: "1-16 characters of [A-Za-z0-9_-]"}
		case seen[v.ID]:
			return &flashgate.FieldError{Field: fmt.Sprintf("variants[%d].id", i), Reason: "used twice"}
		case v.Name == "" || utf8.RuneCountInString(v.Name) > maxVariantNameLen:
			return &flashgate.FieldError{Field: fmt.Sprintf("variants[%d].name", i), Reason: "1-100 characters"}
		case v.Total < 1 || v.Total > maxTotal:
			return &flashgate.FieldError{Field: fmt.Sprintf("variants[%d].total", i), Reason: "outside 1..1000000"}
		}
		seen[v.ID] = true
		sum += v.Total
	}
	if s.Total != sum {
		return &flashgate.FieldError{Field: "total", Reason: "not the sum of the variants' totals (omit it to take the sum)"}
	}
	return nil
}

// variantTotal returns the sale with Total the sum of its variants' totals
// when it has variants and no Total (an omitted total means the sum).
func variantTotal(s flashgate.Sale) flashgate.Sale {
	if s.Total != 0 || len(s.Variants) == 0 {
		return s
	}
	for _, v := range s.Variants {
		if v.Total > 0 && v.Total <= maxTotal {
			s.Total += v.Total
		}
	}
	return s
}

// CreateSale validates s (a sale with variants and no Total takes their
// sum), stores it as upcoming and prepares its Redis hash
// (closed, empty). An existing id is flashgate.ErrExists. The scheduler opens
// it at StartsAt; without StartsAt it waits for Start.
func (s *Service) CreateSale(ctx context.Context, sale flashgate.Sale) (flashgate.Sale, error) {
	sale = variantTotal(sale)
	if err := validateSale(sale); err != nil {
		return flashgate.Sale{}, err
	}
	sale.State = flashgate.StateUpcoming
	if sale.StartsAt != nil {
		t := sale.StartsAt.UTC()
		sale.StartsAt = &t
	}
	if sale.EndsAt != nil {
		t := sale.EndsAt.UTC()
		sale.EndsAt = &t
	}
	if sale.EntriesOpenAt != nil {
		t := sale.EntriesOpenAt.UTC()
		sale.EntriesOpenAt = &t
	}
	if sale.EntriesCloseAt != nil {
		t := sale.EntriesCloseAt.UTC()
		sale.EntriesCloseAt = &t
	}
	sale.BucketSalts = nil
	if sale.Buckets <= 1 {
		sale.Buckets = 0
	} else {
		// The placement is fixed here, for the sale's life.
		sale.BucketSalts = s.buckets.ChooseSalts(ctx, sale.ID, sale.Buckets)
	}
	// The row and the hash are made under the re-sync's lock: a re-sync of
	// this process between them would find the row without its hash and
	// "rebuild" a sale Redis never had, with a warning about a loss.
	s.sync.Lock()
	defer s.sync.Unlock()
	if err := s.store.CreateSale(ctx, sale); err != nil {
		return flashgate.Sale{}, fmt.Errorf("creating sale: %w", err)
	}
	if err := s.prepare(ctx, sale); err != nil {
		// The row is the record; the re-sync loop rebuilds the hash later.
		s.log.Error("preparing sale in redis", "sale", sale.ID, "err", err)
	}
	return sale, nil
}

// prepare adds the sale (and, bucketed, its buckets) to fg:sales, then
// creates each bucket's hash with its share of the stock, then the sale's own
// hash (with the layout when bucketed): in that order, so that the order
// sinks know every sale that can have orders and a reader that sees the
// layout finds every bucket (a script touches one sale's keys only, for Redis
// Cluster).
func (s *Service) prepare(ctx context.Context, sale flashgate.Sale) error {
	l := buckets.Layout(sale)
	var tags []string
	if sale.Bucketed() {
		tags = l.Tags()
	}
	if err := resync.JoinSales(ctx, s.rdb, sale.ID, tags); err != nil {
		return err
	}
	for b, t := range tags {
		if err := lua.Prepare.Run(ctx, s.rdb, lua.SaleKeys(t), buckets.PrepareArgs(sale, b)...).Err(); err != nil {
			return err
		}
	}
	args := []any{sale.Total, flashgate.AdmitCap(sale.Total, sale.AdmitRatio), salehash.PerUser(sale), sale.PriceCents}
	if sale.Bucketed() {
		args = append(args, l.String(), "", salehash.VariantSpec(sale.Variants, nil, nil))
	} else if sale.Fair() || sale.Draw() || sale.HasVariants() {
		// The queue argument names a fair queue, or a draw with its entry
		// window (whose sale refuses every purchase).
		args = append(args, "", lua.DrawQueueArg(sale), salehash.VariantSpec(sale.Variants, nil, nil))
	}
	return lua.Prepare.Run(ctx, s.rdb, lua.SaleKeys(sale.ID), args...).Err()
}

// Start opens a sale now. Start and Stop carry ctx's fencing token, or one
// of their own (fencedCall).
func (s *Service) Start(ctx context.Context, id string) error {
	return s.setState(ctx, id, flashgate.StateOpen)
}

// Stop closes a sale now.
func (s *Service) Stop(ctx context.Context, id string) error {
	return s.setState(ctx, id, flashgate.StateClosed)
}

func (s *Service) setState(ctx context.Context, id string, st flashgate.SaleState) error {
	if !flashgate.ValidSaleID(id) {
		return fmt.Errorf("sale %q: %w", id, flashgate.ErrNotFound)
	}
	return s.fencedCall(ctx, func(ctx context.Context) error { return s.setStateFenced(ctx, id, st) })
}

func (s *Service) setStateFenced(ctx context.Context, id string, st flashgate.SaleState) error {
	tok := fencing.Of(ctx)
	sale, err := s.store.Sale(ctx, id)
	if err != nil {
		return fmt.Errorf("reading sale: %w", err)
	}
	if err := s.store.SetSaleState(ctx, id, st, tok); err != nil {
		return fmt.Errorf("setting sale state: %w", err)
	}
	if st != flashgate.StateClosed {
		// An archived sale is live again before it opens (controlplane/archive).
		if err := s.archive.UnarchiveIfArchived(ctx, id); err != nil {
			return err
		}
	}
	arg := salehash.StateArg(st)
	missing := false
	if sale.Bucketed() {
		// Every bucket first, the sale's own hash (the gateways' view) last.
		if missing, err = s.buckets.SetState(ctx, sale, arg); err != nil {
			return fmt.Errorf("setting sale state in redis: %w: %w", flashgate.ErrUnavailable, err)
		}
	}
	n, err := lua.SetState.Run(ctx, s.rdb, lua.SaleKeys(id), arg, tok).Int()
	if err != nil {
		return fmt.Errorf("setting sale state in redis: %w: %w", flashgate.ErrUnavailable, err)
	}
	if n == lua.SetStateFenced {
		return fencing.Err("setting sale state in redis", tok)
	}
	if n == -1 || missing {
		// Redis lost the sale: rebuild it from the row, which now has st.
		if _, _, err := s.Resync(ctx, id); err != nil {
			return err
		}
	}
	if st == flashgate.StateClosed {
		s.mu.Lock()
		delete(s.settled, id)
		s.mu.Unlock()
	}
	s.log.Info("sale state set", "sale", id, "state", st)
	return nil
}

// Sales lists the sales in the database.
func (s *Service) Sales(ctx context.Context) ([]flashgate.Sale, error) {
	list, err := s.store.Sales(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing sales: %w", err)
	}
	if list == nil {
		list = []flashgate.Sale{}
	}
	return list, nil
}
