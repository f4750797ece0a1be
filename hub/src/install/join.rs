//! The end of `install`: a ready `accord-agent join` line with a fresh bootstrap token when
//! etcd is reachable from where install runs, otherwise the `accord-hub token create`
//! command that makes one from inside the cluster.

use std::time::Duration;

use super::options::{EtcdMode, HUB_NAME, InstallOptions};
use crate::store::{EtcdConnection, Keyspace, Store, StoreError};
use crate::token::join_line;

/// How long install tries to reach etcd for a token before printing the command instead.
const ETCD_TIMEOUT: Duration = Duration::from_secs(10);

/// Why no token was created from here.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The etcd endpoints are the evaluation etcd's in-cluster Service.
    #[error("the evaluation etcd is only reachable inside the cluster")]
    InCluster,
    /// etcd did not answer in time.
    #[error("etcd at {0} did not answer within {ETCD_TIMEOUT:?}")]
    Timeout(String),
    /// etcd refused or could not be reached.
    #[error("etcd at {endpoints} could not be used")]
    Store {
        /// The endpoints tried.
        endpoints: String,
        /// What the store said.
        #[source]
        source: StoreError,
    },
}

/// The URL members dial, or a placeholder to fill in.
pub fn hub_url_or_placeholder(hub_url: Option<&str>, options: &InstallOptions) -> String {
    hub_url.map_or_else(
        || format!("https://<hub-address>:{}", options.grpc_port),
        str::to_owned,
    )
}

/// Creates a bootstrap token in the hub's etcd, if reachable from here.
/// `connection` carries the TLS files and credentials of the install flags.
pub async fn create_token(
    options: &InstallOptions,
    connection: &EtcdConnection,
    ttl: Duration,
) -> Result<String, TokenError> {
    let EtcdMode::External { endpoints } = &options.etcd else {
        return Err(TokenError::InCluster);
    };
    let joined = endpoints.join(",");
    let attempt = async {
        let store = Store::connect_with(connection, Keyspace::new(&options.etcd_prefix)).await?;
        store
            .create_token(ttl, "created by accord-hub install")
            .await
    };
    match tokio::time::timeout(ETCD_TIMEOUT, attempt).await {
        Err(_) => Err(TokenError::Timeout(joined)),
        Ok(Err(source)) => Err(TokenError::Store {
            endpoints: joined,
            source,
        }),
        Ok(Ok(token)) => Ok(token.to_string()),
    }
}

/// The closing message: how to join a member cluster.
pub fn closing_message(
    options: &InstallOptions,
    hub_url: Option<&str>,
    ca_cert_hash: &str,
    token: Result<&str, &TokenError>,
    ttl: Duration,
) -> String {
    let ns = &options.namespace;
    let url = hub_url_or_placeholder(hub_url, options);
    let mut out = format!("accord-hub is installed in namespace {ns} (hub CA {ca_cert_hash}).\n");
    if hub_url.is_none() {
        out.push_str(&format!(
            "Members reach the hub through Service {ns}/{HUB_NAME} (port {port}); expose it \
             (--service-type LoadBalancer or NodePort, or an Ingress with TLS passthrough) and \
             re-run install with --hub-url https://ADDRESS:PORT so the hub's certificate names \
             that address.\n",
            port = options.grpc_port,
        ));
    }
    match token {
        Ok(token) => {
            out.push_str(&format!(
                "Join a member cluster (the token is valid for {}):\n  {}\n",
                humanize(ttl),
                join_line(&url, token, ca_cert_hash, "<cluster-name>")
            ));
        }
        Err(reason) => {
            let endpoints = options.etcd_endpoints().join(",");
            // Inside the hub's pod the etcd Secret is mounted and the user name is in the
            // environment: the same file flags as the hub's own.
            let tls: String = super::render::hub_args(options)
                .into_iter()
                .filter(|a| {
                    [
                        "--etcd-ca=",
                        "--etcd-cert=",
                        "--etcd-key=",
                        "--etcd-password-file=",
                    ]
                    .iter()
                    .any(|f| a.starts_with(f))
                })
                .map(|a| format!(" {a}"))
                .collect();
            out.push_str(&format!(
                "No join token was created from here ({reason}). Once the hub is running, \
                 create one inside the cluster:\n  \
                 kubectl -n {ns} exec deploy/{HUB_NAME} -- accord-hub token create \
                 --etcd-endpoints {endpoints}{tls} --etcd-prefix {prefix} --namespace {ns} \
                 --hub-url {url} --ttl {ttl}\n",
                prefix = options.etcd_prefix,
                ttl = humanize(ttl),
            ));
        }
    }
    out
}

/// `24h`, `90m`, `45s`: the largest unit that divides the duration.
fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    if s > 0 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s > 0 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "sha256:0123";
    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn with_a_token_the_message_is_a_ready_join_line() {
        let options = InstallOptions::default();
        let text = closing_message(
            &options,
            Some("https://hub.example:7443"),
            HASH,
            Ok("abc.def"),
            DAY,
        );
        assert!(text.contains(
            "accord-agent join --hub https://hub.example:7443 --token abc.def --ca-cert-hash sha256:0123 \
             --cluster-name <cluster-name> --kubeconfig <member-kubeconfig>"
        ));
        assert!(text.contains("valid for 24h"));
        assert!(!text.contains("expose it"));
    }

    #[test]
    fn without_etcd_access_the_message_is_the_token_create_command() {
        let options = InstallOptions::default();
        let text = closing_message(&options, None, HASH, Err(&TokenError::InCluster), DAY);
        assert!(text.contains(
            "kubectl -n accord-system exec deploy/accord-hub -- accord-hub token create \
             --etcd-endpoints http://accord-etcd.accord-system.svc:2379 --etcd-prefix /accord/ \
             --namespace accord-system --hub-url https://<hub-address>:7443 --ttl 24h"
        ));
        assert!(text.contains("only reachable inside the cluster"));
        assert!(text.contains("--hub-url https://ADDRESS:PORT"));
    }

    #[test]
    fn the_token_create_command_carries_the_hubs_etcd_file_flags() {
        let options = InstallOptions {
            etcd: EtcdMode::External {
                endpoints: vec!["https://etcd:2379".into()],
            },
            etcd_client: Some(crate::install::EtcdClientSecret {
                ca: true,
                client_certificate: true,
                auth: true,
                ..Default::default()
            }),
            ..InstallOptions::default()
        };
        let reason = TokenError::Timeout("https://etcd:2379".into());
        let text = closing_message(&options, None, HASH, Err(&reason), DAY);
        assert!(
            text.contains(
                "--etcd-endpoints https://etcd:2379 --etcd-ca=/etc/accord/etcd/ca.crt \
                 --etcd-cert=/etc/accord/etcd/tls.crt --etcd-key=/etc/accord/etcd/tls.key \
                 --etcd-password-file=/etc/accord/etcd/password --etcd-prefix /accord/"
            ),
            "{text}"
        );
    }

    #[test]
    fn durations_are_printed_as_flags_accept_them() {
        assert_eq!(humanize(DAY), "24h");
        assert_eq!(humanize(Duration::from_secs(90 * 60)), "90m");
        assert_eq!(humanize(Duration::from_secs(45)), "45s");
    }
}
