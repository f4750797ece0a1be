//! FederatedResources as the benchmark sees them: the object it applies (a Deployment of one
//! pause pod, a headless Service and a ConfigMap), and what watches show of a set of them —
//! their status on the management cluster (`Applied`, `Available`, each placement) and
//! the delivered objects in each member cluster — with the moment each milestone was
//! first seen, so that a figure never depends on when the bench got round to looking.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use accord_common::runtime::AbortOnDrop;
use accord_crds::{FederatedResource, PlacementState};
use anyhow::{Context as _, Result, bail};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Resource};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::fleet::pause_deployment;
use crate::testbed::Cluster;

/// Field manager of the benchmark's applies.
pub const FIELD_MANAGER: &str = "accord-e2e-resource";
/// The ConfigMap data key whose value an edit changes.
pub const VALUE_KEY: &str = "value";
/// Manifests in each FederatedResource [`resource_object`] builds.
pub const MANIFESTS: usize = 3;

/// FederatedResource `ns/name` for `clusters`: a Deployment of one pause pod (kwok makes
/// it Ready), a headless Service (the testbed's service range has room for ~250
/// ClusterIPs per member, not thousands) and a ConfigMap holding [`VALUE_KEY`]`=value`,
/// each named `name`.
pub fn resource_object(ns: &str, name: &str, clusters: &[String], value: &str) -> Value {
    json!({
        "apiVersion": "accord.io/v1beta1",
        "kind": "FederatedResource",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "placement": {"clusters": clusters},
            "manifests": bundle(name, value),
        }
    })
}

/// The [`MANIFESTS`] objects a FederatedResource `name` of [`resource_object`] delivers to
/// each member: its Deployment, headless Service and ConfigMap (the last one as
/// [`config_map`] builds it).
pub fn bundle(name: &str, value: &str) -> [Value; MANIFESTS] {
    [
        pause_deployment(name, 1),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name},
               "spec": {"clusterIP": "None", "selector": {"app": name},
                        "ports": [{"port": 80}]}}),
        config_map(name, value),
    ]
}

/// ConfigMap `name` holding [`VALUE_KEY`]`=value`.
pub fn config_map(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name}, "data": {VALUE_KEY: value}})
}

/// Field manager of the floor's applies straight to a member.
pub const FLOOR_FIELD_MANAGER: &str = "accord-e2e-floor";

/// Server-side applies (forced, [`FLOOR_FIELD_MANAGER`]) [`bundle`]`(name, value)` in
/// namespace `ns` straight to a member, one object after the other as the agent applies a
/// policy's manifests: what a perfect federation would write.
pub async fn apply_bundle_directly(
    client: &kube::Client,
    ns: &str,
    name: &str,
    value: &str,
) -> Result<()> {
    let [deployment, service, config] = bundle(name, value);
    let params = PatchParams::apply(FLOOR_FIELD_MANAGER).force();
    Api::<Deployment>::namespaced(client.clone(), ns)
        .patch(name, &params, &Patch::Apply(&deployment))
        .await
        .with_context(|| format!("applying Deployment {ns}/{name}"))?;
    Api::<Service>::namespaced(client.clone(), ns)
        .patch(name, &params, &Patch::Apply(&service))
        .await
        .with_context(|| format!("applying Service {ns}/{name}"))?;
    apply_config_map_directly(client, ns, &config).await
}

/// Server-side applies ConfigMap `object` (forced, [`FLOOR_FIELD_MANAGER`]) in namespace
/// `ns` straight to a member.
pub async fn apply_config_map_directly(
    client: &kube::Client,
    ns: &str,
    object: &Value,
) -> Result<()> {
    let name = object["metadata"]["name"].as_str().context("no name")?;
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::apply(FLOOR_FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .with_context(|| format!("applying ConfigMap {ns}/{name}"))?;
    Ok(())
}

/// Waits (at most `timeout`) until every Deployment named `prefix…` in namespace `ns` of
/// each of `members` is Available (`status.availableReplicas` ≥ its `spec.replicas`) and
/// there are `expected` of them, watched; the moment the last member got there.
pub async fn deployments_available(
    members: &[&Cluster],
    ns: &str,
    prefix: &str,
    expected: usize,
    timeout: Duration,
) -> Result<Instant> {
    let each = members.iter().map(|member| {
        let api: Api<Deployment> = Api::namespaced(member.client(), ns);
        async move {
            let mut available = HashSet::new();
            let mut stream = std::pin::pin!(
                watcher(api, watcher::Config::default())
                    .default_backoff()
                    .applied_objects()
            );
            while available.len() < expected {
                let d = match stream.next().await {
                    Some(Ok(d)) => d,
                    Some(Err(e)) => {
                        eprintln!("watch error (retried): {e}");
                        continue;
                    }
                    None => bail!("the Deployment watch ended"),
                };
                let name = d.metadata.name.clone().unwrap_or_default();
                if !name.starts_with(prefix) {
                    continue;
                }
                let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let have = d
                    .status
                    .as_ref()
                    .and_then(|s| s.available_replicas)
                    .unwrap_or(0);
                if have >= want {
                    available.insert(name);
                } else {
                    available.remove(&name);
                }
            }
            anyhow::Ok(Instant::now())
        }
    });
    let done = tokio::time::timeout(timeout, futures::future::try_join_all(each))
        .await
        .with_context(|| format!("every Deployment in {ns} Available: not within {timeout:?}"))??;
    done.into_iter().max().context("no members")
}

/// Applies `object` (server-side, [`FIELD_MANAGER`], forced); the object as stored.
pub async fn apply_resource(client: &kube::Client, object: &Value) -> Result<FederatedResource> {
    let name = object["metadata"]["name"].as_str().context("no name")?;
    let ns = object["metadata"]["namespace"]
        .as_str()
        .context("no namespace")?;
    let api: Api<FederatedResource> = Api::namespaced(client.clone(), ns);
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .with_context(|| format!("applying FederatedResource {ns}/{name}"))
}

/// What one FederatedResource's status says, for its current generation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// `metadata.generation`.
    pub generation: i64,
    /// The status is for that generation and `Applied` is `True`.
    pub applied: bool,
    /// The status is for that generation and `Available` is `True`.
    pub available: bool,
    /// Clusters whose placement is `Synced` with every manifest applied.
    pub synced: Vec<String>,
}

/// What `object`'s status says of its current generation (a status for an older one says
/// nothing).
pub fn progress(object: &FederatedResource, manifests: usize) -> Progress {
    let generation = object.metadata.generation.unwrap_or(0);
    let mut p = Progress {
        generation,
        ..Progress::default()
    };
    let Some(status) = object
        .status
        .as_ref()
        .filter(|s| s.observed_generation == Some(generation))
    else {
        return p;
    };
    let is_true = |type_: &str| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    };
    p.applied = is_true("Applied");
    p.available = is_true("Available");
    let all = i32::try_from(manifests).unwrap_or(i32::MAX);
    p.synced = status
        .placements
        .iter()
        .filter(|pl| pl.state == PlacementState::Synced && pl.applied == Some(all))
        .map(|pl| pl.cluster.clone())
        .collect();
    p
}

/// One FederatedResource as the watch last saw it, and when it first saw each generation
/// applied and available.
#[derive(Debug, Clone, Default)]
pub struct ResourceSeen {
    /// What its status says now.
    pub now: Progress,
    /// The latest generation seen `Applied`, and when first seen so.
    pub applied: Option<(i64, Instant)>,
    /// The latest generation seen `Available`, and when first seen so.
    pub available: Option<(i64, Instant)>,
}

/// The delivered objects of one member cluster, as its watches see them.
#[derive(Debug, Clone, Default)]
pub struct MemberSeen {
    /// Names present, by kind.
    pub present: BTreeMap<&'static str, HashSet<String>>,
    /// Each ConfigMap's [`VALUE_KEY`], and when that value was first seen.
    pub values: HashMap<String, (String, Instant)>,
    /// Benchmark objects present (of [`Seen::expected`] × kinds).
    pub counted: usize,
    /// When the first benchmark object appeared.
    pub first: Option<Instant>,
    /// When every benchmark object ([`Seen::expected`] × kinds) was first present.
    pub all: Option<Instant>,
}

/// Everything the watches saw, with the moment of each milestone.
#[derive(Debug, Default)]
pub struct Seen {
    /// Name prefix of the benchmark's FederatedResources (others, e.g. a probe, are
    /// watched but not counted).
    pub prefix: String,
    /// How many of them the milestones wait for.
    pub expected: usize,
    /// Cluster names on the hub, in member order.
    pub clusters: Vec<String>,
    /// FederatedResources by name.
    pub resources: HashMap<String, ResourceSeen>,
    /// Members, in order.
    pub members: Vec<MemberSeen>,
    /// Counted FederatedResources `Applied` / `Available` now.
    pub applied: usize,
    /// See [`Seen::applied`].
    pub available: usize,
    /// Counted FederatedResources `Synced` in each cluster now.
    pub synced: BTreeMap<String, usize>,
    /// When every counted one was first `Applied`.
    pub all_applied: Option<Instant>,
    /// When every counted one was first `Available`.
    pub all_available: Option<Instant>,
    /// When every counted one was first `Synced` in each cluster.
    pub all_synced: BTreeMap<String, Instant>,
    /// How many of the watches have listed (once each).
    pub listed: usize,
}

/// Kinds delivered per FederatedResource, as the member watches name them.
const KINDS: [&str; MANIFESTS] = ["Deployment", "Service", "ConfigMap"];

impl Seen {
    fn counted(&self, name: &str) -> bool {
        name.starts_with(&self.prefix)
    }

    /// Records FederatedResource `name`'s new state, seen at `at`.
    fn resource(&mut self, name: &str, now: Progress, at: Instant) {
        let counted = self.counted(name);
        let entry = self.resources.entry(name.to_owned()).or_default();
        let old = std::mem::replace(&mut entry.now, now.clone());
        if now.applied && entry.applied.is_none_or(|(g, _)| g < now.generation) {
            entry.applied = Some((now.generation, at));
        }
        if now.available && entry.available.is_none_or(|(g, _)| g < now.generation) {
            entry.available = Some((now.generation, at));
        }
        if !counted {
            return;
        }
        self.applied = self.applied + usize::from(now.applied) - usize::from(old.applied);
        self.available = self.available + usize::from(now.available) - usize::from(old.available);
        for c in &old.synced {
            if let Some(n) = self.synced.get_mut(c) {
                *n -= 1;
            }
        }
        for c in &now.synced {
            *self.synced.entry(c.clone()).or_default() += 1;
        }
        if self.applied >= self.expected && self.all_applied.is_none() {
            self.all_applied = Some(at);
        }
        if self.available >= self.expected && self.all_available.is_none() {
            self.all_available = Some(at);
        }
        for (c, n) in &self.synced {
            if *n >= self.expected && !self.all_synced.contains_key(c) {
                self.all_synced.insert(c.clone(), at);
            }
        }
    }

    /// Records object `name` of `kind` present (or gone) in member `m` at `at`.
    fn member_object(
        &mut self,
        m: usize,
        kind: &'static str,
        name: &str,
        present: bool,
        at: Instant,
    ) {
        let counted = self.counted(name);
        let expected = self.expected * KINDS.len();
        let member = &mut self.members[m];
        let names = member.present.entry(kind).or_default();
        let changed = if present {
            names.insert(name.to_owned())
        } else {
            names.remove(name)
        };
        if !(counted && changed) {
            return;
        }
        if present {
            member.counted += 1;
            member.first.get_or_insert(at);
        } else {
            member.counted -= 1;
        }
        if member.counted >= expected && member.all.is_none() {
            member.all = Some(at);
        }
    }

    /// Records ConfigMap `name`'s value in member `m`, seen at `at`.
    fn member_value(&mut self, m: usize, name: &str, value: Option<String>, at: Instant) {
        let values = &mut self.members[m].values;
        match value {
            Some(v) if values.get(name).is_none_or(|(old, _)| *old != v) => {
                values.insert(name.to_owned(), (v, at));
            }
            Some(_) => {}
            None => {
                values.remove(name);
            }
        }
    }

    /// Counted objects present in member `m`.
    pub fn present_in(&self, m: usize) -> usize {
        self.members[m].counted
    }

    /// When ConfigMap `name` first held `value` in every member, once it does.
    pub fn value_everywhere(&self, name: &str, value: &str) -> Option<Instant> {
        self.value_seen(name, value)
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .max()
    }

    /// When ConfigMap `name` first held `value` in the first member that holds it.
    pub fn value_first(&self, name: &str, value: &str) -> Option<Instant> {
        self.value_seen(name, value).flatten().min()
    }

    /// Per member, when ConfigMap `name` first held `value` (if it does now).
    fn value_seen<'a>(
        &'a self,
        name: &'a str,
        value: &'a str,
    ) -> impl Iterator<Item = Option<Instant>> + 'a {
        self.members.iter().map(move |m| {
            m.values
                .get(name)
                .filter(|(v, _)| v == value)
                .map(|(_, at)| *at)
        })
    }
}

/// Watches on FederatedResources in one namespace of the management cluster and on the
/// Deployments, Services and ConfigMaps of that namespace in every member.
pub struct DeliveryWatch {
    seen: Arc<Mutex<Seen>>,
    changed: watch::Receiver<()>,
    _tasks: Vec<AbortOnDrop>,
    /// How many watches it runs.
    watches: usize,
}

impl DeliveryWatch {
    /// Starts the watches; `expected` FederatedResources named `prefix…` are counted, for
    /// `clusters` (names on the hub) on `members` (in the same order).
    pub fn start(
        mgmt: &Cluster,
        members: &[&Cluster],
        clusters: &[String],
        ns: &str,
        prefix: &str,
        expected: usize,
    ) -> Self {
        let seen = Arc::new(Mutex::new(Seen {
            prefix: prefix.to_owned(),
            expected,
            clusters: clusters.to_vec(),
            members: vec![MemberSeen::default(); members.len()],
            ..Seen::default()
        }));
        let (tx, changed) = watch::channel(());
        let recorder = Recorder {
            seen: seen.clone(),
            changed: Arc::new(tx),
        };
        let mut tasks = Vec::new();
        let api: Api<FederatedResource> = Api::namespaced(mgmt.client(), ns);
        let r = recorder.clone();
        tasks.push(spawn_watch(
            watcher(api, watcher::Config::default()),
            &recorder,
            move |o, present| {
                let name = o.metadata.name.clone().unwrap_or_default();
                let now = if present {
                    progress(&o, MANIFESTS)
                } else {
                    Progress::default()
                };
                r.record(|s, at| s.resource(&name, now, at));
            },
        ));
        for (m, member) in members.iter().enumerate() {
            let deployments: Api<PartialObjectMeta<Deployment>> =
                Api::namespaced(member.client(), ns);
            let r = recorder.clone();
            tasks.push(spawn_watch(
                watcher(deployments, watcher::Config::default()),
                &recorder,
                move |o, present| {
                    let name = o.metadata.name.unwrap_or_default();
                    r.record(|s, at| s.member_object(m, "Deployment", &name, present, at));
                },
            ));
            let services: Api<PartialObjectMeta<Service>> = Api::namespaced(member.client(), ns);
            let r = recorder.clone();
            tasks.push(spawn_watch(
                watcher(services, watcher::Config::default()),
                &recorder,
                move |o, present| {
                    let name = o.metadata.name.unwrap_or_default();
                    r.record(|s, at| s.member_object(m, "Service", &name, present, at));
                },
            ));
            let config_maps: Api<ConfigMap> = Api::namespaced(member.client(), ns);
            let r = recorder.clone();
            tasks.push(spawn_watch(
                watcher(config_maps, watcher::Config::default()),
                &recorder,
                move |o: ConfigMap, present| {
                    let name = o.metadata.name.unwrap_or_default();
                    let value = o
                        .data
                        .and_then(|mut d| d.remove(VALUE_KEY))
                        .filter(|_| present);
                    r.record(|s, at| {
                        s.member_object(m, "ConfigMap", &name, present, at);
                        s.member_value(m, &name, value, at);
                    });
                },
            ));
        }
        Self {
            seen,
            changed,
            watches: tasks.len(),
            _tasks: tasks,
        }
    }

    /// Waits (at most `timeout`) until every watch has listed once, so that what happens
    /// afterwards is seen as it happens.
    pub async fn listed(&self, timeout: Duration) -> Result<()> {
        let watches = self.watches;
        self.wait_for(
            "every watch listed",
            timeout,
            || Ok(()),
            |s| (s.listed >= watches).then_some(()),
        )
        .await
    }

    /// Reads what the watches saw so far.
    pub fn read<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.seen.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A handle that reads what the watches saw, e.g. from another task.
    pub fn reader(&self) -> SeenReader {
        SeenReader(self.seen.clone())
    }

    /// Waits (at most `timeout`) until `f` says yes, checking after every change the
    /// watches see; `running` is asked too and ends the wait with its error (a component
    /// exited). `what` names the wait in the timeout error.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        running: impl Fn() -> Result<()>,
        f: impl Fn(&Seen) -> Option<T>,
    ) -> Result<T> {
        let mut changed = self.changed.clone();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            changed.borrow_and_update();
            if let Some(t) = self.read(&f) {
                return Ok(t);
            }
            running()?;
            // Woken by the next change, or once a second to ask `running` again.
            let next = (tokio::time::Instant::now() + Duration::from_secs(1)).min(deadline);
            match tokio::time::timeout_at(next, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => bail!("{what}: the watches ended"),
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    bail!("{what}: not within {timeout:?}")
                }
                Err(_) => {}
            }
        }
    }
}

/// Reads what a [`DeliveryWatch`] saw.
#[derive(Clone)]
pub struct SeenReader(Arc<Mutex<Seen>>);

impl SeenReader {
    /// Reads what the watches saw so far.
    pub fn read<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Applies what a watch saw to the shared [`Seen`], stamped with the moment it was seen,
/// and wakes the waiters.
#[derive(Clone)]
struct Recorder {
    seen: Arc<Mutex<Seen>>,
    changed: Arc<watch::Sender<()>>,
}

impl Recorder {
    fn record(&self, f: impl FnOnce(&mut Seen, Instant)) {
        f(
            &mut self.seen.lock().unwrap_or_else(PoisonError::into_inner),
            Instant::now(),
        );
        self.changed.send_replace(());
    }
}

/// Runs `stream`, calling `on(object, present)` for every object it lists or sees change
/// (`present`) or sees deleted, and counting its first complete list in `recorder`.
fn spawn_watch<K, S>(
    stream: S,
    recorder: &Recorder,
    on: impl Fn(K, bool) + Send + 'static,
) -> AbortOnDrop
where
    K: Resource + Send + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let recorder = recorder.clone();
    AbortOnDrop(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream.default_backoff());
        let mut listed = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => on(o, true),
                Ok(watcher::Event::Delete(o)) => on(o, false),
                Ok(watcher::Event::InitDone) if !listed => {
                    listed = true;
                    recorder.record(|s, _| s.listed += 1);
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                Err(e) => eprintln!("watch error (retried): {e}"),
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(
        generation: i64,
        observed: i64,
        conditions: &[(&str, &str)],
        synced: &[(&str, i32)],
    ) -> FederatedResource {
        let mut o: FederatedResource =
            serde_json::from_value(resource_object("ns", "a", &["c0".into()], "v")).unwrap();
        o.metadata.generation = Some(generation);
        o.status = Some(
            serde_json::from_value(json!({
                "observedGeneration": observed,
                "conditions": conditions.iter().map(|(t, s)| json!({
                    "type": t, "status": s, "reason": "R", "message": "",
                    "lastTransitionTime": "2025-01-01T00:00:00Z"})).collect::<Vec<_>>(),
                "placements": synced.iter().map(|(c, applied)| json!({
                    "cluster": c, "state": "Synced", "applied": applied})).collect::<Vec<_>>(),
            }))
            .unwrap(),
        );
        o
    }

    #[test]
    fn a_status_of_an_older_generation_says_nothing() {
        let o = object(
            2,
            1,
            &[("Applied", "True"), ("Available", "True")],
            &[("c0", 3)],
        );
        assert_eq!(
            progress(&o, 3),
            Progress {
                generation: 2,
                ..Progress::default()
            }
        );
    }

    #[test]
    fn a_placement_counts_as_synced_only_with_every_manifest_applied() {
        let o = object(
            1,
            1,
            &[("Applied", "True"), ("Available", "False")],
            &[("c0", 3), ("c1", 2)],
        );
        let p = progress(&o, 3);
        assert!(p.applied && !p.available);
        assert_eq!(p.synced, ["c0"]);
    }

    #[test]
    fn milestones_are_stamped_when_the_last_one_arrives_and_never_moved() {
        let mut seen = Seen {
            prefix: "app-".into(),
            expected: 2,
            members: vec![MemberSeen::default()],
            ..Seen::default()
        };
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        let done = Progress {
            generation: 1,
            applied: true,
            available: true,
            synced: vec!["c0".into()],
        };
        seen.resource("app-1", done.clone(), t0);
        seen.resource("probe", done.clone(), t0);
        assert_eq!(seen.all_applied, None, "the probe is not counted");
        seen.resource("app-2", done.clone(), later);
        assert_eq!(seen.all_available, Some(later));
        assert_eq!(seen.all_synced.get("c0"), Some(&later));
        seen.resource("app-2", Progress::default(), later + Duration::from_secs(1));
        assert_eq!(seen.available, 1);
        assert_eq!(seen.all_available, Some(later));

        for (i, kind) in KINDS.iter().enumerate() {
            seen.member_object(0, kind, "app-1", true, t0);
            seen.member_object(0, kind, "app-2", true, t0 + Duration::from_secs(i as u64));
        }
        assert_eq!(seen.members[0].all, Some(t0 + Duration::from_secs(2)));
        seen.member_value(0, "app-1", Some("x".into()), t0);
        seen.member_value(0, "app-1", Some("x".into()), later);
        assert_eq!(seen.value_everywhere("app-1", "x"), Some(t0));
        assert_eq!(seen.value_everywhere("app-1", "y"), None);
        assert_eq!(seen.value_first("app-1", "x"), Some(t0));
    }
}
