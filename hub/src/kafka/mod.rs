//! FederatedKafkaTopic and KafkaTopicPolicy: the pure decisions of the Kafka controller and
//! the admission webhook — which KafkaTopicPolicy rules a topic breaks ([`policy`]).

pub mod policy;

/// Kind name of federated topics in keys and object references.
pub const TOPIC_KIND: &str = "FederatedKafkaTopic";
