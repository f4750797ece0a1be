//! The hub's etcd keyspace (docs/architecture.md). Every key lives under one configurable
//! prefix (default `/accord/`), so several hubs — or a hub and its tests — can share an
//! etcd without seeing each other.

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "/accord/";

/// Builds the keys of one hub keyspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyspace {
    prefix: String,
}

impl Default for Keyspace {
    fn default() -> Self {
        Self::new(DEFAULT_PREFIX)
    }
}

impl Keyspace {
    /// A keyspace under `prefix`; a trailing `/` is added when missing.
    pub fn new(prefix: &str) -> Self {
        let mut prefix = prefix.to_owned();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        Self { prefix }
    }

    /// The prefix itself, ending in `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn key(&self, parts: &[&str]) -> String {
        let mut k = self.prefix.clone();
        k.push_str(&parts.join("/"));
        k
    }

    /// `clusters/<name>`: registry record of a member cluster.
    pub fn cluster(&self, name: &str) -> String {
        self.key(&["clusters", name])
    }

    /// Prefix of every registry record.
    pub fn clusters_prefix(&self) -> String {
        self.key(&["clusters", ""])
    }

    /// `connected/<name>`: which hub replica holds the cluster's stream (on that replica's lease).
    pub fn connected(&self, name: &str) -> String {
        self.key(&["connected", name])
    }

    /// Prefix of every `connected/` key.
    pub fn connected_prefix(&self) -> String {
        self.key(&["connected", ""])
    }

    /// `placements/<kind>/<ns>/<name>`: one key per placed object with every cluster's share.
    pub fn placements(&self, kind: &str, namespace: &str, name: &str) -> String {
        self.key(&["placements", kind, namespace, name])
    }

    /// Prefix of every placements key.
    pub fn placements_prefix(&self) -> String {
        self.key(&["placements", ""])
    }

    /// `status/<cluster>/<kind>/<ns>/<name>`: a cluster's last status report for a placed object.
    pub fn status(&self, cluster: &str, kind: &str, namespace: &str, name: &str) -> String {
        self.key(&["status", cluster, kind, namespace, name])
    }

    /// Prefix of every status record.
    pub fn status_prefix(&self) -> String {
        self.key(&["status", ""])
    }

    /// `locks/<kind>/<ns>/<name>`: the decision lock of a placed object.
    pub fn lock(&self, kind: &str, namespace: &str, name: &str) -> String {
        self.key(&["locks", kind, namespace, name])
    }

    /// `rollouts/<kind>/<ns>/<name>`: where a placed object's progressive rollout is.
    pub fn rollout(&self, kind: &str, namespace: &str, name: &str) -> String {
        self.key(&["rollouts", kind, namespace, name])
    }

    /// Prefix of every rollout.
    pub fn rollouts_prefix(&self) -> String {
        self.key(&["rollouts", ""])
    }

    /// `election/hub`: the leader election.
    pub fn election(&self) -> String {
        self.key(&["election", "hub"])
    }

    /// `autoscale/<ns>/<name>`: autoscaling engine state of a CrossClusterScalePolicy.
    pub fn autoscale(&self, namespace: &str, name: &str) -> String {
        self.key(&["autoscale", namespace, name])
    }

    /// Prefix of every autoscaling state.
    pub fn autoscale_prefix(&self) -> String {
        self.key(&["autoscale", ""])
    }

    /// `tokens/<id>`: a bootstrap token (hashed secret, on a TTL lease).
    pub fn token(&self, id: &str) -> String {
        self.key(&["tokens", id])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_documented_layout() {
        let k = Keyspace::default();
        assert_eq!(k.cluster("eu-west1"), "/accord/clusters/eu-west1");
        assert_eq!(k.connected("eu-west1"), "/accord/connected/eu-west1");
        assert_eq!(
            k.placements("CrossClusterScalePolicy", "default", "web"),
            "/accord/placements/CrossClusterScalePolicy/default/web"
        );
        assert_eq!(
            k.status("eu-west1", "CrossClusterScalePolicy", "default", "web"),
            "/accord/status/eu-west1/CrossClusterScalePolicy/default/web"
        );
        assert_eq!(
            k.lock("CrossClusterScalePolicy", "default", "web"),
            "/accord/locks/CrossClusterScalePolicy/default/web"
        );
        assert_eq!(k.election(), "/accord/election/hub");
        assert_eq!(
            k.autoscale("default", "web"),
            "/accord/autoscale/default/web"
        );
        assert_eq!(k.token("abc123"), "/accord/tokens/abc123");
    }

    #[test]
    fn a_prefix_without_trailing_slash_gets_one() {
        assert_eq!(Keyspace::new("/test-7").cluster("a"), "/test-7/clusters/a");
    }
}
