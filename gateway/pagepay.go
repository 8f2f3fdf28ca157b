package gateway

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/flashgate/flashgate"
)

// DefaultStripeJS is the address of Stripe.js an item page that takes
// payments loads (Config.StripeJS): Stripe's own, which Stripe asks to be
// loaded from js.stripe.com and never bundled or hosted elsewhere.
const DefaultStripeJS = "https://js.stripe.com/v3/"

// stripeFrames are the origins of the frames Stripe.js opens (the Payment
// Element, 3-D Secure), as Stripe's integration security guide lists them
// for frame-src.
const stripeFrames = "https://js.stripe.com https://*.js.stripe.com https://hooks.stripe.com"

// payPage is what an item page needs to take payments itself: the
// publishable key and the script it hands to the template, and the
// Content-Security-Policy its answers carry. The zero value is a page
// without a payment form, as before the key existed.
type payPage struct {
	key, js string
	// csp is the Content-Security-Policy of the item page; nil without a
	// key.
	csp []byte
}

// newPayPage checks the publishable key and the address of Stripe.js and
// builds the page's policy: scripts from the gateway and the script's
// origin only, frames from that origin and Stripe's, no plugins, no
// <base>. Without a key it returns the zero payPage.
func newPayPage(key, js string) (payPage, error) {
	if key == "" {
		return payPage{}, nil
	}
	// The key is published in every item page: a secret (sk_) or
	// restricted (rk_) key there would give the world the account.
	if !strings.HasPrefix(key, "pk_") || strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return payPage{}, fmt.Errorf("gateway: StripePublishableKey must be a publishable key (pk_…): %w", flashgate.ErrBadRequest)
	}
	if js == "" {
		js = DefaultStripeJS
	}
	u, err := url.Parse(js)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return payPage{}, fmt.Errorf("gateway: StripeJS %q: want an http(s) URL: %w", js, flashgate.ErrBadRequest)
	}
	origin := u.Scheme + "://" + u.Host
	scripts := "'self' " + origin
	if u.Host == "js.stripe.com" {
		// Stripe.js loads parts of itself from its subdomains.
		scripts += " https://*.js.stripe.com"
	}
	frames := stripeFrames
	if !strings.Contains(" "+frames+" ", " "+origin+" ") {
		frames = origin + " " + frames
	}
	csp := "script-src " + scripts + "; frame-src " + frames + "; object-src 'none'; base-uri 'self'"
	return payPage{key: key, js: js, csp: []byte(csp)}, nil
}

// headers are the extra response headers of an item page: its policy,
// when it has one.
func (p payPage) headers() [][]byte {
	if p.csp == nil {
		return nil
	}
	return [][]byte{hCSP, p.csp}
}

// hCSP is the policy header's name.
var hCSP = []byte("Content-Security-Policy")
