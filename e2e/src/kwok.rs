//! kwok, which plays kubelet for fake nodes: it marks the nodes it manages Ready, keeps
//! their heartbeats going, and moves pods bound to them to Running and Ready (Job pods on
//! to Succeeded), deleting pods once they are marked for deletion.

use std::fs;
use std::process::Command;

use anyhow::{Context as _, Result};

use crate::binaries::Binaries;
use crate::kubernetes::ClusterFiles;
use crate::ports::free_port;
use crate::process::{ProcessId, Supervisor};

/// Annotation kwok uses to pick the nodes it simulates (value `fake`).
pub const NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Pods a fake node takes: load tests run thousands of pods on one node (a kubelet's
/// default of 110 would leave them Pending with "Too many pods").
pub const NODE_PODS: &str = "10000";
/// CPU a fake node offers: ample for [`NODE_PODS`] pods with requests.
pub const NODE_CPU: &str = "1000";
/// Memory a fake node offers.
pub const NODE_MEMORY: &str = "4Ti";

/// A fake node's capacity (and allocatable), as the node status carries it. kwok's node
/// stage template keeps the same values when a node has none.
pub fn node_capacity() -> serde_json::Value {
    serde_json::json!({ "cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": NODE_PODS })
}

/// Range kwok assigns pod IPs from.
const POD_CIDR: &str = "10.1.0.0/16";
/// Address reported for fake nodes.
const NODE_IP: &str = "10.1.0.1";

/// kwok's behaviour, as stages: each matches objects by a selector and applies a status
/// template (or deletes them). `NodeConditions` yields a Ready node's conditions.
const STAGES: &str = r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-ready
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - {key: '.status.conditions.[] | select( .type == "Ready" ) | .status', operator: NotIn, values: ['True']}
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        reason: {{ .reason | Quote }}
        message: {{ .message | Quote }}
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      {{ end }}
      addresses:
      - {type: InternalIP, address: {{ NodeIP | Quote }}}
      - {type: Hostname, address: {{ .metadata.name | Quote }}}
      allocatable:
      {{ with .status.allocatable }}{{ YAML . 1 }}{{ else }}  {cpu: "1000", memory: 4Ti, pods: "10000"}{{ end }}
      capacity:
      {{ with .status.capacity }}{{ YAML . 1 }}{{ else }}  {cpu: "1000", memory: 4Ti, pods: "10000"}{{ end }}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
        kubeProxyVersion: {{ printf "kwok-%s" Version | Quote }}
        containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
        kernelVersion: {{ printf "kwok-%s" Version | Quote }}
        bootID: ""
        machineID: ""
        osImage: ""
        systemUUID: ""
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-heartbeat
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '.status.conditions.[] | select( .type == "Ready" ) | .status', operator: In, values: ['True']}
  delay: {durationMilliseconds: 15000, jitterDurationMilliseconds: 20000}
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $since := or .metadata.creationTimestamp $now }}
      conditions:
      {{ range NodeConditions }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        reason: {{ .reason | Quote }}
        message: {{ .message | Quote }}
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $since | Quote }}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Pending]}
    - {key: '.status.conditions.[] | select( .type == "Ready" ) | .status', operator: NotIn, values: ['True']}
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
      {{ range .spec.readinessGates }}
      - {type: {{ .conditionType | Quote }}, status: "True", lastTransitionTime: {{ $now | Quote }}}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: true
        started: true
        restartCount: 0
        state: {running: {startedAt: {{ $now | Quote }}}}
      {{ end }}
      initContainerStatuses:
      {{ range .spec.initContainers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: true
        restartCount: 0
        state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}
      {{ end }}
      {{ with NodeIPsWith .spec.nodeName }}
      hostIP: {{ index . 0 | Quote }}
      hostIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      {{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: job-pod-succeeded
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '.metadata.ownerReferences.[].kind', operator: In, values: [Job]}
  next:
    statusTemplate: |
      {{ $now := Now }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        started: false
        restartCount: 0
        state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}
      {{ end }}
      phase: Succeeded
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: Exists}
  next:
    delete: true
"#;

/// Starts kwok for cluster `name`, simulating the nodes annotated
/// `kwok.x-k8s.io/node: fake` and the pods bound to them; returns it and its health port.
pub fn spawn(
    supervisor: &Supervisor,
    binaries: &Binaries,
    name: &str,
    files: &ClusterFiles,
) -> Result<(ProcessId, u16)> {
    let port = free_port()?;
    let config = files.dir.join("kwok.yaml");
    fs::write(&config, STAGES).with_context(|| format!("writing {}", config.display()))?;
    let mut command = Command::new(&binaries.kwok);
    command
        .arg(format!("--kubeconfig={}", files.kubeconfig.display()))
        .arg(format!("--config={}", config.display()))
        .arg(format!(
            "--manage-nodes-with-annotation-selector={NODE_ANNOTATION}=fake"
        ))
        .arg(format!("--cidr={POD_CIDR}"))
        .arg(format!("--node-ip={NODE_IP}"))
        .arg(format!("--server-address=127.0.0.1:{port}"));
    Ok((supervisor.spawn(&format!("{name}/kwok"), command)?, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kwoks_node_template_defaults_to_the_load_test_capacity() {
        let default =
            format!("{{cpu: \"{NODE_CPU}\", memory: {NODE_MEMORY}, pods: \"{NODE_PODS}\"}}");
        assert_eq!(STAGES.matches(default.as_str()).count(), 2, "{default}");
    }
}
