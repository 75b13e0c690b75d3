//! Failures as the node agent reports them. A node call's failure as the
//! cluster protocol carries it, both ways: the CSI method that failed, its
//! code and message, and whether the plugin was unreachable or the failure
//! was the agent's own (`Failure::Local`); and the agent's own readings of
//! a plugin's answer (NOT_FOUND from an undo is done; a record it could not
//! write is its own failure).

use berth_proto::berth::v1 as wire;

use berth_csi::{CsiError, Failure};

pub fn failure_to_wire(e: &CsiError) -> wire::Failure {
    let message = match &e.failure {
        Failure::Status { message, .. } | Failure::Local { message, .. } => message.clone(),
        Failure::Unreachable(why) | Failure::Invalid(why) => why.clone(),
        Failure::Deadline(_) => e.failure.to_string(),
    };
    wire::Failure {
        call: e.call.to_string(),
        code: e.failure.code() as i32,
        message,
        unreachable: matches!(e.failure, Failure::Unreachable(_)),
        local: matches!(e.failure, Failure::Local { .. }),
    }
}

/// A failure an agent reported, as the server's callers see it.
pub fn failure_from_wire(plugin: String, f: wire::Failure) -> CsiError {
    const CALLS: [&str; 6] = [
        "NodeStageVolume",
        "NodePublishVolume",
        "NodeUnpublishVolume",
        "NodeUnstageVolume",
        "NodeExpandVolume",
        "NodeGetVolumeStats",
    ];
    let call = CALLS.into_iter().find(|c| *c == f.call).unwrap_or("node call");
    let failure = if f.unreachable {
        Failure::Unreachable(f.message)
    } else if f.local {
        Failure::Local {
            code: tonic::Code::from_i32(f.code),
            message: f.message,
        }
    } else {
        Failure::Status {
            code: tonic::Code::from_i32(f.code),
            message: f.message,
        }
    };
    CsiError {
        plugin,
        call,
        failure,
    }
}

/// NOT_FOUND from an unpublish or unstage: the plugin holds nothing of the
/// volume there, so that call is done and undoing goes on to the next (a
/// staging path is never left mounted behind a target already gone).
pub(crate) fn gone_is_done(id: &str, outcome: Result<(), CsiError>) -> Result<(), CsiError> {
    match outcome {
        Err(e) if e.failure.code() == tonic::Code::NotFound => {
            tracing::info!(volume = %id, call = e.call, "the plugin has nothing of the volume here; taken as done");
            Ok(())
        }
        other => other,
    }
}

/// The node record refused a write: the agent's own failure, which may
/// pass (a full or failing disk), not the plugin's.
pub(crate) fn recording(e: berth_store::StoreError) -> CsiError {
    CsiError {
        plugin: "agent".into(),
        call: "recording the node's state",
        failure: Failure::Local {
            code: tonic::Code::Unavailable,
            message: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_own_failure_crosses_the_wire_as_its_own_not_the_plugins() {
        let e = recording(berth_store::StoreError::Open {
            path: "/var/lib/berth/agent.redb".into(),
            message: "No space left on device".into(),
        });
        let back = failure_from_wire("agent node-a".into(), failure_to_wire(&e));
        assert!(
            matches!(
                back.failure,
                Failure::Local {
                    code: tonic::Code::Unavailable,
                    ..
                }
            ),
            "{back:?}"
        );
        let shown = back.to_string();
        assert!(!shown.contains("CSI plugin"), "{shown}");
        assert!(shown.starts_with("agent node-a: "), "{shown}");
        // A plugin's failure stays the plugin's.
        let plugin = CsiError {
            plugin: "hostpath".into(),
            call: "NodeStageVolume",
            failure: Failure::Status {
                code: tonic::Code::Internal,
                message: "boom".into(),
            },
        };
        let back = failure_from_wire("agent node-a".into(), failure_to_wire(&plugin));
        assert!(matches!(back.failure, Failure::Status { .. }), "{back:?}");
        assert_eq!(back.call, "NodeStageVolume");
    }
}
