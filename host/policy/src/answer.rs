//! The contract a guest's answer must meet, checked before Berth uses it.

use crate::{RetryDecision, Verdicts};

/// The CSI spec's limit for names (CreateVolumeRequest.name).
pub const MAX_NAME_BYTES: usize = 128;
/// A verdict's reason is for humans: a line, not a document.
pub const MAX_REASON_BYTES: usize = 256;
/// A retry delay of more than a day is a bug, not a policy.
pub const MAX_RETRY_DELAY_MS: u64 = 24 * 60 * 60 * 1000;

/// How an answer broke the contract.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("the volume name is empty")]
    EmptyName,
    #[error("the volume name is {0} bytes; CSI allows at most {MAX_NAME_BYTES}")]
    LongName(usize),
    #[error("the volume name contains the control character U+{:04X}, which CSI bans", *.0 as u32)]
    NameControl(char),
    #[error(
        "{refusals} refusals and {scores} scores for {candidates} candidates; there must be one of each per candidate"
    )]
    Verdicts {
        refusals: usize,
        scores: usize,
        candidates: usize,
    },
    #[error("candidate {candidate} is refused for reason {reason}, and there are {reasons} reasons")]
    NoSuchReason {
        candidate: usize,
        reason: u32,
        reasons: usize,
    },
    #[error("reason {0} is {1} bytes; at most {MAX_REASON_BYTES}")]
    LongReason(usize, usize),
    #[error("reason {index} contains the control character U+{:04X}; a reason is one line of text", *.character as u32)]
    ReasonControl { index: usize, character: char },
    #[error("{verdicts} verdicts for {candidates} candidates; there must be one per candidate")]
    VerdictCount { verdicts: usize, candidates: usize },
    /// The request itself was malformed (the host's bug, not the guest's).
    #[error("bad request: {0}")]
    Request(#[from] crate::candidates::ColumnsError),
    #[error("retry after {0} ms is more than a day ({MAX_RETRY_DELAY_MS} ms)")]
    LongDelay(u64),
    #[error("give-up needs a reason for the operator")]
    NoGiveUpReason,
    #[error("a denial needs a reason for the caller")]
    NoDenialReason,
    #[error("{0} changes; at most {MAX_ADMISSION_CHANGES}")]
    TooManyChanges(usize),
    #[error("changes answer a create-volume only; this was a {0}")]
    ChangesNotCreate(&'static str),
    #[error("change {index}: {why}")]
    BadChange { index: usize, why: &'static str },
}

/// Changes one admission answer may make to a new volume.
pub const MAX_ADMISSION_CHANGES: usize = 64;
/// A key or value an admission change sets, at most.
const MAX_CHANGE_TEXT: usize = 4096;

/// Whether an admission answer meets the contract for `call`: a reason
/// that is one line, changes for a create only, each within bounds and
/// never asking for less than the caller did.
pub fn validate_admission(
    call: &crate::AdmissionCall,
    asked_bytes: u64,
    verdict: &crate::AdmissionVerdict,
) -> Result<(), AnswerError> {
    use crate::{AdmissionCall as Call, AdmissionChange as Change, AdmissionVerdict as Verdict};
    let reason = |index: usize, text: &str| -> Result<(), AnswerError> {
        if text.len() > MAX_REASON_BYTES {
            return Err(AnswerError::LongReason(index, text.len()));
        }
        match text.chars().find(|c| c.is_control()) {
            Some(character) => Err(AnswerError::ReasonControl { index, character }),
            None => Ok(()),
        }
    };
    let changes = match verdict {
        Verdict::Allow => return Ok(()),
        Verdict::Deny(why) if why.trim().is_empty() => return Err(AnswerError::NoDenialReason),
        Verdict::Deny(why) => return reason(0, why),
        Verdict::AllowWith(changes) => changes,
    };
    if !matches!(call, Call::CreateVolume) {
        return Err(AnswerError::ChangesNotCreate(admission_call_name(call)));
    }
    if changes.len() > MAX_ADMISSION_CHANGES {
        return Err(AnswerError::TooManyChanges(changes.len()));
    }
    let text_ok = |t: &str| !t.is_empty() && t.len() <= MAX_CHANGE_TEXT && !t.chars().any(char::is_control);
    for (index, c) in changes.iter().enumerate() {
        reason(index, &c.reason)?;
        let bad = |why| Err(AnswerError::BadChange { index, why });
        match &c.change {
            Change::Parameter((k, v)) | Change::Label((k, v)) if !text_ok(k) || v.len() > MAX_CHANGE_TEXT => {
                return bad("a key is 1 to 4096 bytes of text, a value at most 4096");
            }
            Change::RequiredBytes(b) if *b < asked_bytes => {
                return bad("required-bytes may round a size up, never down");
            }
            Change::Plugin(p) if !text_ok(p) => return bad("a plugin is named by its name in berth.toml"),
            Change::RequisiteTopology(t) if t.len() > 64 || t.iter().any(|p| p.len() > 64) => {
                return bad("at most 64 topologies of 64 segments");
            }
            _ => {}
        }
    }
    Ok(())
}

/// The WIT name of an admission call.
pub fn admission_call_name(call: &crate::AdmissionCall) -> &'static str {
    use crate::AdmissionCall as Call;
    match call {
        Call::CreateVolume => "create-volume",
        Call::PublishVolume(_) => "publish-volume",
        Call::ExpandVolume(_) => "expand-volume",
        Call::ModifyVolume(_) => "modify-volume",
        Call::CreateSnapshot(_) => "create-snapshot",
        Call::DeleteVolume => "delete-volume",
    }
}

/// Whether `name` may be sent as `CreateVolumeRequest.name`: non-empty, at
/// most 128 bytes, and none of the control characters the CSI spec bans.
pub fn validate_volume_name(name: &str) -> Result<(), AnswerError> {
    if name.is_empty() {
        return Err(AnswerError::EmptyName);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(AnswerError::LongName(name.len()));
    }
    let banned = |c: char| matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{7f}'..='\u{9f}');
    if let Some(c) = name.chars().find(|&c| banned(c)) {
        return Err(AnswerError::NameControl(c));
    }
    Ok(())
}

pub fn validate_verdicts(verdicts: &Verdicts, candidates: usize) -> Result<(), AnswerError> {
    let (refusals, scores) = (verdicts.refusals.len(), verdicts.scores.len());
    if refusals != candidates || scores != candidates {
        return Err(AnswerError::Verdicts {
            refusals,
            scores,
            candidates,
        });
    }
    let reasons = verdicts.reasons.len();
    // `max` first: one vectorised pass in the common case.
    let highest = verdicts.refusals.iter().copied().max().unwrap_or(0);
    if highest as usize > reasons
        && let Some(i) = verdicts.refusals.iter().position(|r| *r as usize > reasons)
    {
        return Err(AnswerError::NoSuchReason {
            candidate: i,
            reason: verdicts.refusals[i],
            reasons,
        });
    }
    for (i, r) in verdicts.reasons.iter().enumerate() {
        validate_reason(i, r)?;
    }
    Ok(())
}

/// A reason is one line for an operator's terminal: bounded, and without
/// control characters (which could clear a screen or fake a line).
fn validate_reason(i: usize, reason: &str) -> Result<(), AnswerError> {
    if reason.len() > MAX_REASON_BYTES {
        return Err(AnswerError::LongReason(i, reason.len()));
    }
    // Printable ASCII, the common case, needs no decoding.
    if reason.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Ok(());
    }
    if let Some(c) = reason.chars().find(|c| c.is_control()) {
        return Err(AnswerError::ReasonControl {
            index: i,
            character: c,
        });
    }
    Ok(())
}

pub fn validate_retry(decision: &RetryDecision) -> Result<(), AnswerError> {
    match decision {
        RetryDecision::RetryAfter(ms) if *ms > MAX_RETRY_DELAY_MS => Err(AnswerError::LongDelay(*ms)),
        RetryDecision::GiveUp(reason) if reason.trim().is_empty() => Err(AnswerError::NoGiveUpReason),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_csi_rules() {
        assert!(validate_volume_name("pv-data-1a2b").is_ok());
        assert!(
            validate_volume_name("with space and ünïcödé\ttab").is_ok(),
            "tab and newline are allowed"
        );
        assert!(validate_volume_name(&"a".repeat(128)).is_ok());
        let refused = |name: &str| validate_volume_name(name).unwrap_err().to_string();
        assert!(refused("").contains("empty"));
        assert!(refused(&"a".repeat(129)).contains("129 bytes"));
        assert!(refused("bad\u{7}").contains("U+0007"));
        assert!(refused("c1\u{85}").contains("U+0085"));
    }

    #[test]
    fn verdicts_and_retries() {
        let v = |reason: &str| Verdicts {
            refusals: vec![1],
            scores: vec![0],
            reasons: vec![reason.into()],
        };
        assert!(validate_verdicts(&v("full"), 1).is_ok());
        let refused = |verdicts: &Verdicts, n: usize| validate_verdicts(verdicts, n).unwrap_err().to_string();
        assert!(refused(&v("ok"), 2).contains("for 2 candidates"));
        let mut past = v("full");
        past.refusals[0] = 2;
        assert!(refused(&past, 1).contains("reason 2"));
        let mut short = v("full");
        short.scores.clear();
        assert!(refused(&short, 1).contains("0 scores"));
        assert!(validate_verdicts(&v(&"r".repeat(300)), 1).is_err());
        for bad in ["\x1b[2Jgone", "nul\0", "two\nlines"] {
            let e = refused(&v(bad), 1);
            assert!(e.contains("control character"), "{e}");
        }
        // A give-up's reason is shown escaped; 0.1.0 modules may write any.
        assert!(validate_retry(&RetryDecision::GiveUp("a\x1bb".into())).is_ok());
        assert!(validate_retry(&RetryDecision::RetryAfter(1000)).is_ok());
        assert!(validate_retry(&RetryDecision::RetryAfter(u64::MAX)).is_err());
        assert!(validate_retry(&RetryDecision::GiveUp(" ".into())).is_err());
    }
}
