//! Small tools most policies need: reading pairs, matching topology,
//! sanitising names, stable hashing, backoff.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::shared::Fnv;
use crate::{Code, Operation, Pairs, Verdicts};

impl Verdicts {
    /// Whether node `i` may take the volume.
    pub fn is_eligible(&self, i: usize) -> bool {
        self.refusals[i] == 0
    }

    /// Why node `i` was refused; `None` when it is eligible.
    pub fn reason(&self, i: usize) -> Option<&str> {
        let r = self.refusals[i] as usize;
        (r > 0).then(|| self.reasons[r - 1].as_str())
    }
}

/// A reason added to a [`VerdictsBuilder`], to refuse any number of nodes for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reason(u32);

/// Builds a placement answer: every node starts eligible with score 0; each
/// distinct reason is sent once, however many nodes it refuses.
pub struct VerdictsBuilder {
    verdicts: Verdicts,
    seen: HashMap<String, Reason, BuildHasherDefault<Fnv>>,
}

impl VerdictsBuilder {
    /// Verdicts on `nodes` nodes (`candidates.len()`).
    pub fn new(nodes: usize) -> Self {
        VerdictsBuilder {
            verdicts: Verdicts {
                refusals: vec![0; nodes],
                scores: vec![0; nodes],
                reasons: Vec::new(),
            },
            seen: HashMap::default(),
        }
    }

    /// Among eligible nodes, higher is better.
    pub fn score(&mut self, node: usize, score: i32) {
        self.verdicts.scores[node] = score;
    }

    /// Adds `text` as a reason, for [`refuse_for`](Self::refuse_for): the
    /// fastest way when one reason refuses many nodes (a topology, say).
    pub fn reason(&mut self, text: impl Into<String>) -> Reason {
        self.verdicts.reasons.push(text.into());
        Reason(self.verdicts.reasons.len() as u32)
    }

    pub fn refuse_for(&mut self, node: usize, reason: Reason) {
        self.verdicts.refusals[node] = reason.0;
    }

    /// Refuses `node` because of `text`, shared with every node refused for
    /// the same text.
    pub fn refuse(&mut self, node: usize, text: &str) {
        let reason = match self.seen.get(text) {
            Some(r) => *r,
            None => {
                let r = self.reason(text);
                self.seen.insert(text.to_string(), r);
                r
            }
        };
        self.refuse_for(node, reason);
    }

    pub fn finish(self) -> Verdicts {
        self.verdicts
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

crate::shared::operation_names!();

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

/// Key/value pairs that can be looked up by key: [`Pairs`], and a topology
/// or label set of the candidates ([`Segments`](crate::Segments)).
pub trait Lookup {
    fn value(&self, key: &str) -> Option<&str>;
}

impl Lookup for Pairs {
    fn value(&self, key: &str) -> Option<&str> {
        get(self, key)
    }
}

/// Whether every segment of `required` is present, with the same value, in `topology`.
pub fn satisfies(topology: &impl Lookup, required: &Pairs) -> bool {
    required
        .iter()
        .all(|(k, v)| topology.value(k) == Some(v.as_str()))
}

/// Whether a node with `topology` can reach a volume accessible from any of
/// `accessible`; an empty list means everywhere.
pub fn reachable(topology: &impl Lookup, accessible: &[Pairs]) -> bool {
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
    fn verdicts_send_each_reason_once() {
        let mut v = VerdictsBuilder::new(4);
        let far = v.reason("topology zone=b is outside zone=a");
        v.refuse_for(1, far);
        v.refuse(2, "full");
        v.refuse(3, "full");
        v.score(0, 7);
        let v = v.finish();
        assert_eq!(v.reasons.len(), 2);
        assert_eq!(v.refusals, vec![0, 1, 2, 2]);
        assert!(v.is_eligible(0) && !v.is_eligible(3));
        assert_eq!((v.reason(0), v.reason(3)), (None, Some("full")));
        assert_eq!(v.scores[0], 7);
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
