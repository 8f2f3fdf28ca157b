package controlplane

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// createHookStore is a Store that runs afterCreate once a sale's row is
// inserted, before CreateSale goes on to its hash.
type createHookStore struct {
	Store
	afterCreate func(id string)
}

func (h createHookStore) CreateSale(ctx context.Context, s flashgate.Sale) error {
	err := h.Store.CreateSale(ctx, s)
	if err == nil {
		h.afterCreate(s.ID)
	}
	return err
}

// TestCreateSaleRacesResync runs a re-sync pass of the same process between
// a new sale's row and its hash (the demo's start, an admin's create during
// the leader's pass): the pass waits for the create, so it never finds the
// row without its hash and "rebuilds" a sale Redis never had, warning of a
// loss. The hook waits for the pass at most a few seconds: with the create
// holding the re-sync's lock, the pass runs after it.
func TestCreateSaleRacesResync(t *testing.T) {
	logs := &lockedBuffer{}
	var svc *Service
	passes := make(chan error, 4)
	e := newEnv(t, sqliteDSN(t), func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		c.Store = createHookStore{Store: c.Store, afterCreate: func(id string) {
			go func() {
				_, _, err := svc.Resync(WithFencingToken(context.Background(), 1), id)
				passes <- err
			}()
			select {
			case err := <-passes:
				passes <- err
			case <-time.After(3 * time.Second):
			}
		}}
	})
	svc = e.svc
	if _, err := e.svc.CreateSale(e.ctx, flashgate.Sale{ID: "fresh", Name: "Fresh", PriceCents: 100, Total: 5}); err != nil {
		t.Fatal(err)
	}
	if err := <-passes; err != nil {
		t.Fatalf("the re-sync pass: %v", err)
	}
	if got := logs.lines("sale rebuilt in redis"); got != 0 {
		t.Errorf("a sale 'rebuilt' by a pass during its creation: got %d warnings, want 0\n%s", got, logs.b.String())
	}
	if got := e.rdb.HGet(e.ctx, lua.SaleKey("fresh"), lua.FieldTotal).Val(); got != "5" {
		t.Errorf("the new sale's hash: total %q, want 5", got)
	}
}
