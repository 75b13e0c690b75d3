//! Small tools most policies need: reading pairs, matching topology,
//! sanitising names, stable hashing, backoff.

use crate::{Candidate, Candidates, Code, Operation, Pairs};

impl Candidates {
    /// The topology segments of a candidate.
    pub fn topology_of(&self, c: &Candidate) -> &Pairs {
        &self.topologies[c.topology as usize]
    }

    /// The operator's labels on a candidate.
    pub fn labels_of(&self, c: &Candidate) -> &Pairs {
        &self.label_sets[c.labels as usize]
    }
}

impl Code {
    /// The gRPC name, as the CSI spec writes it: `NOT_FOUND`, `UNAVAILABLE`...
    pub fn name(self) -> &'static str {
        match self {
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }
}

impl Operation {
    /// The CSI method name: `CreateVolume`, `NodePublishVolume`...
    pub fn name(self) -> &'static str {
        match self {
            Operation::CreateVolume => "CreateVolume",
            Operation::DeleteVolume => "DeleteVolume",
            Operation::ControllerPublishVolume => "ControllerPublishVolume",
            Operation::ControllerUnpublishVolume => "ControllerUnpublishVolume",
            Operation::NodeStageVolume => "NodeStageVolume",
            Operation::NodeUnstageVolume => "NodeUnstageVolume",
            Operation::NodePublishVolume => "NodePublishVolume",
            Operation::NodeUnpublishVolume => "NodeUnpublishVolume",
            Operation::ControllerExpandVolume => "ControllerExpandVolume",
            Operation::NodeExpandVolume => "NodeExpandVolume",
            Operation::CreateSnapshot => "CreateSnapshot",
            Operation::DeleteSnapshot => "DeleteSnapshot",
        }
    }

    /// Whether the operation undoes something (delete, unpublish, unstage),
    /// so that NOT_FOUND means the work is already done.
    pub fn is_undo(self) -> bool {
        matches!(
            self,
            Operation::DeleteVolume
                | Operation::ControllerUnpublishVolume
                | Operation::NodeUnstageVolume
                | Operation::NodeUnpublishVolume
                | Operation::DeleteSnapshot
        )
    }
}

/// The value of `key` in a list of pairs (settings, labels, topology...).
pub fn get<'a>(pairs: &'a Pairs, key: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// A setting parsed as a number, or `default` when absent.
/// A setting that is present but not a number is an error naming it.
pub fn number_setting(settings: &Pairs, key: &str, default: u64) -> Result<u64, String> {
    match get(settings, key) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("setting {key:?} must be a whole number, not {v:?}")),
    }
}

/// Whether every segment of `required` is present, with the same value, in `topology`.
pub fn satisfies(topology: &Pairs, required: &Pairs) -> bool {
    required.iter().all(|(k, v)| get(topology, k) == Some(v.as_str()))
}

/// Whether a node with `topology` can reach a volume accessible from any of
/// `accessible`; an empty list means everywhere.
pub fn reachable(topology: &Pairs, accessible: &[Pairs]) -> bool {
    accessible.is_empty() || accessible.iter().any(|t| satisfies(topology, t))
}

/// Parses `k=v,k2=v2` into pairs; blank input gives none.
pub fn parse_pairs(text: &str) -> Result<Pairs, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
            _ => Err(format!("{kv:?} is not key=value")),
        })
        .collect()
}

/// Lower-case ASCII letters and digits, with runs of anything else folded to
/// one `-` and no `-` at either end. May be empty.
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// FNV-1a, 64 bits: stable across runs, builds and platforms (unlike std's hasher).
pub fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `base * 2^(attempt-1)`, capped at `max`.
pub fn backoff_ms(attempt: u32, base: u64, max: u64) -> u64 {
    let exp = attempt.saturating_sub(1).min(63);
    base.saturating_mul(1u64 << exp).min(max)
}

/// `ms` moved randomly by up to `percent` percent either way, so that many
/// retries do not arrive together.
pub fn jitter(ms: u64, percent: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let spread = ms.saturating_mul(percent.min(100)) / 100;
    if spread == 0 {
        return ms;
    }
    // RandomState draws fresh keys from the host's random source.
    let r = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    ms - spread + r % (2 * spread + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(kv: &[(&str, &str)]) -> Pairs {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn sanitize_keeps_backend_friendly_characters() {
        assert_eq!(sanitize("My Data/Volume__01"), "my-data-volume-01");
        assert_eq!(sanitize("--x--"), "x");
        assert_eq!(sanitize("日本"), "");
    }

    #[test]
    fn stable_hash_is_fnv1a() {
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn topology_matching() {
        let node = pairs(&[("zone", "a"), ("rack", "1")]);
        assert!(satisfies(&node, &pairs(&[("zone", "a")])));
        assert!(!satisfies(&node, &pairs(&[("zone", "b")])));
        assert!(reachable(&node, &[]));
        assert!(reachable(
            &node,
            &[pairs(&[("zone", "b")]), pairs(&[("rack", "1")])]
        ));
    }

    #[test]
    fn backoff_doubles_then_caps() {
        assert_eq!(backoff_ms(1, 100, 1000), 100);
        assert_eq!(backoff_ms(3, 100, 1000), 400);
        assert_eq!(backoff_ms(40, 100, 1000), 1000);
        for _ in 0..100 {
            let j = jitter(1000, 10);
            assert!((900..=1100).contains(&j), "{j}");
        }
    }

    #[test]
    fn pairs_parse() {
        assert_eq!(
            parse_pairs(" a=1, b = 2 ,").unwrap(),
            pairs(&[("a", "1"), ("b", "2")])
        );
        assert!(parse_pairs("novalue").is_err());
        assert_eq!(number_setting(&pairs(&[("n", "7")]), "n", 1), Ok(7));
        assert!(number_setting(&pairs(&[("n", "x")]), "n", 1).is_err());
    }
}
