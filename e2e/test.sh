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

log "running the test suite"
cargo test --workspace --all-targets --no-fail-fast "$@"
