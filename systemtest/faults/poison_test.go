//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// poisonSubjects is issue 18's second item as a scenario: on PostgreSQL,
// buyers whose token subjects hold a NUL byte or control characters (or
// are too long) buy among the crowd, and order entries with user ids
// PostgreSQL refuses (a NUL byte, invalid UTF-8: SQLSTATE 22021) are added
// to the sale's stream straight, as no reserve would write them: every
// ordinary order must be stored, each odd buyer refused (401) and each odd
// entry dead-lettered, none lost silently.
var poisonSubjects = scenario{name: "poison-subjects",
	fault: "buyers whose token subjects hold NUL or control characters buy mid-sale, and order entries with user ids PostgreSQL refuses (NUL, invalid UTF-8) are added to the sale's stream (PostgreSQL)",
	needs: "18.2 (sink)", opts: clusterOpts{postgres: true}, inject: poison}

// poisonUsers are token subjects that are not user ids (docs/api.md,
// "Buyer identity").
var poisonUsers = []string{"poison\x00nul", "\x00", "poison\x01soh", "poison\nINFO forged", "poison\x1b[31m", "poison\x7f", "poison\u0085", strings.Repeat("p", flashgate.MaxUserID+1)}

// refusedUsers are user ids PostgreSQL refuses in a text column.
var refusedUsers = []string{"poison-entry\x00nul", "\x00", "poison-entry\xffutf8"}

func poison(ctx context.Context, x *run) {
	x.at(ctx, 1500*time.Millisecond)
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	answers := map[string]int{}
	for i, u := range poisonUsers {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": u, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(x.c.jwt)
		if err != nil {
			x.problem("minting a token for %q: %v", u, err)
			return
		}
		a := x.crowd.send(ctx, client, i%len(x.c.gwURL), "/api/sales/"+x.crowd.sale+"/orders", tok, "")
		answers[a.label()]++
		if a.status != http.StatusUnauthorized || a.code != "unauthorized" {
			x.problem("POISON SUBJECT: a buyer whose token's sub is %q got %s, want 401 unauthorized", u, a.label())
		}
	}
	x.event("%d buyers whose token subjects are not user ids bought: %s", len(poisonUsers), countList(answers))

	// The sink's side: entries the database refuses, between the crowd's.
	var orders []string
	for _, u := range refusedUsers {
		oid := ulid.Make().String()
		v := oid + " 1 4900 " + strconv.FormatInt(time.Now().UnixMilli(), 10) + "  " + u
		if err := x.c.rdb.XAdd(ctx, &redis.XAddArgs{Stream: lua.OrdersKey(x.sale), Values: []any{lua.EntryCompact, v}}).Err(); err != nil {
			x.problem("XADD an entry PostgreSQL refuses: %v", err)
			return
		}
		orders = append(orders, oid)
	}
	x.event("XADD %d order entries whose user ids PostgreSQL refuses (NUL, invalid UTF-8)", len(orders))
	var last string
	d, ok := testwait.For(5*time.Second, func() bool {
		var v struct {
			DeadLetters []struct {
				OrderID string `json:"order_id"`
				Reason  string `json:"reason"`
			} `json:"dead_letters"`
		}
		if err := x.c.adminDo(ctx, http.MethodGet, "/admin/sales/"+x.sale+"/dead-letters?limit=1000", nil, &v); err != nil {
			last = err.Error()
			return false
		}
		reasons := map[string]string{}
		for _, dl := range v.DeadLetters {
			reasons[dl.OrderID] = dl.Reason
		}
		missing := 0
		for _, oid := range orders {
			r, ok := reasons[oid]
			if !ok {
				missing++
				continue
			}
			if !strings.Contains(r, "refused by the database") || !strings.Contains(r, "22021") {
				last = fmt.Sprintf("order %s dead-lettered with reason %q", oid, r)
				return false
			}
		}
		last = fmt.Sprintf("%d of %d not listed", missing, len(orders))
		return missing == 0
	})
	if !ok {
		x.problem("DEAD LETTER: 5s after the order sink met %d entries PostgreSQL refuses, the admin API's dead letters do not hold them with the database's reason (%s); see the order sinks' logs", len(orders), last)
		return
	}
	for _, oid := range orders {
		if _, err := x.c.db.Order(ctx, oid); !errors.Is(err, flashgate.ErrNotFound) {
			x.problem("DEAD LETTER: the refused order %s: got %v from the database, want no row", oid, err)
		}
	}
	x.mu.Lock()
	x.recovery, x.recWhat = d, "refused entries listed as dead letters"
	x.mu.Unlock()
	x.event("the %d refused entries are listed in the sale's dead letters with the database's reason", len(orders))
}
