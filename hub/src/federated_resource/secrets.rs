//! The Secrets a FederatedResource delivers (`spec.secretRefs`): the decision records each
//! one's name, type and hash ([`crate::distribution::secrets::Secrets::reference`]), and
//! [`enclose`] adds their data when an assignment is sent.

use accord_proto::v1::assignment;

use crate::distribution::secrets::Secrets;

/// Adds the data of every Secret a FederatedResource assignment names, as this replica
/// sees it now (the decision's hash stays: a changed Secret brings a new decision).
pub fn enclose(secrets: &Secrets, namespace: &str, spec: &mut assignment::Spec) {
    let assignment::Spec::FederatedResource(spec) = spec else {
        return;
    };
    for payload in &mut spec.secrets {
        if let Some((_, data)) = secrets.contents(namespace, &payload.name) {
            payload.data = data.into_iter().collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_proto::v1::{FederatedResourceAssignment, SecretPayload};

    #[test]
    fn without_a_store_nothing_is_enclosed() {
        let mut spec = assignment::Spec::FederatedResource(FederatedResourceAssignment {
            secrets: vec![SecretPayload {
                name: "db".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        enclose(&Secrets::none(), "team", &mut spec);
        let assignment::Spec::FederatedResource(spec) = spec else {
            unreachable!()
        };
        assert!(spec.secrets[0].data.is_empty());
    }
}
