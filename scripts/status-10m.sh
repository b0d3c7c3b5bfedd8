#!/usr/bin/env bash
# The overview at size: fills an outbox table of 10,000,000 rows (once; it
# is kept for the next run) as after a week of traffic, then times what
# the console's overview asks for: `relay status --json` and the console's
# GET /api/status and /api/groups. Prints one line per timing.
#
#   scripts/status-10m.sh                 # schema status10m, 10,000,000 rows
#   ROWS=1000000 SCHEMA=s1m scripts/status-10m.sh
#   psql "$URL" -c 'DROP SCHEMA status10m CASCADE'   # to drop it
set -euo pipefail
cd "$(dirname "$0")/.."
URL="${OUTBOX_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
SCHEMA="${SCHEMA:-status10m}"
ROWS="${ROWS:-10000000}"
RUNS="${RUNS:-5}"
go build -o /tmp/status-10m-relay ./cmd/relay
relay=/tmp/status-10m-relay
t="$SCHEMA.outbox"

have=-1
if [ "$(psql "$URL" -qAtc "SELECT to_regclass('$t') IS NOT NULL")" = t ]; then
  have="$(psql "$URL" -qAtc "SELECT count(*) FROM $t")"
fi
if [ "$have" != "$ROWS" ]; then
  echo "filling $t with $ROWS rows"
  psql "$URL" -qc "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" -c "CREATE SCHEMA $SCHEMA"
  "$relay" migrate up --database-url "$URL" --schema "$SCHEMA" >/dev/null
  # Of every 10,000 rows: 9,880 sent over the last 7 days, 100 pending
  # (20 of them due 5 minutes after the fill), 10 processing under a
  # 30 s lease, 10 failed (8 error texts); 20 topics.
  psql "$URL" -q <<SQL
SET session_replication_role = replica;  -- no wake-up trigger per row
INSERT INTO $t (topic, key, payload, status, attempt, next_retry_at, locked_by, locked_until, last_error, created_at, sent_at, failed_at)
SELECT 'topic.' || (g % 20),
       convert_to('key-' || (g % 100000), 'UTF8'),
       '\x7b7d'::bytea,
       s.status,
       CASE WHEN s.status = 'failed' THEN 10 ELSE 0 END,
       CASE WHEN m BETWEEN 9960 AND 9979 THEN now() + interval '5 min' ELSE now() - (m % 60) * interval '1 s' END,
       CASE WHEN s.status = 'processing' THEN 'relay-' || (g % 3) || ':' || md5(g::text) END,
       CASE WHEN s.status = 'processing' THEN now() + interval '30 s' END,
       CASE WHEN s.status = 'failed' THEN (ARRAY['permanent: kafka: [10] Message Size Too Large: broker refused ' || (g % 977) || ' bytes',
         'attempts exhausted: kafka: dial tcp 10.0.' || (g % 250) || '.4:9092: i/o timeout',
         'permanent: kafka: [3] Unknown Topic Or Partition',
         'malformed: headers: invalid JSON at offset ' || (g % 90),
         'attempts exhausted: webhook: 503 Service Unavailable after 30s',
         'parked: an earlier event of key "key-' || (g % 100000) || '" failed',
         'permanent: webhook: 410 Gone',
         'too large: ' || (g % 5000) || ' bytes over --max-message-bytes'])[1 + g % 8] END,
       now() - (g % 604800) * interval '1 s',
       CASE WHEN s.status = 'sent' THEN now() - (g % 604800) * interval '1 s' END,
       CASE WHEN s.status = 'failed' THEN now() - (g % 86400) * interval '1 s' END
FROM generate_series(1, $ROWS) g,
     LATERAL (SELECT g % 10000 AS m) mm,
     LATERAL (SELECT CASE WHEN m < 9880 THEN 'sent' WHEN m < 9980 THEN 'pending'
                          WHEN m < 9990 THEN 'processing' ELSE 'failed' END AS status) s;
VACUUM ANALYZE $t;
SQL
fi
psql "$URL" -qAtc "SELECT '$t: ' || count(*) || ' rows, ' || pg_size_pretty(pg_total_relation_size('$t')) FROM $t"

ms() { local a b; a=$(date +%s%N); "$@" >/dev/null; b=$(date +%s%N); echo $(( (b - a) / 1000000 )); }
for i in $(seq "$RUNS"); do
  echo "relay status --json: $(ms "$relay" status --database-url "$URL" --schema "$SCHEMA" --json) ms"
done
"$relay" console --database-url "$URL" --schema "$SCHEMA" --listen 127.0.0.1:18089 2>/dev/null &
console=$!
trap 'kill $console 2>/dev/null' EXIT
for _ in $(seq 50); do curl -fs -o /dev/null 127.0.0.1:18089/ && break; sleep 0.2; done
for i in $(seq "$RUNS"); do
  echo "GET /api/status: $(ms curl -fs 127.0.0.1:18089/api/status) ms; GET /api/groups: $(ms curl -fs 127.0.0.1:18089/api/groups) ms"
done
