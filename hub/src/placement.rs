//! Placement engine (interim version; replaced by the full engine with property tests).

/// A cluster that takes part in a division.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Cluster name.
    pub cluster: String,
    /// Weight, > 0.
    pub weight: u32,
    /// Fewest replicas.
    pub min: u32,
    /// Most replicas.
    pub max: Option<u32>,
}

/// A cluster's share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// Cluster name.
    pub cluster: String,
    /// Replicas.
    pub replicas: u32,
}

/// Result of a division.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Division {
    /// Shares summing to the total.
    Exact(Vec<Share>),
    /// The bounds make the total impossible.
    Infeasible {
        /// Why.
        reason: String,
        /// The closest division the bounds allow.
        best_effort: Vec<Share>,
    },
}

/// Webster / Sainte-Laguë by sequential seat assignment within bounds.
pub fn divide(total: u32, candidates: &[Candidate]) -> Division {
    let mut seats: Vec<u32> = candidates.iter().map(|c| c.min).collect();
    let shares = |seats: &[u32]| {
        candidates
            .iter()
            .zip(seats)
            .map(|(c, s)| Share { cluster: c.cluster.clone(), replicas: *s })
            .collect::<Vec<_>>()
    };
    let mins: u64 = seats.iter().map(|s| u64::from(*s)).sum();
    if candidates.is_empty() && total > 0 {
        return Division::Infeasible { reason: "no eligible cluster".into(), best_effort: vec![] };
    }
    if mins > u64::from(total) {
        return Division::Infeasible {
            reason: format!("the minReplicas of the eligible clusters add up to {mins}, more than {total}"),
            best_effort: shares(&seats),
        };
    }
    let mut placed = mins;
    while placed < u64::from(total) {
        let mut best: Option<usize> = None;
        for (i, c) in candidates.iter().enumerate() {
            if c.max.is_some_and(|m| seats[i] >= m) {
                continue;
            }
            best = Some(match best {
                None => i,
                Some(b) => {
                    let lhs = u64::from(c.weight) * (2 * u64::from(seats[b]) + 1);
                    let rhs = u64::from(candidates[b].weight) * (2 * u64::from(seats[i]) + 1);
                    let better = lhs > rhs
                        || (lhs == rhs
                            && (c.weight, std::cmp::Reverse(&c.cluster))
                                > (candidates[b].weight, std::cmp::Reverse(&candidates[b].cluster)));
                    if better { i } else { b }
                }
            });
        }
        let Some(i) = best else {
            return Division::Infeasible {
                reason: format!("every eligible cluster is at its maxReplicas; only {placed} of {total} fit"),
                best_effort: shares(&seats),
            };
        };
        seats[i] += 1;
        placed += 1;
    }
    Division::Exact(shares(&seats))
}
