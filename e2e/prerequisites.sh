#!/usr/bin/env bash
# Installs what Accord's testbed needs on a Debian/Ubuntu machine, once: protoc for the gRPC
# code, Prometheus for the federation parts, what librdkafka's bundled build needs, and
# Debian's Chromium with its WebDriver for the console's browser tests.
# Idempotent: installs only what is missing. Sourced by e2e/test.sh and e2e/sandbox.sh.

accord_prerequisites() {
  local need=()
  command -v protoc >/dev/null || need+=(protobuf-compiler)
  [ -e /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
  command -v prometheus >/dev/null || need+=(prometheus)
  command -v pkg-config >/dev/null || need+=(pkg-config)
  command -v make >/dev/null || need+=(make)
  command -v g++ >/dev/null || need+=(g++)
  [ -e /usr/include/zlib.h ] || need+=(zlib1g-dev)
  [ -x /usr/bin/chromium ] || need+=(chromium)
  [ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
  if [ "${#need[@]}" -gt 0 ]; then
    printf '[setup] installing %s\n' "${need[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
}
