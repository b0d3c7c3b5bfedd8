#!/usr/bin/env bash
# What `make test` needs besides Go, checked before it spends minutes
# compiling: the test database, kcat, Chromium, PostgreSQL's server programs, and the
# brokers of the sinks' tests (NATS with JetStream, RabbitMQ, Redis;
# mosquitto and Node.js for the ones they start), and
# MariaDB (or MySQL) for the MySQL store's tests.
# Prints every missing piece with the command that installs or starts it,
# and exits 1 when something is missing; prints one line and exits 0 when
# all is there.
#
#   OUTBOX_TEST_DATABASE_URL  the database the tests use (make sets the
#                             local server's, postgres://postgres@127.0.0.1:5432/postgres)
#   PG_SERVER_DIRS            colon-separated directories to look in for
#                             initdb and postgres instead of where
#                             internal/pgserver looks (pg_config --bindir,
#                             /usr/lib/postgresql/*/bin, PATH)
#   OUTBOX_TEST_NATS_URL, OUTBOX_TEST_RABBITMQ_URL, OUTBOX_TEST_REDIS_ADDR
#                             the brokers the sinks' tests use (default the
#                             local ones: 127.0.0.1:4222, :5672, :6379)
#   OUTBOX_TEST_MYSQL_URL     the MariaDB/MySQL server of the MySQL store's
#                             tests (default root@tcp(127.0.0.1:3306)/)
set -u

missing=()
say() { missing+=("$1"); }

url="${OUTBOX_TEST_DATABASE_URL:-}"

# Go itself (the Makefile runs go vet and go test).
command -v go >/dev/null 2>&1 ||
  say "go: not on PATH; install Go 1.26 or newer from https://go.dev/dl/"

# kcat: the independent Kafka client that one integration test reads the
# topic back with.
command -v kcat >/dev/null 2>&1 ||
  say "kcat: not on PATH (the end-to-end Kafka test reads the topic back with it);
    install it: sudo apt-get install -y kcat   (macOS: brew install kcat)"

# Chromium: the web console's tests drive it headless (OUTBOX_TEST_CHROMIUM
# names another Chromium binary).
[ -n "${OUTBOX_TEST_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 ||
  say "chromium: not on PATH (the web console's tests drive it headless);
    install it: sudo apt-get install -y chromium   (or set OUTBOX_TEST_CHROMIUM to a Chromium binary)"

# Node.js: the cloud services' emulators (scripts/emulators, installed by
# make with npm ci) run on it.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
  say "node, npm: not on PATH (the SQS and Kinesis sinks' tests run emulators on Node.js);
    install them: sudo apt-get install -y nodejs npm"

# initdb and postgres: the fault-injection harness (make chaos-short, run
# by make test) starts a private PostgreSQL server it can crash and restart.
server_dirs() {
  if [ -n "${PG_SERVER_DIRS:-}" ]; then
    tr ':' '\n' <<<"$PG_SERVER_DIRS"
    return
  fi
  command -v pg_config >/dev/null 2>&1 && pg_config --bindir 2>/dev/null
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -V -r
  tr ':' '\n' <<<"$PATH"
}
server=""
while IFS= read -r dir; do
  if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ]; then
    server="$dir"
    break
  fi
done < <(server_dirs)
if [ -z "$server" ]; then
  say "initdb, postgres: PostgreSQL's server programs are not installed (the fault-injection
    tests start a private server with them; looked in ${PG_SERVER_DIRS:-pg_config --bindir, /usr/lib/postgresql/*/bin and PATH});
    install them: sudo apt-get install -y postgresql   (macOS: brew install postgresql@15)"
elif [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
  say "user postgres: running as root, the private PostgreSQL server runs as the OS user postgres
    (initdb and postgres refuse root), and there is none; apt-get install postgresql creates it,
    or: useradd --system postgres"
fi

# The test database: each test creates and drops a schema of its own.
start_hint="start the local server: sudo pg_ctlcluster \$(ls /etc/postgresql | sort -V | tail -n1) main start
    (or sudo service postgresql start; macOS: brew services start postgresql@15), let the
    postgres user in over TCP without a password (trust in pg_hba.conf), or point the tests
    at another database: make test OUTBOX_TEST_DATABASE_URL=postgres://user:pass@host:5432/db"
if [ -z "$url" ]; then
  say "OUTBOX_TEST_DATABASE_URL is empty; set it to a PostgreSQL URL the tests may create schemas in"
elif command -v psql >/dev/null 2>&1; then
  if ! err=$(PGCONNECT_TIMEOUT=5 psql "$url" -qAtX -c 'SELECT 1' 2>&1 >/dev/null); then
    err="${err%%$'\n'*}"
    say "the test database does not answer: $(sed -E -e 's#(://[^:/@]*:)[^@]*@#\1xxxxx@#' -e 's#(password=)[^ ]*#\1xxxxx#' <<<"$url"): ${err#psql: error: }
    $start_hint"
  fi
elif [ -n "$server" ]; then
  say "psql: not on PATH, so the test database cannot be checked; it comes with the server:
    sudo apt-get install -y postgresql-client"
fi

# The sinks' brokers: each test talks to the local one (or the one its
# variable names).
hostport() { # URL or host:port -> host:port
  local x="${1#*://}"
  x="${x#*@}"
  echo "${x%%/*}"
}
answers() { # host:port
  local hp="$1"
  (exec 3<>"/dev/tcp/${hp%:*}/${hp##*:}") 2>/dev/null
}
broker() { # name, address, how to start it
  answers "$2" || say "$1 does not answer on $2 (the sinks' tests publish to it);
    $3"
}
broker "NATS with JetStream" "$(hostport "${OUTBOX_TEST_NATS_URL:-nats://127.0.0.1:4222}")" \
  "start it: nats-server -js -a 127.0.0.1 -p 4222 -sd /tmp/nats &   (sudo apt-get install -y nats-server), or set OUTBOX_TEST_NATS_URL"
broker "RabbitMQ" "$(hostport "${OUTBOX_TEST_RABBITMQ_URL:-amqp://guest:guest@127.0.0.1:5672/}")" \
  "start it: sudo rabbitmq-server -detached   (sudo apt-get install -y rabbitmq-server), or set OUTBOX_TEST_RABBITMQ_URL"
broker "Redis" "$(hostport "${OUTBOX_TEST_REDIS_ADDR:-127.0.0.1:6379}")" \
  "start it: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save ''   (sudo apt-get install -y redis-server), or set OUTBOX_TEST_REDIS_ADDR"
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] ||
  say "mosquitto: not installed (the MQTT sink's tests start a private broker);
    install it: sudo apt-get install -y mosquitto"
mysql_addr="127.0.0.1:3306"
if [ -n "${OUTBOX_TEST_MYSQL_URL:-}" ]; then
  case "$OUTBOX_TEST_MYSQL_URL" in
    mysql://*) mysql_addr="$(hostport "$OUTBOX_TEST_MYSQL_URL")" ;;
    *tcp\(*) mysql_addr="$(sed -E 's/.*tcp\(([^)]*)\).*/\1/' <<<"$OUTBOX_TEST_MYSQL_URL")" ;;
  esac
fi
answers "$mysql_addr" || say "MariaDB or MySQL does not answer on $mysql_addr (the MySQL store's tests use it);
    start it: sudo start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd   (sudo apt-get install -y mariadb-server), or set OUTBOX_TEST_MYSQL_URL"
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] ||
  say "mariadbd: not installed (the MySQL/MariaDB fault tests start a private server with it);
    install it: sudo apt-get install -y mariadb-server"

if [ ${#missing[@]} -gt 0 ]; then
  echo "make test needs what is missing below (see README.md, \"Quick start\"):" >&2
  for m in "${missing[@]}"; do
    echo "  - $m" >&2
  done
  exit 1
fi
echo "prerequisites: go, kcat, chromium, PostgreSQL server programs in $server, test database answers, MariaDB answers on $mysql_addr"
