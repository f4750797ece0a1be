//! The CRD conversion webhook ([`accord_crds::versions::CONVERSION_PATH`]): a
//! `ConversionReview` (`apiextensions.k8s.io/v1`) in, the same review with its response out,
//! every object converted by [`accord_crds::conversion::convert`].
//!
//! It needs nothing but the request: no cache, no API call, no leadership, so every hub
//! replica answers it from the moment it serves, before its reflectors have listed. The API
//! server calls it on every read and write of an object in a version other than the stored
//! one, so a hub that cannot answer makes Accord's objects unreadable in that version: the
//! conversion is pure and never panics.
//!
//! - Every object converts: a `Success` response with the objects in request order.
//! - One object does not: a `Failure` response naming it and the problem, and no objects
//!   (the API server takes the review whole), answered with HTTP 200.
//! - The body is not a `ConversionReview` with a request: a [`ReviewError`], which the
//!   server answers with HTTP 400 and its message.

use accord_common::runtime::error_chain;
use accord_crds::conversion::convert;
use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use serde_json::Value;

/// API version of the reviews this webhook reads and writes (`conversionReviewVersions`).
pub const CONVERSION_REVIEW_API_VERSION: &str = "apiextensions.k8s.io/v1";
/// Kind of the reviews this webhook reads and writes.
pub const CONVERSION_REVIEW_KIND: &str = "ConversionReview";
/// `result.reason` of a failed conversion.
pub const FAILURE_REASON: &str = "ConversionFailed";

/// Why a request body is not a review this webhook can answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The body is not JSON, or not shaped like a ConversionReview.
    #[error("the body is not a ConversionReview: {0}")]
    NotAReview(#[source] serde_json::Error),
    /// The review is of another API version or kind.
    #[error(
        "expected apiVersion {CONVERSION_REVIEW_API_VERSION} kind {CONVERSION_REVIEW_KIND}, got apiVersion {api_version:?} kind {kind:?}"
    )]
    WrongVersion {
        /// `apiVersion` of the body.
        api_version: String,
        /// `kind` of the body.
        kind: String,
    },
    /// The review has no `request` to answer.
    #[error("the ConversionReview has no request to answer")]
    NoRequest,
    /// The answer could not be written as JSON (not expected of these types).
    #[error("the ConversionReview's answer could not be written as JSON: {0}")]
    Encode(#[source] serde_json::Error),
}

/// Answers one request body: the `ConversionReview` to send back, with `response.uid`
/// echoing `request.uid`.
pub fn review(body: &[u8]) -> Result<Value, ReviewError> {
    let request = decode(body)?;
    let review = respond(request).into_review();
    serde_json::to_value(review).map_err(ReviewError::Encode)
}

/// The request of a `ConversionReview` body.
fn decode(body: &[u8]) -> Result<ConversionRequest, ReviewError> {
    let review: ConversionReview = serde_json::from_slice(body).map_err(ReviewError::NotAReview)?;
    if review.types.api_version != CONVERSION_REVIEW_API_VERSION
        || review.types.kind != CONVERSION_REVIEW_KIND
    {
        return Err(ReviewError::WrongVersion {
            api_version: review.types.api_version,
            kind: review.types.kind,
        });
    }
    ConversionRequest::from_review(review).map_err(|_| ReviewError::NoRequest)
}

/// Converts every object of `request`; the first that fails fails the whole response.
fn respond(mut request: ConversionRequest) -> ConversionResponse {
    let objects = std::mem::take(&mut request.objects);
    let desired = request.desired_api_version.clone();
    let response = ConversionResponse::for_request(request);
    let converted: Result<Vec<Value>, _> = objects
        .into_iter()
        .map(|object| convert(object, &desired))
        .collect();
    match converted {
        Ok(objects) => response.success(objects),
        Err(e) => {
            let message = format!("cannot convert to {desired}: {}", error_chain(&e));
            response.failure(Status::failure(&message, FAILURE_REASON))
        }
    }
}

#[cfg(test)]
mod tests {
    use accord_crds::conversion::LOSSLESS_ANNOTATION;
    use serde_json::json;

    use super::*;

    fn body(objects: Value, desired: &str) -> Vec<u8> {
        json!({
            "apiVersion": CONVERSION_REVIEW_API_VERSION,
            "kind": CONVERSION_REVIEW_KIND,
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "desiredAPIVersion": desired,
                "objects": objects,
            },
        })
        .to_string()
        .into_bytes()
    }

    fn topic(name: &str) -> Value {
        json!({
            "apiVersion": "accord.io/v1alpha1",
            "kind": "FederatedKafkaTopic",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"partitions": 3, "replicationFactor": 3, "clusters": ["us-central1"]},
        })
    }

    fn cluster() -> Value {
        json!({
            "apiVersion": "accord.io/v1alpha1",
            "kind": "ManagedCluster",
            "metadata": {"name": "us-central1"},
            "spec": {"weight": 60},
        })
    }

    #[test]
    fn every_object_is_converted_in_request_order() {
        let answer = review(&body(
            json!([topic("orders"), cluster()]),
            "accord.io/v1beta1",
        ))
        .unwrap();
        assert_eq!(answer["apiVersion"], CONVERSION_REVIEW_API_VERSION);
        assert_eq!(answer["kind"], CONVERSION_REVIEW_KIND);
        assert!(answer.get("request").is_none());
        let response = &answer["response"];
        assert_eq!(response["result"]["status"], "Success");
        let objects = response["convertedObjects"].as_array().unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0]["kind"], "FederatedKafkaTopic");
        assert_eq!(objects[0]["apiVersion"], "accord.io/v1beta1");
        assert_eq!(
            objects[0]["spec"]["placement"],
            json!({"clusters": ["us-central1"]})
        );
        assert_eq!(objects[1]["kind"], "ManagedCluster");
        assert_eq!(objects[1]["apiVersion"], "accord.io/v1beta1");
        assert_eq!(objects[1]["spec"], json!({"weight": 60}));
    }

    #[test]
    fn the_request_uid_is_echoed() {
        let answer = review(&body(json!([]), "accord.io/v1alpha1")).unwrap();
        assert_eq!(
            answer["response"]["uid"],
            "705ab4f5-6393-11e8-b7cc-42010a800002"
        );
        assert_eq!(answer["response"]["result"]["status"], "Success");
        assert_eq!(answer["response"]["convertedObjects"], json!([]));
    }

    #[test]
    fn one_object_that_does_not_convert_fails_the_review_naming_it() {
        let mut bad = topic("broken");
        bad["metadata"]["annotations"] = json!({ LOSSLESS_ANNOTATION: "{not json" });
        let answer = review(&body(json!([topic("orders"), bad]), "accord.io/v1beta1")).unwrap();
        let response = &answer["response"];
        assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(response["result"]["status"], "Failure");
        assert_eq!(response["result"]["reason"], FAILURE_REASON);
        let message = response["result"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(
                "cannot convert to accord.io/v1beta1: FederatedKafkaTopic shop/broken: annotation accord.io/v1beta1-fields is not valid JSON"
            ),
            "{message}"
        );
        assert_eq!(response["convertedObjects"], json!([]));
    }

    #[test]
    fn an_object_of_a_foreign_kind_fails_the_review() {
        let pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}});
        let answer = review(&body(json!([pod]), "accord.io/v1beta1")).unwrap();
        assert_eq!(answer["response"]["result"]["status"], "Failure");
        let message = answer["response"]["result"]["message"].as_str().unwrap();
        assert!(message.contains("Pod a/p: apiVersion \"v1\""), "{message}");
    }

    #[test]
    fn a_body_that_is_not_json_is_an_error() {
        let error = review(b"not json").unwrap_err();
        assert!(matches!(error, ReviewError::NotAReview(_)), "{error:?}");
        assert!(
            error
                .to_string()
                .starts_with("the body is not a ConversionReview")
        );
    }

    #[test]
    fn a_review_without_request_is_an_error() {
        let body =
            json!({"apiVersion": CONVERSION_REVIEW_API_VERSION, "kind": CONVERSION_REVIEW_KIND});
        let error = review(body.to_string().as_bytes()).unwrap_err();
        assert!(matches!(error, ReviewError::NoRequest), "{error:?}");
    }

    #[test]
    fn a_review_of_another_kind_or_version_is_an_error() {
        let mut admission: Value =
            serde_json::from_slice(&body(json!([]), "accord.io/v1beta1")).unwrap();
        admission["apiVersion"] = json!("admission.k8s.io/v1");
        admission["kind"] = json!("AdmissionReview");
        let error = review(admission.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(error, ReviewError::WrongVersion { .. }),
            "{error:?}"
        );
    }
}
