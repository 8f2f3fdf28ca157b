package sqldb

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flashgate/flashgate"
)

func nowUTC() time.Time { return time.Now().UTC() }

const saleCols = `id, name, price_cents, total, starts_at, ends_at, state, admit_ratio, per_user, buckets, bucket_salts,
	queue, prequeue_seconds, challenge_maxnumber, challenge_auto, admit_per_minute, admit_seconds, currency, variants,
	entries_open_at, entries_close_at`

// saleReadCols are the columns scanSale reads: saleCols and archived.
const saleReadCols = saleCols + `, archived`

type rowScanner interface {
	Scan(dest ...any) error
}

func scanSale(r rowScanner) (flashgate.Sale, error) {
	var (
		s          flashgate.Sale
		st         string
		start, end stamp
		eOpen      stamp
		eClose     stamp
		salts      string
		archived   int64
		auto       int64
		variants   string
	)
	if err := r.Scan(&s.ID, &s.Name, &s.PriceCents, &s.Total, &start, &end, &st, &s.AdmitRatio, &s.PerUser, &s.Buckets, &salts,
		&s.Queue, &s.PrequeueSeconds, &s.ChallengeMaxNumber, &auto, &s.AdmitPerMinute, &s.AdmitSeconds, &s.Currency, &variants,
		&eOpen, &eClose, &archived); err != nil {
		return flashgate.Sale{}, err
	}
	s.Archived = archived != 0
	if variants != "" {
		if err := json.Unmarshal([]byte(variants), &s.Variants); err != nil {
			return flashgate.Sale{}, fmt.Errorf("sale %s: reading its variants: %w", s.ID, err)
		}
	}
	if auto == 0 {
		off := false
		s.ChallengeAuto = &off
	}
	if s.Buckets <= 1 {
		s.Buckets = 0
	} else {
		s.BucketSalts = parseSalts(salts)
	}
	s.State = flashgate.SaleState(st)
	s.StartsAt, s.EndsAt = start.ptr(), end.ptr()
	s.EntriesOpenAt, s.EntriesCloseAt = eOpen.ptr(), eClose.ptr()
	return s, nil
}

// formatSalts and parseSalts convert a sale's bucket salts to and from the
// bucket_salts column ("17,4,233").
func formatSalts(salts []int) string {
	parts := make([]string, len(salts))
	for i, v := range salts {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func parseSalts(v string) []int {
	if v == "" {
		return nil
	}
	parts := strings.Split(v, ",")
	out := make([]int, 0, len(parts))
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil
		}
		out = append(out, n)
	}
	return out
}

// CreateSale stores a new sale. An empty State is stored as upcoming, a zero
// AdmitRatio as flashgate.DefaultAdmitRatio and a zero PerUser as 1;
// Variants are stored as a JSON array (” none). An id that is taken is
// flashgate.ErrExists.
func (d *DB) CreateSale(ctx context.Context, s flashgate.Sale) error {
	if !flashgate.ValidSaleID(s.ID) {
		return &flashgate.FieldError{Field: "id", Reason: "must be 1-64 characters of [A-Za-z0-9_-]"}
	}
	if s.State == "" {
		s.State = flashgate.StateUpcoming
	}
	if err := storedState(s.State); err != nil {
		return err
	}
	if s.AdmitRatio <= 0 {
		s.AdmitRatio = flashgate.DefaultAdmitRatio
	}
	if s.PerUser <= 0 {
		s.PerUser = 1
	}
	variants := ""
	if len(s.Variants) > 0 {
		b, err := json.Marshal(s.Variants)
		if err != nil {
			return fmt.Errorf("creating sale %s: %w", s.ID, err)
		}
		variants = string(b)
	}
	res, err := d.w.ExecContext(ctx, d.q(`INSERT INTO sales (`+saleCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`),
		s.ID, s.Name, s.PriceCents, s.Total, d.tsPtr(s.StartsAt), d.tsPtr(s.EndsAt),
		string(s.State), s.AdmitRatio, s.PerUser, max(s.Buckets, 1), formatSalts(s.BucketSalts),
		s.Queue, s.PrequeueSeconds, s.ChallengeMaxNumber, boolInt(s.ChallengeAutoOn()), s.AdmitPerMinute, s.AdmitSeconds, s.Currency, variants,
		d.tsPtr(s.EntriesOpenAt), d.tsPtr(s.EntriesCloseAt))
	if err != nil {
		return fmt.Errorf("creating sale %s: %w", s.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("creating sale %s: %w", s.ID, err)
	} else if n == 0 {
		return fmt.Errorf("creating sale %s: %w", s.ID, flashgate.ErrExists)
	}
	return nil
}

// storedState rejects states that are never stored (sold_out is derived).
func storedState(st flashgate.SaleState) error {
	switch st {
	case flashgate.StateUpcoming, flashgate.StateOpen, flashgate.StateClosed:
		return nil
	}
	return &flashgate.FieldError{Field: "state", Reason: "must be upcoming, open or closed"}
}

// Sale returns the sale with id, or flashgate.ErrNotFound.
func (d *DB) Sale(ctx context.Context, id string) (flashgate.Sale, error) {
	s, err := scanSale(d.r.QueryRowContext(ctx, d.q(`SELECT `+saleReadCols+` FROM sales WHERE id = ?`), id))
	if err != nil {
		return flashgate.Sale{}, notFound(err, "sale "+id)
	}
	return s, nil
}

// Sales returns every sale, ordered by id.
func (d *DB) Sales(ctx context.Context) ([]flashgate.Sale, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT `+saleReadCols+` FROM sales ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("listing sales: %w", err)
	}
	defer rows.Close()
	var out []flashgate.Sale
	for rows.Next() {
		s, err := scanSale(rows)
		if err != nil {
			return nil, fmt.Errorf("listing sales: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing sales: %w", err)
	}
	return out, nil
}

// SetSaleState stores the lifecycle state of sale id (upcoming, open or
// closed) under fencing token fence (see raiseFence); an unknown id is
// flashgate.ErrNotFound.
func (d *DB) SetSaleState(ctx context.Context, id string, st flashgate.SaleState, fence int64) error {
	if err := storedState(st); err != nil {
		return err
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("setting state of sale %s: %w", id, err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := d.raiseFence(ctx, tx, fence); err != nil {
		return fmt.Errorf("setting state of sale %s: %w", id, err)
	}
	res, err := tx.ExecContext(ctx, d.q(`UPDATE sales SET state = ? WHERE id = ?`), string(st), id)
	if err != nil {
		return fmt.Errorf("setting state of sale %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("setting state of sale %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("sale %s: %w", id, flashgate.ErrNotFound)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("setting state of sale %s: %w", id, err)
	}
	return nil
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
