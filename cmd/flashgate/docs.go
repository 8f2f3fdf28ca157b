package main

// The flag and metric tables of docs/api.md are generated from flagSpecs
// and from the collectors the tiers register, by TestDocTables
// (docs_test.go), which also fails when they drift. After changing a flag,
// a metric or their text: go generate ./cmd/flashgate
//go:generate go test -count=1 -run ^TestDocTables$ . -args -update-docs
