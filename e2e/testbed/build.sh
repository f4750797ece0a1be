#!/usr/bin/env bash
# Builds the testbed's third-party binaries into a versioned cache outside the repository:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (from their Go
#   modules), kwok, and the Kafka broker's jars (from Maven). Idempotent: each component is
#   built once per version and reused afterwards. Prints the bin directory on its last line.
#
# Environment:
#   ACCORD_TESTBED_CACHE  cache root (default: $XDG_CACHE_HOME/accord-testbed or ~/.cache/accord-testbed)
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.34.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
LOG4J_VERSION="${LOG4J_VERSION:-2.24.3}"
JAEGER_VERSION="${JAEGER_VERSION:-v1.75.0}"

CACHE="${ACCORD_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accord-testbed}"
ROOT="$CACHE/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_kafka-${KAFKA_VERSION}"
BIN="$ROOT/bin"
mkdir -p "$BIN" "$ROOT/src"

log() { printf '[testbed-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fail() { printf '[testbed-build] ERROR: %s\n' "$*" >&2; exit 1; }

export CGO_ENABLED=0 GOFLAGS=-mod=mod

# Builds one Go wrapper module. $1 = name, $2 = requirement, $3.. = go build targets; the
# caller sets up replace lines through WRAPPER_REPLACES and may name the output file through
# OUT (default: the bin directory, binaries named after their package).
build_go() {
  local name="$1" require="$2" ldflags="$3"; shift 3
  command -v go >/dev/null || fail "go is not installed; the testbed builds etcd, Kubernetes and kwok from their Go modules"
  local dir="$ROOT/src/$name"
  mkdir -p "$dir"
  (
    cd "$dir"
    [ -f go.mod ] || go mod init "accord.local/testbed/$name" >/dev/null 2>&1
    for r in ${WRAPPER_REPLACES:-}; do go mod edit -replace="$r"; done
    log "$name: resolving $require"
    go get "$require" >"$dir/get.log" 2>&1 || { tail -30 "$dir/get.log" >&2; fail "$name: go get $require failed (log: $dir/get.log)"; }
    log "$name: building $* (cold builds take minutes)"
    go build -trimpath -ldflags "$ldflags" -o "${OUT:-$BIN/}" "$@" >"$dir/build.log" 2>&1 \
      || { tail -30 "$dir/build.log" >&2; fail "$name: go build failed (log: $dir/build.log)"; }
  )
}

if [ ! -x "$BIN/etcd" ]; then
  # The package path ends in a major-version suffix, so go would name the binary "server".
  OUT="$BIN/etcd" WRAPPER_REPLACES="" build_go etcd "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "-s -w" go.etcd.io/etcd/server/v3
  [ -x "$BIN/etcd" ] || fail "etcd binary missing after build"
  log "etcd $ETCD_VERSION built"
else
  log "etcd $ETCD_VERSION cached"
fi

if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-controller-manager" ] || [ ! -x "$BIN/kube-scheduler" ] || [ ! -x "$BIN/kubectl" ]; then
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  staging_version="v0.${K8S_VERSION#v1.}"
  staging="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
    cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
    cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
    kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
    mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller"
  if [ "$minor" -ge 36 ]; then staging="$staging cri-streaming streaming"; fi
  reps=""
  for m in $staging; do reps="$reps k8s.io/$m=k8s.io/$m@$staging_version"; done
  ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  WRAPPER_REPLACES="$reps" build_go kubernetes "k8s.io/kubernetes@$K8S_VERSION" "$ld" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
  log "kubernetes $K8S_VERSION built"
else
  log "kubernetes $K8S_VERSION cached"
fi

if [ ! -x "$BIN/kwok" ]; then
  WRAPPER_REPLACES="" build_go kwok "sigs.k8s.io/kwok@$KWOK_VERSION" "-s -w" sigs.k8s.io/kwok/cmd/kwok
  log "kwok $KWOK_VERSION built"
else
  log "kwok $KWOK_VERSION cached"
fi

# Jaeger (its all-in-one binary: OTLP receiver, in-memory store, query API), the OTLP receiver of
# the tracing tests and of `sandbox up --with-tracing`. Named by version, so a new version builds.
if [ ! -x "$BIN/jaeger-$JAEGER_VERSION" ]; then
  OUT="$BIN/jaeger-$JAEGER_VERSION" WRAPPER_REPLACES="" build_go jaeger "github.com/jaegertracing/jaeger@$JAEGER_VERSION" "-s -w" github.com/jaegertracing/jaeger/cmd/jaeger
  [ -x "$BIN/jaeger-$JAEGER_VERSION" ] || fail "jaeger binary missing after build"
  log "jaeger $JAEGER_VERSION built"
else
  log "jaeger $JAEGER_VERSION cached"
fi
ln -sf "jaeger-$JAEGER_VERSION" "$BIN/jaeger"

KAFKA_LIB="$ROOT/kafka/lib"
# The broker (kafka_2.13) and Kafka's own tools (kafka-tools: kafka-acls, the verifiable
# producer), which the tests use to check the brokers independently of Accord.
if [ ! -f "$ROOT/kafka/.complete" ] || [ ! -f "$KAFKA_LIB/kafka-tools-$KAFKA_VERSION.jar" ]; then
  command -v mvn >/dev/null || fail "mvn is not installed; the Kafka broker's jars come from Maven"
  mkdir -p "$ROOT/kafka"
  cat >"$ROOT/kafka/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>accord.testbed</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
  </dependencies>
</project>
POM
  log "kafka $KAFKA_VERSION: fetching jars with Maven"
  (cd "$ROOT/kafka" && mvn -B -q dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=lib >"$ROOT/kafka/mvn.log" 2>&1) \
    || { tail -30 "$ROOT/kafka/mvn.log" >&2; fail "kafka: maven could not fetch the broker jars (log: $ROOT/kafka/mvn.log)"; }
  touch "$ROOT/kafka/.complete"
  log "kafka $KAFKA_VERSION jars fetched"
else
  log "kafka $KAFKA_VERSION cached"
fi

echo "$BIN"
