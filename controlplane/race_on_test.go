//go:build race

package controlplane

// raceEnabled is true when the tests run under the race detector, which
// makes the pure-Go SQLite about ten times slower: big fixtures shrink.
const raceEnabled = true
