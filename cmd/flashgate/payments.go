package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/payments"
)

// The values of --payments.
const (
	paySimulated  = "simulated"
	payStripe     = "stripe"
	payStripeDemo = "stripe-local"
)

// checkPayments checks the payment flags of cmd.
func checkPayments(cmd string, c *Config) error {
	switch c.Payments {
	case paySimulated:
	case payStripe:
		if c.StripeKey == "" || c.StripeSecret == "" {
			return fmt.Errorf("--payments stripe needs --stripe-key and --stripe-webhook-secret (or %s and %s)",
				EnvName("stripe-key"), EnvName("stripe-webhook-secret"))
		}
		if c.StripeAPIBase != "" {
			if err := checkHTTPURL("--stripe-api-base", c.StripeAPIBase); err != nil {
				return err
			}
		}
	case payStripeDemo:
		if cmd != "demo" {
			return fmt.Errorf("--payments stripe-local is for demo only; want simulated or stripe")
		}
	default:
		return fmt.Errorf("--payments %q: want simulated or stripe", c.Payments)
	}
	if err := checkPageKey(cmd, c); err != nil {
		return err
	}
	if c.PaymentCurrency == "" || !flashgate.ValidCurrency(c.PaymentCurrency) {
		return fmt.Errorf("--payment-currency %q: want an ISO 4217 code in lower case, such as usd", c.PaymentCurrency)
	}
	return nil
}

// checkPageKey checks --stripe-publishable-key and --stripe-js-url on the
// commands that serve the item page: a publishable key only (the page
// publishes it), only with a provider, and a script at an http(s) URL.
func checkPageKey(cmd string, c *Config) error {
	if !gwLike.has(cmd) {
		return nil
	}
	if err := checkHTTPURL("--stripe-js-url", c.StripeJSURL); err != nil {
		return err
	}
	if c.StripePubKey == "" {
		return nil
	}
	if !strings.HasPrefix(c.StripePubKey, "pk_") {
		return fmt.Errorf("--stripe-publishable-key: want a publishable key (pk_…); it is published in every item page, never give a secret one")
	}
	if c.Payments != payStripe && c.Payments != payStripeDemo {
		return fmt.Errorf("--stripe-publishable-key needs --payments stripe")
	}
	return nil
}

// paymentProvider is the provider the flags choose: nil for simulated
// payments.
func paymentProvider(c *Config) (controlplane.PaymentProvider, error) {
	if c.Payments != payStripe && c.Payments != payStripeDemo {
		return nil, nil
	}
	p, err := payments.NewStripe(payments.StripeConfig{Key: c.StripeKey, WebhookSecret: c.StripeSecret, APIBase: c.StripeAPIBase})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// webhookBodySize bounds a webhook's body on a gateway that takes
// payments: a provider's event runs to a few KB, past the purchase
// routes' bound.
const webhookBodySize = 64 << 10

// startStandIn serves, for demo --payments stripe-local, a local stand-in
// of Stripe's API on a free loopback port and points the Stripe flags at
// it (a key, a publishable key and a webhook secret of its own, and its
// Stripe.js for the item page, which so takes payments); its webhooks go
// to the demo's gateway. It returns nil for any other --payments.
func startStandIn(st *stack, cfg *Config) (*stripelocal.Server, error) {
	if cfg.Payments != payStripeDemo {
		return nil, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("stand-in of the payment provider: %v", err)
	}
	cfg.StripeKey, cfg.StripeSecret = "sk_test_"+randomSecret(12), "whsec_"+randomSecret(16)
	cfg.StripeAPIBase = httpURL(ln.Addr())
	cfg.StripePubKey, cfg.StripeJSURL = "pk_test_"+randomSecret(12), cfg.StripeAPIBase+stripelocal.JSPath
	stand := stripelocal.New(cfg.StripeKey, cfg.StripeSecret)
	stand.PublishableKey = cfg.StripePubKey
	srv := &http.Server{Handler: stand, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	st.onClose(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		stand.Deliveries.Wait()
	})
	return stand, nil
}

// demoCheckout shows a checkout against the stand-in: a buyer of sale pays
// (the order answers paying, with its intent), confirms the intent with
// its client secret as Stripe.js would, and the stand-in's signed webhook
// makes the order paid.
func demoCheckout(ctx context.Context, stdout io.Writer, cfg *Config, stand *stripelocal.Server, base, sale string) error {
	stand.SetWebhookURL(base + "/webhooks/stripe")
	tok, err := mintToken([]byte(cfg.JWTSecret), "checkout-buyer", time.Now().Add(time.Hour))
	if err != nil {
		return err
	}
	call := func(method, url string, form url.Values, auth string) (map[string]any, int, error) {
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(ctx, method, url, body)
		if err != nil {
			return nil, 0, err
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return nil, 0, err
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&out)
		return out, res.StatusCode, nil
	}
	// A fresh sale of one unit, so the checkout never meets a sold-out demo.
	fmt.Fprintln(stdout, "checkout (payments: local stand-in of Stripe's API at "+cfg.StripeAPIBase+")")
	var orderID string
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, code, err := call("POST", base+"/api/sales/"+sale+"-checkout/orders", nil, tok)
		if err == nil && code == http.StatusCreated {
			orderID, _ = o["order_id"].(string)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("checkout: buying: %d %v %v", code, o, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var pay map[string]any
	for {
		o, code, err := call("POST", base+"/api/orders/"+orderID+"/pay", nil, tok)
		if err == nil && code == http.StatusOK {
			pay = o
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("checkout: paying: %d %v %v", code, o, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pi, _ := pay["payment_intent"].(string)
	secret, _ := pay["client_secret"].(string)
	fmt.Fprintf(stdout, "  pay        order %s: %v, intent %s\n", orderID, pay["status"], pi)
	if _, code, err := call("POST", cfg.StripeAPIBase+"/v1/payment_intents/"+pi+"/confirm", url.Values{"client_secret": {secret}, "key": {cfg.StripePubKey}}, ""); err != nil || code != http.StatusOK {
		return fmt.Errorf("checkout: confirming at the stand-in: %d %v", code, err)
	}
	fmt.Fprintln(stdout, "  confirm    the buyer's card, at the provider (the stand-in signs and sends payment_intent.succeeded)")
	for {
		o, _, err := call("GET", base+"/api/orders/"+orderID, nil, tok)
		if err == nil && o["status"] == "paid" {
			fmt.Fprintf(stdout, "  webhook    order %s paid\n", orderID)
			return nil
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			return fmt.Errorf("checkout: the order did not become paid: %v %v", o, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
