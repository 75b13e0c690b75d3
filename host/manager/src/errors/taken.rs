//! A name already taken by something else (CSI's ALREADY_EXISTS, every
//! time): the API's ALREADY_EXISTS, with what holds the name.

use berth_model::text::echo;

#[derive(Debug, thiserror::Error)]
pub enum Taken {
    /// A volume's name, asked again with another spec.
    #[error("a volume named {name:?} already exists with a different spec{}", if *.deleting { " (being deleted)" } else { "" })]
    VolumeSpec { name: String, deleting: bool },
    #[error("a snapshot named {} already exists, of volume {}", echo(name), echo(volume))]
    Snapshot { name: String, volume: String },
    #[error("a group snapshot named {} already exists", echo(.0))]
    Group(String),
    #[error("group snapshot {} exists, of other volumes", echo(.0))]
    GroupOfOthers(String),
    /// A backend volume an adoption names that Berth already has.
    #[error(
        "volume {} of plugin {plugin:?} is Berth's volume {} already",
        echo(volume_id),
        echo(volume)
    )]
    Adopted {
        volume_id: String,
        plugin: String,
        volume: String,
    },
    /// A repeated publish that differs in access: the node keeps what it has.
    #[error(
        "volume {volume:?} is already published {now} on {node:?}; unpublish it first to publish it {asked}"
    )]
    PublishedOtherwise {
        volume: String,
        node: String,
        now: &'static str,
        asked: &'static str,
    },
}
