//! What the Kafka kinds (FederatedKafkaTopic with KafkaTopicPolicy, FederatedKafkaUser)
//! share in the hub: the admission caches both webhooks read, and the policies' refusal
//! reason and audit annotation, so that neither kind's folder imports the other's.

pub mod admission_cache;

/// `status.reason` of a refusal for breaking a `Deny` KafkaTopicPolicy (a topic's, also
/// when its name is taken as well; a user's ACLs).
pub const DENY_REASON: &str = "TOPIC_CREATION_POLICY_VIOLATION";

/// Key of the audit annotation an audited violation adds. The API server prefixes it with
/// the webhook's name, so audit logs show e.g.
/// `federatedkafkatopics.accord.io/policy-violation` (a key with a `/` of its own would be
/// dropped as malformed).
pub const AUDIT_ANNOTATION: &str = "policy-violation";
