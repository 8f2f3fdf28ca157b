// Package admin serves the control plane's HTTP side: the admin API of
// docs/api.md, the dashboard at /admin/, the OpenAPI description, the audit
// of admin actions, /metrics, /healthz and /readyz. It owns the routes, the
// bearer-token check and the answers' encoding; every action is a method of
// the control plane's Service, which owns the state.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/internal/buildinfo"
)

// maxBody is the largest admin request body accepted.
const maxBody = 64 << 10

// server is the state of one Handler: the control plane it serves and the
// settings of its admin API.
type server struct {
	svc      *controlplane.Service
	token    []byte
	log      *slog.Logger
	clock    flashgate.Clock
	gatherer prometheus.Gatherer
	audit    *auditLog
}

// Handler serves svc's admin API of docs/api.md, the dashboard at /admin/,
// /metrics, /healthz and /readyz, configured by svc.AdminSettings. Only the
// admin API needs the bearer token. Each Handler keeps its own audit.
func Handler(svc *controlplane.Service) http.Handler {
	set := svc.AdminSettings()
	s := &server{svc: svc, token: []byte(set.Token), log: set.Logger, clock: set.Clock, gatherer: set.Gatherer}
	s.audit = newAuditLog(set.AuditLogger, s.log)
	mux := &routeMux{ServeMux: http.NewServeMux(), audit: s.audit, clock: s.clock} // audits every admin action (audit.go)
	mux.Handle("GET /admin/audit", s.auth(s.handleAudit))
	mux.Handle("POST /admin/sales", s.auth(s.handleCreate))
	mux.Handle("GET /admin/sales", s.auth(s.handleList))
	mux.Handle("GET /admin/sales/{id}", s.auth(s.handleStatus))
	mux.Handle("POST /admin/sales/{id}/start", s.auth(s.handleState(s.svc.Start)))
	mux.Handle("POST /admin/sales/{id}/stop", s.auth(s.handleState(s.svc.Stop)))
	mux.Handle("POST /admin/sales/{id}/resync", s.auth(s.handleResync))
	mux.Handle("POST /admin/orders/{id}/refund", s.auth(s.handleRefund))
	mux.Handle("GET /admin/orders/{id}/payment", s.auth(s.handlePayment))
	mux.Handle("GET /admin/sales/{id}/payments", s.auth(s.handleSalePayments))
	mux.Handle("GET /admin/sales/{id}/dead-letters", s.auth(s.handleDeadLetters))
	mux.Handle("POST /admin/sales/{id}/dead-letters/replay", s.auth(s.handleReplayDeadLetters))
	mux.Handle("GET /admin/sales/{id}/draw.txt", s.auth(s.handleDrawFile))

	mux.HandleFunc(dashPattern, s.dashboard(mux))
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
// constant time. It logs each admitted call at debug level as it begins.
func (s *server) auth(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), s.token) != 1 {
			writeError(w, flashgate.ErrUnauthorized)
			return
		}
		s.log.Debug("admin call", "method", r.Method, "path", r.URL.Path)
		w.Header().Set("Cache-Control", "no-store")
		h(w, r)
	})
}

func (s *server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.svc.Ready(ctx); err != nil {
		s.log.Warn("readyz", "err", err)
		writeError(w, flashgate.ErrUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, flashgate.ReadyBody)
}

// fail answers err through flashgate.ErrorStatus, logging what is not a
// client error; internal text never reaches the client.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
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

// handleDrawFile answers GET /admin/sales/{id}/draw.txt: the draw's entries
// file, stored at its close, for the operator to publish (anyone checks it
// with "flashgate draw verify").
func (s *server) handleDrawFile(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !flashgate.ValidSaleID(id) {
		writeError(w, flashgate.ErrNotFound)
		return
	}
	body, err := s.svc.DrawFile(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+id+`-draw.txt"`)
	_, _ = w.Write(body)
}
