#!/usr/bin/env bash
# ab-bench.sh compares two builds of the relay in the same hour: it builds
# the relay at OLD and at NEW (git refs) and runs the same relay-bench modes
# with each, alternating old, new, old, new, so that a machine whose load
# drifts charges both alike. Each ref's bench runs that ref's relays: its
# relay-bench (cmd/relay-bench), or `relay bench` at a ref older than it.
#
#   scripts/ab-bench.sh OLD NEW OUTDIR [PAIRS]
#
# It runs, PAIRS times (default 2): a burn-down of 1,000,000 events at
# batch 1,000 (no SQL ceiling: only the ratio of the two builds matters)
# and 60 s of steady 2,000 events/s. The JSON of every run is written to
# OUTDIR as <mode>-<old|new>-<n>.json; a summary line per run is printed.
# The database is OUTBOX_DATABASE_URL (default the local PostgreSQL), the
# schema OUTBOX_SCHEMA (default outbox_ab, so that other bench runs on the
# machine do not drop it).
set -euo pipefail
old=${1:?old ref} new=${2:?new ref} out=${3:?output directory} pairs=${4:-2}
url=${OUTBOX_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
schema=${OUTBOX_SCHEMA:-outbox_ab}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/old" >/dev/null 2>&1 || true; git -C "$root" worktree remove --force "$work/new" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
mkdir -p "$out"
for side in old new; do
	ref=${!side}
	git -C "$root" worktree add --detach --force "$work/$side" "$ref" >/dev/null 2>&1
	(cd "$work/$side" && go build -o "$work/relay-$side" ./cmd/relay)
	if [ -d "$work/$side/cmd/relay-bench" ]; then
		(cd "$work/$side" && go build -o "$work/relay-bench-$side" ./cmd/relay-bench)
	fi
	echo "$side: $(git -C "$root" rev-parse --short "$ref")"
done
# bench SIDE MODE [FLAGS...] runs a mode with SIDE's build.
bench() {
	local side=$1
	shift
	if [ -x "$work/relay-bench-$side" ]; then
		"$work/relay-bench-$side" "$@" --relay-bin "$work/relay-$side" --database-url "$url" --schema "$schema"
	else
		"$work/relay-$side" bench "$@" --database-url "$url" --schema "$schema"
	fi
}
for n in $(seq 1 "$pairs"); do
	for side in old new; do
		f="$out/burndown-$side-$n.json"
		bench "$side" burn-down --events 1000000 --batch-size 1000 --no-ceiling --json >"$f"
		jq -r --arg s "$side" --arg n "$n" '"burn-down \($s) \($n): \(.runs[0].events_per_s | floor) events/s, \(.runs[0].duplicates) duplicates, \(.runs[0].missing) missing"' "$f"
	done
	for side in old new; do
		f="$out/steady-$side-$n.json"
		bench "$side" steady --rate 2000 --duration 60s --json >"$f"
		jq -r --arg s "$side" --arg n "$n" '.runs[0].steady.latency_ms | "steady \($s) \($n): p50 \(.p50 * 100 | round / 100) ms, p99 \(.p99 * 100 | round / 100) ms"' "$f"
	done
done
