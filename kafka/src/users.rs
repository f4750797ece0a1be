//! Kafka users kept alike across clusters: SCRAM credentials, ACLs and client quotas, each
//! read or changed with one batched request (DescribeUserScramCredentials,
//! AlterUserScramCredentials, DescribeAcls, CreateAcls, DeleteAcls, DescribeClientQuotas,
//! AlterClientQuotas) sent to any broker, which forwards changes to the controller. Kafka's
//! authorizer checks an ACL on the cluster for each of them; a refusal names the missing one.
//!
//! The wire is translated at the edge by pure functions (one per request and per answer),
//! so every shape is tested without a broker; codes Kafka may add later are skipped, never
//! guessed at.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use kafka_protocol::messages::alter_client_quotas_request::{
    EntityData as AlterEntity, EntryData as AlterEntry, OpData,
};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest,
    DeleteAclsResponse, DescribeAclsRequest, DescribeAclsResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::admin::{Admin, ItemResults, complete, left_out, retriable, unique};
use crate::config::SaslMechanism;
use crate::error::{ClusterApi, ItemError, KafkaError, RESOURCE_NOT_FOUND};

/// Kafka's code for "any" in ACL filters (resource type, pattern type, operation,
/// permission).
const ANY: i8 = 1;
/// The client-quota entity type of a user principal.
const USER_ENTITY: &str = "user";
/// DescribeClientQuotas match type: any entity with a name (not the default entity).
const MATCH_SPECIFIED: i8 = 2;

/// A name [`FromStr`] does not know for one of Kafka's ACL or SCRAM enums.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not a Kafka {kind} (expected one of {expected})")]
pub struct UnknownName {
    /// What was being parsed, e.g. "ACL operation".
    pub kind: &'static str,
    /// The text given.
    pub given: String,
    /// Kafka's names, comma separated.
    pub expected: String,
}

/// Whether `given` spells Kafka's `name`, ignoring case, `_` and `-`: Kafka's own tools
/// print `TRANSACTIONAL_ID` in some places and take `TransactionalId` in others.
fn same_name(name: &str, given: &str) -> bool {
    let normal = |s: &str| {
        s.chars()
            .filter(|c| !matches!(c, '_' | '-'))
            .map(|c| c.to_ascii_lowercase())
            .collect::<String>()
    };
    normal(name) == normal(given)
}

/// An enum of Kafka wire codes with `code`, `from_code`, `Display` (Kafka's name) and
/// `FromStr` (that name, leniently), so the five enums below cannot drift apart.
macro_rules! kafka_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($kind:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $code:literal => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in Kafka's code order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// Kafka's code on the wire.
            pub fn code(self) -> i8 {
                match self {
                    $(Self::$variant => $code,)+
                }
            }

            /// The value of a wire code; `None` for Kafka's UNKNOWN and ANY and for codes
            /// this client does not know.
            pub fn from_code(code: i8) -> Option<Self> {
                match code {
                    $($code => Some(Self::$variant),)+
                    _ => None,
                }
            }

            /// Kafka's name for it.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;

            /// Kafka's name, ignoring case, `_` and `-`.
            fn from_str(given: &str) -> Result<Self, UnknownName> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|value| same_name(value.name(), given))
                    .ok_or_else(|| UnknownName {
                        kind: $kind,
                        given: given.to_string(),
                        expected: Self::ALL
                            .iter()
                            .map(|value| value.name())
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
            }
        }
    };
}

kafka_enum! {
    /// The hash of a SCRAM credential (Kafka's `ScramMechanism`).
    pub enum ScramMechanism ("SCRAM mechanism") {
        /// SCRAM-SHA-256.
        Sha256 = 1 => "SCRAM-SHA-256",
        /// SCRAM-SHA-512.
        Sha512 = 2 => "SCRAM-SHA-512",
    }
}

kafka_enum! {
    /// What an ACL is on (Kafka's `ResourceType`).
    pub enum AclResourceType ("ACL resource type") {
        /// A topic.
        Topic = 2 => "Topic",
        /// A consumer group.
        Group = 3 => "Group",
        /// The cluster itself (named `kafka-cluster`).
        Cluster = 4 => "Cluster",
        /// A transactional id.
        TransactionalId = 5 => "TransactionalId",
        /// A delegation token.
        DelegationToken = 6 => "DelegationToken",
        /// A user principal (for delegation tokens on behalf of it).
        User = 7 => "User",
    }
}

kafka_enum! {
    /// How an ACL's resource name matches (Kafka's `PatternType`).
    pub enum AclPatternType ("ACL pattern type") {
        /// The exact name (or `*` for every resource).
        Literal = 3 => "Literal",
        /// Every name starting with it.
        Prefixed = 4 => "Prefixed",
    }
}

kafka_enum! {
    /// What an ACL allows or denies (Kafka's `AclOperation`).
    pub enum AclOperation ("ACL operation") {
        /// Every operation.
        All = 2 => "All",
        /// Read.
        Read = 3 => "Read",
        /// Write.
        Write = 4 => "Write",
        /// Create.
        Create = 5 => "Create",
        /// Delete.
        Delete = 6 => "Delete",
        /// Alter.
        Alter = 7 => "Alter",
        /// Describe.
        Describe = 8 => "Describe",
        /// Cluster actions (between brokers).
        ClusterAction = 9 => "ClusterAction",
        /// Describe configs.
        DescribeConfigs = 10 => "DescribeConfigs",
        /// Alter configs.
        AlterConfigs = 11 => "AlterConfigs",
        /// Idempotent writes.
        IdempotentWrite = 12 => "IdempotentWrite",
        /// Create delegation tokens.
        CreateTokens = 13 => "CreateTokens",
        /// Describe delegation tokens.
        DescribeTokens = 14 => "DescribeTokens",
    }
}

kafka_enum! {
    /// Whether an ACL allows or denies (Kafka's `AclPermissionType`).
    pub enum AclPermission ("ACL permission") {
        /// Denies (wins over any allow).
        Deny = 2 => "Deny",
        /// Allows.
        Allow = 3 => "Allow",
    }
}

impl From<ScramMechanism> for SaslMechanism {
    fn from(mechanism: ScramMechanism) -> Self {
        match mechanism {
            ScramMechanism::Sha256 => Self::ScramSha256,
            ScramMechanism::Sha512 => Self::ScramSha512,
        }
    }
}

impl From<SaslMechanism> for ScramMechanism {
    fn from(mechanism: SaslMechanism) -> Self {
        match mechanism {
            SaslMechanism::ScramSha256 => Self::Sha256,
            SaslMechanism::ScramSha512 => Self::Sha512,
        }
    }
}

/// One SCRAM credential of a user, as Kafka describes it (it never gives out the secrets,
/// so a changed password cannot be seen, only a changed mechanism or iteration count).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScramCredentialInfo {
    /// The credential's hash.
    pub mechanism: ScramMechanism,
    /// Its PBKDF2 iteration count.
    pub iterations: i32,
}

/// A SCRAM credential to create or replace. The broker stores keys derived from the salted
/// password ([`crate::salted_password`]), so the password itself is never sent. Its `Debug`
/// shows neither the salt nor the salted password.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScramUpsertion {
    /// The user name (the principal is `User:<user>`).
    pub user: String,
    /// The credential's hash.
    pub mechanism: ScramMechanism,
    /// The PBKDF2 iteration count (Kafka takes 4096..=16384).
    pub iterations: i32,
    /// The random salt.
    pub salt: Vec<u8>,
    /// `Hi(password, salt, iterations)`.
    pub salted_password: Vec<u8>,
}

impl fmt::Debug for ScramUpsertion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramUpsertion")
            .field("user", &self.user)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .field("salt", &"<redacted>")
            .field("salted_password", &"<redacted>")
            .finish()
    }
}

/// A SCRAM credential to delete.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScramDeletion {
    /// The user name.
    pub user: String,
    /// Which of the user's credentials.
    pub mechanism: ScramMechanism,
}

/// One ACL: `principal` from `host` is allowed (or denied) `operation` on the resources
/// `resource_name` names under `pattern_type`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    /// What kind of resource.
    pub resource_type: AclResourceType,
    /// The resource's name, or prefix, or `*`.
    pub resource_name: String,
    /// How the name matches.
    pub pattern_type: AclPatternType,
    /// The principal, e.g. `User:alice`.
    pub principal: String,
    /// The client host, `*` for any.
    pub host: String,
    /// The operation.
    pub operation: AclOperation,
    /// Allow or deny.
    pub permission: AclPermission,
}

/// Which ACLs [`Admin::describe_acls`] returns: every field not given matches anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclFilter {
    /// Only this principal's ACLs (e.g. `User:alice`); `None` for every principal's.
    pub principal: Option<String>,
}

/// A change of one user's client quotas (keys such as `producer_byte_rate`,
/// `consumer_byte_rate`, `request_percentage`, `controller_mutation_rate`). Keys named in
/// neither list keep their values.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaAlteration {
    /// The user name (the entity `user=<user>`).
    pub user: String,
    /// Keys to set, with their values.
    pub set: BTreeMap<String, f64>,
    /// Keys to remove (back to the defaults).
    pub remove: Vec<String>,
}

impl QuotaAlteration {
    fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }
}

impl Admin {
    /// The SCRAM credentials of `users` (one request), or of every user that has one for
    /// `None`. Users without a credential are absent from the map, as are credentials of
    /// mechanisms this client does not know.
    pub async fn describe_user_scram_credentials(
        &self,
        users: Option<&[String]>,
    ) -> Result<BTreeMap<String, Vec<ScramCredentialInfo>>, KafkaError> {
        let users = users.map(unique);
        // Kafka reads an empty list as "every user".
        if users.as_ref().is_some_and(Vec::is_empty) {
            return Ok(BTreeMap::new());
        }
        let request = describe_scram_request(users.as_deref());
        let (_, response) = self.call(None, |_| request.clone()).await?;
        scram_credentials(response)
    }

    /// Creates or replaces, and deletes, SCRAM credentials (one request); results keyed by
    /// user name. Kafka alters a user at most once per request: a user named twice (in
    /// either list) fails with DUPLICATE_RESOURCE. Deleting a credential the user lacks
    /// fails with RESOURCE_NOT_FOUND ([`ItemError::is_resource_not_found`]).
    pub async fn alter_user_scram_credentials(
        &self,
        upsertions: &[ScramUpsertion],
        deletions: &[ScramDeletion],
    ) -> Result<ItemResults<()>, KafkaError> {
        let upsertions: Vec<&ScramUpsertion> = upsertions.iter().collect();
        let deletions: Vec<&ScramDeletion> = deletions.iter().collect();
        let (addr, mut results) = self.alter_scram_once(&upsertions, &deletions, None).await?;
        let retry = retriable(&results);
        if !retry.is_empty() {
            let upsertions: Vec<&ScramUpsertion> = upsertions
                .iter()
                .copied()
                .filter(|u| retry.contains(&u.user.as_str()))
                .collect();
            let deletions: Vec<&ScramDeletion> = deletions
                .iter()
                .copied()
                .filter(|d| retry.contains(&d.user.as_str()))
                .collect();
            if let Ok((_, again)) = self
                .alter_scram_once(&upsertions, &deletions, Some(&addr))
                .await
            {
                results.extend(again);
            }
        }
        Ok(results)
    }

    async fn alter_scram_once(
        &self,
        upsertions: &[&ScramUpsertion],
        deletions: &[&ScramDeletion],
        exclude: Option<&str>,
    ) -> Result<(String, ItemResults<()>), KafkaError> {
        if upsertions.is_empty() && deletions.is_empty() {
            return Ok((String::new(), BTreeMap::new()));
        }
        let request = alter_scram_request(upsertions, deletions);
        let (addr, response) = self.call(exclude, |_| request.clone()).await?;
        let names: Vec<&str> = upsertions
            .iter()
            .map(|u| u.user.as_str())
            .chain(deletions.iter().map(|d| d.user.as_str()))
            .collect();
        Ok((addr, complete(&names, scram_alter_results(response))))
    }

    /// The ACLs `filter` matches (one request), skipping any whose codes this client does
    /// not know.
    pub async fn describe_acls(&self, filter: &AclFilter) -> Result<Vec<AclBinding>, KafkaError> {
        let request = describe_acls_request(filter);
        let (_, response) = self.call(None, |_| request.clone()).await?;
        acl_bindings(response)
    }

    /// Creates ACLs (one request); one result per binding, in the same order. Creating an
    /// ACL that exists already succeeds.
    pub async fn create_acls(
        &self,
        bindings: &[AclBinding],
    ) -> Result<Vec<Result<(), ItemError>>, KafkaError> {
        let all: Vec<usize> = (0..bindings.len()).collect();
        let (addr, mut results) = self.create_acls_once(bindings, &all, None).await?;
        let retry = retriable_indexes(&results);
        if !retry.is_empty()
            && let Ok((_, again)) = self.create_acls_once(bindings, &retry, Some(&addr)).await
        {
            for (index, result) in retry.into_iter().zip(again) {
                results[index] = result;
            }
        }
        Ok(results)
    }

    async fn create_acls_once(
        &self,
        bindings: &[AclBinding],
        indexes: &[usize],
        exclude: Option<&str>,
    ) -> Result<(String, Vec<Result<(), ItemError>>), KafkaError> {
        if indexes.is_empty() {
            return Ok((String::new(), Vec::new()));
        }
        let creations: Vec<AclCreation> = indexes
            .iter()
            .map(|i| acl_creation(&bindings[*i]))
            .collect();
        let (addr, response) = self
            .call(exclude, |_| {
                CreateAclsRequest::default().with_creations(creations.clone())
            })
            .await?;
        Ok((addr, creation_results(response, indexes.len())))
    }

    /// Deletes ACLs (one request), each binding used as a filter matching exactly itself;
    /// one result per binding, in the same order: how many ACLs it deleted (0 when it did
    /// not exist).
    pub async fn delete_acls(
        &self,
        bindings: &[AclBinding],
    ) -> Result<Vec<Result<usize, ItemError>>, KafkaError> {
        let all: Vec<usize> = (0..bindings.len()).collect();
        let (addr, mut results) = self.delete_acls_once(bindings, &all, None).await?;
        let retry = retriable_indexes(&results);
        if !retry.is_empty()
            && let Ok((_, again)) = self.delete_acls_once(bindings, &retry, Some(&addr)).await
        {
            for (index, result) in retry.into_iter().zip(again) {
                results[index] = result;
            }
        }
        Ok(results)
    }

    async fn delete_acls_once(
        &self,
        bindings: &[AclBinding],
        indexes: &[usize],
        exclude: Option<&str>,
    ) -> Result<(String, Vec<Result<usize, ItemError>>), KafkaError> {
        if indexes.is_empty() {
            return Ok((String::new(), Vec::new()));
        }
        let filters: Vec<DeleteAclsFilter> = indexes
            .iter()
            .map(|i| exact_filter(&bindings[*i]))
            .collect();
        let (addr, response) = self
            .call(exclude, |_| {
                DeleteAclsRequest::default().with_filters(filters.clone())
            })
            .await?;
        Ok((addr, deletion_results(response, indexes.len())))
    }

    /// The client quotas of user entities (`user=<name>`; neither the default user nor
    /// user and client-id pairs) in one request: of `users`, or of every user that has
    /// quotas for `None`. Users without quotas are absent. Kafka matches one name or every
    /// name per request, so for a list it is asked for every user and the answer filtered.
    pub async fn describe_client_quotas(
        &self,
        users: Option<&[String]>,
    ) -> Result<BTreeMap<String, BTreeMap<String, f64>>, KafkaError> {
        let wanted: Option<BTreeSet<&str>> =
            users.map(|users| users.iter().map(String::as_str).collect());
        if wanted.as_ref().is_some_and(BTreeSet::is_empty) {
            return Ok(BTreeMap::new());
        }
        let request = describe_quotas_request();
        let (_, response) = self.call(None, |_| request.clone()).await?;
        user_quotas(response, wanted.as_ref())
    }

    /// Changes users' client quotas key by key (one request); results keyed by user name.
    /// A user named twice is sent once (the first); a user with nothing to change succeeds
    /// without being sent.
    pub async fn alter_client_quotas(
        &self,
        alterations: &[QuotaAlteration],
    ) -> Result<ItemResults<()>, KafkaError> {
        let mut seen = BTreeSet::new();
        let mut results = BTreeMap::new();
        let mut send = Vec::new();
        for alteration in alterations {
            if !seen.insert(alteration.user.as_str()) {
                continue;
            }
            if alteration.is_empty() {
                results.insert(alteration.user.clone(), Ok(()));
            } else {
                send.push(alteration);
            }
        }
        let (addr, sent) = self.alter_quotas_once(&send, None).await?;
        results.extend(sent);
        let retry = retriable(&results);
        if !retry.is_empty() {
            let again: Vec<&QuotaAlteration> = send
                .iter()
                .copied()
                .filter(|a| retry.contains(&a.user.as_str()))
                .collect();
            if let Ok((_, again)) = self.alter_quotas_once(&again, Some(&addr)).await {
                results.extend(again);
            }
        }
        Ok(results)
    }

    async fn alter_quotas_once(
        &self,
        alterations: &[&QuotaAlteration],
        exclude: Option<&str>,
    ) -> Result<(String, ItemResults<()>), KafkaError> {
        if alterations.is_empty() {
            return Ok((String::new(), BTreeMap::new()));
        }
        let entries: Vec<AlterEntry> = alterations.iter().map(|a| quota_entry(a)).collect();
        let (addr, response) = self
            .call(exclude, |_| {
                AlterClientQuotasRequest::default()
                    .with_entries(entries.clone())
                    .with_validate_only(false)
            })
            .await?;
        let names: Vec<&str> = alterations.iter().map(|a| a.user.as_str()).collect();
        Ok((addr, complete(&names, quota_alter_results(response))))
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn message_of(message: Option<StrBytes>) -> Option<String> {
    message.map(|m| m.to_string())
}

fn item_result(api: ClusterApi, code: i16, message: Option<StrBytes>) -> Result<(), ItemError> {
    match ItemError::from_api_code(api, code, message_of(message)) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Positions whose error is worth one more try on another broker.
fn retriable_indexes<T>(results: &[Result<T, ItemError>]) -> Vec<usize> {
    results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.as_ref().is_err_and(ItemError::is_retriable))
        .map(|(i, _)| i)
        .collect()
}

/// Every user is asked for with an empty list, never with null (which Kafka reads the
/// same): Kafka 4.1 never answers a null list from a user the authorizer refuses, where
/// it answers an empty one with CLUSTER_AUTHORIZATION_FAILED.
fn describe_scram_request(users: Option<&[&str]>) -> DescribeUserScramCredentialsRequest {
    let users = users.unwrap_or_default();
    DescribeUserScramCredentialsRequest::default().with_users(Some(
        users
            .iter()
            .map(|u| UserName::default().with_name(str_bytes(u)))
            .collect(),
    ))
}

/// The credentials in a DescribeUserScramCredentials answer. A user without credentials
/// (RESOURCE_NOT_FOUND) is absent; any other error of a user fails the whole answer, since
/// the map has no place for it and leaving the user out would read as "no credential".
fn scram_credentials(
    response: DescribeUserScramCredentialsResponse,
) -> Result<BTreeMap<String, Vec<ScramCredentialInfo>>, KafkaError> {
    const API: ClusterApi = ClusterApi::DescribeUserScramCredentials;
    if let Some(e) =
        KafkaError::from_api_code(API, response.error_code, message_of(response.error_message))
    {
        return Err(e);
    }
    let mut credentials = BTreeMap::new();
    for result in response.results {
        let user = result.user.to_string();
        match result.error_code {
            0 => {}
            RESOURCE_NOT_FOUND => continue,
            code => {
                let detail = message_of(result.error_message).unwrap_or_default();
                let message = Some(format!("user {user:?}: {detail}"));
                if let Some(e) = KafkaError::from_api_code(API, code, message) {
                    return Err(e);
                }
            }
        }
        let infos: Vec<ScramCredentialInfo> = result
            .credential_infos
            .iter()
            .filter_map(|info| match ScramMechanism::from_code(info.mechanism) {
                Some(mechanism) => Some(ScramCredentialInfo {
                    mechanism,
                    iterations: info.iterations,
                }),
                None => {
                    tracing::debug!(
                        user,
                        mechanism = info.mechanism,
                        "skipping a SCRAM credential of an unknown mechanism"
                    );
                    None
                }
            })
            .collect();
        if !infos.is_empty() {
            credentials.insert(user, infos);
        }
    }
    Ok(credentials)
}

fn alter_scram_request(
    upsertions: &[&ScramUpsertion],
    deletions: &[&ScramDeletion],
) -> AlterUserScramCredentialsRequest {
    AlterUserScramCredentialsRequest::default()
        .with_deletions(
            deletions
                .iter()
                .map(|d| {
                    ScramCredentialDeletion::default()
                        .with_name(str_bytes(&d.user))
                        .with_mechanism(d.mechanism.code())
                })
                .collect(),
        )
        .with_upsertions(
            upsertions
                .iter()
                .map(|u| {
                    ScramCredentialUpsertion::default()
                        .with_name(str_bytes(&u.user))
                        .with_mechanism(u.mechanism.code())
                        .with_iterations(u.iterations)
                        .with_salt(Bytes::copy_from_slice(&u.salt))
                        .with_salted_password(Bytes::copy_from_slice(&u.salted_password))
                })
                .collect(),
        )
}

fn scram_alter_results(response: AlterUserScramCredentialsResponse) -> ItemResults<()> {
    response
        .results
        .into_iter()
        .map(|r| {
            (
                r.user.to_string(),
                item_result(
                    ClusterApi::AlterUserScramCredentials,
                    r.error_code,
                    r.error_message,
                ),
            )
        })
        .collect()
}

fn describe_acls_request(filter: &AclFilter) -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_type_filter(ANY)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(ANY)
        .with_principal_filter(filter.principal.as_deref().map(str_bytes))
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

/// The ACLs in a DescribeAcls answer; one whose codes this client does not know (a newer
/// Kafka's resource type, say) is skipped.
fn acl_bindings(response: DescribeAclsResponse) -> Result<Vec<AclBinding>, KafkaError> {
    if let Some(e) = KafkaError::from_api_code(
        ClusterApi::DescribeAcls,
        response.error_code,
        message_of(response.error_message),
    ) {
        return Err(e);
    }
    let mut bindings = Vec::new();
    for resource in response.resources {
        for acl in resource.acls {
            let known = (
                AclResourceType::from_code(resource.resource_type),
                AclPatternType::from_code(resource.pattern_type),
                AclOperation::from_code(acl.operation),
                AclPermission::from_code(acl.permission_type),
            );
            let (Some(resource_type), Some(pattern_type), Some(operation), Some(permission)) =
                known
            else {
                tracing::debug!(
                    resource_type = resource.resource_type,
                    pattern_type = resource.pattern_type,
                    operation = acl.operation,
                    permission = acl.permission_type,
                    "skipping an ACL with a code this client does not know"
                );
                continue;
            };
            bindings.push(AclBinding {
                resource_type,
                resource_name: resource.resource_name.to_string(),
                pattern_type,
                principal: acl.principal.to_string(),
                host: acl.host.to_string(),
                operation,
                permission,
            });
        }
    }
    Ok(bindings)
}

fn acl_creation(binding: &AclBinding) -> AclCreation {
    AclCreation::default()
        .with_resource_type(binding.resource_type.code())
        .with_resource_name(str_bytes(&binding.resource_name))
        .with_resource_pattern_type(binding.pattern_type.code())
        .with_principal(str_bytes(&binding.principal))
        .with_host(str_bytes(&binding.host))
        .with_operation(binding.operation.code())
        .with_permission_type(binding.permission.code())
}

/// One result per creation, in order; creations the answer left out fail.
fn creation_results(response: CreateAclsResponse, sent: usize) -> Vec<Result<(), ItemError>> {
    let mut results: Vec<Result<(), ItemError>> = response
        .results
        .into_iter()
        .take(sent)
        .map(|r| item_result(ClusterApi::CreateAcls, r.error_code, r.error_message))
        .collect();
    results.resize_with(sent, || Err(left_out()));
    results
}

/// A DeleteAcls filter that matches `binding` and nothing else: every field exact (a
/// literal `*` matches only the literal `*` ACL, not every ACL).
fn exact_filter(binding: &AclBinding) -> DeleteAclsFilter {
    DeleteAclsFilter::default()
        .with_resource_type_filter(binding.resource_type.code())
        .with_resource_name_filter(Some(str_bytes(&binding.resource_name)))
        .with_pattern_type_filter(binding.pattern_type.code())
        .with_principal_filter(Some(str_bytes(&binding.principal)))
        .with_host_filter(Some(str_bytes(&binding.host)))
        .with_operation(binding.operation.code())
        .with_permission_type(binding.permission.code())
}

/// How many ACLs each filter deleted, in order; a filter fails with its own error or the
/// first of its matching ACLs' errors, and filters the answer left out fail.
fn deletion_results(response: DeleteAclsResponse, sent: usize) -> Vec<Result<usize, ItemError>> {
    const API: ClusterApi = ClusterApi::DeleteAcls;
    let mut results: Vec<Result<usize, ItemError>> = response
        .filter_results
        .into_iter()
        .take(sent)
        .map(|r| {
            item_result(API, r.error_code, r.error_message)?;
            for acl in &r.matching_acls {
                item_result(API, acl.error_code, acl.error_message.clone())?;
            }
            Ok(r.matching_acls.len())
        })
        .collect();
    results.resize_with(sent, || Err(left_out()));
    results
}

/// Every user entity that has quotas, alone (`strict`: no user and client-id pairs).
fn describe_quotas_request() -> DescribeClientQuotasRequest {
    DescribeClientQuotasRequest::default()
        .with_components(vec![
            ComponentData::default()
                .with_entity_type(str_bytes(USER_ENTITY))
                .with_match_type(MATCH_SPECIFIED)
                .with_match(None),
        ])
        .with_strict(true)
}

/// The quotas of the user entities in a DescribeClientQuotas answer (of `wanted` only, if
/// given); entities of other shapes are ignored.
fn user_quotas(
    response: DescribeClientQuotasResponse,
    wanted: Option<&BTreeSet<&str>>,
) -> Result<BTreeMap<String, BTreeMap<String, f64>>, KafkaError> {
    if let Some(e) = KafkaError::from_api_code(
        ClusterApi::DescribeClientQuotas,
        response.error_code,
        message_of(response.error_message),
    ) {
        return Err(e);
    }
    let mut quotas = BTreeMap::new();
    for entry in response.entries.unwrap_or_default() {
        let [entity] = entry.entity.as_slice() else {
            continue;
        };
        let Some(user) = entity.entity_name.as_ref().map(|n| n.to_string()) else {
            continue;
        };
        if entity.entity_type.as_str() != USER_ENTITY
            || wanted.is_some_and(|w| !w.contains(user.as_str()))
            || entry.values.is_empty()
        {
            continue;
        }
        let values: BTreeMap<String, f64> = entry
            .values
            .iter()
            .map(|v| (v.key.to_string(), v.value))
            .collect();
        quotas.insert(user, values);
    }
    Ok(quotas)
}

fn quota_entry(alteration: &QuotaAlteration) -> AlterEntry {
    let set = alteration.set.iter().map(|(key, value)| {
        OpData::default()
            .with_key(str_bytes(key))
            .with_value(*value)
            .with_remove(false)
    });
    let remove = alteration.remove.iter().map(|key| {
        OpData::default()
            .with_key(str_bytes(key))
            .with_value(0.0)
            .with_remove(true)
    });
    AlterEntry::default()
        .with_entity(vec![
            AlterEntity::default()
                .with_entity_type(str_bytes(USER_ENTITY))
                .with_entity_name(Some(str_bytes(&alteration.user))),
        ])
        .with_ops(set.chain(remove).collect())
}

/// Results of an AlterClientQuotas answer keyed by user; entries for anything but a lone
/// user entity are not ours and are ignored.
fn quota_alter_results(response: AlterClientQuotasResponse) -> ItemResults<()> {
    let mut results = BTreeMap::new();
    for entry in response.entries {
        let user = match entry.entity.as_slice() {
            [entity] if entity.entity_type.as_str() == USER_ENTITY => {
                entity.entity_name.as_ref().map(|n| n.to_string())
            }
            _ => None,
        };
        let Some(user) = user else {
            tracing::debug!("ignoring an AlterClientQuotas result for another entity");
            continue;
        };
        results.insert(
            user,
            item_result(
                ClusterApi::AlterClientQuotas,
                entry.error_code,
                entry.error_message,
            ),
        );
    }
    results
}

#[cfg(test)]
mod tests {
    //! The wire shapes of every request (encoded and decoded again at each version both
    //! sides know) and the reading of every answer, without a broker; the real protocol is
    //! proven against a real broker in `e2e/tests/kafka_user_client.rs`.

    use std::fmt::Debug;

    use bytes::BytesMut;
    use kafka_protocol::messages::alter_client_quotas_response::{
        EntityData as AlteredEntity, EntryData as AlteredEntry,
    };
    use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
    use kafka_protocol::messages::create_acls_response::AclCreationResult;
    use kafka_protocol::messages::delete_acls_response::{
        DeleteAclsFilterResult, DeleteAclsMatchingAcl,
    };
    use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
    use kafka_protocol::messages::describe_client_quotas_response::{
        EntityData as DescribedEntity, EntryData as DescribedEntry, ValueData,
    };
    use kafka_protocol::messages::describe_user_scram_credentials_response::{
        CredentialInfo, DescribeUserScramCredentialsResult,
    };
    use kafka_protocol::protocol::{Decodable, Request};

    use super::*;
    use crate::error::{CLUSTER_AUTHORIZATION_FAILED, NOT_CONTROLLER};

    /// Encodes `request` at every version the codec knows and decodes it again: what the
    /// broker reads is what was built.
    fn survives_the_wire<R: Request + Decodable + PartialEq + Debug>(request: &R) {
        for version in R::VERSIONS.min..=R::VERSIONS.max {
            let mut buffer = BytesMut::new();
            request.encode(&mut buffer, version).unwrap();
            let decoded = R::decode(&mut buffer.freeze(), version).unwrap();
            assert_eq!(&decoded, request, "version {version}");
        }
    }

    fn binding(
        resource_type: AclResourceType,
        name: &str,
        pattern_type: AclPatternType,
        principal: &str,
        operation: AclOperation,
    ) -> AclBinding {
        AclBinding {
            resource_type,
            resource_name: name.into(),
            pattern_type,
            principal: principal.into(),
            host: "*".into(),
            operation,
            permission: AclPermission::Allow,
        }
    }

    fn check_codes_and_names<T>(all: &[T], codes: std::ops::RangeInclusive<i8>)
    where
        T: Copy + Eq + Debug + fmt::Display + FromStr<Err = UnknownName>,
        T: KafkaCode,
    {
        let listed: Vec<i8> = all.iter().map(|v| v.wire()).collect();
        assert_eq!(listed, codes.clone().collect::<Vec<_>>());
        for value in all {
            assert_eq!(T::from_wire(value.wire()), Some(*value));
            let name = value.to_string();
            assert_eq!(name.parse::<T>(), Ok(*value), "{name}");
            assert_eq!(name.to_uppercase().parse::<T>(), Ok(*value), "{name}");
        }
        // Kafka's UNKNOWN (0) and ANY (1) are filters, not values; 99 is from the future.
        for code in [0, 1, 99, -1] {
            if !codes.contains(&code) {
                assert_eq!(T::from_wire(code), None, "{code}");
            }
        }
        let err = "no-such-name".parse::<T>().unwrap_err();
        assert!(err.to_string().contains(&all[0].to_string()), "{err}");
    }

    /// The generated `code`/`from_code` of each enum, for one generic check.
    trait KafkaCode: Sized {
        fn wire(&self) -> i8;
        fn from_wire(code: i8) -> Option<Self>;
    }

    macro_rules! kafka_code {
        ($($t:ty),+) => {$(
            impl KafkaCode for $t {
                fn wire(&self) -> i8 { self.code() }
                fn from_wire(code: i8) -> Option<Self> { Self::from_code(code) }
            }
        )+};
    }
    kafka_code!(
        ScramMechanism,
        AclResourceType,
        AclPatternType,
        AclOperation,
        AclPermission
    );

    #[test]
    fn codes_and_names_round_trip_and_unknown_codes_are_none() {
        check_codes_and_names(ScramMechanism::ALL, 1..=2);
        check_codes_and_names(AclResourceType::ALL, 2..=7);
        check_codes_and_names(AclPatternType::ALL, 3..=4);
        check_codes_and_names(AclOperation::ALL, 2..=14);
        check_codes_and_names(AclPermission::ALL, 2..=3);
    }

    #[test]
    fn names_are_kafkas_own_and_parse_leniently() {
        assert_eq!(
            AclResourceType::TransactionalId.to_string(),
            "TransactionalId"
        );
        assert_eq!(AclOperation::ClusterAction.to_string(), "ClusterAction");
        assert_eq!(AclPatternType::Prefixed.to_string(), "Prefixed");
        assert_eq!(AclPermission::Allow.to_string(), "Allow");
        assert_eq!(ScramMechanism::Sha512.to_string(), "SCRAM-SHA-512");
        // As kafka-acls prints them.
        assert_eq!(
            "TRANSACTIONAL_ID".parse(),
            Ok(AclResourceType::TransactionalId)
        );
        assert_eq!("CLUSTER_ACTION".parse(), Ok(AclOperation::ClusterAction));
        assert_eq!(
            "idempotent_write".parse(),
            Ok(AclOperation::IdempotentWrite)
        );
        assert_eq!("PREFIXED".parse(), Ok(AclPatternType::Prefixed));
        assert_eq!("scram-sha-256".parse(), Ok(ScramMechanism::Sha256));
        let err = "Any".parse::<AclOperation>().unwrap_err();
        assert_eq!(err.kind, "ACL operation");
        assert!(
            err.to_string()
                .starts_with("\"Any\" is not a Kafka ACL operation")
        );
        assert_eq!(
            SaslMechanism::from(ScramMechanism::Sha512),
            SaslMechanism::ScramSha512
        );
        assert_eq!(
            ScramMechanism::from(SaslMechanism::ScramSha256),
            ScramMechanism::Sha256
        );
    }

    #[test]
    fn an_upsertion_prints_neither_salt_nor_salted_password() {
        let upsertion = ScramUpsertion {
            user: "alice".into(),
            mechanism: ScramMechanism::Sha512,
            iterations: 8192,
            salt: vec![0xAB; 16],
            salted_password: vec![0xCD; 64],
        };
        let debug = format!("{upsertion:?} {upsertion:#?}");
        assert!(debug.contains("alice") && debug.contains("8192"), "{debug}");
        assert!(debug.contains("<redacted>"), "{debug}");
        for secret in ["171", "205", "0xab", "0xcd", "AB", "CD", "[", "]"] {
            assert!(!debug.contains(secret), "{secret} in {debug}");
        }
    }

    #[test]
    fn scram_requests_name_users_mechanisms_and_the_salted_password() {
        let all = describe_scram_request(None);
        assert_eq!(all.users, Some(vec![]), "an empty list asks for every user");
        survives_the_wire(&all);
        let some = describe_scram_request(Some(&["alice", "bob"]));
        let names: Vec<&str> = some
            .users
            .iter()
            .flatten()
            .map(|u| u.name.as_str())
            .collect();
        assert_eq!(names, ["alice", "bob"]);
        survives_the_wire(&some);

        let upsertion = ScramUpsertion {
            user: "alice".into(),
            mechanism: ScramMechanism::Sha512,
            iterations: 8192,
            salt: b"salt".to_vec(),
            salted_password: vec![7; 64],
        };
        let deletion = ScramDeletion {
            user: "bob".into(),
            mechanism: ScramMechanism::Sha256,
        };
        let request = alter_scram_request(&[&upsertion], &[&deletion]);
        let sent = &request.upsertions[0];
        assert_eq!(
            (
                sent.name.as_str(),
                sent.mechanism,
                sent.iterations,
                &sent.salt[..],
                &sent.salted_password[..]
            ),
            ("alice", 2, 8192, &b"salt"[..], &[7u8; 64][..])
        );
        assert_eq!(
            (
                request.deletions[0].name.as_str(),
                request.deletions[0].mechanism
            ),
            ("bob", 1)
        );
        survives_the_wire(&request);
    }

    #[test]
    fn described_credentials_leave_out_users_without_one_and_unknown_mechanisms() {
        let result = |user: &str, code: i16, infos: &[(i8, i32)]| {
            DescribeUserScramCredentialsResult::default()
                .with_user(str_bytes(user))
                .with_error_code(code)
                .with_credential_infos(
                    infos
                        .iter()
                        .map(|(m, i)| {
                            CredentialInfo::default()
                                .with_mechanism(*m)
                                .with_iterations(*i)
                        })
                        .collect(),
                )
        };
        let response = DescribeUserScramCredentialsResponse::default().with_results(vec![
            result("alice", 0, &[(2, 8192), (1, 4096)]),
            result("bob", RESOURCE_NOT_FOUND, &[]),
            result("carol", 0, &[(9, 4096)]),
        ]);
        let credentials = scram_credentials(response).unwrap();
        assert_eq!(credentials.keys().collect::<Vec<_>>(), ["alice"]);
        assert_eq!(
            credentials["alice"],
            [
                ScramCredentialInfo {
                    mechanism: ScramMechanism::Sha512,
                    iterations: 8192
                },
                ScramCredentialInfo {
                    mechanism: ScramMechanism::Sha256,
                    iterations: 4096
                }
            ]
        );

        let refused = DescribeUserScramCredentialsResponse::default()
            .with_error_code(CLUSTER_AUTHORIZATION_FAILED);
        let err = scram_credentials(refused).unwrap_err().to_string();
        assert!(
            err.contains("needs the Describe ACL on the cluster"),
            "{err}"
        );
        let odd = DescribeUserScramCredentialsResponse::default().with_results(vec![
            result("dave", 58, &[]).with_error_message(Some(str_bytes("odd"))),
        ]);
        let err = scram_credentials(odd).unwrap_err().to_string();
        assert!(
            err.contains("SASL_AUTHENTICATION_FAILED") && err.contains("\"dave\": odd"),
            "{err}"
        );
    }

    #[test]
    fn scram_alteration_results_are_keyed_by_user_and_refusals_name_the_acl() {
        let response = AlterUserScramCredentialsResponse::default().with_results(vec![
            AlterUserScramCredentialsResult::default().with_user(str_bytes("alice")),
            AlterUserScramCredentialsResult::default()
                .with_user(str_bytes("bob"))
                .with_error_code(CLUSTER_AUTHORIZATION_FAILED)
                .with_error_message(Some(str_bytes("Cluster authorization failed."))),
        ]);
        let results = complete(&["alice", "bob", "carol"], scram_alter_results(response));
        assert_eq!(results["alice"], Ok(()));
        let refused = results["bob"].clone().unwrap_err();
        assert!(refused.is_cluster_authorization_failed());
        assert!(
            refused
                .to_string()
                .contains("needs the Alter ACL on the cluster (AlterUserScramCredentials"),
            "{refused}"
        );
        assert_eq!(results["carol"].clone().unwrap_err().code, left_out().code);
    }

    #[test]
    fn describe_acls_asks_for_any_acl_of_the_principal() {
        let request = describe_acls_request(&AclFilter {
            principal: Some("User:alice".into()),
        });
        assert_eq!(
            (
                request.resource_type_filter,
                request.pattern_type_filter,
                request.operation,
                request.permission_type
            ),
            (ANY, ANY, ANY, ANY)
        );
        assert_eq!(request.principal_filter.as_deref(), Some("User:alice"));
        assert!(request.resource_name_filter.is_none() && request.host_filter.is_none());
        survives_the_wire(&request);
        let everyone = describe_acls_request(&AclFilter::default());
        assert_eq!(everyone.principal_filter, None);
        survives_the_wire(&everyone);
    }

    #[test]
    fn described_acls_skip_unknown_codes() {
        let acl = |operation: i8, permission: i8| {
            AclDescription::default()
                .with_principal(str_bytes("User:alice"))
                .with_host(str_bytes("*"))
                .with_operation(operation)
                .with_permission_type(permission)
        };
        let resource = |resource_type: i8, name: &str, pattern: i8, acls| {
            DescribeAclsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(str_bytes(name))
                .with_pattern_type(pattern)
                .with_acls(acls)
        };
        let response = DescribeAclsResponse::default().with_resources(vec![
            resource(2, "orders.", 4, vec![acl(4, 3), acl(8, 3), acl(99, 3)]),
            resource(3, "g", 3, vec![acl(3, 2)]),
            resource(42, "future", 3, vec![acl(3, 3)]),
            resource(2, "other", 9, vec![acl(3, 3)]),
        ]);
        let bindings = acl_bindings(response).unwrap();
        let write = binding(
            AclResourceType::Topic,
            "orders.",
            AclPatternType::Prefixed,
            "User:alice",
            AclOperation::Write,
        );
        let describe = AclBinding {
            operation: AclOperation::Describe,
            ..write.clone()
        };
        let deny_read = AclBinding {
            permission: AclPermission::Deny,
            ..binding(
                AclResourceType::Group,
                "g",
                AclPatternType::Literal,
                "User:alice",
                AclOperation::Read,
            )
        };
        assert_eq!(bindings, [write, describe, deny_read]);

        let refused = DescribeAclsResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED);
        let err = acl_bindings(refused).unwrap_err().to_string();
        assert!(
            err.contains("needs the Describe ACL on the cluster (DescribeAcls"),
            "{err}"
        );
    }

    #[test]
    fn acls_are_created_and_deleted_field_for_field() {
        let acl = AclBinding {
            host: "10.0.0.1".into(),
            permission: AclPermission::Deny,
            ..binding(
                AclResourceType::TransactionalId,
                "tx-",
                AclPatternType::Prefixed,
                "User:bob",
                AclOperation::IdempotentWrite,
            )
        };
        let creation = acl_creation(&acl);
        assert_eq!(
            (
                creation.resource_type,
                creation.resource_name.as_str(),
                creation.resource_pattern_type,
                creation.principal.as_str(),
                creation.host.as_str(),
                creation.operation,
                creation.permission_type
            ),
            (5, "tx-", 4, "User:bob", "10.0.0.1", 12, 2)
        );
        survives_the_wire(&CreateAclsRequest::default().with_creations(vec![creation]));

        let filter = exact_filter(&acl);
        assert_eq!(
            (
                filter.resource_type_filter,
                filter.resource_name_filter.as_deref(),
                filter.pattern_type_filter,
                filter.principal_filter.as_deref(),
                filter.host_filter.as_deref(),
                filter.operation,
                filter.permission_type
            ),
            (5, Some("tx-"), 4, Some("User:bob"), Some("10.0.0.1"), 12, 2)
        );
        survives_the_wire(&DeleteAclsRequest::default().with_filters(vec![filter]));
    }

    #[test]
    fn acl_results_keep_the_order_and_fill_what_the_answer_left_out() {
        let created = CreateAclsResponse::default().with_results(vec![
            AclCreationResult::default(),
            AclCreationResult::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED),
        ]);
        let results = creation_results(created, 3);
        assert_eq!(results.len(), 3);
        assert_eq!(results[0], Ok(()));
        let refused = results[1].clone().unwrap_err().to_string();
        assert!(
            refused.contains("needs the Alter ACL on the cluster"),
            "{refused}"
        );
        assert_eq!(results[2].clone().unwrap_err().code, left_out().code);

        let matching = |code: i16| DeleteAclsMatchingAcl::default().with_error_code(code);
        let deleted = DeleteAclsResponse::default().with_filter_results(vec![
            DeleteAclsFilterResult::default().with_matching_acls(vec![matching(0)]),
            DeleteAclsFilterResult::default(),
            DeleteAclsFilterResult::default().with_matching_acls(vec![matching(0), matching(58)]),
            DeleteAclsFilterResult::default().with_error_code(NOT_CONTROLLER),
        ]);
        let results = deletion_results(deleted, 5);
        assert_eq!(results[0], Ok(1));
        assert_eq!(results[1], Ok(0));
        assert_eq!(results[2].clone().unwrap_err().code, 58);
        assert_eq!(retriable_indexes(&results), [3]);
        assert_eq!(results[4].clone().unwrap_err().code, left_out().code);
    }

    #[test]
    fn quotas_are_described_for_lone_user_entities() {
        let request = describe_quotas_request();
        assert!(request.strict, "user and client-id pairs are not ours");
        let component = &request.components[0];
        assert_eq!(
            (
                component.entity_type.as_str(),
                component.match_type,
                component._match.clone()
            ),
            ("user", MATCH_SPECIFIED, None)
        );
        survives_the_wire(&request);

        let entity = |kind: &str, name: Option<&str>| {
            DescribedEntity::default()
                .with_entity_type(str_bytes(kind))
                .with_entity_name(name.map(str_bytes))
        };
        let value = |key: &str, value: f64| {
            ValueData::default()
                .with_key(str_bytes(key))
                .with_value(value)
        };
        let entry = |entities, values| {
            DescribedEntry::default()
                .with_entity(entities)
                .with_values(values)
        };
        let response = DescribeClientQuotasResponse::default().with_entries(Some(vec![
            entry(
                vec![entity("user", Some("alice"))],
                vec![
                    value("producer_byte_rate", 1024.0),
                    value("request_percentage", 12.5),
                ],
            ),
            entry(
                vec![entity("user", Some("bob"))],
                vec![value("consumer_byte_rate", 2048.0)],
            ),
            entry(
                vec![entity("user", None)],
                vec![value("producer_byte_rate", 1.0)],
            ),
            entry(
                vec![
                    entity("user", Some("carol")),
                    entity("client-id", Some("c")),
                ],
                vec![value("producer_byte_rate", 1.0)],
            ),
            entry(
                vec![entity("client-id", Some("dave"))],
                vec![value("producer_byte_rate", 1.0)],
            ),
        ]));
        let all = user_quotas(response.clone(), None).unwrap();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["alice", "bob"]);
        assert_eq!(
            all["alice"],
            BTreeMap::from([
                ("producer_byte_rate".to_string(), 1024.0),
                ("request_percentage".to_string(), 12.5)
            ])
        );
        let wanted = BTreeSet::from(["bob", "erin"]);
        let some = user_quotas(response, Some(&wanted)).unwrap();
        assert_eq!(some.keys().collect::<Vec<_>>(), ["bob"]);

        let refused =
            DescribeClientQuotasResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED);
        let err = user_quotas(refused, None).unwrap_err().to_string();
        assert!(
            err.contains("needs the DescribeConfigs ACL on the cluster"),
            "{err}"
        );
    }

    #[test]
    fn quota_changes_set_and_remove_keys_of_one_user_entity() {
        let alteration = QuotaAlteration {
            user: "alice".into(),
            set: BTreeMap::from([
                ("consumer_byte_rate".to_string(), 2048.0),
                ("producer_byte_rate".to_string(), 1024.0),
            ]),
            remove: vec!["request_percentage".into()],
        };
        let entry = quota_entry(&alteration);
        let entity = &entry.entity[0];
        assert_eq!(
            (entity.entity_type.as_str(), entity.entity_name.as_deref()),
            ("user", Some("alice"))
        );
        let ops: Vec<(&str, f64, bool)> = entry
            .ops
            .iter()
            .map(|op| (op.key.as_str(), op.value, op.remove))
            .collect();
        assert_eq!(
            ops,
            [
                ("consumer_byte_rate", 2048.0, false),
                ("producer_byte_rate", 1024.0, false),
                ("request_percentage", 0.0, true)
            ]
        );
        survives_the_wire(
            &AlterClientQuotasRequest::default()
                .with_entries(vec![entry])
                .with_validate_only(false),
        );

        let altered = |kind: &str, name: &str, code: i16| {
            AlteredEntry::default()
                .with_error_code(code)
                .with_entity(vec![
                    AlteredEntity::default()
                        .with_entity_type(str_bytes(kind))
                        .with_entity_name(Some(str_bytes(name))),
                ])
        };
        let response = AlterClientQuotasResponse::default().with_entries(vec![
            altered("user", "alice", 0),
            altered("user", "bob", CLUSTER_AUTHORIZATION_FAILED),
            altered("client-id", "carol", 0),
        ]);
        let results = quota_alter_results(response);
        assert_eq!(results.keys().collect::<Vec<_>>(), ["alice", "bob"]);
        assert_eq!(results["alice"], Ok(()));
        let refused = results["bob"].clone().unwrap_err().to_string();
        assert!(
            refused.contains("needs the AlterConfigs ACL on the cluster (AlterClientQuotas)"),
            "{refused}"
        );
    }
}
