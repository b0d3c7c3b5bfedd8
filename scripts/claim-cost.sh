#!/usr/bin/env bash
# claim-cost.sh: the SQL-only cost of our row lifecycle (the relay's claim
# statement, returning the rows, then a mark-sent) on the real outbox schema,
# with pgbench, and of variants of it, in one run. It shows what the schema's
# indexes and the claim's parts cost per event (docs/benchmarks.md);
# relay-bench burn-down's SQL ceiling is the reference lifecycle.
#
#   usage: [VARIANTS="..."] scripts/claim-cost.sh [DATABASE_URL] [ROWS] [ROUNDS]
#   default: postgres://postgres@127.0.0.1:5432/postgres 200000 3, VARIANTS="005 004 005-keyless lock"
#
# Variants, each on a fresh table in schema outbox_claimcost, with ROWS events
# of 200 bytes and batches of 1000, drained by 3/4 with pgbench (1 client):
#   005         the schema as migrated (with 005's ordered_pending_idx), keyed events
#   004         migrated down to 004 (ordered_idx also holds processing rows)
#   005-keyless the schema as migrated, events without a key
#   lock        a lock claim (--claim-mode lock): BEGIN, the SELECT ... FOR UPDATE
#               SKIP LOCKED of the pending rows, one UPDATE to sent, COMMIT
#   nolapsed    005 with a claim that has no lapsed-lease branch (Run's claimDue)
#   noreturn    005 with a claim that returns nothing, as the SQL ceiling's
#   nosentidx   005 with sent_idx dropped
#   ctid        nolapsed, the UPDATE finding the picked rows by ctid (a TID scan)
#               instead of by id (a primary-key probe each)
#   brinsent    nolapsed, with sent_idx a BRIN index instead of a B-tree
#   ctidbrin    both
# Prints "<variant> events_per_s=<n>".
set -euo pipefail
url=${1:-postgres://postgres@127.0.0.1:5432/postgres}
rows=${2:-200000}
rounds=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'psql -q "$url" -c "DROP SCHEMA IF EXISTS outbox_claimcost CASCADE" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
relay=${RELAY:-}
if [ -z "$relay" ]; then
  (cd "$here" && go build -o "$tmp/relay" ./cmd/relay)
  relay=$tmp/relay
fi

cat >"$tmp/lifecycle.sql" <<'SQL'
WITH picked AS (
    SELECT id FROM (
        SELECT id FROM outbox_claimcost.outbox
        WHERE status = 'processing' AND locked_until < now()
          AND NOT (bucket IS NOT NULL AND (false OR topic = ANY('{}'::text[])))
        ORDER BY locked_until LIMIT 1000 FOR UPDATE SKIP LOCKED
    ) AS expired
    UNION ALL
    SELECT id FROM (
        SELECT id FROM outbox_claimcost.outbox
        WHERE status = 'pending' AND next_retry_at <= now()
          AND NOT (bucket IS NOT NULL AND (false OR topic = ANY('{}'::text[])))
        ORDER BY next_retry_at, id LIMIT 1000 FOR UPDATE SKIP LOCKED
    ) AS due
    LIMIT 1000
)
UPDATE outbox_claimcost.outbox AS o
SET status = 'processing', locked_by = 'w', locked_until = now() + interval '30 s',
    attempt = least(o.attempt, 2147483646) + 1
FROM picked WHERE o.id = picked.id
RETURNING o.id, o.topic, o.key, o.payload, o.headers, o.attempt, o.created_at;
UPDATE outbox_claimcost.outbox SET status = 'sent', sent_at = now(), locked_until = NULL, last_error = NULL
WHERE locked_by = 'w' AND status = 'processing';
SQL
# The same lifecycle without the claim's lapsed-lease branch (lines 2-8),
# and without its RETURNING.
sed '2,8d' "$tmp/lifecycle.sql" >"$tmp/nolapsed.sql"
sed 's/^RETURNING .*;$/;/' "$tmp/lifecycle.sql" >"$tmp/noreturn.sql"
sed -e 's/^    SELECT id FROM (/    SELECT ctid AS tid FROM (/' -e 's/^        SELECT id FROM /        SELECT ctid FROM /' \
  -e 's/o.id = picked.id/o.ctid = picked.tid/' "$tmp/nolapsed.sql" >"$tmp/ctid.sql"
cp "$tmp/nolapsed.sql" "$tmp/brinsent.sql"
cp "$tmp/ctid.sql" "$tmp/ctidbrin.sql"

cat >"$tmp/lock.sql" <<'SQL'
BEGIN;
SELECT quote_literal(array_agg(id)::text) AS ids FROM (
    SELECT id, topic, key, payload, headers, attempt, created_at FROM outbox_claimcost.outbox
    WHERE status = 'pending' AND next_retry_at <= now()
      AND NOT (bucket IS NOT NULL AND (false OR topic = ANY('{}'::text[])))
    ORDER BY next_retry_at, id LIMIT 1000 FOR UPDATE SKIP LOCKED
) AS picked \gset
UPDATE outbox_claimcost.outbox SET status = 'sent', sent_at = now(), attempt = least(attempt, 2147483646) + 1,
    locked_by = 'w', locked_until = NULL, last_error = NULL
WHERE id = ANY(:ids::uuid[]);
END;
SQL

run() { # variant
  local key="decode(md5(g::text), 'hex')"
  psql -q "$url" -c "DROP SCHEMA IF EXISTS outbox_claimcost CASCADE" -c "CREATE SCHEMA outbox_claimcost" >/dev/null 2>&1
  "$relay" migrate up --database-url "$url" --schema outbox_claimcost --table outbox >/dev/null
  case $1 in
    004) # every migration after 004, newest first
      for _ in $(seq $(($(ls "$here"/migrations/[0-9]*.up.sql | wc -l) - 4))); do
        "$relay" migrate down --database-url "$url" --schema outbox_claimcost --table outbox >/dev/null
      done ;;
    005-keyless) key=NULL ;;
    nosentidx) psql -q "$url" -c "DROP INDEX outbox_claimcost.outbox_sent_idx" >/dev/null ;;
    brinsent | ctidbrin) psql -q "$url" -c "DROP INDEX outbox_claimcost.outbox_sent_idx" \
      -c "CREATE INDEX outbox_sent_idx ON outbox_claimcost.outbox USING brin (sent_at) WHERE status = 'sent'" >/dev/null ;;
  esac
  psql -q -v ON_ERROR_STOP=1 "$url" >/dev/null \
    -c "INSERT INTO outbox_claimcost.outbox (id, topic, key, payload)
        SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'orders', $key, convert_to(repeat('x', 200), 'UTF8')
        FROM generate_series(1, $rows) g" \
    -c "VACUUM ANALYZE outbox_claimcost.outbox"
  local tps
  local script=lifecycle.sql
  case $1 in lock | nolapsed | noreturn | ctid | brinsent | ctidbrin) script=$1.sql ;; esac
  tps=$(pgbench -n -c 1 -j 1 -t $((rows / 1000 * 3 / 4)) -f "$tmp/$script" "$url" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
  awk -v n="$1" -v t="$tps" 'BEGIN { printf "%s events_per_s=%.0f\n", n, t * 1000 }'
}
for _ in $(seq "$rounds"); do
  for v in ${VARIANTS:-005 004 005-keyless lock}; do run "$v"; done
done
