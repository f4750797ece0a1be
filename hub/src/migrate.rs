//! `accord-hub migrate-storage`: rewrites every stored Accord object in the storage version
//! (`accord.io/v1beta1`), then trims each CRD's `status.storedVersions` to it, so that a
//! later release can stop serving `v1alpha1` without losing objects etcd still holds in it.
//!
//! The same procedure as kube-storage-version-migrator: the API server re-encodes an object
//! in the storage version on any update, and skips only updates whose encoded bytes equal
//! the stored ones. So an update that changes nothing, a `replace` of the object exactly as
//! listed (with its `resourceVersion`), is a real write for an object stored as `v1alpha1`
//! and a no-op for one already stored as `v1beta1`. That makes the command idempotent and
//! resumable: a run that stopped half-way leaves what it rewrote rewritten, and a second
//! run finishes the rest.
//!
//! The pipeline, with I/O only at the ends:
//! `connect → read every CRD → [plan] (pure: does it serve and store v1beta1? is anything
//! left to rewrite?) → per kind: list in pages → replace each object (retries with backoff)
//! → trim status.storedVersions`.
//!
//! The listing goes through the hub's conversion webhook for objects stored as `v1alpha1`,
//! so the hub must be running.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use clap::Args;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    TypeMeta,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use accord_common::apply::{self, ApplyError};

use crate::pki::install_crypto_provider;

/// The version every object is rewritten in, and the only one left in
/// `status.storedVersions` afterwards.
pub const STORAGE_VERSION: &str = accord_crds::VERSION;
/// Field manager of the rewrites (they change no field, so it owns none).
pub const FIELD_MANAGER: &str = "accord-hub-migrate-storage";
/// Objects per list page.
pub const PAGE_SIZE: u32 = 500;
/// Rewrites in flight at once.
pub const CONCURRENT_WRITES: usize = 4;
/// A progress line is printed after this many objects...
pub const PROGRESS_EVERY_OBJECTS: u64 = 500;
/// ... or this long after the previous one, whichever comes first.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Attempts after the first for a request that failed in a way that may pass (a timeout,
/// 429, 5xx, e.g. the conversion webhook restarting).
pub const RETRIES: usize = 6;
/// How many times a listing starts over when its continue token expired and the API server
/// offered no token to go on with.
const LIST_RESTARTS: u32 = 3;
/// How many times trimming re-reads a CRD that changed between its read and the patch.
const TRIM_ATTEMPTS: u32 = 5;

const INSTALL_FIRST: &str = "install the new CRDs first (accord-hub install, or \
                             kubectl apply -f crds/yaml/), with the hub running";

/// Flags of `accord-hub migrate-storage`.
///
/// Runs with the operator's credentials (it needs get on the Accord CRDs and patch on their
/// status, and list, update on every Accord kind), not the hub's.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// Kubeconfig of the management cluster (default: $KUBECONFIG, which may list several
    /// files, else ~/.kube/config, else in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
    /// Count the objects of every kind and print what would be done; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Why `accord-hub migrate-storage` stopped.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The management cluster could not be reached.
    #[error(transparent)]
    Connect(#[from] ApplyError),
    /// A CRD could not be read.
    #[error("cannot read CustomResourceDefinition {crd}")]
    ReadCrd {
        /// The CRD's name.
        crd: String,
        /// The API server's answer.
        #[source]
        source: RequestError,
    },
    /// An Accord CRD is not installed at all.
    #[error("CustomResourceDefinition {crd} is not installed; {INSTALL_FIRST}")]
    CrdMissing {
        /// The CRD's name.
        crd: String,
    },
    /// An Accord CRD does not serve, or does not store, the storage version.
    #[error("CustomResourceDefinition {crd} {reason}; {INSTALL_FIRST}")]
    NotReady {
        /// The CRD's name.
        crd: String,
        /// What is wrong with it.
        reason: NotReady,
    },
    /// The objects of a kind could not be listed.
    #[error("cannot list {kind} in accord.io/{STORAGE_VERSION}{hint}")]
    List {
        /// The kind.
        kind: String,
        /// What may be the cause, when it is recognisable (starts with "; ").
        hint: String,
        /// The API server's answer.
        #[source]
        source: RequestError,
    },
    /// One object could not be rewritten.
    #[error(
        "cannot rewrite {kind} {object} in accord.io/{STORAGE_VERSION} (objects rewritten so \
         far stay rewritten: run accord-hub migrate-storage again to resume){hint}"
    )]
    Rewrite {
        /// The kind.
        kind: String,
        /// The object, `namespace/name` (or `name`).
        object: String,
        /// What may be the cause, when it is recognisable (starts with "; ").
        hint: String,
        /// The API server's answer.
        #[source]
        source: RequestError,
    },
    /// A CRD's `status.storedVersions` could not be trimmed.
    #[error(
        "every {kind} is stored in {STORAGE_VERSION}, but setting status.storedVersions of \
         CustomResourceDefinition {crd} to [{STORAGE_VERSION}] failed (run the command again)"
    )]
    Trim {
        /// The kind.
        kind: String,
        /// The CRD's name.
        crd: String,
        /// The API server's answer.
        #[source]
        source: RequestError,
    },
}

/// A failed request, shown as the API server's message: kube's own text of an API error
/// repeats the message with the whole Status, and operators read this one.
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(.0))]
pub struct RequestError(pub kube::Error);

impl From<kube::Error> for RequestError {
    fn from(error: kube::Error) -> Self {
        Self(error)
    }
}

/// `message (HTTP code Reason)` for an API error, the error with its causes otherwise.
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            let message = status.message.trim_end_matches([':', ' ']);
            match (status.code, status.reason.as_str()) {
                (0, "") => message.to_owned(),
                (code, "") => format!("{message} (HTTP {code})"),
                (code, reason) => format!("{message} (HTTP {code} {reason})"),
            }
        }
        other => accord_common::runtime::error_chain(other),
    }
}

/// Why a CRD is not ready for the migration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// The CRD has no served `v1beta1`: the old CRDs are still installed.
    #[error("does not serve accord.io/{STORAGE_VERSION}")]
    NotServed,
    /// The CRD serves `v1beta1` but stores another version: rewriting would store that.
    #[error("stores accord.io/{storage}, not accord.io/{STORAGE_VERSION}")]
    OtherStorage {
        /// The version the CRD stores (empty if it marks none).
        storage: String,
    },
}

/// What the migration does for one CRD, decided from the CRD alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrdPlan {
    /// Objects may be stored in these versions (`status.storedVersions`): rewrite every
    /// object, then trim the list to the storage version.
    Rewrite {
        /// `status.storedVersions` as it is.
        stored_versions: Vec<String>,
    },
    /// `status.storedVersions` is already just the storage version: every object is stored
    /// in it (a previous run finished this kind).
    Done,
}

/// Decides what to do with `crd`: it must serve the storage version and store it;
/// anything but `status.storedVersions == [v1beta1]` means objects may be stored otherwise.
pub fn plan(crd: &CustomResourceDefinition) -> Result<CrdPlan, NotReady> {
    let versions = &crd.spec.versions;
    if !versions
        .iter()
        .any(|v| v.name == STORAGE_VERSION && v.served)
    {
        return Err(NotReady::NotServed);
    }
    if let Some(storage) = versions.iter().find(|v| v.storage)
        && storage.name != STORAGE_VERSION
    {
        return Err(NotReady::OtherStorage {
            storage: storage.name.clone(),
        });
    }
    let stored_versions = crd
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default();
    if stored_versions == [STORAGE_VERSION] {
        Ok(CrdPlan::Done)
    } else {
        Ok(CrdPlan::Rewrite { stored_versions })
    }
}

/// The merge patch of a CRD's `/status` that leaves only the storage version in
/// `storedVersions`, with the CRD's `resourceVersion` as precondition: if the CRD changed
/// since it was checked (say the old CRD was put back, storing `v1alpha1` again), the patch
/// fails with a conflict instead of hiding that version.
pub fn stored_versions_patch(resource_version: &str) -> Value {
    json!({
        "metadata": { "resourceVersion": resource_version },
        "status": { "storedVersions": [STORAGE_VERSION] },
    })
}

/// Counts of one kind's rewrite, and when to say so.
#[derive(Debug, Clone)]
pub struct Progress {
    kind: String,
    total: Option<u64>,
    rewritten: u64,
    conflicts: u64,
    gone: u64,
    last_line_at: Instant,
    last_line_count: u64,
}

/// What became of one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Rewritten (or already stored in the storage version: the write was a no-op).
    Rewritten,
    /// Someone else wrote it since it was listed (409): that write stored it in the
    /// storage version, so it counts as rewritten.
    Conflict,
    /// Deleted since it was listed (404).
    Gone,
}

impl Progress {
    /// A kind's progress, starting at `now`; `total` is the object count if known.
    pub fn new(kind: &str, total: Option<u64>, now: Instant) -> Self {
        Self {
            kind: kind.to_owned(),
            total,
            rewritten: 0,
            conflicts: 0,
            gone: 0,
            last_line_at: now,
            last_line_count: 0,
        }
    }

    /// Sets the object count, once the first page tells it.
    pub fn set_total(&mut self, total: u64) {
        self.total = Some(total);
    }

    /// Objects rewritten so far (conflicts included).
    pub fn rewritten(&self) -> u64 {
        self.rewritten
    }

    /// Records one object; returns a progress line when one is due (every
    /// [`PROGRESS_EVERY_OBJECTS`] objects or [`PROGRESS_EVERY`]).
    pub fn record(&mut self, outcome: Outcome, now: Instant) -> Option<String> {
        match outcome {
            Outcome::Rewritten => self.rewritten += 1,
            Outcome::Conflict => {
                self.rewritten += 1;
                self.conflicts += 1;
            }
            Outcome::Gone => self.gone += 1,
        }
        let count = self.rewritten + self.gone;
        let due = count - self.last_line_count >= PROGRESS_EVERY_OBJECTS
            || now.saturating_duration_since(self.last_line_at) >= PROGRESS_EVERY;
        due.then(|| {
            self.last_line_at = now;
            self.last_line_count = count;
            self.line()
        })
    }

    /// `FederatedKafkaTopic: 120/1000 rewritten`. Objects created during the run (stored
    /// in the storage version already) may be listed too, so the total is never shown
    /// below the count.
    pub fn line(&self) -> String {
        match self.total {
            Some(total) => {
                let total = total.max(self.rewritten + self.gone);
                format!("{}: {}/{total} rewritten", self.kind, self.rewritten)
            }
            None => format!("{}: {} rewritten", self.kind, self.rewritten),
        }
    }

    /// The kind's last line: the counts, and what happened meanwhile if anything did.
    pub fn final_line(&self) -> String {
        let mut line = format!(
            "{}: {}/{} rewritten in accord.io/{STORAGE_VERSION}",
            self.kind,
            self.rewritten,
            self.rewritten + self.gone
        );
        let mut notes = Vec::new();
        if self.conflicts > 0 {
            notes.push(format!("{} written by others meanwhile", self.conflicts));
        }
        if self.gone > 0 {
            notes.push(format!("{} deleted meanwhile", self.gone));
        }
        if !notes.is_empty() {
            line.push_str(&format!(" ({})", notes.join(", ")));
        }
        line
    }
}

/// Whether a failed request may pass if tried again: transport failures, timeouts, 429
/// and 5xx (an unreachable conversion webhook is a 500). A 4xx is an answer about the
/// request itself; 404 and 409 have their own meaning to the caller.
pub fn is_transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => matches!(status.code, 408 | 429 | 500..),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// The outcome a failed replace stands for, if it is not a failure: 409 (written by
/// someone else) or 404 (deleted).
pub fn outcome_of_error(error: &kube::Error) -> Option<Outcome> {
    match error {
        kube::Error::Api(status) if status.is_conflict() => Some(Outcome::Conflict),
        kube::Error::Api(status) if status.is_not_found() => Some(Outcome::Gone),
        _ => None,
    }
}

/// A hint for an error that names the conversion webhook (the hub is not running or not
/// reachable from the API server), else nothing.
pub fn hint_for(error: &kube::Error) -> String {
    let text = match error {
        kube::Error::Api(status) => status.message.as_str(),
        _ => return String::new(),
    };
    if text.contains("conversion webhook") {
        "; the API server's call to the hub's conversion webhook failed: is the hub running, \
         and reachable at the address the CRD's spec.conversion names?"
            .to_owned()
    } else {
        String::new()
    }
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn object_name(object: &DynamicObject) -> String {
    match object.namespace() {
        Some(namespace) => format!("{namespace}/{}", object.name_any()),
        None => object.name_any(),
    }
}

/// One Accord kind as its CRD describes it.
#[derive(Debug, Clone)]
struct Kind {
    crd: String,
    resource: ApiResource,
    namespaced: bool,
}

impl Kind {
    fn of(crd: &CustomResourceDefinition) -> Self {
        let gvk = GroupVersionKind::gvk(&crd.spec.group, STORAGE_VERSION, &crd.spec.names.kind);
        Self {
            crd: crd.name_any(),
            resource: ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural),
            namespaced: crd.spec.scope == "Namespaced",
        }
    }

    fn name(&self) -> &str {
        &self.resource.kind
    }

    fn all(&self, client: &Client) -> Api<DynamicObject> {
        Api::all_with(client.clone(), &self.resource)
    }

    fn api_for(&self, client: &Client, object: &DynamicObject) -> Api<DynamicObject> {
        match object.namespace() {
            Some(namespace) if self.namespaced => {
                Api::namespaced_with(client.clone(), &namespace, &self.resource)
            }
            _ => self.all(client),
        }
    }
}

fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_max_times(RETRIES)
        .with_jitter()
}

/// Runs `accord-hub migrate-storage`: progress on stdout, retries on stderr.
pub async fn run(args: MigrateArgs) -> Result<(), MigrateError> {
    install_crypto_provider();
    let (client, url) = apply::connect(args.kubeconfig.as_ref(), args.context.as_deref()).await?;
    apply::check_reachable(&client, &url).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());

    // Every CRD is checked before anything is written: a half-upgraded installation stops
    // here, not after some kinds.
    let mut kinds = Vec::new();
    for expected in accord_crds::all_crds() {
        let name = expected.name_any();
        let crd = crds
            .get_opt(&name)
            .await
            .map_err(|source| MigrateError::ReadCrd {
                crd: name.clone(),
                source: source.into(),
            })?
            .ok_or_else(|| MigrateError::CrdMissing { crd: name.clone() })?;
        let plan = plan(&crd).map_err(|reason| MigrateError::NotReady {
            crd: name.clone(),
            reason,
        })?;
        kinds.push((Kind::of(&crd), plan));
    }

    let verb = if args.dry_run {
        "would migrate"
    } else {
        "migrating"
    };
    println!("{verb} every Accord object on {url} to storage version accord.io/{STORAGE_VERSION}");
    for (kind, plan) in kinds {
        let stored_versions = match plan {
            CrdPlan::Done => {
                println!(
                    "{}: status.storedVersions is already [{STORAGE_VERSION}]; nothing to do",
                    kind.name()
                );
                continue;
            }
            CrdPlan::Rewrite { stored_versions } => stored_versions,
        };
        if args.dry_run {
            let count = count(&client, &kind).await?;
            println!(
                "{}: would rewrite {count} objects in accord.io/{STORAGE_VERSION}, then set \
                 status.storedVersions of {} from [{}] to [{STORAGE_VERSION}]",
                kind.name(),
                kind.crd,
                stored_versions.join(", ")
            );
            continue;
        }
        let progress = rewrite_all(&client, &kind).await?;
        println!("{}", progress.final_line());
        trim(&crds, &kind).await?;
        println!(
            "{}: status.storedVersions of {} set to [{STORAGE_VERSION}] (was [{}])",
            kind.name(),
            kind.crd,
            stored_versions.join(", ")
        );
    }
    if !args.dry_run {
        println!("done: every Accord object is stored in accord.io/{STORAGE_VERSION}");
    }
    Ok(())
}

/// The pages of one kind's listing in the storage version, each request retried while it
/// fails transiently. An expired continue token (410) goes on with the token the API server
/// offers for the rest of the list, else starts over (rewriting an object twice is a
/// no-op the second time).
struct Pages {
    api: Api<DynamicObject>,
    token: Option<String>,
    finished: bool,
    restarts: u32,
}

impl Pages {
    fn new(api: Api<DynamicObject>) -> Self {
        Self {
            api,
            token: None,
            finished: false,
            restarts: 0,
        }
    }

    /// The next page and, on the first page, the kind's object count if the API server
    /// told it; `None` after the last page.
    async fn next(&mut self) -> Result<Option<(Vec<DynamicObject>, Option<u64>)>, kube::Error> {
        loop {
            if self.finished {
                return Ok(None);
            }
            let first = self.token.is_none();
            let mut params = ListParams::default().limit(PAGE_SIZE);
            if let Some(token) = &self.token {
                params = params.continue_token(token);
            }
            let listed = (|| self.api.list(&params))
                .retry(backoff())
                .when(is_transient)
                .notify(|error, delay| {
                    tracing::warn!(
                        error = describe(error),
                        ?delay,
                        "listing failed; trying again"
                    );
                })
                .await;
            let list = match listed {
                Ok(list) => list,
                Err(kube::Error::Api(status)) if status.code == 410 && !first => {
                    let offered = status
                        .metadata
                        .as_ref()
                        .and_then(|m| m.continue_.clone())
                        .filter(|t| !t.is_empty());
                    if offered.is_none() {
                        if self.restarts >= LIST_RESTARTS {
                            return Err(kube::Error::Api(status));
                        }
                        self.restarts += 1;
                    }
                    tracing::warn!(
                        "the list's continue token expired; {}",
                        if offered.is_some() {
                            "going on with the rest of the list"
                        } else {
                            "listing again from the start"
                        }
                    );
                    self.token = offered;
                    continue;
                }
                Err(error) => return Err(error),
            };
            let total = first.then(|| {
                let remaining = list.metadata.remaining_item_count.unwrap_or(0).max(0);
                list.items.len() as u64 + remaining as u64
            });
            self.token = list.metadata.continue_.filter(|t| !t.is_empty());
            self.finished = self.token.is_none();
            return Ok(Some((list.items, total)));
        }
    }
}

/// Counts one kind's objects, listing them in the storage version (which goes through the
/// conversion webhook just as the rewrite would).
async fn count(client: &Client, kind: &Kind) -> Result<u64, MigrateError> {
    let mut pages = Pages::new(kind.all(client));
    let mut count = 0;
    while let Some((items, _)) = pages.next().await.map_err(|source| MigrateError::List {
        kind: kind.name().to_owned(),
        hint: hint_for(&source),
        source: source.into(),
    })? {
        count += items.len() as u64;
    }
    Ok(count)
}

/// Rewrites every object of `kind` in the storage version.
async fn rewrite_all(client: &Client, kind: &Kind) -> Result<Progress, MigrateError> {
    let mut progress = Progress::new(kind.name(), None, Instant::now());
    // Objects rewritten in this run, by uid: a listing that starts over skips them.
    let mut done: HashSet<String> = HashSet::new();
    let mut pages = Pages::new(kind.all(client));
    loop {
        let page = pages.next().await.map_err(|source| MigrateError::List {
            kind: kind.name().to_owned(),
            hint: hint_for(&source),
            source: source.into(),
        })?;
        let Some((items, total)) = page else { break };
        if let Some(total) = total {
            progress.set_total(total);
        }
        let todo: Vec<DynamicObject> = items
            .into_iter()
            .filter(|o| o.uid().is_none_or(|uid| !done.contains(&uid)))
            .collect();
        let mut writes = futures::stream::iter(todo)
            .map(|object| rewrite(client, kind, object))
            .buffer_unordered(CONCURRENT_WRITES);
        while let Some(written) = writes.next().await {
            let (uid, outcome) = written?;
            if let Some(uid) = uid {
                done.insert(uid);
            }
            if let Some(line) = progress.record(outcome, Instant::now()) {
                println!("{line}");
            }
        }
    }
    Ok(progress)
}

/// Rewrites one object: a replace of it as listed, with its `resourceVersion`.
async fn rewrite(
    client: &Client,
    kind: &Kind,
    mut object: DynamicObject,
) -> Result<(Option<String>, Outcome), MigrateError> {
    let api = kind.api_for(client, &object);
    let name = object.name_any();
    let uid = object.uid();
    object.types = Some(TypeMeta {
        api_version: kind.resource.api_version.clone(),
        kind: kind.resource.kind.clone(),
    });
    let params = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let replaced = (|| api.replace(&name, &params, &object))
        .retry(backoff())
        .when(is_transient)
        .notify(|error, delay| {
            tracing::warn!(object = %object_name(&object), error = describe(error), ?delay, "rewrite failed; trying again");
        })
        .await;
    match replaced {
        Ok(_) => Ok((uid, Outcome::Rewritten)),
        Err(error) => match outcome_of_error(&error) {
            Some(outcome) => Ok((uid, outcome)),
            None => Err(MigrateError::Rewrite {
                kind: kind.name().to_owned(),
                object: object_name(&object),
                hint: hint_for(&error),
                source: error.into(),
            }),
        },
    }
}

/// Sets `kind`'s CRD `status.storedVersions` to the storage version, once every object of
/// it was rewritten. The CRD is read again first: should it no longer store the storage
/// version, nothing is trimmed.
async fn trim(crds: &Api<CustomResourceDefinition>, kind: &Kind) -> Result<(), MigrateError> {
    let failed = |source: kube::Error| MigrateError::Trim {
        kind: kind.name().to_owned(),
        crd: kind.crd.clone(),
        source: source.into(),
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        let crd = crds.get(&kind.crd).await.map_err(failed)?;
        plan(&crd).map_err(|reason| MigrateError::NotReady {
            crd: kind.crd.clone(),
            reason,
        })?;
        let resource_version = crd.resource_version().unwrap_or_default();
        let patched = crds
            .patch_status(
                &kind.crd,
                &PatchParams::default(),
                &Patch::Merge(stored_versions_patch(&resource_version)),
            )
            .await;
        match patched {
            Ok(_) => return Ok(()),
            // The CRD changed between the read and the patch: check it again.
            Err(kube::Error::Api(status)) if status.is_conflict() && attempt < TRIM_ATTEMPTS => {}
            Err(error) if is_transient(&error) && attempt < TRIM_ATTEMPTS => {
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            }
            Err(error) => return Err(failed(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinitionStatus, CustomResourceDefinitionVersion,
    };
    use kube::core::Status;

    fn version(name: &str, served: bool, storage: bool) -> CustomResourceDefinitionVersion {
        CustomResourceDefinitionVersion {
            name: name.to_owned(),
            served,
            storage,
            ..Default::default()
        }
    }

    fn crd(
        versions: Vec<CustomResourceDefinitionVersion>,
        stored: Option<&[&str]>,
    ) -> CustomResourceDefinition {
        let mut crd = accord_crds::all_crds().remove(0);
        crd.spec.versions = versions;
        crd.status = stored.map(|s| CustomResourceDefinitionStatus {
            stored_versions: Some(s.iter().map(|v| (*v).to_owned()).collect()),
            ..Default::default()
        });
        crd
    }

    fn api_error(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Status::failure(message, reason).with_code(code).boxed())
    }

    #[test]
    fn old_crd_serving_only_v1alpha1_is_not_ready() {
        let old = crd(vec![version("v1alpha1", true, true)], Some(&["v1alpha1"]));
        assert_eq!(plan(&old), Err(NotReady::NotServed));
    }

    #[test]
    fn crd_listing_v1beta1_without_serving_it_is_not_ready() {
        let crd = crd(
            vec![
                version("v1beta1", false, true),
                version("v1alpha1", true, false),
            ],
            Some(&["v1alpha1"]),
        );
        assert_eq!(plan(&crd), Err(NotReady::NotServed));
    }

    #[test]
    fn crd_serving_v1beta1_but_storing_v1alpha1_is_not_ready() {
        let crd = crd(
            vec![
                version("v1beta1", true, false),
                version("v1alpha1", true, true),
            ],
            Some(&["v1alpha1"]),
        );
        assert_eq!(
            plan(&crd),
            Err(NotReady::OtherStorage {
                storage: "v1alpha1".into()
            })
        );
        assert_eq!(
            MigrateError::NotReady {
                crd: "federatedkafkatopics.accord.io".into(),
                reason: plan(&crd).unwrap_err()
            }
            .to_string(),
            "CustomResourceDefinition federatedkafkatopics.accord.io stores accord.io/v1alpha1, \
             not accord.io/v1beta1; install the new CRDs first (accord-hub install, or kubectl \
             apply -f crds/yaml/), with the hub running"
        );
    }

    #[test]
    fn new_crd_with_objects_stored_in_both_versions_is_rewritten() {
        let crd = crd(
            vec![
                version("v1beta1", true, true),
                version("v1alpha1", true, false),
            ],
            Some(&["v1alpha1", "v1beta1"]),
        );
        assert_eq!(
            plan(&crd),
            Ok(CrdPlan::Rewrite {
                stored_versions: vec!["v1alpha1".into(), "v1beta1".into()]
            })
        );
    }

    #[test]
    fn crd_without_status_is_rewritten() {
        let crd = crd(vec![version("v1beta1", true, true)], None);
        assert_eq!(
            plan(&crd),
            Ok(CrdPlan::Rewrite {
                stored_versions: vec![]
            })
        );
    }

    #[test]
    fn crd_storing_only_v1beta1_needs_nothing() {
        let crd = crd(
            vec![
                version("v1beta1", true, true),
                version("v1alpha1", true, false),
            ],
            Some(&["v1beta1"]),
        );
        assert_eq!(plan(&crd), Ok(CrdPlan::Done));
    }

    #[test]
    fn crds_this_build_installs_are_ready() {
        for crd in accord_crds::all_crds() {
            assert!(
                plan(&crd).is_ok(),
                "{} must serve and store {STORAGE_VERSION}",
                crd.name_any()
            );
        }
    }

    #[test]
    fn stored_versions_patch_keeps_only_the_storage_version_under_a_precondition() {
        assert_eq!(
            stored_versions_patch("42"),
            json!({
                "metadata": {"resourceVersion": "42"},
                "status": {"storedVersions": ["v1beta1"]},
            })
        );
    }

    #[test]
    fn progress_line_is_printed_every_500_objects() {
        let start = Instant::now();
        let mut progress = Progress::new("FederatedKafkaTopic", Some(1000), start);
        let lines: Vec<String> = (0..1000)
            .filter_map(|_| progress.record(Outcome::Rewritten, start))
            .collect();
        assert_eq!(
            lines,
            [
                "FederatedKafkaTopic: 500/1000 rewritten",
                "FederatedKafkaTopic: 1000/1000 rewritten"
            ]
        );
    }

    #[test]
    fn progress_line_is_printed_every_few_seconds_however_few_objects() {
        let start = Instant::now();
        let mut progress = Progress::new("ManagedCluster", Some(10), start);
        assert_eq!(progress.record(Outcome::Rewritten, start), None);
        assert_eq!(
            progress.record(Outcome::Rewritten, start + PROGRESS_EVERY),
            Some("ManagedCluster: 2/10 rewritten".into())
        );
        assert_eq!(
            progress.record(Outcome::Rewritten, start + PROGRESS_EVERY),
            None
        );
    }

    #[test]
    fn progress_never_shows_a_total_below_the_count() {
        let start = Instant::now();
        let mut progress = Progress::new("KafkaTopicPolicy", Some(1), start);
        progress.record(Outcome::Rewritten, start);
        progress.record(Outcome::Rewritten, start);
        assert_eq!(progress.line(), "KafkaTopicPolicy: 2/2 rewritten");
        let unknown = Progress::new("KafkaTopicPolicy", None, start);
        assert_eq!(unknown.line(), "KafkaTopicPolicy: 0 rewritten");
    }

    #[test]
    fn final_line_counts_conflicts_as_rewritten_and_names_deletions() {
        let start = Instant::now();
        let mut progress = Progress::new("FederatedResource", Some(4), start);
        for outcome in [
            Outcome::Rewritten,
            Outcome::Conflict,
            Outcome::Gone,
            Outcome::Rewritten,
        ] {
            progress.record(outcome, start);
        }
        assert_eq!(progress.rewritten(), 3);
        assert_eq!(
            progress.final_line(),
            "FederatedResource: 3/4 rewritten in accord.io/v1beta1 (1 written by others \
             meanwhile, 1 deleted meanwhile)"
        );
        let clean = Progress::new("ManagedCluster", Some(0), start);
        assert_eq!(
            clean.final_line(),
            "ManagedCluster: 0/0 rewritten in accord.io/v1beta1"
        );
    }

    #[test]
    fn conflict_counts_as_rewritten_and_not_found_as_gone() {
        assert_eq!(
            outcome_of_error(&api_error(409, "Conflict", "the object has been modified")),
            Some(Outcome::Conflict)
        );
        assert_eq!(
            outcome_of_error(&api_error(404, "NotFound", "not found")),
            Some(Outcome::Gone)
        );
        assert_eq!(
            outcome_of_error(&api_error(422, "Invalid", "spec.x: Invalid value")),
            None
        );
    }

    #[test]
    fn only_failures_that_may_pass_are_retried() {
        for code in [408, 429, 500, 503, 504] {
            assert!(is_transient(&api_error(code, "", "")), "{code}");
        }
        for code in [400, 403, 404, 409, 410, 422] {
            assert!(!is_transient(&api_error(code, "", "")), "{code}");
        }
    }

    #[test]
    fn an_api_error_reads_as_the_servers_message_with_its_code() {
        let error = api_error(409, "Conflict", "the object has been modified");
        assert_eq!(
            RequestError::from(error).to_string(),
            "the object has been modified (HTTP 409 Conflict)"
        );
        assert_eq!(
            describe(&api_error(500, "", "conversion webhook failed: ")),
            "conversion webhook failed (HTTP 500)"
        );
    }

    #[test]
    fn unreachable_conversion_webhook_gets_a_hint() {
        let error = api_error(
            500,
            "InternalError",
            "conversion webhook for accord.io/v1alpha1, Kind=FederatedKafkaTopic failed: \
             Post \"https://127.0.0.1:9443/convert\": connection refused",
        );
        assert!(hint_for(&error).contains("is the hub running"));
        assert_eq!(
            hint_for(&api_error(500, "InternalError", "etcd timeout")),
            ""
        );
    }
}
