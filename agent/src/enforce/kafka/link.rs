//! One Kafka enforcer's connection: its watch of the connection Secret (by name, in the
//! agent's namespace) and what the Secret says ([`Link`]). A change of the Secret
//! reconnects without a restart; of it only the bootstrap addresses are ever logged, never
//! a credential. The watch runs only while the enforcer has work ([`KafkaLink::watch`],
//! [`KafkaLink::close`]); every change of the connection bumps its epoch, so that what was
//! seen or probed through an older one is dropped.

use std::sync::Arc;

use accord_kafka::{Admin, KafkaConfig};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tracing::{info, warn};

use super::connection::{self, ConnectionError};
use super::{KafkaOptions, SECRETS};
use crate::enforce::watch::ResourceWatch;
use crate::enforce::{EventSink, WatchEvent};

/// The state of the connection, from the Secret.
pub enum Link {
    /// The Secret has not been listed yet.
    Waiting,
    /// No usable connection; the message says why.
    Broken(String),
    /// Connected (lazily) with this configuration.
    Ready {
        /// The connection's configuration (a probe makes a client of its own from it).
        config: Arc<KafkaConfig>,
        /// The client the enforcer's observer and applier share.
        admin: Admin,
    },
}

/// The Secret watch while it runs.
struct SecretWatch {
    watch: ResourceWatch<Secret>,
    /// Whether the watch listed the Secret yet (until then its cache says nothing).
    synced: bool,
}

/// One enforcer's connection to the member's Kafka, from the connection Secret.
pub struct KafkaLink {
    client: kube::Client,
    namespace: String,
    secret: String,
    /// Which enforcer it serves, for the logs.
    enforcer: &'static str,
    watch: Option<SecretWatch>,
    link: Link,
    epoch: u64,
}

impl KafkaLink {
    /// The connection of `enforcer` described by the Secret `options.secret` in
    /// `namespace`, read through `client`; nothing is watched until [`Self::watch`].
    pub fn new(
        client: kube::Client,
        namespace: String,
        options: &KafkaOptions,
        enforcer: &'static str,
    ) -> Self {
        Self {
            client,
            namespace,
            secret: options.secret.clone(),
            enforcer,
            watch: None,
            link: Link::Waiting,
            epoch: 0,
        }
    }

    /// The connection as the Secret last said.
    pub fn state(&self) -> &Link {
        &self.link
    }

    /// Bumped whenever the connection changes (or closes).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The admin client, when there is a connection.
    pub fn admin(&self) -> Option<Admin> {
        match &self.link {
            Link::Ready { admin, .. } => Some(admin.clone()),
            Link::Waiting | Link::Broken(_) => None,
        }
    }

    /// The connection's configuration, when there is one.
    pub fn config(&self) -> Option<Arc<KafkaConfig>> {
        match &self.link {
            Link::Ready { config, .. } => Some(config.clone()),
            Link::Waiting | Link::Broken(_) => None,
        }
    }

    /// Whether the Secret is watched.
    pub fn watching(&self) -> bool {
        self.watch.is_some()
    }

    /// Starts watching the Secret (if it is not yet); its events go to `events`, and back
    /// to [`Self::event`].
    pub fn watch(&mut self, events: &EventSink) {
        if self.watch.is_some() {
            return;
        }
        info!(
            enforcer = self.enforcer,
            secret = %format!("{}/{}", self.namespace, self.secret),
            "watching the Kafka connection Secret"
        );
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.secret));
        let watch = ResourceWatch::start_with(
            Api::namespaced(self.client.clone(), &self.namespace),
            config,
            SECRETS,
            &self.namespace,
            connection::slim_secret,
            events.clone(),
        );
        self.watch = Some(SecretWatch {
            watch,
            synced: false,
        });
    }

    /// Stops watching and forgets the connection (the epoch moves on); answers whether it
    /// was watching.
    pub fn close(&mut self) -> bool {
        self.link = Link::Waiting;
        self.epoch += 1;
        self.watch.take().is_some()
    }

    /// Takes an event of the Secret watch; answers whether the connection changed (what
    /// was seen through the old one is then to be forgotten, and everything judged again).
    pub fn event(&mut self, event: WatchEvent) -> bool {
        match event {
            WatchEvent::Synced { .. } | WatchEvent::Changed { .. } => {
                if let Some(watch) = self.watch.as_mut()
                    && matches!(event, WatchEvent::Synced { .. })
                {
                    watch.synced = true;
                }
                if !self.watch.as_ref().is_some_and(|w| w.synced) {
                    return false;
                }
                self.read_secret().is_some_and(|next| self.relink(next))
            }
            WatchEvent::Failed { message, .. } => {
                // Once listed, the cache stays valid while the watch retries.
                if self.watch.as_ref().is_none_or(|w| w.synced) {
                    return false;
                }
                self.relink(Err(ConnectionError::Watch { message }))
            }
        }
    }

    /// Sets the connection to `next`; true when it changed.
    fn relink(&mut self, next: Result<KafkaConfig, ConnectionError>) -> bool {
        let link = match next {
            Ok(config) => {
                if let Link::Ready {
                    config: current, ..
                } = &self.link
                    && **current == config
                {
                    return false;
                }
                info!(
                    enforcer = self.enforcer,
                    secret = %format!("{}/{}", self.namespace, self.secret),
                    bootstrap = %config.bootstrap.join(","),
                    "Kafka connection configured"
                );
                Link::Ready {
                    admin: Admin::new(config.clone()),
                    config: Arc::new(config),
                }
            }
            Err(e) => {
                let message = e.to_string();
                if matches!(&self.link, Link::Broken(m) if *m == message) {
                    return false;
                }
                warn!(enforcer = self.enforcer, error = %message, "no Kafka connection");
                Link::Broken(message)
            }
        };
        self.link = link;
        self.epoch += 1;
        true
    }

    /// The connection the Secret in the watch's cache describes.
    fn read_secret(&self) -> Option<Result<KafkaConfig, ConnectionError>> {
        let watch = self.watch.as_ref()?;
        let secret = watch
            .watch
            .cache
            .get(&ObjectRef::new(&self.secret).within(&self.namespace));
        Some(connection::config_of(
            &self.namespace,
            &self.secret,
            secret.as_deref(),
        ))
    }
}
