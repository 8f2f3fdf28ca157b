package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/ordersink"
)

// serveEnv is the least environment serve parses with.
func serveEnv(extra map[string]string) func(string) string {
	e := map[string]string{"FLASHGATE_JWT_SECRET": "0123456789abcdef0123456789abcdef", "FLASHGATE_ADMIN_TOKEN": "admintoken-0123456789",
		"FLASHGATE_REDIS": "redis://127.0.0.1:6379", "FLASHGATE_DB": "sqlite:///tmp/x.db"}
	for k, v := range extra {
		e[k] = v
	}
	return env(e)
}

// TestFlagDefaultsAreTierDefaults: a flag that sets a tier's setting
// defaults to the tier's own default, so that serve without flags runs
// each tier as its zero Config would.
func TestFlagDefaultsAreTierDefaults(t *testing.T) {
	cfg, err := parseConfig("serve", nil, &bytes.Buffer{}, serveEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flag      string
		got, want any
	}{
		{"user-rate", cfg.UserRate, float64(gateway.DefaultUserRate)},
		{"user-burst", cfg.UserBurst, gateway.DefaultUserBurst},
		{"sale-rate", cfg.SaleRate, float64(gateway.DefaultSaleRate)},
		{"reserve-limit", cfg.ReserveLimit, gateway.DefaultReserveLimit},
		{"reserve-tolerance", cfg.ReserveTol, float64(gateway.DefaultReserveTolerance)},
		{"state-refresh", cfg.StateRefresh, gateway.DefaultStateRefresh},
		{"user-limiters", cfg.UserLimiters, gateway.DefaultMaxUsers},
		{"fast-conns", cfg.FastConns, gateway.DefaultFastConns},
		{"payment-window", cfg.PaymentWindow, controlplane.DefaultPaymentWindow},
		{"resync-every", cfg.ResyncEvery, controlplane.DefaultResyncEvery},
		{"reserve-batch", cfg.ReserveBatch, inventory.DefaultMaxReserveBatch},
		{"wait-replicas", inventoryWait(cfg.WaitReplicas), inventory.WaitAuto},
		{"sink-wait-replicas", cfg.SinkWaitReplicas, ordersink.WaitAuto},
		{"sink-wait-timeout", cfg.SinkWaitTimeout, ordersink.DefaultWaitTimeout},
		{"sink-claim-idle", cfg.SinkClaimIdle, ordersink.DefaultClaimIdle},
	} {
		if tc.got != tc.want {
			t.Errorf("--%s: got %v, want the tier's default %v", tc.flag, tc.got, tc.want)
		}
	}
}

// TestUserBurstZero: --user-burst 0 with a per-user rate is refused rather
// than silently becoming the gateway's default burst; without a per-user
// rate the burst does not matter.
func TestUserBurstZero(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--user-burst", "0"}, "--user-burst must be at least 1"},
		{[]string{"--user-burst", "0", "--user-rate", "0"}, ""},
		{[]string{"--user-burst", "1"}, ""},
	} {
		_, err := parseConfig("serve", tc.args, &bytes.Buffer{}, serveEnv(nil))
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.err)
		}
	}
}
