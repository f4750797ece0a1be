//! `accord-agent reload`: the reloader that runs beside a federation Prometheus (like
//! prometheus-operator's config-reloader, without waiting for the kubelet's ConfigMap
//! sync). It watches one ConfigMap, and for each new config (debounced: a burst of edits is
//! one reload) validates it, writes Prometheus's config file atomically, POSTs
//! `/-/reload`, and confirms from Prometheus itself that the config is loaded
//! (`/api/v1/status/config` has the same jobs and `prometheus_config_last_reload_successful`
//! is 1). It reports in the ConfigMap's `accord.io/loaded-hash|reload-hash|reload-state|
//! reload-message|scrape-errors` annotations, written with a merge patch only on change.
//!
//! A config Prometheus refuses (HTTP 500) never stays: the last good file is put back and
//! reloaded. `Pending` is never written: a config is pending while `reload-hash` differs
//! from `config-hash`.
//!
//! The pure parts — comparing configs ([`compare`]), reading Prometheus's answers
//! ([`prometheus`]), the annotation patch ([`annotations`]) — are tested alone; this module
//! is the I/O loop around them.

pub mod annotations;
pub mod compare;
pub mod prometheus;

use accord_crds::duration::{parse_flag, parse_positive_flag};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use accord_common::pki::install_crypto_provider;
use accord_common::promfed::{
    CONFIG_KEY, CONFIG_MAP_NAME, STATE_ERROR, STATE_SYNCED, STATE_UNAVAILABLE, config_hash,
    empty_config, validate,
};
use accord_common::runtime::{KubeClientError, kube_client};
use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use self::annotations::Report;
use self::prometheus::{PrometheusClient, ReloadAnswer};

/// Field manager of the reloader's annotation patches.
pub const FIELD_MANAGER: &str = "accord-reloader";
/// The message of a 403 from `/-/reload`.
pub const FORBIDDEN_MESSAGE: &str =
    "Prometheus refused /-/reload (403 Forbidden): start it with --web.enable-lifecycle";
/// However long edits keep coming, a config is acted on at most this many debounce
/// intervals after the first of them.
const MAX_DEBOUNCE_FACTOR: u32 = 5;
/// First delay before retrying a Prometheus that did not answer.
const RETRY_MIN_DELAY: Duration = Duration::from_millis(200);
/// Longest delay between two retries.
const RETRY_MAX_DELAY: Duration = Duration::from_secs(10);

/// Flags of `accord-agent reload`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReloadArgs {
    /// Prometheus's config file (its `--config.file`), rewritten atomically.
    #[arg(long, env = "ACCORD_RELOAD_CONFIG_FILE")]
    pub config_file: PathBuf,
    /// Kubeconfig of the cluster holding the ConfigMap (default: $KUBECONFIG,
    /// ~/.kube/config, or the in-cluster configuration).
    #[arg(long, env = "ACCORD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the ConfigMap.
    #[arg(long, env = "ACCORD_NAMESPACE", default_value = "accord-system")]
    pub namespace: String,
    /// Name of the ConfigMap; its data key `prometheus.yml` is the whole config.
    #[arg(long, env = "ACCORD_RELOAD_CONFIG_MAP", default_value = CONFIG_MAP_NAME)]
    pub config_map: String,
    /// Base URL of the Prometheus to reload.
    #[arg(
        long,
        env = "ACCORD_PROMETHEUS_URL",
        default_value = "http://127.0.0.1:9090"
    )]
    pub prometheus_url: String,
    /// How long to wait after a change for more changes before reloading (a burst of
    /// edits is one reload).
    #[arg(long, env = "ACCORD_RELOAD_DEBOUNCE", default_value = "1s", value_parser = parse_flag)]
    pub debounce: Duration,
    /// How often to read Prometheus's targets for the scrape-errors annotation.
    #[arg(long, env = "ACCORD_RELOAD_TARGETS_INTERVAL", default_value = "5s", value_parser = parse_positive_flag)]
    pub targets_interval: Duration,
}

/// Why the reloader stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// No client of the cluster holding the ConfigMap.
    #[error("no client of the cluster")]
    Client(#[source] KubeClientError),
    /// The HTTP client of Prometheus could not be built.
    #[error("cannot build the HTTP client of Prometheus")]
    Http(#[source] reqwest::Error),
    /// The ConfigMap watch ended (it retries errors, so this is not expected).
    #[error("the ConfigMap watch ended")]
    WatchEnded,
}

/// The config the ConfigMap asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Desired {
    /// `data[prometheus.yml]`.
    Config(String),
    /// The ConfigMap exists without `data[prometheus.yml]`.
    MissingKey,
    /// There is no ConfigMap: nothing to federate.
    Deleted,
}

impl Desired {
    fn of(object: Option<&ConfigMap>) -> Self {
        match object {
            None => Self::Deleted,
            Some(cm) => match cm.data.as_ref().and_then(|d| d.get(CONFIG_KEY)) {
                Some(config) => Self::Config(config.clone()),
                None => Self::MissingKey,
            },
        }
    }

    fn hash(&self) -> String {
        match self {
            Self::Config(config) => config_hash(config),
            Self::MissingKey => format!("missing-{CONFIG_KEY}"),
            Self::Deleted => config_hash(&empty_config()),
        }
    }
}

/// A config waiting to be acted on.
#[derive(Debug, Clone)]
struct Work {
    desired: Desired,
    hash: String,
    /// When the first change of the current burst was seen.
    first_seen: Instant,
    /// When to act.
    due: Instant,
    /// Acted on before, and to be retried.
    retrying: bool,
}

/// Whether handling a config is finished or must be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Done,
    Retry,
}

struct Reloader {
    api: Api<ConfigMap>,
    name: String,
    prometheus: PrometheusClient,
    file: PathBuf,
    /// The last config Prometheus confirmed loading (or had loaded when we started).
    last_good: Option<String>,
    /// Its hash, once confirmed by this process.
    loaded_hash: Option<String>,
    /// The ConfigMap's annotations as last seen; `None` while there is no ConfigMap.
    annotations: Option<BTreeMap<String, String>>,
    report: Option<Report>,
    scrape_errors: BTreeMap<String, String>,
}

/// Runs the reloader until `shutdown` completes.
pub async fn run(
    args: ReloadArgs,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ReloadError> {
    install_crypto_provider();
    let client = kube_client(args.kubeconfig.as_deref())
        .await
        .map_err(ReloadError::Client)?;
    let prometheus = PrometheusClient::new(&args.prometheus_url).map_err(ReloadError::Http)?;
    let api: Api<ConfigMap> = Api::namespaced(client, &args.namespace);
    info!(
        config_map = %format!("{}/{}", args.namespace, args.config_map),
        file = %args.config_file.display(),
        prometheus = %args.prometheus_url,
        "starting the reloader"
    );
    let mut reloader = Reloader {
        api: api.clone(),
        name: args.config_map.clone(),
        prometheus,
        file: args.config_file.clone(),
        last_good: None,
        loaded_hash: None,
        annotations: None,
        report: None,
        scrape_errors: BTreeMap::new(),
    };
    reloader.learn_last_good().await;

    let watch_config =
        watcher::Config::default().fields(&format!("metadata.name={}", args.config_map));
    let stream = accord_common::watch::watcher(api, watch_config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut targets = tokio::time::interval(args.targets_interval);
    targets.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let max_wait = args.debounce * MAX_DEBOUNCE_FACTOR;
    let mut listing: Option<ConfigMap> = None;
    let mut work: Option<Work> = None;
    let mut done_hash: Option<String> = None;
    let mut backoff = retry_backoff();
    loop {
        let due = work.as_ref().map(|w| w.due);
        tokio::select! {
            () = &mut shutdown => {
                info!("shutting down");
                return Ok(());
            }
            event = stream.next() => {
                let observed = match event {
                    None => return Err(ReloadError::WatchEnded),
                    Some(Err(e)) => {
                        warn!(error = %e, "watching the ConfigMap (retrying)");
                        continue;
                    }
                    Some(Ok(Event::Init)) => {
                        listing = None;
                        continue;
                    }
                    Some(Ok(Event::InitApply(cm))) => {
                        listing = Some(cm);
                        continue;
                    }
                    Some(Ok(Event::InitDone)) => listing.take(),
                    Some(Ok(Event::Apply(cm))) => Some(cm),
                    Some(Ok(Event::Delete(_))) => None,
                };
                reloader.annotations = observed.as_ref().map(|cm| cm.annotations().clone());
                let desired = Desired::of(observed.as_ref());
                let hash = desired.hash();
                let pending = work.as_ref().map(|w| w.hash.as_str());
                if pending == Some(hash.as_str()) {
                    continue;
                }
                if pending.is_none() && done_hash.as_deref() == Some(hash.as_str()) {
                    // Our own annotation patch, or a change that leaves the config alone.
                    reloader.write_annotations().await;
                    continue;
                }
                let now = Instant::now();
                let first_seen = match &work {
                    Some(w) if !w.retrying => w.first_seen,
                    _ => now,
                };
                debug!(hash = %short(&hash), "config changed");
                work = Some(Work {
                    desired,
                    hash,
                    first_seen,
                    due: (now + args.debounce).min(first_seen + max_wait),
                    retrying: false,
                });
                backoff = retry_backoff();
            }
            () = sleep_until(due), if due.is_some() => {
                let Some(w) = work.take() else { continue };
                match reloader.act(&w.desired, &w.hash).await {
                    Outcome::Done => done_hash = Some(w.hash),
                    Outcome::Retry => {
                        let delay = backoff.next().unwrap_or(RETRY_MAX_DELAY);
                        debug!(?delay, "retrying");
                        done_hash = None;
                        work = Some(Work { due: Instant::now() + delay, retrying: true, ..w });
                    }
                }
                reloader.write_annotations().await;
            }
            _ = targets.tick() => {
                reloader.refresh_scrape_errors().await;
                reloader.write_annotations().await;
            }
        }
    }
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

fn retry_backoff() -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(RETRY_MIN_DELAY)
        .with_max_delay(RETRY_MAX_DELAY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

/// The first 12 hex digits, for logs.
fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

impl Reloader {
    /// Takes the file on disk as the last good config when Prometheus has it loaded.
    async fn learn_last_good(&mut self) {
        let Ok(on_disk) = std::fs::read_to_string(&self.file) else {
            return;
        };
        match self.prometheus.loaded_config().await {
            Ok(loaded) => match compare::compare(&on_disk, &loaded) {
                Ok(()) => {
                    debug!("the config file on disk is the one Prometheus has loaded");
                    self.last_good = Some(on_disk);
                }
                Err(difference) => debug!(%difference, "the config file on disk is not loaded"),
            },
            Err(e) => debug!(error = %e, "cannot read Prometheus's loaded config"),
        }
    }

    fn set(&mut self, hash: &str, state: &'static str, message: String) {
        let changed = self
            .report
            .as_ref()
            .is_none_or(|r| r.reload_hash != hash || r.state != state || r.message != message);
        if changed {
            if state == STATE_SYNCED {
                info!(hash = %short(hash), state, %message, "reload");
            } else {
                warn!(hash = %short(hash), state, %message, "reload");
            }
        }
        self.report = Some(Report {
            reload_hash: hash.to_owned(),
            state,
            message,
        });
    }

    /// Validates, writes, reloads and confirms one config.
    async fn act(&mut self, desired: &Desired, hash: &str) -> Outcome {
        let content = match desired {
            Desired::MissingKey => {
                self.set(
                    hash,
                    STATE_ERROR,
                    format!("invalid config: the ConfigMap has no data key {CONFIG_KEY}"),
                );
                return Outcome::Done;
            }
            Desired::Deleted => empty_config(),
            Desired::Config(config) => config.clone(),
        };
        if let Err(e) = validate(&content) {
            self.set(hash, STATE_ERROR, format!("invalid config: {e}"));
            return Outcome::Done;
        }
        if self.last_good.is_none() {
            self.learn_last_good().await;
        }
        let previous = std::fs::read_to_string(&self.file).ok();
        if let Err(e) = write_atomically(&self.file, &content) {
            self.set(
                hash,
                STATE_ERROR,
                format!("cannot write {}: {e}", self.file.display()),
            );
            return Outcome::Retry;
        }
        info!(hash = %short(hash), "config file written; POST /-/reload");
        let url = self.prometheus.url().to_owned();
        match self.prometheus.reload().await {
            ReloadAnswer::Reloaded => match self.confirm(&content).await {
                Ok(()) => {
                    let jobs = validate(&content).map(|v| v.jobs.len()).unwrap_or_default();
                    self.last_good = Some(content);
                    self.loaded_hash = Some(hash.to_owned());
                    self.set(hash, STATE_SYNCED, format!("Prometheus loaded {jobs} jobs"));
                    Outcome::Done
                }
                Err(Unconfirmed::Unreachable(e)) => {
                    self.set(hash, STATE_UNAVAILABLE, unreachable(&url, &e));
                    Outcome::Retry
                }
                Err(Unconfirmed::Differs(e)) => {
                    self.set(
                        hash,
                        STATE_ERROR,
                        format!("Prometheus answered the reload but did not load the config: {e}"),
                    );
                    Outcome::Retry
                }
            },
            ReloadAnswer::Refused(message) => {
                self.restore(previous, &content).await;
                self.set(hash, STATE_ERROR, message);
                Outcome::Done
            }
            ReloadAnswer::Forbidden => {
                self.set(hash, STATE_ERROR, FORBIDDEN_MESSAGE.to_owned());
                Outcome::Retry
            }
            ReloadAnswer::Unexpected(answer) => {
                self.set(
                    hash,
                    STATE_ERROR,
                    format!("{url}/-/reload answered {answer}: is this Prometheus?"),
                );
                Outcome::Retry
            }
            ReloadAnswer::Unreachable(e) => {
                self.set(hash, STATE_UNAVAILABLE, unreachable(&url, &e));
                Outcome::Retry
            }
        }
    }

    /// Checks from Prometheus itself that `content` is what it has loaded.
    async fn confirm(&self, content: &str) -> Result<(), Unconfirmed> {
        let loaded = self
            .prometheus
            .loaded_config()
            .await
            .map_err(Unconfirmed::Unreachable)?;
        compare::compare(content, &loaded).map_err(Unconfirmed::Differs)?;
        match self.prometheus.last_reload_successful().await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Unconfirmed::Differs(format!(
                "{} is 0",
                prometheus::RELOAD_SUCCESS_METRIC
            ))),
            Err(e) => Err(Unconfirmed::Unreachable(e)),
        }
    }

    /// After Prometheus refused `refused`: puts the last good config (or, not knowing one,
    /// the file as it was) back and reloads it, so that the file on disk is never one
    /// Prometheus cannot start with.
    async fn restore(&mut self, previous: Option<String>, refused: &str) {
        let Some(good) = self.last_good.clone().or(previous) else {
            warn!("Prometheus refused the config and no previous config is known to restore");
            return;
        };
        if good == refused {
            return;
        }
        if let Err(e) = write_atomically(&self.file, &good) {
            warn!(error = %e, "cannot put the last good config back");
            return;
        }
        match self.prometheus.reload().await {
            ReloadAnswer::Reloaded => info!("the last good config is back in place"),
            other => warn!(answer = ?other, "reloading the last good config"),
        }
    }

    async fn refresh_scrape_errors(&mut self) {
        if self.annotations.is_none() {
            return;
        }
        match self.prometheus.down_targets().await {
            Ok(errors) => self.scrape_errors = errors,
            Err(e) => debug!(error = %e, "cannot read Prometheus's targets"),
        }
    }

    /// Patches the annotations the reloader owns when they differ from what it knows.
    async fn write_annotations(&mut self) {
        let Some(current) = &self.annotations else {
            return;
        };
        let desired = annotations::desired(
            self.report.as_ref(),
            self.loaded_hash.as_deref(),
            &self.scrape_errors,
        );
        let Some(patch) = annotations::patch(current, &desired) else {
            return;
        };
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        match self
            .api
            .patch(&self.name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(cm) => self.annotations = Some(cm.annotations().clone()),
            Err(e) => warn!(error = %e, "writing the ConfigMap's reload annotations"),
        }
    }
}

/// Why a reload Prometheus accepted is not confirmed.
enum Unconfirmed {
    /// Prometheus did not answer the confirmation's requests.
    Unreachable(String),
    /// Prometheus answered with another config, or a failed reload.
    Differs(String),
}

fn unreachable(url: &str, error: &str) -> String {
    format!("Prometheus at {url} is unreachable: {error}")
}

/// Writes `content` to a temporary file in `path`'s directory and renames it over `path`,
/// so Prometheus never reads a half-written file.
fn write_atomically(path: &Path, content: &str) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the config file path has no file name"))?;
    let temp = dir.join(format!(
        ".{}.accord-{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(content.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ReloadArgs,
    }

    #[test]
    fn flags_have_the_documented_defaults() {
        let cli =
            Cli::try_parse_from(["x", "--config-file", "/etc/prometheus/prometheus.yml"]).unwrap();
        assert_eq!(cli.args.namespace, "accord-system");
        assert_eq!(cli.args.config_map, "prometheus-federation");
        assert_eq!(cli.args.prometheus_url, "http://127.0.0.1:9090");
        assert_eq!(cli.args.debounce, Duration::from_secs(1));
        assert_eq!(cli.args.targets_interval, Duration::from_secs(5));
        assert!(
            Cli::try_parse_from(["x", "--config-file", "f", "--targets-interval", "0s"]).is_err()
        );
        assert!(Cli::try_parse_from(["x"]).is_err());
    }

    #[test]
    fn the_desired_config_follows_the_config_map() {
        let mut cm = ConfigMap::default();
        assert_eq!(Desired::of(Some(&cm)), Desired::MissingKey);
        cm.data = Some(BTreeMap::from([(CONFIG_KEY.to_owned(), "a: 1".to_owned())]));
        assert_eq!(Desired::of(Some(&cm)), Desired::Config("a: 1".into()));
        assert_eq!(Desired::of(Some(&cm)).hash(), config_hash("a: 1"));
        assert_eq!(Desired::of(None), Desired::Deleted);
        assert_eq!(Desired::Deleted.hash(), config_hash(&empty_config()));
    }

    #[test]
    fn the_config_file_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("prometheus.yml");
        write_atomically(&file, "one").unwrap();
        write_atomically(&file, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            ["prometheus.yml"],
            "no temporary file is left behind"
        );
        assert!(write_atomically(&dir.path().join("missing/x.yml"), "x").is_err());
    }
}
