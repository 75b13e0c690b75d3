//! What the worker owns: the queue of volumes with work to do, when each
//! retrying volume is due, and whether this server may act at all (with
//! several servers, only while it can vouch for its lease).

use crate::Tenure;
use crate::worker::deadlines::Deadlines;
use crate::worker::queue::Queue;

#[derive(Default)]
pub struct Work {
    pub(crate) queue: Queue,
    /// When each retrying volume is due, by the monotonic clock.
    pub(crate) deadlines: Deadlines,
    /// With several servers: whether this one may still act as the leader.
    pub(crate) tenure: std::sync::OnceLock<Tenure>,
    /// Whether the workers were started (a server whose stored policy set
    /// does not verify serves the API and acts on no volume until it does).
    pub(crate) started: std::sync::atomic::AtomicBool,
    /// Whether every stored volume was queued for a first look.
    pub(crate) first_pass_queued: std::sync::atomic::AtomicBool,
}

impl Work {
    /// Whether this server may act (always, with one server).
    pub(crate) fn may_act(&self) -> bool {
        self.tenure.get().is_none_or(|t| t())
    }

    /// Whether the workers run and this server may act: what a request
    /// needs to decide on the workers' behalf (a volume's name).
    pub(crate) fn acting(&self) -> bool {
        self.started.load(std::sync::atomic::Ordering::Acquire) && self.may_act()
    }
}
