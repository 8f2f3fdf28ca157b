package main

import (
	"fmt"

	"github.com/flashgate/flashgate/controlplane"
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
	if c.PaymentCurrency == "" {
		return fmt.Errorf("--payment-currency must not be empty")
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
