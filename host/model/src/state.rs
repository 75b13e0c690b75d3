//! The words operators see for where a volume and its publications are,
//! derived from a record (never stored).

use std::fmt;
use std::str::FromStr;

/// Where a volume is, in one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VolumeState {
    /// Declared; not named yet.
    Pending,
    /// Named; CreateVolume not answered yet.
    Creating,
    /// Created, published nowhere.
    Available,
    /// Published on at least one node.
    Published,
    /// Being unpublished and deleted.
    Deleting,
    /// A give-up: waits for an operator.
    Failed,
}

impl VolumeState {
    pub const ALL: [VolumeState; 6] = [
        VolumeState::Pending,
        VolumeState::Creating,
        VolumeState::Available,
        VolumeState::Published,
        VolumeState::Deleting,
        VolumeState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VolumeState::Pending => "pending",
            VolumeState::Creating => "creating",
            VolumeState::Available => "available",
            VolumeState::Published => "published",
            VolumeState::Deleting => "deleting",
            VolumeState::Failed => "failed",
        }
    }

    /// Its place in [`VolumeState::ALL`], for counting by state.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Created and usable (what `--wait` on a create waits for).
    pub fn is_ready(self) -> bool {
        matches!(self, VolumeState::Available | VolumeState::Published)
    }
}

/// How far a publication has got, in one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PublicationState {
    /// Wanted; nothing done yet.
    Pending,
    ControllerPublished,
    Staged,
    Published,
    /// No longer wanted; being undone.
    Unpublishing,
}

impl PublicationState {
    pub const ALL: [PublicationState; 5] = [
        PublicationState::Pending,
        PublicationState::ControllerPublished,
        PublicationState::Staged,
        PublicationState::Published,
        PublicationState::Unpublishing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PublicationState::Pending => "pending",
            PublicationState::ControllerPublished => "controller-published",
            PublicationState::Staged => "staged",
            PublicationState::Published => "published",
            PublicationState::Unpublishing => "unpublishing",
        }
    }
}

macro_rules! words {
    ($t:ty, $what:literal) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                <$t>::ALL
                    .into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| format!("{s:?} is not a {}", $what))
            }
        }
    };
}

words!(VolumeState, "volume state");
words!(PublicationState, "publication state");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_read_back_from_their_names() {
        for (i, s) in VolumeState::ALL.into_iter().enumerate() {
            assert_eq!(s.index(), i);
            assert_eq!(s.as_str().parse::<VolumeState>(), Ok(s));
        }
        for s in PublicationState::ALL {
            assert_eq!(s.to_string().parse::<PublicationState>(), Ok(s));
        }
        assert!("gone".parse::<VolumeState>().is_err());
    }
}
