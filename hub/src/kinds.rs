//! Every kind the hub carries, registered in one place: its controllers, its `serve` flags,
//! its admission webhook, and the hooks the framework calls (enclosing what is never
//! stored, what it keeps for a leader's term, whether it claims other kinds' fields).
//!
//! The framework (`controllers/`, `distribution/`, `writes/`, `webhook/`, `store/`) imports
//! no kind: `serve` and `install` hand it what is registered here. Adding a kind is its own
//! folders plus a line in each list below (see docs/architecture.md, "Adding a kind").

use std::sync::Arc;

use accord_common::distribution::PlacedKind;
use futures::FutureExt as _;

use crate::controllers::{Controller, Registered};
use crate::distribution::secrets::Enclose;
use crate::federated_resource::admission::ResourceAdmission;
use crate::federated_resource::controller::{FederatedResourceOptions, FederatedResources};
use crate::kafka::admission_cache::Caches;
use crate::kafka_topic::admission::TopicAdmission;
use crate::kafka_topic::controller::{KafkaTopicOptions, KafkaTopics};
use crate::kafka_user::admission::UserAdmission;
use crate::kafka_user::controller::{KafkaUserOptions, KafkaUsers};
use crate::promfed::admission::PromfedAdmission;
use crate::promfed::controller::{Promfed, PromfedOptions};
use crate::scale::controller::{Scale, ScaleOptions};
use crate::webhook::{Admission, Admissions, Webhook};
use crate::writes::EventRecorder;

/// Each kind's own `serve` flags, flattened into the command line.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct KindOptions {
    /// CrossClusterScalePolicy.
    #[command(flatten)]
    pub scale: ScaleOptions,
    /// FederatedKafkaTopic.
    #[command(flatten)]
    pub kafka_topic: KafkaTopicOptions,
    /// PrometheusFederation.
    #[command(flatten)]
    pub promfed: PromfedOptions,
    /// FederatedResource.
    #[command(flatten)]
    pub federated_resource: FederatedResourceOptions,
    /// FederatedKafkaUser.
    #[command(flatten)]
    pub kafka_user: KafkaUserOptions,
}

/// The kinds as the controllers take them: every controller the leader runs (in start
/// order), what the kinds keep for a term, and the kinds that claim other kinds' fields.
pub fn registered(options: &KindOptions) -> Registered {
    Registered {
        controllers: vec![
            Controller::placement::<Scale>(options.scale.clone()),
            Controller::new(
                "CrossClusterScalePolicy autoscaler",
                |ctx, clusters, listed| {
                    Box::pin(crate::scale::autoscaler::run(ctx, clusters, listed))
                },
            ),
            Controller::placement::<Promfed>(options.promfed.clone()),
            Controller::placement::<KafkaTopics>(options.kafka_topic.clone()),
            Controller::placement::<FederatedResources>(options.federated_resource.clone()),
            Controller::placement::<KafkaUsers>(options.kafka_user.clone()),
        ],
        extensions: vec![crate::scale::start_autoscale_states],
        field_claimants: FIELD_CLAIMANTS,
    }
}

/// The kinds whose objects claim fields of other kinds' deliveries
/// ([`crate::controllers::placement::PlacementKind::field_claims`]).
pub const FIELD_CLAIMANTS: &[PlacedKind] = &[PlacedKind::CrossClusterScalePolicy];

/// What each kind adds to its assignments when they are sent and never stores
/// ([`crate::distribution::secrets`]).
pub const ENCLOSERS: &[Enclose] = &[
    crate::federated_resource::secrets::enclose,
    crate::kafka_user::credential::enclose,
];

/// Every webhook of the ValidatingWebhookConfiguration, in its order (as [`admissions`]
/// serves them).
pub const WEBHOOKS: &[Webhook] = &[
    crate::kafka_topic::admission::WEBHOOK,
    crate::promfed::admission::WEBHOOK,
    crate::federated_resource::admission::WEBHOOK,
    crate::kafka_user::admission::WEBHOOK,
];

/// Every kind's admission, with the caches they read followed through `kube`.
pub fn admissions(kube: kube::Client, recorder: EventRecorder) -> Admissions {
    let (caches, watches) = Caches::new(kube);
    admissions_over(
        caches,
        recorder,
        watches
            .map(|stopped| match stopped {
                Err(e) => e.to_string(),
                Ok(()) => "the webhook's caches ended".to_owned(),
            })
            .boxed(),
    )
}

/// Every kind's admission over `caches` (kept by `watches`, which resolves only when one
/// stops).
pub fn admissions_over(
    caches: Caches,
    recorder: EventRecorder,
    watches: futures::future::BoxFuture<'static, String>,
) -> Admissions {
    let reviews: Vec<Arc<dyn Admission>> = vec![
        Arc::new(TopicAdmission::new(caches.clone(), Arc::new(recorder))),
        Arc::new(PromfedAdmission),
        Arc::new(ResourceAdmission),
        Arc::new(UserAdmission::new(caches.clone())),
    ];
    Admissions {
        reviews,
        listed: Arc::new(move || {
            let caches = caches.clone();
            async move { caches.wait_until_ready().await }.boxed()
        }),
        caches: watches,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_configuration_lists_every_admission_in_the_order_it_is_served() {
        let caches = Caches::fixed(Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let kube = kube::Client::try_from(kube::Config::new(
            "https://127.0.0.1:1".parse().expect("a URL"),
        ))
        .expect("a client");
        let recorder = EventRecorder::new(
            kube,
            crate::writes::Reporter {
                controller: "test".into(),
                instance: None,
            },
        );
        let served: Vec<Webhook> =
            admissions_over(caches, recorder, futures::future::pending().boxed())
                .reviews
                .iter()
                .map(|a| a.webhook())
                .collect();
        assert_eq!(served, WEBHOOKS);
        assert!(WEBHOOKS.iter().all(|w| Webhook::is_accords(w.name)));
    }
}
