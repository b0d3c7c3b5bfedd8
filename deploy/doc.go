// Package deploy holds the deploy kit's tests: the Dockerfile at the
// repository's root, the Kubernetes manifests of deploy/kubernetes and the
// compose kit of deploy/compose. No Docker engine or cluster is needed: the
// tests read the files and hold them against the real relay binary, built
// by `make build` as the Dockerfile builds it: its --help, and a relay run
// on PostgreSQL (OUTBOX_TEST_DATABASE_URL) whose probes and /metrics they
// query. See docs/operations.md#deployment.
package deploy
