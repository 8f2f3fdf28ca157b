//go:build !race

package gateway

// raceEnabled is true when the tests run under the race detector.
const raceEnabled = false
