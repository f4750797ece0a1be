//! Pins the wire numbers of the fields that carry optimistic concurrency and identity, so a
//! renumbering (which would silently break mixed-version hubs and agents) fails CI.

use accord_proto::v1::{
    Ack, AgentMessage, Assignments, CertificateRenewed, Hello, HubMessage, MemberHealth,
    RefusalReason, Removal, RenewCertificate, StatusAck, StatusReport, agent_message, hub_message,
    status_ack,
};
use prost::Message;

/// Encodes a message and returns the field numbers present, in order.
fn field_numbers(bytes: &[u8]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut buf = bytes;
    while !buf.is_empty() {
        let key = prost::encoding::decode_varint(&mut buf).unwrap();
        let wire_type = prost::encoding::WireType::try_from(key & 7).unwrap();
        out.push((key >> 3) as u32);
        prost::encoding::skip_field(wire_type, (key >> 3) as u32, &mut buf, Default::default())
            .unwrap();
    }
    out
}

#[test]
fn status_report_concurrency_fields_keep_their_numbers() {
    let report = StatusReport {
        resource_version: "8812".into(),
        generation: 5,
        expected_version: 42,
        applied_revision: 7,
        ..Default::default()
    };
    assert_eq!(field_numbers(&report.encode_to_vec()), vec![2, 3, 4, 10]);
}

#[test]
fn assignments_revision_is_field_one() {
    let a = Assignments {
        revision: 9,
        full: true,
        ..Default::default()
    };
    assert_eq!(field_numbers(&a.encode_to_vec()), vec![1, 2]);
}

#[test]
fn status_ack_accepted_and_conflict_keep_their_numbers() {
    let accepted = StatusAck {
        placed: None,
        result: Some(status_ack::Result::Accepted(3)),
        ..Default::default()
    };
    let conflict = StatusAck {
        placed: None,
        result: Some(status_ack::Result::Conflict(4)),
        reason: RefusalReason::StaleVersion as i32,
    };
    assert_eq!(field_numbers(&accepted.encode_to_vec()), vec![2]);
    assert_eq!(field_numbers(&conflict.encode_to_vec()), vec![3, 4]);
}

#[test]
fn the_store_epoch_removals_renewal_and_member_health_have_their_own_numbers() {
    let a = Assignments {
        store_epoch: 7,
        removed: vec![Removal {
            placed: None,
            revision: 3,
        }],
        ..Default::default()
    };
    assert_eq!(field_numbers(&a.encode_to_vec()), vec![5, 6]);
    let hello = Hello {
        store_epoch: 7,
        member_health: Some(MemberHealth::default()),
        ..Default::default()
    };
    assert_eq!(field_numbers(&hello.encode_to_vec()), vec![4, 5]);
    let renew = AgentMessage {
        cluster: String::new(),
        body: Some(agent_message::Body::Renew(RenewCertificate::default())),
    };
    assert_eq!(field_numbers(&renew.encode_to_vec()), vec![6]);
    let health = AgentMessage {
        cluster: String::new(),
        body: Some(agent_message::Body::MemberHealth(MemberHealth::default())),
    };
    assert_eq!(field_numbers(&health.encode_to_vec()), vec![7]);
    let renewed = HubMessage {
        body: Some(hub_message::Body::Renewed(CertificateRenewed::default())),
    };
    assert_eq!(field_numbers(&renewed.encode_to_vec()), vec![3]);
}

#[test]
fn envelopes_round_trip() {
    let up = AgentMessage {
        cluster: "member-1".into(),
        body: Some(agent_message::Body::Ack(Ack { revision: 12 })),
    };
    assert_eq!(
        AgentMessage::decode(up.encode_to_vec().as_slice()).unwrap(),
        up
    );
    let down = HubMessage {
        body: Some(hub_message::Body::Assignments(Assignments {
            revision: 1,
            ..Default::default()
        })),
    };
    assert_eq!(
        HubMessage::decode(down.encode_to_vec().as_slice()).unwrap(),
        down
    );
}

#[test]
fn the_typed_state_and_the_scale_request_id_have_their_own_numbers() {
    use accord_proto::v1::{PlacementState, ScaleStatus, status_report};
    let report = StatusReport {
        state: PlacementState::Synced as i32,
        observed: Some(status_report::Observed::Scale(ScaleStatus {
            scale_request_id: "01J".into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    assert_eq!(field_numbers(&report.encode_to_vec()), vec![7, 13]);
    let replicas = ScaleStatus {
        scale_request_id: "01J".into(),
        ..Default::default()
    };
    assert_eq!(field_numbers(&replicas.encode_to_vec()), vec![5]);
}

#[test]
fn the_api_server_unavailable_flag_is_field_fourteen() {
    let report = StatusReport {
        api_server_unavailable: true,
        ..Default::default()
    };
    assert_eq!(field_numbers(&report.encode_to_vec()), vec![14]);
}
