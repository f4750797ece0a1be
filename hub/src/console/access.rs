//! Who is asking, and what they may see: the console acts with the user's own Kubernetes
//! identity. A bearer token is checked with a TokenReview, then every read with a
//! SubjectAccessReview for that user (the verb and resource `kubectl get` would need), so
//! a person sees exactly what `kubectl get` would show them.
//!
//! Both answers are cached per token for [`REVIEW_TTL`]: a page view asks the management
//! API server nothing once its reviews are cached, and a revoked token or role stops
//! working within that time. Tokens are kept only as their SHA-256 and never logged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};

use crate::metrics::{ConsoleReviewLabel, Metrics};

/// How long a token's review and each of its access reviews are trusted.
pub const REVIEW_TTL: Duration = Duration::from_secs(30);
/// Most cached answers before expired ones are swept.
const SWEEP_ABOVE: usize = 10_000;

/// A token, known by its hash only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenKey([u8; 32]);

impl TokenKey {
    /// The key of `token`.
    pub fn of(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).into())
    }
}

/// An authenticated user, as the TokenReview named them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// User name.
    pub name: String,
    /// UID.
    pub uid: Option<String>,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// A user with the token they came with (needed again for nothing but the cache key).
#[derive(Clone, Debug)]
pub struct Who {
    /// Their token's key.
    pub key: TokenKey,
    /// Who they are.
    pub user: Arc<User>,
}

/// One question to the authorizer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ask {
    /// `get` or `list`.
    pub verb: &'static str,
    /// API group (`accord.io`, or "" for the core group).
    pub group: &'static str,
    /// Plural resource.
    pub resource: String,
    /// Namespace ("" for cluster-wide or a cluster-scoped resource).
    pub namespace: String,
    /// The object's name, for `get`.
    pub name: String,
}

impl Ask {
    /// `list` of an Accord kind's `resource` in `namespace` ("" for every namespace).
    pub fn list(resource: &str, namespace: &str) -> Self {
        Self {
            verb: "list",
            group: accord_crds::GROUP,
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            name: String::new(),
        }
    }

    /// `get` of one Accord object.
    pub fn get(resource: &str, namespace: &str, name: &str) -> Self {
        Self {
            verb: "get",
            group: accord_crds::GROUP,
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// `list` of core Events in `namespace`.
    pub fn events(namespace: &str) -> Self {
        Self {
            verb: "list",
            group: "",
            resource: "events".to_owned(),
            namespace: namespace.to_owned(),
            name: String::new(),
        }
    }
}

/// Why a token is not taken.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The API server did not accept the token.
    #[error("the token was not accepted{}", .0.as_deref().map(|e| format!(": {e}")).unwrap_or_default())]
    Rejected(Option<String>),
    /// The review could not be made.
    #[error("the Kubernetes API server could not review the request: {0}")]
    Unavailable(String),
}

/// A token's review as cached: when it was made, and the user or why the token was refused.
type Reviewed = (Instant, Result<Arc<User>, Option<String>>);

/// The reviews and their cache.
pub struct Access {
    kube: kube::Client,
    metrics: Metrics,
    users: DashMap<TokenKey, Reviewed>,
    answers: DashMap<(TokenKey, Ask), (Instant, bool)>,
}

impl Access {
    /// Reviews through `kube` (the hub's client), counted in `metrics`.
    pub fn new(kube: kube::Client, metrics: Metrics) -> Self {
        Self {
            kube,
            metrics,
            users: DashMap::new(),
            answers: DashMap::new(),
        }
    }

    /// Who `token` belongs to (a TokenReview, cached for [`REVIEW_TTL`]).
    pub async fn who(&self, token: &str) -> Result<Who, AccessError> {
        let key = TokenKey::of(token);
        if let Some(entry) = self.users.get(&key)
            && entry.0.elapsed() < REVIEW_TTL
        {
            return match &entry.1 {
                Ok(user) => Ok(Who {
                    key,
                    user: user.clone(),
                }),
                Err(e) => Err(AccessError::Rejected(e.clone())),
            };
        }
        self.count("tokenreview");
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<TokenReview>::all(self.kube.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| AccessError::Unavailable(describe(&e)))?;
        let status = answer.status.unwrap_or_default();
        let result = match (status.authenticated, status.user) {
            (Some(true), Some(u)) => Ok(Arc::new(User {
                name: u.username.unwrap_or_default(),
                uid: u.uid,
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            })),
            _ => Err(status.error),
        };
        sweep(&self.users, |v| v.0);
        self.users.insert(key, (Instant::now(), result.clone()));
        match result {
            Ok(user) => Ok(Who { key, user }),
            Err(e) => Err(AccessError::Rejected(e)),
        }
    }

    /// Whether `who` may do `ask` (a SubjectAccessReview, cached for [`REVIEW_TTL`]).
    pub async fn allowed(&self, who: &Who, ask: &Ask) -> Result<bool, AccessError> {
        let cache_key = (who.key, ask.clone());
        if let Some(entry) = self.answers.get(&cache_key)
            && entry.0.elapsed() < REVIEW_TTL
        {
            return Ok(entry.1);
        }
        self.count("subjectaccessreview");
        let user = &who.user;
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(ask.verb.to_owned()),
                    group: Some(ask.group.to_owned()),
                    resource: Some(ask.resource.clone()),
                    namespace: (!ask.namespace.is_empty()).then(|| ask.namespace.clone()),
                    name: (!ask.name.is_empty()).then(|| ask.name.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.kube.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| AccessError::Unavailable(describe(&e)))?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        sweep(&self.answers, |v| v.0);
        self.answers.insert(cache_key, (Instant::now(), allowed));
        Ok(allowed)
    }

    fn count(&self, review: &str) {
        self.metrics
            .console_reviews
            .get_or_create(&ConsoleReviewLabel {
                review: review.to_owned(),
            })
            .inc();
    }
}

/// Drops expired entries once `map` holds more than [`SWEEP_ABOVE`].
fn sweep<K: Eq + std::hash::Hash, V>(map: &DashMap<K, V>, at: impl Fn(&V) -> Instant) {
    if map.len() > SWEEP_ABOVE {
        map.retain(|_, v| at(v).elapsed() < REVIEW_TTL);
    }
}

/// A kube error in words, without the request (which holds the token).
fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => {
            let mut s = other.to_string();
            s.truncate(200);
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_known_by_its_hash_only() {
        let key = TokenKey::of("secret-token");
        assert_eq!(key, TokenKey::of("secret-token"));
        assert_ne!(key, TokenKey::of("other"));
        assert!(!format!("{key:?}").contains("secret"));
    }
}
