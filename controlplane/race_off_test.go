//go:build !race

package controlplane

// raceEnabled is true when the tests run under the race detector.
const raceEnabled = false
