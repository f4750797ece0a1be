//! One placement decision over a 10,000-cluster fleet with taints, preferences, spread and a
//! cluster count: the framework's choice ([`choose`]) and the explanation written to the
//! object's status ([`explain`]), as the hub runs them for every reconcile of an object.
//!
//! `cargo bench -p accord-hub --bench placement`

use std::collections::HashSet;

use accord_crds::ClusterPlacement;
use accord_crds::managed_cluster::TaintEffect;
use accord_hub::distribution::choose::{choose, explain};
use accord_hub::distribution::record::ShareRecord;
use accord_hub::distribution::select::{ClusterInfo, Clusters};
use accord_hub::distribution::taints::SeenTaint;
use criterion::{Criterion, criterion_group, criterion_main};

const CLUSTERS: usize = 10_000;

/// 10,000 clusters over 10 regions and 30 zones; one in 20 away, one in 10 tainted
/// NoSchedule, one in 20 PreferNoSchedule, one in 50 NoExecute.
fn fleet() -> Clusters {
    (0..CLUSTERS)
        .map(|i| {
            let effect = match i % 100 {
                0..=9 => Some(TaintEffect::NoSchedule),
                10..=14 => Some(TaintEffect::PreferNoSchedule),
                15..=16 => Some(TaintEffect::NoExecute),
                _ => None,
            };
            let info = ClusterInfo {
                labels: [
                    ("tier".to_owned(), "prod".to_owned()),
                    ("region".to_owned(), format!("r{}", i % 10)),
                    ("zone".to_owned(), format!("z{}", i % 30)),
                ]
                .into(),
                available: i % 20 != 7,
                taints: effect
                    .map(|effect| SeenTaint {
                        key: format!("team-{}", i % 3),
                        value: None,
                        effect,
                        since_unix: 0,
                    })
                    .into_iter()
                    .collect(),
                ..ClusterInfo::default()
            };
            (format!("cluster-{i:05}"), info)
        })
        .collect()
}

fn placement() -> ClusterPlacement {
    serde_saphyr::from_str(
        "clusterSelector: {matchLabels: {tier: prod}}
tolerations: [{key: team-0, operator: Exists}]
preferences:
- {name: west, clusterSelector: {matchExpressions: [{key: region, operator: In, values: [r0, r1, r2]}]}}
- {name: east, clusterSelector: {matchExpressions: [{key: region, operator: NotIn, values: [r0, r1, r2]}]}}
numberOfClusters: 100
spread: {byLabel: zone, minGroups: 3, maxGroups: 10}
",
    )
    .expect("the bench's placement parses")
}

fn bench(c: &mut Criterion) {
    let fleet = fleet();
    let placement = placement();
    // The previous decision: 100 clusters of the first region.
    let placed: HashSet<String> = fleet.keys().step_by(30).take(100).cloned().collect();
    let before = |name: &str| placed.contains(name);
    let choice = choose(&placement, &fleet, &before, 0).expect("the placement is valid");
    assert_eq!(choice.selected.len(), 100, "{:?}", choice.unsatisfied);
    let shares: Vec<ShareRecord> = choice
        .selected
        .iter()
        .map(|s| ShareRecord {
            since: None,
            cluster: s.name.clone(),
            assignment: None,
            held_reason: None,
            hold: None,
        })
        .collect();
    c.bench_function(
        "choose 100 of 10,000 clusters (taints, preferences, spread)",
        |b| b.iter(|| choose(&placement, &fleet, &before, 0)),
    );
    c.bench_function("choose and explain, 10,000 clusters", |b| {
        b.iter(|| {
            let choice = choose(&placement, &fleet, &before, 0).expect("valid");
            explain(Some(&choice), &shares, &fleet, Some(&placement), 0)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
