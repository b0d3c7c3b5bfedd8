#!/usr/bin/env bash
# busy.sh SECONDS: keep one core half busy (10 ms of spinning, 10 ms of
# sleep) for SECONDS, to stand in for a neighbour on a shared box while a
# benchmark runs. docs/benchmarks.md uses it for "a busier box".
set -euo pipefail
secs=${1:?usage: busy.sh SECONDS}
python3 - "$secs" <<'PY'
import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    start = time.monotonic()
    while time.monotonic() - start < 0.010:
        pass
    time.sleep(0.010)
PY
