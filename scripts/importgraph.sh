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
#   4. Inside a folder the rooms (its packages one level down, with what is
#      under them) import neither the folder's own package (its root) nor,
#      directly or through others, a room that imports them: the arrows
#      between rooms point one way too. One room may import its root:
#      controlplane/admin, the HTTP API over controlplane.Service.
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
# room: the root package of the folder itself, or the room r is in.
function room(r, f, rest, a) {
	f = folder(r)
	if (r == f || f == ".") return f
	rest = substr(r, length(f) + 2)
	split(rest, a, "/")
	return f "/" a[1]
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
		rf = room(from); rt = room(to)
		if (ff == ft && ff != "." && rf != rt) {
			if (rt == ft && !(rf in rootok)) {
				printf "importgraph: room %s imports the root of its folder, %s (%s -> %s)\n", rf, ft, from, to
				bad = 1
			}
			if (!((rf, rt) in redge)) { redge[rf, rt] = from " -> " to; rooms[rf]; rooms[rt] }
		}
	}
}
# loops reports the arrows of e (over the nodes in nodes) that close a
# loop, naming them what; it returns how many.
function loops(e, nodes, what, reach, k, ab, c, changed, n) {
	# reach[a, b]: b can be reached from a (transitive closure).
	for (k in e) reach[k] = 1
	changed = 1
	while (changed) {
		changed = 0
		for (k in reach) {
			split(k, ab, SUBSEP)
			for (c in nodes) if (((ab[2], c) in e) && !((ab[1], c) in reach)) { reach[ab[1], c] = 1; changed = 1 }
		}
	}
	n = 0
	for (k in e) {
		split(k, ab, SUBSEP)
		if ((ab[2], ab[1]) in reach) {
			printf "importgraph: %s %s and %s import each other (%s, and back)\n", what, ab[1], ab[2], e[k]
			n++
		}
	}
	return n
}
BEGIN { rootok["controlplane/admin"] }
END {
	if (loops(edge, folders, "folders") + loops(redge, rooms, "rooms") > 0) bad = 1
	if (bad) exit 1
	n = 0; for (k in edge) n++
	m = 0; for (k in redge) m++
	printf "importgraph: %d arrows between folders and %d between rooms, all one way; no room imports the root of its folder (but controlplane/admin); no product package imports a program or a test harness\n", n, m
}'
