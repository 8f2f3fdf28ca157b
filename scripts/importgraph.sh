#!/usr/bin/env bash
# importgraph.sh: the house's import rules, checked on `go list` (make lint).
#   1. No product package imports a program (cmd/ other than cmd/flashgate)
#      or a test harness (internal/testenv/...).
#   2. internal/ outside internal/testenv holds only leaves: they import no
#      package of the module but the root and each other.
#   3. Between folders the arrows point one way: no folder imports, directly
#      or through others, a folder that imports it (a folder whose packages
#      import from both the ground floor and the top closes such a loop).
#      A folder is the module path's first element, cmd/<name>,
#      internal/testenv, or the root.
# Test files are not part of the graph (go list's Imports leaves them out).
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
go list -tags faults -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' ./... |
awk -v mod="$mod" '
function rel(p) { return p == mod ? "." : substr(p, length(mod) + 2) }
function inmod(p) { return p == mod || index(p, mod "/") == 1 }
function folder(r, a) {
	if (r == ".") return "."
	split(r, a, "/")
	if (a[1] == "cmd" || (a[1] == "internal" && a[2] == "testenv")) return a[1] "/" a[2]
	return a[1]
}
function program(r) { return r ~ /^cmd\// && r !~ /^cmd\/flashgate(\/|$)/ }
function harness(r) { return r ~ /^internal\/testenv(\/|$)/ }
function product(r) { return !program(r) && !harness(r) && r !~ /^systemtest(\/|$)/ }
{
	from = rel($1)
	for (i = 2; i <= NF; i++) {
		if (!inmod($i)) continue
		to = rel($i)
		if (product(from) && (program(to) || harness(to))) {
			printf "importgraph: product package %s imports %s %s\n", from, program(to) ? "the program" : "the test harness", to
			bad = 1
		}
		if (from ~ /^internal\// && !harness(from) && to != "." && to !~ /^internal\//) {
			printf "importgraph: %s in internal/ is not a leaf: it imports %s\n", from, to
			bad = 1
		}
		ff = folder(from); ft = folder(to)
		if (ff != ft && !((ff, ft) in edge)) { edge[ff, ft] = from " -> " to; folders[ff]; folders[ft] }
	}
}
END {
	# reach[a, b]: b can be reached from a (transitive closure).
	for (k in edge) reach[k] = 1
	changed = 1
	while (changed) {
		changed = 0
		for (k in reach) {
			split(k, ab, SUBSEP)
			for (c in folders) if (((ab[2], c) in edge) && !((ab[1], c) in reach)) { reach[ab[1], c] = 1; changed = 1 }
		}
	}
	for (k in edge) {
		split(k, ab, SUBSEP)
		if ((ab[2], ab[1]) in reach) {
			printf "importgraph: folders %s and %s import each other (%s, and back)\n", ab[1], ab[2], edge[k]
			bad = 1
		}
	}
	if (bad) exit 1
	n = 0; for (k in edge) n++
	printf "importgraph: %d arrows between folders, all one way; no product package imports a program or a test harness\n", n
}'
