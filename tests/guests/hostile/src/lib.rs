//! A policy module that misbehaves in the way its `behaviour` setting names:
//!
//! - `loop`: never returns;
//! - `memory-bomb`: allocates until something stops it;
//! - `trap`: panics;
//! - `stack-overflow`: recurses until its stack (in linear memory) runs out;
//! - `huge-answer`: answers with megabytes;
//! - `invalid-answer`: an answer of the right type that breaks the contract
//!   (a name with a control character, the wrong number of verdicts, a retry
//!   delay of years, a volume shrunk below what its caller asked);
//! - `stateful`: remembers across calls, to show every decision gets a fresh instance;
//! - `read-file`, `environment`: reach for the host, to show WASI grants nothing;
//! - `echo`: answers whatever the request carries, for property tests of the
//!   host's checks: the name in the volume's label `answer` (or a refusal from
//!   label `refuse`); verdicts from labels `refusals` and `scores` (numbers
//!   separated by `,`) and `reasons` (separated by `;`); a retry decision from the failure's message
//!   (`retry-after MS`, `give-up REASON` or `done`);
//! - `dump-input`: shows what it was given: refuses to name a volume labelled
//!   `dump=naming` with its whole request as the reason, and gives up on every
//!   failure with the whole failure as the reason (tests look there for secrets);
//! - anything else: a well-formed answer.

use std::sync::atomic::{AtomicU64, Ordering};

use berth_guest::{
    Admission, AdmissionRequest, Candidates, Change, Decision, Failure, FieldChange, Naming, NamingRequest,
    Pairs, Placement, PlacementRequest, Retry, Verdict, Verdicts, get,
};

pub struct Hostile;

/// Recursion with a large frame on the guest's own stack (in linear memory).
#[inline(never)]
fn deep(n: u32) -> u64 {
    let frame = std::hint::black_box([n as u8; 4096]);
    if n == 0 {
        0
    } else {
        u64::from(frame[(n % 4096) as usize]) + deep(n - 1)
    }
}

static CALLS: AtomicU64 = AtomicU64::new(0);

/// Runs the named misbehaviour that has the same shape for every decision.
fn misbehave(settings: &Pairs) -> Option<&str> {
    let behaviour = get(settings, "behaviour").unwrap_or("");
    match behaviour {
        "loop" => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        "memory-bomb" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        "trap" => panic!("hostile guest trapped on purpose"),
        "stack-overflow" => {
            std::hint::black_box(deep(std::hint::black_box(1 << 20)));
            None
        }
        _ => Some(behaviour),
    }
}

impl Naming for Hostile {
    fn volume_name(request: NamingRequest) -> Result<String, String> {
        match misbehave(&request.settings) {
            Some("huge-answer") => Ok("x".repeat(8 << 20)),
            Some("invalid-answer") => Ok("bad\u{7}name".into()),
            Some("stateful") => Ok(format!("call-{}", CALLS.fetch_add(1, Ordering::SeqCst))),
            Some("read-file") => match std::fs::read_to_string("/etc/hostname") {
                Ok(text) => Ok(format!("leaked-{}", text.trim())),
                Err(e) => Err(format!("no file: {e}")),
            },
            Some("environment") => Ok(format!(
                "env-{}-args-{}",
                std::env::vars().count(),
                std::env::args().count()
            )),
            Some("dump-input") if get(&request.volume.labels, "dump") == Some("naming") => {
                Err(format!("input {request:?}"))
            }
            Some("echo") => match get(&request.volume.labels, "refuse") {
                Some(reason) => Err(reason.to_string()),
                None => Ok(get(&request.volume.labels, "answer").unwrap_or("").to_string()),
            },
            _ => Ok(format!("ok-{}", request.volume.name)),
        }
    }
}

/// Numbers separated by `,`; what does not parse is skipped.
fn numbers<T: std::str::FromStr>(text: Option<&str>) -> Vec<T> {
    let text = text.unwrap_or("");
    text.split(',').filter_map(|n| n.trim().parse().ok()).collect()
}

impl Placement for Hostile {
    fn place(request: PlacementRequest, candidates: Candidates) -> Verdicts {
        let n = candidates.len();
        let ok = |n: usize| Verdicts {
            refusals: vec![0; n],
            scores: vec![1; n],
            reasons: vec![],
        };
        let labels = &request.volume.labels;
        match misbehave(&request.settings) {
            Some("huge-answer") => Verdicts {
                refusals: vec![1; n],
                scores: vec![0; n],
                reasons: vec!["y".repeat(8 << 20)],
            },
            Some("invalid-answer") => ok(n.saturating_sub(1)),
            Some("echo") => Verdicts {
                refusals: numbers(get(labels, "refusals")),
                scores: numbers(get(labels, "scores")),
                reasons: get(labels, "reasons")
                    .unwrap_or("")
                    .split(';')
                    .filter(|r| !r.is_empty())
                    .map(str::to_string)
                    .collect(),
            },
            _ => ok(n),
        }
    }
}

impl Retry for Hostile {
    fn classify(failure: Failure) -> Decision {
        match misbehave(&failure.settings) {
            Some("huge-answer") => Decision::GiveUp("z".repeat(8 << 20)),
            Some("invalid-answer") => Decision::RetryAfter(u64::MAX),
            Some("dump-input") => Decision::GiveUp(format!("input {failure:?}")),
            Some("echo") => match failure.message.split_once(' ') {
                Some(("retry-after", ms)) => Decision::RetryAfter(ms.parse().unwrap_or(0)),
                Some(("give-up", reason)) => Decision::GiveUp(reason.to_string()),
                _ => Decision::Done,
            },
            _ => Decision::RetryAfter(1000),
        }
    }
}

impl Admission for Hostile {
    fn admit(request: AdmissionRequest) -> Verdict {
        match misbehave(&request.settings) {
            Some("huge-answer") => Verdict::Deny("w".repeat(8 << 20)),
            Some("invalid-answer") => Verdict::AllowWith(vec![FieldChange {
                change: Change::RequiredBytes(request.volume.capacity.required_bytes / 2),
                reason: "half is plenty".into(),
            }]),
            Some("dump-input") => Verdict::Deny(format!("input {request:?}")),
            _ => Verdict::Allow,
        }
    }
}

berth_guest::export_naming!(Hostile);
berth_guest::export_admission!(Hostile);
berth_guest::export_placement!(Hostile);
berth_guest::export_retry!(Hostile);
