#!/usr/bin/env bash
# Runs Accord's whole test suite on a fresh machine: installs what the tests need (once),
# builds the testbed binaries into their cache (once), then runs every test of the
# workspace — unit tests, integration tests and end-to-end tests against real etcd,
# kube-apiservers, Kafka and Prometheus on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[test] %s\n' "$*" >&2; }

# Debian packages (protoc, Prometheus, librdkafka build prerequisites), once.
. e2e/prerequisites.sh
accord_prerequisites

log "building the testbed binaries (cached after the first run)"
ACCORD_TESTBED_BIN="$(bash e2e/testbed/build.sh | tail -n 1)"
export ACCORD_TESTBED_BIN

# Helm, for the chart-vs-manifest drift tests (hub/tests/install_helm.rs), built from its Go
# module once into Go's bin directory.
HELM_VERSION=v3.22.0
GOBIN_DIR="$(go env GOPATH)/bin"
if ! command -v helm >/dev/null && [ ! -x "$GOBIN_DIR/helm" ]; then
  log "building helm $HELM_VERSION (once)"
  go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
command -v helm >/dev/null || export HELM="$GOBIN_DIR/helm"
export ACCORD_REQUIRE_HELM=1

log "running the test suite"
cargo test --workspace --all-targets --no-fail-fast "$@"
