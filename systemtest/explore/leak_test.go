package explore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a schedule leaves a goroutine behind
// (an actor never resumed, a client never closed).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
