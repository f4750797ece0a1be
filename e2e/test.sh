#!/usr/bin/env bash
# Runs Accord's whole test suite on a fresh machine: installs what the tests need (once),
# builds the testbed binaries into their cache (once), then runs every test of the
# workspace — unit tests, integration tests and end-to-end tests against real etcd,
# kube-apiservers, Kafka and Prometheus on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[test] %s\n' "$*" >&2; }

# Debian packages: protoc for the gRPC code, Prometheus for the federation tests, and
# what librdkafka's bundled build needs.
need=()
command -v protoc >/dev/null || need+=(protobuf-compiler)
[ -e /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
command -v prometheus >/dev/null || need+=(prometheus)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v make >/dev/null || need+=(make)
command -v g++ >/dev/null || need+=(g++)
[ -e /usr/include/zlib.h ] || need+=(zlib1g-dev)
if [ "${#need[@]}" -gt 0 ]; then
  log "installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

log "building the testbed binaries (cached after the first run)"
ACCORD_TESTBED_BIN="$(bash e2e/testbed/build.sh | tail -n 1)"
export ACCORD_TESTBED_BIN

log "running the test suite"
cargo test --workspace --all-targets --no-fail-fast "$@"
