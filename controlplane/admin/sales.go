package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
)

// The handlers of the sale and order routes.

// saleRequest is the body of POST /admin/sales.
type saleRequest struct {
	ID         string  `json:"id"`
	Name       string  `json:"name"`
	PriceCents int64   `json:"price_cents"`
	Total      int64   `json:"total"`
	StartsAt   *string `json:"starts_at"`
	EndsAt     *string `json:"ends_at"`
	AdmitRatio float64 `json:"admit_ratio"`
	PerUser    int64   `json:"per_user"`
	// Buckets splits the stock over 1..64 buckets; absent means 1.
	Buckets int `json:"buckets"`
	// The fair queue's settings (package fairqueue).
	Queue              string `json:"queue"`
	PrequeueSeconds    int    `json:"prequeue_seconds"`
	ChallengeMaxNumber int64  `json:"challenge_maxnumber"`
	ChallengeAuto      *bool  `json:"challenge_auto"`
	AdmitPerMinute     int64  `json:"admit_per_minute"`
	AdmitSeconds       int    `json:"admit_seconds"`
	// Currency of the sale's payments; absent means the deployment's.
	Currency string `json:"currency"`
	// Variants are the sale's stocks when it comes in several; absent means
	// one stock. Total may then be omitted (the sum of theirs).
	Variants []flashgate.Variant `json:"variants"`
	// Mode is how the sale sells: "first_come", "fair" (queue "fair") or
	// "draw" (queue "draw"); absent means what queue says.
	Mode string `json:"mode"`
	// The entry window of a draw (RFC 3339), both required with "draw".
	EntriesOpenAt  *string `json:"entries_open_at"`
	EntriesCloseAt *string `json:"entries_close_at"`
}

// The modes of POST /admin/sales' mode field.
const (
	modeFirstCome = "first_come"
	modeFair      = "fair"
	modeDraw      = "draw"
)

// saleQueue is the sale's Queue for a request's mode and queue fields: a
// mode and a queue that disagree, or an unknown mode, is a bad request
// naming mode.
func saleQueue(mode, queue string) (string, error) {
	want := ""
	switch mode {
	case "":
		return queue, nil
	case modeFirstCome:
	case modeFair:
		want = flashgate.QueueFair
	case modeDraw:
		want = flashgate.QueueDraw
	default:
		return "", &flashgate.FieldError{Field: "mode", Reason: `"first_come", "fair" or "draw"`}
	}
	if queue != "" && queue != want {
		return "", &flashgate.FieldError{Field: "mode", Reason: "disagrees with queue"}
	}
	return want, nil
}

func (s *server) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req saleRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	startsAt, err := parseTime("starts_at", req.StartsAt)
	if err != nil {
		writeError(w, err)
		return
	}
	endsAt, err := parseTime("ends_at", req.EndsAt)
	if err != nil {
		writeError(w, err)
		return
	}
	entriesOpen, err := parseTime("entries_open_at", req.EntriesOpenAt)
	if err != nil {
		writeError(w, err)
		return
	}
	entriesClose, err := parseTime("entries_close_at", req.EntriesCloseAt)
	if err != nil {
		writeError(w, err)
		return
	}
	queue, err := saleQueue(req.Mode, req.Queue)
	if err != nil {
		writeError(w, err)
		return
	}
	sale, err := s.svc.CreateSale(r.Context(), flashgate.Sale{
		ID: req.ID, Name: req.Name, PriceCents: req.PriceCents, Total: req.Total,
		StartsAt: startsAt, EndsAt: endsAt, AdmitRatio: req.AdmitRatio, PerUser: req.PerUser,
		Buckets: req.Buckets, Queue: queue, PrequeueSeconds: req.PrequeueSeconds,
		ChallengeMaxNumber: req.ChallengeMaxNumber, ChallengeAuto: req.ChallengeAuto,
		AdmitPerMinute: req.AdmitPerMinute, AdmitSeconds: req.AdmitSeconds, Currency: req.Currency,
		Variants: req.Variants, EntriesOpenAt: entriesOpen, EntriesCloseAt: entriesClose,
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, sale)
}

// parseTime parses an optional RFC 3339 time field.
func parseTime(field string, v *string) (*time.Time, error) {
	if v == nil {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, *v)
	if err != nil {
		return nil, &flashgate.FieldError{Field: field, Reason: "not RFC 3339"}
	}
	return &t, nil
}

// decodeError turns a JSON decoding failure into a FieldError naming the
// field where it can.
func decodeError(err error) error {
	var tooLarge *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooLarge):
		return flashgate.ErrTooLarge
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return &flashgate.FieldError{Field: typeErr.Field, Reason: "wrong type"}
	}
	// encoding/json names an unknown field only in its message.
	if f, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		return &flashgate.FieldError{Field: strings.TrimSuffix(f, `"`), Reason: "unknown field"}
	}
	return &flashgate.FieldError{Field: "body", Reason: "not a JSON object"}
}

func (s *server) handleList(w http.ResponseWriter, r *http.Request) {
	list, err := s.svc.Sales(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *server) handleStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.svc.SaleStatus(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// handleState answers start and stop with the sale's status afterwards.
func (s *server) handleState(act func(context.Context, string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if err := act(r.Context(), id); err != nil {
			s.fail(w, r, err)
			return
		}
		st, err := s.svc.SaleStatus(r.Context(), id)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	}
}

func (s *server) handleResync(w http.ResponseWriter, r *http.Request) {
	before, after, err := s.svc.Resync(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]controlplane.ResyncFigures{"before": before, "after": after})
}

func (s *server) handleRefund(w http.ResponseWriter, r *http.Request) {
	o, err := s.svc.Refund(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// handlePayment answers an order's payment at the provider: intent,
// status, outcome, refund and dispute (404 without one, or with simulated
// payments).
func (s *server) handlePayment(w http.ResponseWriter, r *http.Request) {
	p, err := s.svc.OrderPayment(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// handleSalePayments lists the payments of a sale's orders.
func (s *server) handleSalePayments(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ps, err := s.svc.OrderPayments(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]flashgate.Payment, 0, len(ps))
	for _, p := range ps {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b flashgate.Payment) int { return strings.Compare(a.OrderID, b.OrderID) })
	writeJSON(w, http.StatusOK, map[string]any{"sale_id": id, "payments": out})
}
