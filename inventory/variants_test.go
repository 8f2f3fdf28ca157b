package inventory_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// prepVariants creates the open sale id sold in the given variants (ids in
// order, totals as given) with per-user limit perUser, as the control plane
// does: Prepare with a variants spec.
func prepVariants(tb testing.TB, rdb redis.UniversalClient, id string, perUser int64, ids []string, totals []int64) {
	tb.Helper()
	ctx := context.Background()
	var sum int64
	spec := make([]string, len(ids))
	for i, v := range ids {
		sum += totals[i]
		spec[i] = v + ":" + strconv.FormatInt(totals[i], 10)
	}
	n, err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(id),
		sum, flashgate.AdmitCap(sum, 0), perUser, 500, "", "", strings.Join(spec, ",")).Int64()
	if err != nil || n != 1 {
		tb.Fatalf("Prepare %s: got %d, %v; want 1", id, n, err)
	}
	if n, err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(id), "open").Int64(); err != nil || n != 1 {
		tb.Fatalf("SetState %s open: got %d, %v; want 1", id, n, err)
	}
}
