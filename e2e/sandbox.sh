#!/usr/bin/env bash
# The local federation in one command, on a fresh machine:
#   bash e2e/sandbox.sh up [--members N] [--with-kafka | --with-kafka-sasl] [--with-prometheus] [--dir DIR]
#   bash e2e/sandbox.sh status [--json]
#   bash e2e/sandbox.sh down
# Installs the Debian packages the testbed needs (once), builds the testbed binaries into
# their cache (once, ~10 minutes on 2 cores), builds accord-hub, accord-agent and
# accord-sandbox, then runs `accord-sandbox` with the arguments given.
set -euo pipefail
cd "$(dirname "$0")/.."

# Help needs no build: the usage is the comment above (a built accord-sandbox gives more:
# `bash e2e/sandbox.sh up --help`).
case "${1:-}" in
  -h | --help | help)
    sed -n '2,5s/^# //p' "$0"
    exit 0
    ;;
  "")
    sed -n '2,5s/^# //p' "$0" >&2
    exit 2
    ;;
esac

. e2e/prerequisites.sh
if [ "${1:-}" = "up" ]; then
  accord_prerequisites
  if [ -z "${ACCORD_TESTBED_BIN:-}" ]; then
    printf '[setup] building the testbed binaries (cached after the first run)\n' >&2
    ACCORD_TESTBED_BIN="$(bash e2e/testbed/build.sh | tail -n 1)"
    export ACCORD_TESTBED_BIN
  fi
fi
cargo build --quiet -p accord-hub -p accord-agent -p accord-e2e --bins
ACCORD_SANDBOX_COMMAND="bash e2e/sandbox.sh" exec "${CARGO_TARGET_DIR:-target}/debug/accord-sandbox" "$@"
