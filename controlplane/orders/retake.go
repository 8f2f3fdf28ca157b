package orders

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/internal/replwait"
	"github.com/flashgate/flashgate/lua"
)

// retakeWait bounds the WAIT after a retake, as a reserve's
// (inventory.DefaultWaitTimeout).
const retakeWait = 500 * time.Millisecond

// retake runs lua.Retake on the keys of tag and, when it took the units
// (or took them earlier), waits until the replicas the sale's primary has
// online hold it (WAIT on the connection of the script, after a write of
// the tag's WAIT mark so that a retake written by an earlier call is
// covered too), as a reserve does before its 201: the honour step that
// follows commits a unit a failover must not lose. A WAIT that falls short
// is flashgate.ErrUnavailable; the retake stays recorded and the next
// settle (the reconciliation) waits again. A primary whose replicas cannot
// be read is waited on for at least one; one that cannot tell at all
// (INFO renamed, miniredis) has none.
func (s *Service) retake(ctx context.Context, tag string, args ...any) (int, error) {
	keys := lua.RetakeKeys(tag)
	node, err := s.primaryOf(ctx, keys[0])
	if err != nil {
		return 0, err
	}
	if node == nil {
		return lua.Retake.Run(ctx, s.rdb, keys, args...).Int()
	}
	conn := node.Conn()
	defer conn.Close()
	code, err := lua.Retake.Run(ctx, conn, keys, args...).Int()
	if err != nil || code != lua.RetakeOK {
		return code, err
	}
	n, a, _ := replwait.Read(ctx, conn)
	if a == replwait.Unreadable {
		n = max(n, 1)
	}
	if n == 0 {
		return code, nil
	}
	if err := conn.Set(ctx, lua.WaitMarkKey(tag), 1, 10*time.Second).Err(); err != nil {
		return 0, err
	}
	acked, err := replwait.Wait(ctx, conn, n, retakeWait)
	if err != nil {
		return 0, err
	}
	if acked < int64(n) {
		return 0, fmt.Errorf("retake reached %d of %d replicas: %w", acked, n, flashgate.ErrUnavailable)
	}
	return code, nil
}

// primaryOf returns the client of the primary that holds key: the client
// itself, or on a cluster the master of key's slot; nil for another kind
// of client (a ring), which no WAIT can follow.
func (s *Service) primaryOf(ctx context.Context, key string) (*redis.Client, error) {
	switch r := s.rdb.(type) {
	case *redis.Client:
		return r, nil
	case *redis.ClusterClient:
		return r.MasterForKey(ctx, key)
	}
	return nil, nil
}

// unretake gives back the units of a refunded order that a late payment
// took again (lua.Unretake; a no-op for any other order): Release leaves
// them, the order being in the released set. unhonoured says no honour
// step recorded the retake (the late payment is refunded), so the units
// leave reserved too: no retakes row will ever count them. It returns
// what failed; the callers that only log it leave the units to the next
// re-sync (the buyer entry stays until the sale's next rebuild).
func (s *Service) unretake(ctx context.Context, o flashgate.Order, unhonoured bool) error {
	sale, err := s.store.Sale(ctx, o.SaleID)
	if err != nil {
		return err
	}
	flag := ""
	if unhonoured {
		flag = "1"
	}
	tag := buckets.Layout(sale).Tag(o.Bucket)
	return lua.Unretake.Run(ctx, s.rdb, lua.UnretakeKeys(tag), o.ID, o.UserID, o.Quantity, o.Variant, flag).Err()
}

// unretakeOrLog is unretake after an admin refund of an honoured order,
// whose failure is only logged: the refund's step marked the retake owed
// back (flashgate.PaymentStep.OweRetake), and the next re-sync pass gives
// it back if this does not. A no-op for an order no late payment took
// again, and for one a pass gave back already.
func (s *Service) unretakeOrLog(ctx context.Context, o flashgate.Order) {
	if err := s.unretake(ctx, o, false); err != nil {
		s.log.Warn("giving back a retaken order's units failed; the next re-sync gives them back", "order", o.ID, "sale", o.SaleID, "err", err)
		return
	}
	if err := s.paymentStore.RetakeGivenBack(ctx, o.ID); err != nil {
		s.log.Info("recording a retake given back failed; the next re-sync records it", "order", o.ID, "sale", o.SaleID, "err", err)
	}
}
