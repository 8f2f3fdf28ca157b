package stripelocal

import (
	_ "embed"
	"net/http"
)

// JSPath is where the stand-in serves its Stripe.js (stripe.js): the subset
// of Stripe.js an item page uses, confirming payments at this stand-in.
// Point the page's script address at the stand-in's base URL + JSPath.
const JSPath = "/v3/"

// DeclinedCard is the card number the stand-in declines, Stripe's test card
// for a generic decline; DeclinedPaymentMethod is Stripe's test payment
// method that does the same.
const (
	DeclinedCard          = "4000000000000002"
	DeclinedPaymentMethod = "pm_card_chargeDeclined"
)

// declinedMessage is what a declined confirmation says, as Stripe says it.
const declinedMessage = "Your card was declined."

//go:embed stripe.js
var stripeJS []byte

// serveBrowser answers what a browser asks of the stand-in: its script,
// and the CORS preflight of a confirmation from a page on another origin;
// it marks every answer to a browser (a request with Origin) readable by
// any page, as Stripe's API does for publishable-key calls. It reports
// whether it answered.
func (s *Server) serveBrowser(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Origin") != "" {
		w.Header().Set("Access-Control-Allow-Origin", "*")
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == JSPath:
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(stripeJS)
		return true
	case r.Method == http.MethodOptions:
		w.Header().Set("Access-Control-Allow-Methods", "POST, GET")
		w.Header().Set("Access-Control-Allow-Headers", "Content-Type")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	return false
}

// declined reports whether a confirmation's form asks for the declined
// card or payment method.
func declined(form map[string]string) bool {
	return form["payment_method_data[card][number]"] == DeclinedCard || form["payment_method"] == DeclinedPaymentMethod
}
