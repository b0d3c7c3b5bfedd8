# The two commands of the README: `make demo` and `make test`.
# Tests need PostgreSQL; by default the local server (trust auth).
OUTBOX_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres
export OUTBOX_TEST_DATABASE_URL

.PHONY: test prereqs unit partitioned chaos-short chaos fuzz demo demo-ordered demo-inbox build vet fmt

# The fault-injection harness (integration/chaos) runs on its own, after the
# other tests, with -v so that its schedule and summary line are printed.
CHAOS_PKG := ./integration/chaos

test: prereqs vet unit partitioned chaos-short chaos-short-mariadb

# What the tests need besides Go (the database, kcat, PostgreSQL's server
# programs): each missing piece is named with the command that installs it.
prereqs:
	@scripts/check-prereqs.sh
	@$(MAKE) --no-print-directory scripts/emulators/node_modules

# The cloud services' emulators (internal/emulators), from the npm registry.
scripts/emulators/node_modules: scripts/emulators/package-lock.json
	npm ci --prefix scripts/emulators --no-audit --no-fund
	@touch $@

# -timeout: a package's tests on a busy 2-core machine can take longer than
# go test's default 10 minutes (deploy did).
unit: prereqs
	go test -race -count=1 -timeout 30m $$(go list ./... | grep -v /integration/chaos)
	go -C scripts/charts test -count=1 ./...

# The integration and admin tests again, every table partitioned by hour
# (docs/architecture.md#partitioned-tables).
partitioned: prereqs
	OUTBOX_TEST_PARTITION_INTERVAL=1h go test -race -count=1 -timeout 30m ./integration ./admin

# CHAOS_SINK picks the sink of chaos-short and chaos (default kafka).
CHAOS_SINK ?= kafka

chaos-short: prereqs
	OUTBOX_CHAOS_SINK=$(CHAOS_SINK) OUTBOX_CHAOS_PROFILE=short go test -race -count=1 -v -timeout 15m -run '^(TestChaos|TestJudgeEffects)$$' $(CHAOS_PKG)

# The short profile against another sink: the broker of this machine
# (NATS with JetStream on 4222, RabbitMQ on 5672, Redis on 6379) or one
# the run starts (the webhook's receiver, pstest, Mosquitto, the AWS
# emulators) behind a fault
# proxy, a destination of the run's own (integration/chaos/doc.go).
CHAOS_SINKS := nats rabbitmq redis webhook pubsub mqtt sqs kinesis
.PHONY: $(addprefix chaos-short-,$(CHAOS_SINKS))
$(addprefix chaos-short-,$(CHAOS_SINKS)): chaos-short-%: prereqs
	OUTBOX_CHAOS_SINK=$* OUTBOX_CHAOS_PROFILE=short go test -race -count=1 -v -timeout 15m -run '^TestChaos$$' $(CHAOS_PKG)

# The short profile on MariaDB instead of PostgreSQL: a private mariadbd
# (mariadb-server's binaries) behind the fault proxies, mariadb-* faults in
# place of pg-*, lease claims only. CHAOS_SINK picks the sink as for
# chaos-short.
.PHONY: chaos-short-mariadb
chaos-short-mariadb: prereqs
	OUTBOX_CHAOS_DB=mariadb OUTBOX_CHAOS_SINK=$(CHAOS_SINK) OUTBOX_CHAOS_PROFILE=short go test -race -count=1 -v -timeout 15m -run '^TestChaos$$' $(CHAOS_PKG)

# The long profile: random faults for CHAOS_DURATION (default 10m); relay
# logs are kept in CHAOS_LOGDIR. Replay a run with OUTBOX_CHAOS_SEED.
CHAOS_DURATION ?= 10m
CHAOS_LOGDIR ?= /tmp/outbox-chaos-logs
# The web console's screenshots in docs/operations.md, taken by its
# browser tests.
console-screenshots: prereqs
	OUTBOX_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/img go test -count=1 -run '^TestBrowser' ./internal/console

chaos:
	OUTBOX_CHAOS_SINK=$(CHAOS_SINK) OUTBOX_CHAOS_PROFILE=long OUTBOX_CHAOS_DURATION=$(CHAOS_DURATION) OUTBOX_CHAOS_LOGDIR=$(CHAOS_LOGDIR) \
		go test -count=1 -v -timeout 90m -run '^TestChaos$$' $(CHAOS_PKG)

# Every go test -fuzz target (func FuzzXxx in any package), one after
# another, for FUZZTIME each. Failing inputs land in the package's
# testdata/fuzz; FuzzCheckVersions (migrations) needs the database,
# FuzzRowPath (relay) the database, NATS, RabbitMQ and Redis.
FUZZTIME ?= 10s
fuzz:
	@set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		targets=$$(go test -list '^Fuzz' $$dir); \
		for target in $$(echo "$$targets" | grep '^Fuzz'); do \
			echo "== $$dir $$target"; \
			go test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$dir; \
		done; \
	done

# go mod tidy -diff prints what tidy would change and fails if anything.
# scripts/charts is a module of its own: its plotting library stays out of
# the relay's go.mod.
vet:
	@test -z "$$(gofmt -l .)" || { echo "not gofmt-ed:"; gofmt -l .; exit 1; }
	go mod tidy -diff
	go vet ./...
	go -C scripts/charts mod tidy -diff
	go -C scripts/charts vet ./...

demo:
	go run ./cmd/relay demo

demo-ordered:
	go run ./cmd/relay demo --ordered

# The demo, then a consumer that applies each event through an inbox and
# reads the topic twice: every event delivered twice, applied once.
# Kafka, NATS or Redis; MySQL/MariaDB with DEMO_FLAGS.
demo-inbox:
	go run ./cmd/relay demo --inbox $(DEMO_FLAGS)

# The demo against the other sinks, each on the service of this machine
# (NATS with JetStream on 4222, RabbitMQ on 5672, Redis on 6379; the
# webhook demo runs its own receiver). Add --ordered with DEMO_FLAGS.
.PHONY: demo-nats demo-rabbitmq demo-redis demo-webhook
demo-nats:
	go run ./cmd/relay demo --sink nats $(DEMO_FLAGS)

demo-rabbitmq:
	go run ./cmd/relay demo --sink rabbitmq $(DEMO_FLAGS)

demo-redis:
	go run ./cmd/relay demo --sink redis $(DEMO_FLAGS)

demo-webhook:
	go run ./cmd/relay demo --sink webhook $(DEMO_FLAGS)

# The demo on MySQL 8.0.13+ or MariaDB 10.6+ (docs/mysql.md#command-line):
# the database outbox_demo on MYSQL_URL's server, dropped and recreated,
# and an embedded Kafka-protocol broker. Other sinks with DEMO_FLAGS.
MYSQL_URL ?= mysql://root@127.0.0.1:3306/
.PHONY: demo-mysql
demo-mysql:
	go run ./cmd/relay demo --database-url '$(MYSQL_URL)' $(DEMO_FLAGS)

# -buildvcs=auto records the commit for relay version, even where GOFLAGS
# turns it off. VERSION, when set, is the version relay version reports
# (-X main.version); BIN is where the binary goes. The Dockerfile runs this
# target (with CGO_ENABLED=0), so the image and a local build are built alike.
BIN ?= bin/relay
VERSION ?=
build:
	go build -buildvcs=auto $(if $(VERSION),-ldflags "-X main.version=$(VERSION)") -o $(BIN) ./cmd/relay
