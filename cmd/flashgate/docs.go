package main

// The flag tables of README.md and docs/api.md and the metric table of
// docs/api.md are generated from flagSpecs (whose defaults for a tier's
// setting are the tier's Default* constants) and from the collectors the
// tiers register, by TestDocTables (docs_test.go), which also fails when
// they drift. After changing a flag, a default, a metric or their text:
// go generate ./cmd/flashgate
//go:generate go test -count=1 -run ^TestDocTables$ . -args -update-docs
