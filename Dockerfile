# syntax=docker/dockerfile:1
#
# The relay's image: a static binary on distroless, run as a non-root user.
#
#   docker build -t outboxrelay/relay:dev --build-arg VERSION=v0.1.0 .
#   docker run --rm -e OUTBOX_DATABASE_URL=... outboxrelay/relay:dev run
#
# The binary is built by `make build`, the same target a developer runs, so
# the image and a local build use one set of go build flags
# (deploy/deploy_test.go checks it). docs/operations.md#deployment.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first: a change to the source does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# CGO_ENABLED=0: a static binary (Go's own DNS resolver, no libc), which
# distroless/static and scratch can run. VERSION, when given, is what
# `relay version` and outbox_build_info report; .git is not in the build
# context (.dockerignore), so the binary carries no commit.
ENV CGO_ENABLED=0
ARG VERSION=
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    make build VERSION="${VERSION}"

# static-debian12: CA certificates (TLS to the database and the sinks),
# /etc/passwd with the nonroot user (65532), tzdata; no shell, no package
# manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/relay /usr/local/bin/relay
USER 65532:65532
# The metrics and health listener (/metrics, /healthz, /readyz), on in
# the image so that HEALTHCHECK has something to ask.
ENV OUTBOX_METRICS_ADDR=:9090
EXPOSE 9090
# Liveness, not readiness: a relay whose database or sink is down is
# waiting for it as designed and must not be restarted by an orchestrator
# that acts on this status. relay healthcheck exits 0 on HTTP 200, so no
# curl or shell is needed in the image.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/relay", "healthcheck", "--addr", "127.0.0.1:9090", "--path", "/healthz"]
ENTRYPOINT ["/usr/local/bin/relay"]
CMD ["run"]
