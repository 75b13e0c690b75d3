//! The volume plugin protocol's messages, as Docker and Podman send and
//! expect them: JSON with Go's field names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Create, Remove, Mount, Unmount, Path, Get: a volume by name, and for
/// Create its `-o` options, for Mount and Unmount the caller's mount ID.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct VolumeRequest {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Opts")]
    pub opts: Option<BTreeMap<String, String>>,
    #[serde(rename = "ID")]
    pub id: String,
}

/// Every answer: `Err` empty on success, the rest as the call has them.
#[derive(Debug, Default, Serialize)]
pub struct Answer {
    #[serde(rename = "Err")]
    pub err: String,
    #[serde(rename = "Mountpoint", skip_serializing_if = "Option::is_none")]
    pub mountpoint: Option<String>,
    #[serde(rename = "Volume", skip_serializing_if = "Option::is_none")]
    pub volume: Option<Volume>,
    #[serde(rename = "Volumes", skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<Volume>>,
}

impl Answer {
    pub fn error(err: impl Into<String>) -> Answer {
        Answer {
            err: err.into(),
            ..Answer::default()
        }
    }
}

#[derive(Debug, Default, Serialize)]
pub struct Volume {
    #[serde(rename = "Name")]
    pub name: String,
    /// Where the volume is mounted on this node; empty while it is not
    /// (Docker asks for the path with Mount, and shows it once mounted).
    #[serde(rename = "Mountpoint", skip_serializing_if = "String::is_empty")]
    pub mountpoint: String,
    /// When the volume was made (RFC 3339), for `docker volume inspect`.
    #[serde(rename = "CreatedAt", skip_serializing_if = "String::is_empty")]
    pub created_at: String,
    /// What `docker volume inspect` shows under Status.
    #[serde(rename = "Status", skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

pub const ACTIVATE: &str = r#"{"Implements":["VolumeDriver"]}"#;

/// Every node's Docker sees the same volumes: Berth's.
pub const CAPABILITIES: &str = r#"{"Capabilities":{"Scope":"global"}}"#;
