//go:build race

package gateway

// raceEnabled is true when the tests run under the race detector, whose
// sync.Pool drops a share of what is put back (the verifier's pooled HMAC
// states are then made again): allocation counts through a pool mean
// nothing there.
const raceEnabled = true
