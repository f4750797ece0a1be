//! AdmissionReview `admission.k8s.io/v1` as the API server sends it for an object of any
//! kind, decoded into a [`Review`], and the answer written back.
//!
//! Only the fields the webhook reads are decoded; a review that is not JSON, not
//! `admission.k8s.io/v1`, has no `request.uid`, or carries an object that is not of the
//! kind the path serves is a [`ReviewError`] (HTTP 400 with its message), never a panic.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `status.reason` of a refusal of a spec that fails its kind's own checks (those CEL
/// cannot express), naming every failed rule.
pub const INVALID_SPEC_REASON: &str = "INVALID_SPEC";

/// API version of the reviews this webhook reads and writes.
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";

/// Why a request body is not a review this webhook can answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The body is not JSON, or not shaped like an AdmissionReview.
    #[error("the body is not an AdmissionReview: {0}")]
    NotAReview(#[source] serde_json::Error),
    /// The review is of another API version or kind.
    #[error(
        "expected apiVersion {ADMISSION_API_VERSION} kind AdmissionReview, got apiVersion {api_version:?} kind {kind:?}"
    )]
    WrongVersion {
        /// `apiVersion` of the body.
        api_version: String,
        /// `kind` of the body.
        kind: String,
    },
    /// The review has no `request` (or no `request.uid` to answer to).
    #[error("the AdmissionReview has no request.uid to answer")]
    NoRequest,
    /// A CREATE or UPDATE without `request.object`.
    #[error("the {operation} request has no request.object")]
    NoObject {
        /// The operation.
        operation: String,
    },
    /// The object (or old object) is not of the kind the path serves.
    #[error("request.{field} is not a {kind}: {source}")]
    WrongObject {
        /// `object` or `oldObject`.
        field: &'static str,
        /// The kind the path serves.
        kind: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
}

/// What is being done to the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
    /// Anything else (`DELETE`, `CONNECT`): nothing to validate.
    Other(String),
}

/// One decoded review of an object of kind `K`.
#[derive(Clone, Debug)]
pub struct Review<K> {
    /// `request.uid`, echoed in the answer.
    pub uid: String,
    /// `request.operation`.
    pub operation: Operation,
    /// `request.dryRun`: nothing may be recorded for it (no Event).
    pub dry_run: bool,
    /// `request.object` (CREATE, UPDATE).
    pub object: Option<K>,
    /// `request.oldObject` (UPDATE).
    pub old: Option<K>,
}

impl<K: kube::Resource> Review<K> {
    /// The object whose spec is to be decided: that of a CREATE, or of an UPDATE that
    /// changes the spec (by `spec`) of an object not being deleted. `None` for anything
    /// else, so an object stored before the webhook existed can still be relabelled and
    /// cleaned up.
    pub fn spec_to_decide<S: PartialEq>(&self, spec: impl Fn(&K) -> &S) -> Option<&K> {
        let object = self.object.as_ref()?;
        match &self.operation {
            Operation::Create => Some(object),
            Operation::Update
                if object.meta().deletion_timestamp.is_none()
                    && self
                        .old
                        .as_ref()
                        .is_none_or(|old| spec(old) != spec(object)) =>
            {
                Some(object)
            }
            Operation::Update | Operation::Other(_) => None,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<RequestIn>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestIn {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    object: Option<Value>,
    #[serde(default)]
    old_object: Option<Value>,
    #[serde(default)]
    dry_run: Option<bool>,
}

/// Decodes a request body whose objects are of kind `K`.
pub fn decode<K>(body: &[u8]) -> Result<Review<K>, ReviewError>
where
    K: DeserializeOwned + kube::Resource<DynamicType = ()>,
{
    let review: ReviewIn = serde_json::from_slice(body).map_err(ReviewError::NotAReview)?;
    if review.api_version != ADMISSION_API_VERSION || review.kind != "AdmissionReview" {
        return Err(ReviewError::WrongVersion {
            api_version: review.api_version,
            kind: review.kind,
        });
    }
    let request = review.request.ok_or(ReviewError::NoRequest)?;
    if request.uid.is_empty() {
        return Err(ReviewError::NoRequest);
    }
    let operation = match request.operation.as_str() {
        "CREATE" => Operation::Create,
        "UPDATE" => Operation::Update,
        other => Operation::Other(other.to_owned()),
    };
    let object_of = |value: Option<Value>, field| {
        value
            .filter(|v| !v.is_null())
            .map(|v| {
                serde_json::from_value(v).map_err(|source| ReviewError::WrongObject {
                    field,
                    kind: K::kind(&()).into_owned(),
                    source,
                })
            })
            .transpose()
    };
    let (object, old) = match operation {
        Operation::Create | Operation::Update => {
            let object =
                object_of(request.object, "object")?.ok_or_else(|| ReviewError::NoObject {
                    operation: request.operation.clone(),
                })?;
            (Some(object), object_of(request.old_object, "oldObject")?)
        }
        // Nothing is validated: the objects are not even read.
        Operation::Other(_) => (None, None),
    };
    Ok(Review {
        uid: request.uid,
        operation,
        dry_run: request.dry_run.unwrap_or(false),
        object,
        old,
    })
}

/// HTTP-like code of a refusal of an invalid object.
const UNPROCESSABLE: u16 = 422;

/// Why a request is refused: `status` of the answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// HTTP-like code the API server returns to the client (403).
    pub code: u16,
    /// Machine-readable reason, e.g. `TOPIC_CREATION_POLICY_VIOLATION`.
    pub reason: String,
    /// What to fix, for people.
    pub message: String,
}

/// The webhook's answer to one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// `None`: allowed; `Some`: refused.
    pub refusal: Option<Refusal>,
    /// Warnings `kubectl` prints (one per audited violation).
    pub warnings: Vec<String>,
    /// Audit annotations (the API server prefixes each key with the webhook's name).
    pub audit_annotations: BTreeMap<String, String>,
}

impl Verdict {
    /// Allowed, nothing to say.
    pub fn allow() -> Self {
        Self::default()
    }

    /// Refused as an invalid object (HTTP 422, as for the API server's own validation)
    /// with a machine-readable `reason` and a `message` that names the fields.
    pub fn invalid(reason: &str, message: String) -> Self {
        Self {
            refusal: Some(Refusal {
                code: UNPROCESSABLE,
                reason: reason.to_owned(),
                message,
            }),
            ..Self::default()
        }
    }

    /// Whether the request is allowed.
    pub fn allowed(&self) -> bool {
        self.refusal.is_none()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    audit_annotations: &'a BTreeMap<String, String>,
}

#[derive(Serialize)]
struct StatusOut<'a> {
    status: &'static str,
    code: u16,
    reason: &'a str,
    message: &'a str,
}

/// The AdmissionReview answering request `uid` with `verdict`, as JSON.
pub fn response_body(uid: &str, verdict: &Verdict) -> Vec<u8> {
    let out = ReviewOut {
        api_version: ADMISSION_API_VERSION,
        kind: "AdmissionReview",
        response: ResponseOut {
            uid,
            allowed: verdict.allowed(),
            status: verdict.refusal.as_ref().map(|r| StatusOut {
                status: "Failure",
                code: r.code,
                reason: &r.reason,
                message: &r.message,
            }),
            warnings: &verdict.warnings,
            audit_annotations: &verdict.audit_annotations,
        },
    };
    // Strings and integers only: serialising cannot fail.
    serde_json::to_vec(&out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_crds::kafka_topic::FederatedKafkaTopic;
    use serde_json::json;

    /// Any CRD type serves; the topic's is the one these tests were written with.
    type TopicReview = Review<FederatedKafkaTopic>;

    fn topic_json(partitions: i64) -> Value {
        json!({
            "apiVersion": "accord.io/v1beta1",
            "kind": "FederatedKafkaTopic",
            "metadata": { "name": "events", "namespace": "team-a" },
            "spec": { "partitions": partitions, "replicationFactor": 3, "placement": { "clusters": ["east"] } },
        })
    }

    fn review(request: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": request,
        }))
        .unwrap()
    }

    #[test]
    fn a_create_review_decodes_into_the_topic() {
        let body = review(json!({
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": { "group": "accord.io", "version": "v1beta1", "kind": "FederatedKafkaTopic" },
            "operation": "CREATE",
            "object": topic_json(6),
            "oldObject": null,
            "dryRun": false,
            "userInfo": { "username": "admin" },
        }));
        let r: TopicReview = decode(&body).unwrap();
        assert_eq!(r.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(r.operation, Operation::Create);
        assert!(!r.dry_run);
        assert_eq!(r.object.unwrap().spec.partitions, 6);
        assert!(r.old.is_none());
    }

    #[test]
    fn an_update_review_carries_the_old_object_and_dry_run() {
        let body = review(json!({
            "uid": "u", "operation": "UPDATE", "dryRun": true,
            "object": topic_json(24), "oldObject": topic_json(12),
        }));
        let r: TopicReview = decode(&body).unwrap();
        assert_eq!(r.operation, Operation::Update);
        assert!(r.dry_run);
        assert_eq!(r.old.unwrap().spec.partitions, 12);
    }

    #[test]
    fn a_delete_review_is_decoded_without_reading_objects() {
        let body =
            review(json!({ "uid": "u", "operation": "DELETE", "oldObject": {"garbage": 1} }));
        let r: TopicReview = decode(&body).unwrap();
        assert_eq!(r.operation, Operation::Other("DELETE".into()));
        assert!(r.object.is_none());
    }

    #[test]
    fn malformed_reviews_are_errors_with_a_clear_message_not_panics() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"{not json".to_vec(), "not an AdmissionReview"),
            (b"[]".to_vec(), "not an AdmissionReview"),
            (
                serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}})).unwrap(),
                "expected apiVersion admission.k8s.io/v1",
            ),
            (
                serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})).unwrap(),
                "no request.uid",
            ),
            (review(json!({"operation": "CREATE", "object": topic_json(1)})), "no request.uid"),
            (review(json!({"uid": "u", "operation": "CREATE"})), "CREATE request has no request.object"),
            (
                review(json!({"uid": "u", "operation": "CREATE", "object": {"spec": {"partitions": "many"}}})),
                "request.object is not a FederatedKafkaTopic",
            ),
            (
                review(json!({"uid": "u", "operation": "UPDATE", "object": topic_json(1), "oldObject": {"spec": 3}})),
                "request.oldObject is not a FederatedKafkaTopic",
            ),
            (b"".to_vec(), "not an AdmissionReview"),
        ];
        for (body, expected) in cases {
            let err = decode::<FederatedKafkaTopic>(&body)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{err:?} lacks {expected:?}");
        }
    }

    #[test]
    fn a_refusal_is_written_with_its_status_and_an_allowance_with_its_warnings() {
        let refused = Verdict {
            refusal: Some(Refusal {
                code: 403,
                reason: "TOPIC_CREATION_POLICY_VIOLATION".into(),
                message: "no".into(),
            }),
            ..Verdict::default()
        };
        let out: Value = serde_json::from_slice(&response_body("u1", &refused)).unwrap();
        assert_eq!(
            out,
            json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": "u1",
                    "allowed": false,
                    "status": { "status": "Failure", "code": 403, "reason": "TOPIC_CREATION_POLICY_VIOLATION", "message": "no" },
                },
            })
        );
        let audited = Verdict {
            refusal: None,
            warnings: vec!["w1".into(), "w2".into()],
            audit_annotations: [("policy-violation".to_owned(), "m".to_owned())].into(),
        };
        let out: Value = serde_json::from_slice(&response_body("u2", &audited)).unwrap();
        assert_eq!(
            out["response"],
            json!({ "uid": "u2", "allowed": true, "warnings": ["w1", "w2"], "auditAnnotations": { "policy-violation": "m" } })
        );
    }
}
