package controlplane

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/buildinfo"
)

// maxBody is the largest admin request body accepted.
const maxBody = 64 << 10

// Handler serves the admin API of docs/api.md, the dashboard at /admin/, /metrics,
// /healthz and /readyz. Only the admin API needs the bearer token.
func (s *Service) Handler() http.Handler {
	mux := s.newRouteMux() // audits every admin action (audit.go)
	mux.Handle("GET /admin/audit", s.auth(s.handleAudit))
	mux.Handle("POST /admin/sales", s.auth(s.handleCreate))
	mux.Handle("GET /admin/sales", s.auth(s.handleList))
	mux.Handle("GET /admin/sales/{id}", s.auth(s.handleStatus))
	mux.Handle("POST /admin/sales/{id}/start", s.auth(s.handleState(s.Start)))
	mux.Handle("POST /admin/sales/{id}/stop", s.auth(s.handleState(s.Stop)))
	mux.Handle("POST /admin/sales/{id}/resync", s.auth(s.handleResync))
	mux.Handle("POST /admin/orders/{id}/refund", s.auth(s.handleRefund))
	mux.Handle("GET /admin/sales/{id}/dead-letters", s.auth(s.handleDeadLetters))
	mux.Handle("POST /admin/sales/{id}/dead-letters/replay", s.auth(s.handleReplayDeadLetters))

	files := http.StripPrefix("/admin/", http.FileServerFS(dashFS))
	mux.HandleFunc(dashPattern, func(w http.ResponseWriter, r *http.Request) {
		if !dashFile(r.URL.Path) {
			// Not a file: a route of another method (405) or nothing (404).
			mux.noRoute(w, r)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'")
		files.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /admin/openapi.json", s.handleOpenAPI)
	mux.HandleFunc("GET /admin", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/admin/", http.StatusMovedPermanently)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(buildinfo.Header, buildinfo.Get().Version)
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": buildinfo.Get().Version})
	})
	mux.HandleFunc("GET /readyz", s.handleReady)
	return mux
}

// auth admits requests carrying the admin bearer token, compared in
// constant time.
func (s *Service) auth(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), s.token) != 1 {
			writeError(w, flashgate.ErrUnauthorized)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		h(w, r)
	})
}

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
	// The fair queue's settings (queue.go).
	Queue              string `json:"queue"`
	PrequeueSeconds    int    `json:"prequeue_seconds"`
	ChallengeMaxNumber int64  `json:"challenge_maxnumber"`
	ChallengeAuto      *bool  `json:"challenge_auto"`
	AdmitPerMinute     int64  `json:"admit_per_minute"`
	AdmitSeconds       int    `json:"admit_seconds"`
}

func (s *Service) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req saleRequest
	body := http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields() // the description's additionalProperties: false
	if err := dec.Decode(&req); err != nil {
		writeError(w, decodeError(err))
		return
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeError(w, &flashgate.FieldError{Field: "body", Reason: "trailing data"})
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
	sale, err := s.CreateSale(r.Context(), flashgate.Sale{
		ID: req.ID, Name: req.Name, PriceCents: req.PriceCents, Total: req.Total,
		StartsAt: startsAt, EndsAt: endsAt, AdmitRatio: req.AdmitRatio, PerUser: req.PerUser,
		Buckets: req.Buckets, Queue: req.Queue, PrequeueSeconds: req.PrequeueSeconds,
		ChallengeMaxNumber: req.ChallengeMaxNumber, ChallengeAuto: req.ChallengeAuto,
		AdmitPerMinute: req.AdmitPerMinute, AdmitSeconds: req.AdmitSeconds,
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

func (s *Service) handleList(w http.ResponseWriter, r *http.Request) {
	list, err := s.Sales(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Service) handleStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.SaleStatus(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// handleState answers start and stop with the sale's status afterwards.
func (s *Service) handleState(act func(context.Context, string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if err := act(r.Context(), id); err != nil {
			s.fail(w, r, err)
			return
		}
		st, err := s.SaleStatus(r.Context(), id)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	}
}

func (s *Service) handleResync(w http.ResponseWriter, r *http.Request) {
	before, after, err := s.Resync(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]ResyncFigures{"before": before, "after": after})
}

func (s *Service) handleRefund(w http.ResponseWriter, r *http.Request) {
	o, err := s.Refund(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

func (s *Service) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		s.log.Warn("readyz: redis", "err", err)
		writeError(w, flashgate.ErrUnavailable)
		return
	}
	if err := s.store.Ping(ctx); err != nil {
		s.log.Warn("readyz: database", "err", err)
		writeError(w, flashgate.ErrUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, flashgate.ReadyBody)
}

// fail answers err through flashgate.ErrorStatus, logging what is not a
// client error; internal text never reaches the client.
func (s *Service) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, _ := flashgate.ErrorStatus(err)
	if status >= 500 {
		s.log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, err)
}

func writeError(w http.ResponseWriter, err error) {
	status, code := flashgate.ErrorStatus(err)
	body := map[string]string{"error": code}
	var fe *flashgate.FieldError
	if errors.As(err, &fe) {
		body["field"] = fe.Field
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
