//! Objects watched in a form that always decodes, and decoded one at a time.
//!
//! A watch or list of a typed kind fails as a whole when one stored object does not fit the
//! Rust type (an int32 field holding 3000000000, written around the schema or stored before
//! it changed). So controllers watch [`Lenient<K>`]: the metadata typed, everything else
//! kept as JSON. Reconcile then decodes each object on its own ([`decode_or_invalid`]); an
//! object that does not decode gets `Ready=False`, reason `InvalidSpec`, and every other
//! object keeps reconciling.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use accord_crds::conditions::{self, Desired, Status, reasons, types};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// An object of kind `K` with only its metadata decoded.
#[derive(Serialize, Deserialize)]
pub struct Lenient<K> {
    /// The object's metadata (always decodes: the API server wrote it).
    pub metadata: ObjectMeta,
    /// Everything else (`apiVersion`, `kind`, `spec`, `status`), as stored.
    #[serde(flatten)]
    pub data: serde_json::Map<String, serde_json::Value>,
    #[serde(skip)]
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Lenient<K> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            data: self.data.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Lenient<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lenient")
            .field("metadata", &self.metadata)
            .field("data", &self.data)
            .finish()
    }
}

/// Only the metadata is typed: every stored object decodes.
impl<K> accord_common::watch::AlwaysDecodes for Lenient<K> {}

impl<K: Resource<DynamicType = ()>> Resource for Lenient<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<K> Lenient<K> {
    /// Wraps a JSON object as the API server returns it.
    pub fn from_value(value: serde_json::Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(value)
    }

    /// The stored value at a JSON pointer (`/spec/distribution`), if any.
    pub fn pointer(&self, pointer: &str) -> Option<&serde_json::Value> {
        let path = pointer.strip_prefix('/')?;
        let (first, tail) = path
            .split_once('/')
            .map_or((path, None), |(f, t)| (f, Some(t)));
        let top = self.data.get(first)?;
        match tail {
            None => Some(top),
            Some(tail) => top.pointer(&format!("/{tail}")),
        }
    }

    /// The object's status conditions, as far as they decode (none otherwise).
    pub fn conditions(&self) -> Vec<Condition> {
        self.pointer("/status/conditions")
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default()
    }
}

impl<K: DeserializeOwned> Lenient<K> {
    /// The object as its Rust type, or why it does not fit.
    pub fn decode(&self) -> Result<K, serde_json::Error> {
        let mut object = self.data.clone();
        object.insert("metadata".into(), serde_json::to_value(&self.metadata)?);
        serde_json::from_value(serde_json::Value::Object(object))
    }
}

impl<K> Lenient<K> {
    /// The same object without its status.
    pub fn without_status(&self) -> Self {
        let mut copy = self.clone();
        copy.data.remove("status");
        copy
    }
}

/// What reconcile does with one watched object.
#[derive(Debug)]
pub enum Decoded<K> {
    /// It decodes; reconcile it.
    Valid(Box<K>),
    /// It does not; say so in its status.
    Invalid {
        /// The decode error, as shown in the condition.
        message: String,
        /// The merge patch of `status` to send, or `None` when the object already shows
        /// this condition (nothing to write, no new Event).
        status_patch: Option<serde_json::Value>,
    },
}

/// Decodes `object`, or computes the status that says why it cannot be: `Ready=False`,
/// reason `InvalidSpec`, with the decode error. The patch touches only
/// `status.conditions` and `status.observedGeneration`, as the rest of the status may not
/// decode either.
pub fn decode_or_invalid<K: DeserializeOwned>(object: &Lenient<K>, now: &Time) -> Decoded<K> {
    let error = match object.decode() {
        Ok(k) => return Decoded::Valid(Box::new(k)),
        Err(e) => e,
    };
    // serde names no field; say at least which part is at fault.
    let message = match object.without_status().decode() {
        Ok(_) => format!("the hub cannot read this object's status: {error}"),
        Err(e) => format!("the hub cannot read this object's spec: {e}"),
    };
    let status_patch = invalid_status(object, &message, now);
    Decoded::Invalid {
        message,
        status_patch,
    }
}

/// The merge patch of `status` that says `object` cannot be acted on (`Ready=False`,
/// reason `InvalidSpec`, with `message`), or `None` when it already says so. It touches
/// only `status.conditions` and `status.observedGeneration`, as the rest of the status may
/// not decode.
pub fn invalid_status<K>(
    object: &Lenient<K>,
    message: &str,
    now: &Time,
) -> Option<serde_json::Value> {
    let generation = object.metadata.generation;
    let old = object.conditions();
    let new = conditions::merge(
        &old,
        &[Desired::new(
            types::READY,
            Status::False,
            reasons::INVALID_SPEC,
            message.to_owned(),
        )],
        generation,
        now,
    );
    let observed = object
        .pointer("/status/observedGeneration")
        .and_then(serde_json::Value::as_i64);
    let unchanged = conditions::equal_ignoring_time(&old, &new) && observed == generation;
    (!unchanged).then(|| {
        serde_json::json!({
            "status": { "observedGeneration": generation, "conditions": new }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_crds::CrossClusterScalePolicy;
    use k8s_openapi::jiff::Timestamp;

    fn policy(desired: serde_json::Value) -> Lenient<CrossClusterScalePolicy> {
        Lenient::from_value(serde_json::json!({
            "apiVersion": "accord.io/v1beta1",
            "kind": "CrossClusterScalePolicy",
            "metadata": {"name": "web", "namespace": "default", "generation": 2},
            "spec": {
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "frontend"},
                "desiredReplicas": desired,
                "distribution": [{"cluster": "a", "weight": 1}]
            }
        }))
        .unwrap()
    }

    fn now() -> Time {
        Time(Timestamp::from_second(100).unwrap())
    }

    #[test]
    fn an_object_that_fits_its_type_decodes() {
        match decode_or_invalid(&policy(serde_json::json!(12)), &now()) {
            Decoded::Valid(p) => {
                assert_eq!(p.spec.desired_replicas, 12);
                assert_eq!(p.metadata.name.as_deref(), Some("web"));
            }
            Decoded::Invalid { message, .. } => panic!("did not decode: {message}"),
        }
    }

    #[test]
    fn an_out_of_range_integer_is_an_invalid_spec_with_the_decode_error() {
        let object = policy(serde_json::json!(3_000_000_000_i64));
        let Decoded::Invalid {
            message,
            status_patch,
        } = decode_or_invalid(&object, &now())
        else {
            panic!("3000000000 replicas decoded as an i32")
        };
        assert!(message.contains("3000000000"), "{message}");
        assert!(message.contains("spec"), "{message}");
        let patch = status_patch.expect("the condition must be written");
        let status = &patch["status"];
        assert_eq!(status["observedGeneration"], 2);
        let conditions: Vec<Condition> =
            serde_json::from_value(status["conditions"].clone()).unwrap();
        let ready = conditions::find(&conditions, types::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", reasons::INVALID_SPEC)
        );
        assert_eq!(ready.message, message);
        assert_eq!(
            status.as_object().unwrap().len(),
            2,
            "only conditions and observedGeneration are patched: {status}"
        );
    }

    #[test]
    fn an_invalid_object_that_already_says_so_needs_no_write() {
        let mut object = policy(serde_json::json!(3_000_000_000_i64));
        let Decoded::Invalid { status_patch, .. } = decode_or_invalid(&object, &now()) else {
            panic!("decoded")
        };
        object
            .data
            .insert("status".into(), status_patch.unwrap()["status"].clone());
        let later = Time(Timestamp::from_second(999).unwrap());
        let Decoded::Invalid { status_patch, .. } = decode_or_invalid(&object, &later) else {
            panic!("decoded")
        };
        assert_eq!(status_patch, None);
    }

    #[test]
    fn a_status_that_does_not_decode_either_is_replaced_by_the_condition() {
        let mut object = policy(serde_json::json!("many"));
        object.data.insert(
            "status".into(),
            serde_json::json!({"conditions": "garbage", "readyReplicas": 1e20}),
        );
        let Decoded::Invalid { status_patch, .. } = decode_or_invalid(&object, &now()) else {
            panic!("decoded")
        };
        let patch = status_patch.unwrap();
        assert_eq!(
            patch["status"]["conditions"][0]["reason"],
            reasons::INVALID_SPEC
        );
    }

    #[test]
    fn a_sound_spec_under_a_broken_status_is_reported_as_a_status_problem() {
        let mut object = policy(serde_json::json!(3));
        object.data.insert(
            "status".into(),
            serde_json::json!({"readyReplicas": "lots"}),
        );
        let Decoded::Invalid { message, .. } = decode_or_invalid(&object, &now()) else {
            panic!("decoded")
        };
        assert!(message.contains("status"), "{message}");
        assert!(!message.contains("spec"), "{message}");
    }

    #[test]
    fn the_metadata_and_stored_fields_are_reachable_without_decoding() {
        let object = policy(serde_json::json!(3_000_000_000_i64));
        assert_eq!(
            object.pointer("/spec/distribution/0/cluster"),
            Some(&serde_json::json!("a"))
        );
        assert_eq!(object.pointer("/spec/missing"), None);
        assert_eq!(
            <Lenient<CrossClusterScalePolicy> as Resource>::kind(&()),
            "CrossClusterScalePolicy"
        );
    }
}
