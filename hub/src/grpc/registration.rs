//! `Registration.Register`: a bootstrap token and a CSR in, a client certificate out.

use accord_crds::validate::is_dns1123_label;
use accord_crds::{HUB_FIELD_MANAGER, ManagedCluster};
use accord_proto::v1::registration_server::Registration;
use accord_proto::v1::{RegisterRequest, RegisterResponse};
use kube::api::{Api, Patch, PatchParams};
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use super::AgentFacing;
use crate::store::registry::ClusterRecord;
use crate::store::tokens::TokenError;

/// The Registration service.
pub struct RegistrationService {
    shared: AgentFacing,
}

impl RegistrationService {
    /// A service over the hub's shared state.
    pub fn new(shared: AgentFacing) -> Self {
        Self { shared }
    }
}

/// Maps a token problem to the status an agent shows its user.
fn token_status(e: TokenError) -> Status {
    match e {
        TokenError::Store(inner) => {
            Status::unavailable(format!("the hub could not check the token: {inner}"))
        }
        other => Status::unauthenticated(other.to_string()),
    }
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> Result<Response<RegisterResponse>, Status> {
        let req = request.into_inner();
        let s = &self.shared;
        let cluster = req.cluster_name.as_str();
        if !is_dns1123_label(cluster) {
            return Err(Status::invalid_argument(format!(
                "cluster name {cluster:?}: {}",
                accord_crds::messages::CLUSTER_NAME
            )));
        }
        // The token first: a caller without a valid one learns nothing about cluster names
        // and costs no signing work.
        s.store
            .check_token(&req.token)
            .await
            .map_err(token_status)?;
        let signed = s
            .ca
            .sign_agent_csr(&req.csr_pem, cluster, s.settings.cert_validity)
            .map_err(|e| Status::invalid_argument(format!("certificate signing request: {e}")))?;

        let existing = s.store.get_cluster(cluster).await.map_err(|e| {
            s.metrics.error(e.kind());
            Status::unavailable(format!("the hub could not read its cluster registry: {e}"))
        })?;
        if let Some(existing) = &existing
            && existing.spki_sha256 != signed.spki_sha256
            && !req.force
        {
            return Err(Status::already_exists(format!(
                "cluster {cluster:?} is already joined with another identity; to replace it \
                 (the old agent's certificate stops working) join again with --force"
            )));
        }

        s.store
            .consume_token(&req.token, cluster)
            .await
            .map_err(token_status)?;

        let record = ClusterRecord {
            name: cluster.to_owned(),
            spki_sha256: signed.spki_sha256.clone(),
            labels: req.labels.clone().into_iter().collect(),
            registered_unix: accord_common::runtime::unix_millis() / 1000,
            previous: None,
        };
        s.store.put_cluster(&record).await.map_err(|e| {
            s.metrics.error(e.kind());
            Status::unavailable(format!("the hub could not record the cluster: {e}"))
        })?;

        // The ManagedCluster object; its status (Joined, Available) is the leader's to write.
        let api: Api<ManagedCluster> = Api::all(s.kube.clone());
        let object = serde_json::json!({
            "apiVersion": "accord.io/v1alpha1",
            "kind": "ManagedCluster",
            "metadata": { "name": cluster, "labels": req.labels },
            "spec": {},
        });
        if let Err(e) = api
            .patch(
                cluster,
                &PatchParams::apply(HUB_FIELD_MANAGER),
                &Patch::Apply(&object),
            )
            .await
        {
            s.metrics.error("kubernetes");
            warn!(cluster, error = %e, "ManagedCluster not written; the status controller retries");
        }
        // A replaced identity stops speaking for the cluster now, not at its next connect:
        // end its stream if this replica holds it. (A stream held by another replica ends
        // when it reconnects; the registry check refuses the old certificate then.)
        if let Some(previous) = &existing
            && previous.spki_sha256 != signed.spki_sha256
            && let Some(conn) = s.connections.get(cluster)
        {
            let _ = conn.outbox.try_send(Err(Status::permission_denied(format!(
                "cluster {cluster:?} was registered again with another identity; this \
                 certificate no longer speaks for it"
            ))));
        }
        info!(cluster, replaced = existing.is_some(), "cluster registered");
        Ok(Response::new(RegisterResponse {
            certificate_pem: signed.cert_pem,
            ca_certificate_pem: s.ca.cert_pem().to_owned(),
            not_after_unix: signed.not_after_unix,
            cluster_name: cluster.to_owned(),
        }))
    }
}
