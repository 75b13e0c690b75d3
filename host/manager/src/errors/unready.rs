//! Why a request cannot be answered now but may be shortly: the API's
//! UNAVAILABLE, keeping the store's, the plugin's or the policy's error as
//! its source.

use berth_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum Unready {
    #[error("the store refused {what}: {source}")]
    Store {
        what: String,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    Plugin(#[from] berth_csi::CsiError),
    #[error(transparent)]
    Policy(#[from] berth_policy::PolicyError),
    #[error("plugin {0:?} is not fingerprinted yet: try again shortly")]
    NotFingerprinted(String),
    #[error(
        "the node plugin of {plugin:?} on {node:?} has not reported its topology yet, so Berth cannot tell whether it reaches {volume:?}; try again shortly"
    )]
    TopologyUnknown {
        plugin: String,
        node: String,
        volume: String,
    },
    /// Placement left no node: each node's refusal, as the policy gave it.
    #[error("no eligible node for {volume:?} ({refusals})")]
    NoEligibleNode { volume: String, refusals: String },
}

impl Unready {
    pub fn store(what: impl Into<String>, source: StoreError) -> Self {
        Unready::Store {
            what: what.into(),
            source,
        }
    }
}
