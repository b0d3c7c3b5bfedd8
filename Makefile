# The two commands of the README: `make demo` and `make test`.
# Tests need PostgreSQL; by default the local server (trust auth).
OUTBOX_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres
export OUTBOX_TEST_DATABASE_URL

.PHONY: test demo demo-ordered build vet fmt

test: vet
	go test -race -count=1 ./...

vet:
	@test -z "$$(gofmt -l .)" || { echo "not gofmt-ed:"; gofmt -l .; exit 1; }
	go vet ./...

demo:
	go run ./cmd/relay demo

demo-ordered:
	go run ./cmd/relay demo --ordered

build:
	go build -o bin/relay ./cmd/relay
