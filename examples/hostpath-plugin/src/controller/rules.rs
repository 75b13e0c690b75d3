//! What the sample controller checks of a request, and how it pages a
//! list: the secret `--require-secret` asks for, required fields, whether
//! an access mode is single-node, a volume's condition, List* pages.

use tonic::Status;

use crate::config::Config;
use crate::volumes::Segments;
use berth_proto::csi::v1 as csi;

/// With --require-secret, a call that takes secrets must carry the right one.
pub fn check_secrets(
    config: &Config,
    secrets: &std::collections::HashMap<String, String>,
) -> Result<(), Status> {
    match &config.require_secret {
        Some((k, v)) if secrets.get(k) != Some(v) => Err(Status::unauthenticated(format!(
            "secret {k:?} is missing or wrong"
        ))),
        _ => Ok(()),
    }
}

pub(crate) fn require(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        Err(Status::invalid_argument(format!("{field} is required")))
    } else {
        Ok(())
    }
}

/// A volume is abnormal when its data directory is gone, or holds a file
/// named `.abnormal` (whose text is the message): a fault an operator or a
/// test can make for real.
pub fn condition(data: &std::path::Path) -> csi::VolumeCondition {
    let (abnormal, message) = match std::fs::read_to_string(data.join(".abnormal")) {
        Ok(text) => (true, text.trim().to_string()),
        Err(_) if !data.is_dir() => (true, "the volume's data directory is missing".to_string()),
        Err(_) => (false, "ok".to_string()),
    };
    csi::VolumeCondition { abnormal, message }
}

/// A page of `all` from `starting_token` (an index), as List* calls answer.
pub(crate) fn page<T>(
    all: Vec<T>,
    starting_token: &str,
    max_entries: i32,
) -> Result<(Vec<T>, String), Status> {
    let start: usize = if starting_token.is_empty() {
        0
    } else {
        starting_token
            .parse()
            .ok()
            .filter(|&s| s <= all.len())
            .ok_or_else(|| Status::aborted(format!("starting_token {starting_token:?} is not valid")))?
    };
    let max = if max_entries > 0 {
        max_entries as usize
    } else {
        usize::MAX
    };
    let total = all.len();
    let page: Vec<T> = all.into_iter().skip(start).take(max).collect();
    let next = start + page.len();
    Ok((
        page,
        if next < total {
            next.to_string()
        } else {
            String::new()
        },
    ))
}

pub(crate) fn segments(t: &csi::Topology) -> Segments {
    t.segments.clone().into_iter().collect()
}

pub(crate) fn single_node(cap: &csi::VolumeCapability) -> bool {
    use csi::volume_capability::access_mode::Mode;
    matches!(
        cap.access_mode.as_ref().and_then(|m| Mode::try_from(m.mode).ok()),
        Some(
            Mode::SingleNodeWriter
                | Mode::SingleNodeReaderOnly
                | Mode::SingleNodeSingleWriter
                | Mode::SingleNodeMultiWriter
        )
    )
}
