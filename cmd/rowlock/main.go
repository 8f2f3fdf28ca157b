// Command rowlock is the design people build first for a flash sale, kept
// as the reference of `make bench`: net/http, and per purchase one
// PostgreSQL transaction that takes a unit with
//
//	UPDATE items SET "left" = "left" - 1 WHERE id = $1 AND "left" > 0
//
// and inserts the order, so the row lock of the item serialises every
// buyer. It speaks the purchase route of flashgate's API, so the same crowd
// runs against both: POST /api/sales/{id}/orders with a bearer token (HS256,
// the user id in "sub") answers 201 with the order, 409 sold_out when no
// unit is left (also for an unknown sale: it keeps no catalogue), 409
// already_purchased for a second order of one user, 401 unauthorized.
//
// Usage: rowlock -listen 127.0.0.1:8090 -db postgres://… (FLASHGATE_JWT_SECRET
// in the environment). It creates its two tables when missing; a sale is a
// row of items, inserted by whoever runs it.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

const schema = `
CREATE TABLE IF NOT EXISTS items (
	id          TEXT PRIMARY KEY,
	price_cents BIGINT NOT NULL,
	"left"      BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS orders (
	order_id    TEXT PRIMARY KEY,
	sale_id     TEXT NOT NULL,
	user_id     TEXT NOT NULL,
	price_cents BIGINT NOT NULL,
	status      TEXT NOT NULL,
	created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
	UNIQUE (sale_id, user_id)
)`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rowlock:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:8090", "listen address")
	dbURL := flag.String("db", "", "postgres://… (required)")
	maxConns := flag.Int("max-conns", 64, "PostgreSQL connections in the pool")
	flag.Parse()
	secret := os.Getenv("FLASHGATE_JWT_SECRET")
	if *dbURL == "" || secret == "" {
		return errors.New("-db and FLASHGATE_JWT_SECRET are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg, err := pgxpool.ParseConfig(*dbURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(*maxConns)
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Exec(ctx, schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	srv := &http.Server{Addr: *listen, Handler: &server{db: db, secret: []byte(secret)}}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type server struct {
	db     *pgxpool.Pool
	secret []byte
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/sales/")
	sale, ok2 := strings.CutSuffix(rest, "/orders")
	if !ok || !ok2 || sale == "" || strings.Contains(sale, "/") {
		answer(w, http.StatusNotFound, map[string]string{"error": "not_found"})
		return
	}
	if r.Method != http.MethodPost {
		answer(w, http.StatusMethodNotAllowed, map[string]string{"error": "method_not_allowed"})
		return
	}
	user, err := s.user(r.Header.Get("Authorization"))
	if err != nil {
		answer(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
		return
	}
	id, err := s.buy(r.Context(), sale, user)
	switch {
	case errors.Is(err, errSoldOut):
		answer(w, http.StatusConflict, map[string]string{"error": "sold_out"})
	case errors.Is(err, errAlready):
		answer(w, http.StatusConflict, map[string]string{"error": "already_purchased"})
	case err != nil:
		answer(w, http.StatusServiceUnavailable, map[string]string{"error": "unavailable"})
	default:
		answer(w, http.StatusCreated, map[string]string{
			"order_id": id, "sale_id": sale, "user_id": user, "status": "pending_payment",
		})
	}
}

var (
	errSoldOut = errors.New("sold out")
	errAlready = errors.New("already purchased")
)

// buy takes a unit and records the order in one transaction.
func (s *server) buy(ctx context.Context, sale, user string) (string, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx)
	var price int64
	err = tx.QueryRow(ctx,
		`UPDATE items SET "left" = "left" - 1 WHERE id = $1 AND "left" > 0 RETURNING price_cents`,
		sale).Scan(&price)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return "", errSoldOut
		}
		return "", err
	}
	id := newID()
	_, err = tx.Exec(ctx,
		`INSERT INTO orders (order_id, sale_id, user_id, price_cents, status) VALUES ($1, $2, $3, $4, 'pending_payment')`,
		id, sale, user, price)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return "", errAlready
	}
	if err != nil {
		return "", err
	}
	return id, tx.Commit(ctx)
}

// user verifies an HS256 bearer token and returns its subject.
func (s *server) user(header string) (string, error) {
	raw, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return "", errors.New("no bearer token")
	}
	var c jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return s.secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired())
	if err != nil || c.Subject == "" {
		return "", errors.New("bad token")
	}
	return c.Subject, nil
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
