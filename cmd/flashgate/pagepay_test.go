package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/gateway"
)

// TestStripePublishableKeyFlag: --stripe-publishable-key (or its
// environment variable) takes a publishable key only, and only with
// --payments stripe; --stripe-js-url defaults to Stripe's script and takes
// an http(s) URL; both belong to the commands that serve the item page.
func TestStripePublishableKeyFlag(t *testing.T) {
	base := []string{"--redis", "redis://127.0.0.1:1/0", "--jwt-secret", "j", "--admin-token", "a"}
	stripe := []string{"--payments", "stripe", "--stripe-key", "sk_test_x", "--stripe-webhook-secret", "whsec_x"}
	tests := []struct {
		name    string
		cmd     string
		args    []string
		env     map[string]string
		wantErr string // "" = no error
		wantKey string
		wantJS  string
	}{
		{"unset", "serve", nil, nil, "", "", gateway.DefaultStripeJS},
		{"flag", "serve", append([]string{"--stripe-publishable-key", "pk_test_1"}, stripe...), nil, "", "pk_test_1", gateway.DefaultStripeJS},
		{"environment", "gateway", stripe, map[string]string{"FLASHGATE_STRIPE_PUBLISHABLE_KEY": "pk_live_2", "FLASHGATE_STRIPE_JS_URL": "http://127.0.0.1:9/v3/"}, "", "pk_live_2", "http://127.0.0.1:9/v3/"},
		{"a secret key", "serve", append([]string{"--stripe-publishable-key", "sk_test_1"}, stripe...), nil, "want a publishable key", "", ""},
		{"without a provider", "serve", []string{"--stripe-publishable-key", "pk_test_1"}, nil, "needs --payments stripe", "", ""},
		{"a bad script address", "serve", append([]string{"--stripe-publishable-key", "pk_test_1", "--stripe-js-url", "javascript:x"}, stripe...), nil, "--stripe-js-url", "", ""},
		{"not the control plane's", "controlplane", []string{"--stripe-publishable-key", "pk_test_1"}, nil, "flag provided but not defined", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{}, base...)
			if tc.cmd == "gateway" {
				args = args[:4] // a gateway takes no admin token
			}
			cfg, err := parseConfig(tc.cmd, append(args, tc.args...), &out, env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error()+out.String(), tc.wantErr) {
					t.Fatalf("got %v (%s), want an error saying %q", err, out.String(), tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v (%s), want none", err, out.String())
			}
			if cfg.StripePubKey != tc.wantKey || cfg.StripeJSURL != tc.wantJS {
				t.Errorf("got key %q, script %q, want %q, %q", cfg.StripePubKey, cfg.StripeJSURL, tc.wantKey, tc.wantJS)
			}
		})
	}
}
