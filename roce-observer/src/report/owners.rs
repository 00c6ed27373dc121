//! The QP-owner section: which process owns each flow, by the host's QPs.

use std::{collections::HashMap, sync::Arc};

use super::{FlowSnapshot, QpOwner, ViewStamp};

/// The rule that names a flow's owner, over maps by local and remote QP number (so a host
/// with thousands of QPs and flows costs one pass over each). Traffic into a local QP carries
/// it as destination QP (ingress); traffic out of one carries its remote QP (egress), and then
/// the flow's `peer_qp` (its source QP, learned from the answers) says which local QP sent it
/// when several talk to remote QPs of that number (every rxe host numbers its first QPs alike).
/// A capture may hold either direction: local QPs first. Among QPs of one number, those still
/// alive come first (`owners` lists them in that order, see [`OwnerBook`]).
struct Index<'a> {
    local: HashMap<u32, Vec<&'a QpOwner>>,
    remote: HashMap<u32, Vec<&'a QpOwner>>,
}

impl<'a> Index<'a> {
    fn new(owners: &'a [QpOwner]) -> Index<'a> {
        let mut ix = Index {
            local: HashMap::new(),
            remote: HashMap::new(),
        };
        for o in owners {
            ix.local.entry(o.lqpn).or_default().push(o);
            if let Some(r) = o.rqpn {
                ix.remote.entry(r).or_default().push(o);
            }
        }
        ix
    }

    fn owner(&self, dst_qp: u32, peer_qp: Option<u32>, direction: &str) -> Option<&'a QpOwner> {
        let local = || self.local.get(&dst_qp).and_then(|v| v.first().copied());
        let remote = || {
            let v = self.remote.get(&dst_qp)?;
            v.iter()
                .copied()
                .find(|o| peer_qp.is_none_or(|p| p == o.lqpn))
        };
        match direction {
            "ingress" => local(),
            "egress" => remote(),
            _ => local().or_else(remote),
        }
    }
}

/// The owner of one flow (destination QP, source QP when known, direction): see [`Index`].
pub fn owner_of<'a>(
    owners: &'a [QpOwner],
    dst_qp: u32,
    peer_qp: Option<u32>,
    direction: &str,
) -> Option<&'a QpOwner> {
    Index::new(owners).owner(dst_qp, peer_qp, direction)
}

/// Set every flow's `owner` from the host's QPs. A view whose owner is already right is left
/// as it is (the engine shares unchanged views between snapshots); one that changes is copied.
pub fn label_flows(owners: &[QpOwner], flows: &mut [Arc<FlowSnapshot>]) {
    if owners.is_empty() {
        return;
    }
    let ix = Index::new(owners);
    for f in flows {
        let owner = ix.owner(f.dst_qp, f.peer_qp, f.direction);
        if f.owner.as_deref() != owner {
            let f = Arc::make_mut(f);
            f.owner = owner.cloned().map(Box::new);
            f.stamp = ViewStamp::new();
        }
    }
}
