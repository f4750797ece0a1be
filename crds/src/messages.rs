//! Validation messages, shared by the CEL rules the API server enforces and by their
//! Rust-side counterparts in [`crate::validate`], so both say the same thing.

/// A weight is not positive.
pub const WEIGHT_POSITIVE: &str = "weight must be greater than 0";
/// A weight is above [`crate::bounds::MAX_WEIGHT`].
pub const WEIGHT_MAX: &str =
    "weight must be at most 10,000 (weights are relative: 60 and 40 split like 6,000 and 4,000)";
/// minReplicas is above maxReplicas.
pub const MIN_LE_MAX: &str = "minReplicas must not be greater than maxReplicas";
/// A replica bound is negative.
pub const REPLICAS_NON_NEGATIVE: &str = "replica counts must be 0 or more";
/// A replica bound is above [`crate::bounds::MAX_REPLICAS`].
pub const REPLICAS_MAX: &str = "replica counts must be at most 1,000,000";
/// The same cluster appears twice in a distribution.
pub const DISTRIBUTION_UNIQUE: &str =
    "each cluster may appear only once in distribution; merge the duplicate entries";
/// A distribution lists no cluster.
pub const DISTRIBUTION_NOT_EMPTY: &str =
    "distribution must list at least one cluster when there is no placement";
/// desiredReplicas is negative.
pub const DESIRED_NON_NEGATIVE: &str = "desiredReplicas must be 0 or more";
/// desiredReplicas is above [`crate::bounds::MAX_REPLICAS`].
pub const DESIRED_MAX: &str = "desiredReplicas must be at most 1,000,000";
/// Target kind is not one Accord can scale.
pub const TARGET_KIND: &str =
    "targetRef must name an apps/v1 Deployment, the only kind Accord scales today";
/// A cluster name is not a DNS-1123 label.
pub const CLUSTER_NAME: &str = "cluster names must be lowercase letters, digits and '-', start and end with a letter or digit, at most 63 characters";
/// partitions is below 1.
pub const PARTITIONS_MIN: &str = "partitions must be at least 1";
/// partitions is above [`crate::bounds::MAX_PARTITIONS`].
pub const PARTITIONS_MAX: &str =
    "partitions must be at most 10,000; a topic needing more should be split";
/// A topic policy's minPartitions is outside 1..=[`crate::bounds::MAX_PARTITIONS`].
pub const MIN_PARTITIONS_RANGE: &str =
    "minPartitions must be between 1 and 10,000 (the most partitions a topic may have)";
/// A topic policy's maxPartitions is outside 1..=[`crate::bounds::MAX_PARTITIONS`].
pub const MAX_PARTITIONS_RANGE: &str =
    "maxPartitions must be between 1 and 10,000 (the most partitions a topic may have)";
/// replicationFactor is below 1.
pub const REPLICATION_FACTOR_MIN: &str = "replicationFactor must be at least 1";
/// replicationFactor is above [`crate::bounds::MAX_REPLICATION_FACTOR`].
pub const REPLICATION_FACTOR_MAX: &str = "replicationFactor must be at most 32";
/// minPartitions is above maxPartitions.
pub const MIN_PARTITIONS_LE_MAX: &str = "minPartitions must not be greater than maxPartitions";
/// Not exactly one of clusters / clusterSelector.
pub const CLUSTERS_XOR_SELECTOR: &str = "set exactly one of clusters or clusterSelector: clusters names the members, clusterSelector picks them by label";
/// Not exactly one of namespaces / labelSelector.
pub const TENANT_XOR: &str =
    "set exactly one of tenantSelector.namespaces or tenantSelector.labelSelector";
/// A topic name Kafka would refuse.
pub const TOPIC_NAME: &str = "topicName must be 1 to 249 characters of letters, digits, '.', '_' or '-', and not '.' or '..'";
/// A topic config key or value out of bounds.
pub const TOPIC_CONFIG: &str =
    "config keys must be 1 to 255 characters and values at most 4096 characters";
/// Too many topic config keys.
pub const TOPIC_CONFIG_COUNT: &str = "config may set at most 100 keys";
/// topicNamePattern is not a regular expression.
pub const TOPIC_NAME_PATTERN: &str =
    "topicNamePattern must be a regular expression (Rust regex syntax, at most 1024 characters)";
/// match is empty.
pub const MATCH_NOT_EMPTY: &str =
    "match must list at least one series selector, e.g. '{job=\"prometheus\"}'";
/// A match entry is empty.
pub const MATCH_ENTRY_NOT_EMPTY: &str = "match entries must not be empty";
/// A duration is not in Prometheus syntax.
pub const DURATION_FORMAT: &str =
    "must be a duration such as 30s, 1m or 1h30m (units: ms, s, m, h)";
/// scrapeTimeout exceeds scrapeInterval.
pub const TIMEOUT_LE_INTERVAL: &str = "scrapeTimeout must not be longer than scrapeInterval";
/// sampleLimit is negative.
pub const SAMPLE_LIMIT_NON_NEGATIVE: &str = "sampleLimit must be 0 (no limit) or more";
/// sampleLimit is above [`crate::bounds::MAX_SAMPLE_LIMIT`].
pub const SAMPLE_LIMIT_MAX: &str = "sampleLimit must be at most 10,000,000 samples (0: no limit)";
/// ewmaAlpha is outside (0, 1].
pub const EWMA_ALPHA_RANGE: &str = "ewmaAlpha must be greater than 0 and at most 1";
/// targetPerReplica is not positive.
pub const TARGET_PER_REPLICA_POSITIVE: &str = "targetPerReplica must be greater than 0";
/// A ratio or factor is negative.
pub const NON_NEGATIVE_NUMBER: &str = "must be 0 or more";
/// A period in seconds is above [`crate::bounds::MAX_SECONDS`].
pub const SECONDS_MAX: &str = "must be at most 86,400 seconds (one day)";
/// debounceMillis is above [`crate::bounds::MAX_DEBOUNCE_MILLIS`].
pub const DEBOUNCE_MAX: &str =
    "must be at most 600,000 milliseconds (ten minutes); use cooldownSeconds for longer pauses";
/// maxScaleOperationsPerMinute is above [`crate::bounds::MAX_SCALE_OPERATIONS_PER_MINUTE`].
pub const SCALE_OPERATIONS_MAX: &str = "must be at most 60 (one scale operation a second)";
/// failureThreshold is above [`crate::bounds::MAX_FAILURE_THRESHOLD`].
pub const FAILURE_THRESHOLD_MAX: &str = "must be at most 100";
/// A threshold multiplier is above [`crate::bounds::MAX_FACTOR`].
pub const FACTOR_MAX: &str = "must be at most 10";
/// A count or period that must be positive is not.
pub const POSITIVE_INTEGER: &str = "must be at least 1";
/// A URL is not http(s).
pub const HTTP_URL: &str = "must be an http:// or https:// URL";
/// A ManagedCluster's federationEndpoint is not http(s).
pub const FEDERATION_ENDPOINT: &str = "federationEndpoint must be an http:// or https:// base URL of the cluster's federation Prometheus (the global tier scrapes <federationEndpoint>/federate)";
/// A PromQL query is empty.
pub const QUERY_NOT_EMPTY: &str = "query must not be empty";
/// tolerancePercent is above [`crate::bounds::MAX_TOLERANCE_PERCENT`].
pub const TOLERANCE_PERCENT_MAX: &str =
    "tolerancePercent must be at most 50; a wider band would hold the count while the load halves";
/// Autoscaling poll interval above its cap.
pub const POLL_SECONDS_MAX: &str = "pollSeconds must be at most 3,600 (one hour)";
/// A FederatedResource manifest of kind Secret.
pub const SECRET_MANIFEST: &str = "Secrets are not accepted in manifests: their data would rest in the hub's etcd in the clear; name them in secretRefs (Secrets of this namespace on the management cluster)";
/// A secretRefs entry without a name.
pub const SECRET_REF_NAME: &str = "every secretRefs entry needs a name";
/// The same Secret twice in secretRefs.
pub const SECRET_REF_DUPLICATE: &str = "secretRefs names the same Secret twice";
/// A manifest without a name.
pub const MANIFEST_NAME: &str = "every manifest needs metadata.name";
/// A manifest without apiVersion or kind.
pub const MANIFEST_TYPE: &str = "every manifest needs apiVersion and kind";
/// Two manifests for the same object.
pub const MANIFEST_DUPLICATE: &str =
    "two manifests name the same object (kind, namespace and name); keep one";
/// Too few or too many manifests.
pub const MANIFESTS_COUNT: &str = "manifests must list 1 to 100 objects";
/// An override without operations.
pub const PATCH_EMPTY: &str = "jsonPatch must list at least one operation";
/// A JSON patch path that is not a JSON pointer.
pub const JSON_POINTER: &str =
    "path must be a JSON pointer: empty or starting with '/', e.g. /spec/replicas";
/// add/replace/test without a value.
pub const PATCH_VALUE: &str = "add, replace and test operations need a value";
/// move/copy without from.
pub const PATCH_FROM: &str = "move and copy operations need from";
/// A feedback path that is not JSONPath.
pub const FEEDBACK_PATH: &str =
    "jsonPath must be a JSONPath starting with '.' or '$', e.g. .status.readyReplicas";
/// A FederatedResource spec over its size limit.
pub const SPEC_TOO_LARGE: &str = "spec must be at most 512 KiB (etcd's request limit is 1.5 MiB); split the manifests over several FederatedResources";
/// A FederatedKafkaUser's username is empty or holds a control character.
pub const USERNAME: &str = "userName must be 1 to 255 characters without control characters (it is the SCRAM user name and the principal User:<username>)";
/// SCRAM iterations outside Kafka's limits.
pub const ITERATIONS_RANGE: &str =
    "iterations must be 4,096 to 16,384 (the SCRAM iteration counts Kafka accepts)";
/// A passwordSecretRef name that is not a Secret name.
pub const PASSWORD_SECRET_NAME: &str = "passwordSecretRef.name must be a Secret name: lowercase letters, digits, '-' and '.', at most 253 characters";
/// A passwordSecretRef key that is not a Secret data key.
pub const PASSWORD_SECRET_KEY: &str = "passwordSecretRef.key must be a Secret data key: letters, digits, '-', '_' and '.', at most 253 characters";
/// An ACL's resource name is empty.
pub const ACL_RESOURCE_NAME: &str = "resource.name must be 1 to 255 characters";
/// A cluster ACL names another resource than Kafka's only cluster resource.
pub const ACL_CLUSTER_NAME: &str =
    "the resource.name of a cluster ACL must be kafka-cluster (Kafka's only cluster resource)";
/// A topic ACL's name Kafka could never match.
pub const ACL_TOPIC_NAME: &str = "the resource.name of a topic ACL must be * or 1 to 249 letters, digits, '.', '_' or '-' (what Kafka's topic names are made of)";
/// An ACL without operations.
pub const ACL_OPERATIONS_COUNT: &str = "operations must list 1 to 13 of Kafka's operations";
/// An ACL naming an operation twice.
pub const ACL_OPERATIONS_UNIQUE: &str = "operations must not name an operation twice";
/// An ACL host that is not `*` or an IP address.
pub const ACL_HOST: &str =
    "host must be * (any host) or an IP address (Kafka matches ACL hosts by address only)";
/// A byte-rate quota out of bounds.
pub const BYTE_RATE_RANGE: &str =
    "producerByteRate and consumerByteRate must be 1 to 1,000,000,000,000 bytes a second";
/// A request-percentage quota out of bounds.
pub const REQUEST_PERCENTAGE_RANGE: &str = "requestPercentage must be greater than 0 and at most 100,000 (100 per request handler or network thread)";
/// A controller-mutation-rate quota out of bounds.
pub const CONTROLLER_MUTATION_RATE_RANGE: &str = "controllerMutationRate must be greater than 0 and at most 1,000,000 partition mutations a second";
/// More ACL entries than a FederatedKafkaUser may list.
pub const USER_ACLS_COUNT: &str = "acls may list at most 100 entries";

/// A toleration with `operator: Exists` and a `value`.
pub const TOLERATION_EXISTS_VALUE: &str =
    "a toleration with operator Exists matches any value: leave value out";
/// A toleration without a key that is not `Exists`.
pub const TOLERATION_EMPTY_KEY: &str =
    "a toleration needs a key unless its operator is Exists (which then tolerates every taint)";
/// `tolerationSeconds` without `effect: NoExecute`.
pub const TOLERATION_SECONDS_EFFECT: &str = "tolerationSeconds applies only to effect NoExecute";
/// `tolerationSeconds` out of range.
pub const TOLERATION_SECONDS_RANGE: &str = "tolerationSeconds must be 0 to 86,400";
/// Too many tolerations.
pub const TOLERATIONS_COUNT: &str = "tolerations may list at most 50 entries";
/// Too many preference groups.
pub const PREFERENCES_COUNT: &str = "preferences may list at most 10 groups";
/// `numberOfClusters` out of range.
pub const NUMBER_OF_CLUSTERS_RANGE: &str = "numberOfClusters must be 1 to 10,000";
/// `minGroups` or `maxGroups` out of range.
pub const SPREAD_GROUPS_RANGE: &str = "minGroups and maxGroups must be 1 to 1,000";
/// `maxSkew` out of range.
pub const SPREAD_MAX_SKEW_RANGE: &str = "spread.maxSkew must be 1 to 1,000,000";
/// `maxSkew` on a kind that places whole copies.
pub const SPREAD_MAX_SKEW_DIVIDED_ONLY: &str = "spread.maxSkew applies to divided replicas \
     (CrossClusterScalePolicy); this kind places a whole copy in every chosen cluster";
/// `weighting: AvailableCapacity` with `maxSkew`.
pub const WEIGHTING_NO_MAX_SKEW: &str = "weighting AvailableCapacity cannot be combined with \
     placement.spread.maxSkew; divide by capacity or hold the skew, not both";
/// `minGroups` above `numberOfClusters`.
pub const SPREAD_MIN_ABOVE_COUNT: &str =
    "spread.minGroups must not be greater than numberOfClusters (each group needs a cluster)";
/// `minGroups` above `maxGroups`.
pub const SPREAD_MIN_ABOVE_MAX: &str = "spread.minGroups must not be greater than spread.maxGroups";
/// `spec.rollout.groups` sets both `byLabel` and `ordered`, or neither.
pub const ROLLOUT_GROUPS_XOR: &str = "rollout.groups takes exactly one of byLabel and ordered";
/// `ProgressivePerGroup` without groups.
pub const ROLLOUT_PER_GROUP_NEEDS_GROUPS: &str =
    "strategy ProgressivePerGroup needs rollout.groups";
/// Two rollout groups of one name.
pub const ROLLOUT_GROUP_NAMES_UNIQUE: &str = "rollout group names must be unique";
/// `maxConcurrency` out of range.
pub const ROLLOUT_CONCURRENCY: &str =
    "maxConcurrency must be a count from 1 to 10,000 or a percent from 1% to 100%";
/// `maxFailures` out of range.
pub const ROLLOUT_FAILURES: &str =
    "maxFailures must be a count from 0 to 10,000 or a percent from 0% to 100%";
/// `progressDeadline` of zero.
pub const ROLLOUT_DEADLINE_POSITIVE: &str = "progressDeadline must be longer than 0";
