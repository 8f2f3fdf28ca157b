package controlplane

import (
	"context"

	"github.com/flashgate/flashgate"
)

// The order actions and payments are controlplane/orders'; these methods
// hand them on, and give expiry its fencing token.

// Order returns the order orderID of userID (orders.Service.Order).
func (s *Service) Order(ctx context.Context, orderID, userID string) (flashgate.Order, error) {
	return s.orders.Order(ctx, orderID, userID)
}

// Pay pays userID's order, or starts its checkout at the payment provider
// (orders.Service.Pay).
func (s *Service) Pay(ctx context.Context, orderID, userID string) (flashgate.Order, error) {
	return s.orders.Pay(ctx, orderID, userID)
}

// Cancel cancels userID's unpaid order and gives its units back
// (orders.Service.Cancel).
func (s *Service) Cancel(ctx context.Context, orderID, userID string) (flashgate.Order, error) {
	return s.orders.Cancel(ctx, orderID, userID)
}

// Refund refunds a pending or paid order and gives its units back
// (orders.Service.Refund).
func (s *Service) Refund(ctx context.Context, orderID string) (flashgate.Order, error) {
	return s.orders.Refund(ctx, orderID)
}

// ExpireDue expires the orders unpaid past the payment window
// (orders.Service.ExpireDue) under ctx's fencing token, or one of its own
// (fencedCall). The leader calls it every tick.
func (s *Service) ExpireDue(ctx context.Context) (n int, err error) {
	err = s.fencedCall(ctx, func(ctx context.Context) error {
		var e error
		n, e = s.orders.ExpireDue(ctx)
		return e
	})
	return n, err
}

// Paying reports whether the Service takes payments at a provider.
func (s *Service) Paying() bool { return s.orders.Paying() }

// Webhook handles one webhook delivery of the payment provider
// (orders.Service.Webhook).
func (s *Service) Webhook(ctx context.Context, payload []byte, signature string) error {
	return s.orders.Webhook(ctx, payload, signature)
}

// ReconcilePayments asks the provider about the payments the webhooks have
// not settled (orders.Service.ReconcilePayments). The leader calls it
// every tick.
func (s *Service) ReconcilePayments(ctx context.Context) (int, error) {
	return s.orders.ReconcilePayments(ctx)
}

// OrderPayments returns the payments of a sale's orders by order id.
func (s *Service) OrderPayments(ctx context.Context, saleID string) (map[string]flashgate.Payment, error) {
	return s.orders.OrderPayments(ctx, saleID)
}

// OrderPayment returns an order's payment; flashgate.ErrNotFound without one.
func (s *Service) OrderPayment(ctx context.Context, orderID string) (flashgate.Payment, error) {
	return s.orders.OrderPayment(ctx, orderID)
}
