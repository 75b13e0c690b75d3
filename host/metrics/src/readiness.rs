//! What `/readyz` answers: named checks, each asked at request time, so
//! readiness follows the store and the plugins as they come and go.

use std::sync::{Arc, Mutex};

/// Why a check fails: one line for `/readyz`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotReady(pub String);

impl From<String> for NotReady {
    fn from(why: String) -> Self {
        NotReady(why)
    }
}

impl From<&str> for NotReady {
    fn from(why: &str) -> Self {
        NotReady(why.to_string())
    }
}

/// One check: `Ok` with a short note, or why it is not ready.
pub type Check = Box<dyn Fn() -> Result<String, NotReady> + Send + Sync>;

/// The checks of one process. A check set again under its name replaces
/// the old one (a new term's store check replaces the last term's).
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Arc<Mutex<Vec<(&'static str, Check)>>>,
}

/// The answer to one `/readyz`.
pub struct Report {
    pub ready: bool,
    /// One line per check, `[+]name: note` or `[-]name: why`.
    pub lines: Vec<String>,
}

impl Readiness {
    pub fn set(&self, name: &'static str, check: Check) {
        let mut checks = self.checks.lock().unwrap_or_else(|p| p.into_inner());
        match checks.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = check,
            None => checks.push((name, check)),
        }
    }

    /// A check that passes with `note` (an API socket once bound).
    pub fn set_ok(&self, name: &'static str, note: String) {
        self.set(name, Box::new(move || Ok(note.clone())));
    }

    /// A check that fails with `why` until set again.
    pub fn set_failing(&self, name: &'static str, why: String) {
        self.set(name, Box::new(move || Err(NotReady(why.clone()))));
    }

    pub fn report(&self) -> Report {
        let checks = self.checks.lock().unwrap_or_else(|p| p.into_inner());
        let mut ready = !checks.is_empty();
        let lines = checks
            .iter()
            .map(|(name, check)| match check() {
                Ok(note) => format!("[+]{name}: {note}"),
                Err(why) => {
                    ready = false;
                    format!("[-]{name}: {why}")
                }
            })
            .collect();
        Report { ready, lines }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_check_passes() {
        let r = Readiness::default();
        assert!(!r.report().ready, "no checks yet: not ready");
        r.set_ok("api", "serving".into());
        r.set_failing("store", "not open".into());
        let report = r.report();
        assert!(!report.ready);
        assert_eq!(report.lines, ["[+]api: serving", "[-]store: not open"]);
        r.set_ok("store", "open".into());
        assert!(r.report().ready);
    }
}
