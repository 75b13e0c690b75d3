//! What the nemesis (`tests/benches/nemesis/`) keeps of its workload, and
//! its checker: pure functions over the plugins' journal, the workload's
//! history and Berth's volumes, here so that their own tests run with the
//! suite (a checker that cannot see a violation proves nothing).

pub mod check;
pub mod linear;

use tonic::Code;

/// One request of the workload.
#[derive(Clone, Debug)]
pub enum Op {
    Create {
        mode: &'static str,
    },
    Publish {
        node: String,
    },
    Unpublish {
        node: String,
    },
    Snapshot {
        snapshot: String,
    },
    DeleteSnapshot {
        snapshot: String,
    },
    Expand {
        bytes: i64,
    },
    Delete,
    /// A read of the volume; what it saw is the record's `seen`.
    Get,
}

/// What a read saw of a volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// NOT_FOUND.
    Missing,
    /// There, being deleted.
    Deleting,
    /// There, published (or being published) on these nodes.
    Nodes(std::collections::BTreeSet<String>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// Berth refused it: nothing changed.
    Refused(Code),
    /// No certain answer: it may or may not have happened.
    Unknown,
}

#[derive(Clone, Debug)]
pub struct Record {
    pub volume: String,
    pub op: Op,
    /// Milliseconds since the run started.
    pub invoked: u64,
    pub completed: u64,
    pub outcome: Outcome,
    /// A read's answer (`Op::Get` answered for certain).
    pub seen: Option<Seen>,
}
