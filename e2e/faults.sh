#!/usr/bin/env bash
# Runs Accord's fault suite: real hubs, etcd and API servers on loopback with TCP fault
# proxies (pass, delay, blackhole, reset) between agents and hub and between hub and etcd,
# and signals (SIGSTOP, SIGKILL, SIGTERM) to hubs and etcd. Each case prints how long its
# recovery took ("fault <case>: <what> took <ms> ms"); a summary of those lines ends the
# run. Separate from e2e/test.sh: the cases take minutes (the soak 15 by default; set
# ACCORD_SOAK_SECONDS to shorten it).
#
# Usage: bash e2e/faults.sh            # every case
#        bash e2e/faults.sh partition  # only the fault-suite cases whose name matches
set -uo pipefail
cd "$(dirname "$0")/.."

log() { printf '[faults] %s\n' "$*" >&2; }

# Debian packages (protoc, Prometheus, librdkafka build prerequisites), once.
. e2e/prerequisites.sh
accord_prerequisites

log "building the testbed binaries (cached after the first run)"
ACCORD_TESTBED_BIN="$(bash e2e/testbed/build.sh | tail -n 1)" || exit 1
export ACCORD_TESTBED_BIN

out="$(mktemp -t accord-faults.XXXXXX)"
trap 'rm -f "$out"' EXIT
failed=()

run() {
  log "running: $*"
  if ! "$@" 2>&1 | tee -a "$out"; then
    failed+=("$*")
  fi
}

# The fault suite itself, one case at a time (they share one management cluster).
run cargo test -p accord-e2e --test faults -- --ignored --nocapture --test-threads 1 "$@"

# Long-running cases of other parts, each one exact test.
if [ "$#" -eq 0 ]; then
  while IFS= read -r line; do
    [ -n "$line" ] && [ "${line#\#}" = "$line" ] || continue
    read -r -a words <<<"$line"
    run "${words[@]}"
  done <<'LINES'
# One `cargo test ... -- --ignored --exact NAME` per line; add new ones here.
# Certificate renewal: 60 s certificates for at least 5 minutes (~7 min).
cargo test -p accord-e2e --test renewal -- --ignored --exact sixty_second_certificates_renew_for_five_minutes_without_a_failed_reconnect
# Two agent replicas: the standby applies the next change after the active one is killed
# or frozen past its lease, and a woken holder writes nothing.
cargo test -p accord-e2e --test agent_replicas -- --ignored --exact the_standby_applies_the_next_change_after_the_active_agent_is_killed_and_only_once --nocapture
cargo test -p accord-e2e --test agent_replicas -- --ignored --exact a_holder_frozen_past_its_lease_writes_nothing_when_it_wakes_and_exits --nocapture
# A member API server frozen (SIGSTOP) for 30 s: APIServerAvailable=False within 10 s, the
# placement says why, nothing moves, the agent reports again once it thaws.
cargo test -p accord-e2e --test member_health -- --ignored --exact a_frozen_member_api_server_is_reported_within_ten_seconds_and_nothing_moves --nocapture
# The hub's etcd restored from an older copy: a new store epoch, and the agents take changes
# at lower revisions.
cargo test -p accord-e2e --test store_epoch -- --ignored --exact after_the_hubs_etcd_is_restored_the_agent_takes_changes_at_lower_revisions --nocapture
# Two writers of one field: an undecodable scale policy and a hub restart, and a scaler that
# is not an HPA; each counts a Deployment's generations over 60 s.
cargo test -p accord-e2e --test field_fights -- --ignored --exact an_undecodable_scale_policy_and_a_hub_restart_never_set_two_accord_writers_fighting --nocapture
cargo test -p accord-e2e --test field_fights -- --ignored --exact a_scaler_that_is_not_an_hpa_gets_one_repair_then_a_conflict_naming_it --nocapture
# Fuzzing, bounded: the hub's decoding of every agent message and the validation of every
# kind, 200,000 cases per property.
env PROPTEST_CASES=200000 cargo test -p accord-hub --test fuzz_decode
LINES
fi

echo
echo "== recovery times =="
# A case's first line may follow libtest's "test NAME ... " on the same line.
grep -oE 'fault [^:]+: .* took [0-9]+ ms' "$out" || echo "(none printed)"
grep -oE 'fault soak: (baseline|after) .*' "$out" || true
grep -oE 'fight [a-z]+: .*' "$out" || true
if [ "${#failed[@]}" -gt 0 ]; then
  echo
  echo "== failed =="
  printf '%s\n' "${failed[@]}"
  exit 1
fi
echo "every fault case passed"
