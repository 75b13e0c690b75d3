//! Admission cases of `berth policy test`: the request beyond the volume
//! (the call, who asks, the namespace and what it holds), and what the
//! answer must be: admitted or not, a denial's words, the changes made.

use serde::Deserialize;

use super::{Expect, Failed};
use crate::{
    AdmissionCall, AdmissionCaller, AdmissionChange, AdmissionRequest, AdmissionUsage, AdmissionVerdict,
    Pairs, Volume,
};

/// An admission case's `admission = { ... }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionInput {
    /// `create-volume` (the default), `publish-volume`, `expand-volume`,
    /// `modify-volume`, `create-snapshot` or `delete-volume`.
    call: Option<String>,
    /// publish-volume's node.
    node: Option<String>,
    /// expand-volume's bytes.
    bytes: Option<u64>,
    /// create-snapshot's name.
    snapshot: Option<String>,
    /// modify-volume's parameters.
    #[serde(default)]
    parameters: std::collections::BTreeMap<String, String>,
    /// Who asks (default `management`), and the policies it holds.
    caller: Option<String>,
    #[serde(default)]
    policies: Vec<String>,
    namespace: Option<String>,
    plugin: Option<String>,
    secret: Option<String>,
    #[serde(default)]
    usage: UsageInput,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageInput {
    #[serde(default)]
    volumes: u64,
    #[serde(default)]
    bytes: u64,
    #[serde(default)]
    snapshots: u64,
}

/// The request a case asks about.
pub fn request(
    input: Option<&AdmissionInput>,
    volume: Volume,
    settings: Pairs,
) -> Result<AdmissionRequest, Failed> {
    let default = AdmissionInput::default();
    let i = input.unwrap_or(&default);
    let needs = |what: &str| {
        Failed::from(format!(
            "a {} case needs `admission.{what}`",
            i.call.as_deref().unwrap_or("")
        ))
    };
    let call = match i.call.as_deref().unwrap_or("create-volume") {
        "create-volume" => AdmissionCall::CreateVolume,
        "publish-volume" => AdmissionCall::PublishVolume(i.node.clone().ok_or_else(|| needs("node"))?),
        "expand-volume" => AdmissionCall::ExpandVolume(i.bytes.ok_or_else(|| needs("bytes"))?),
        "modify-volume" => {
            AdmissionCall::ModifyVolume(i.parameters.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        }
        "create-snapshot" => {
            AdmissionCall::CreateSnapshot(i.snapshot.clone().ok_or_else(|| needs("snapshot"))?)
        }
        "delete-volume" => AdmissionCall::DeleteVolume,
        other => {
            return Err(Failed::from(format!(
                "admission.call {other:?} is not one of create-volume, publish-volume, expand-volume, modify-volume, create-snapshot, delete-volume"
            )));
        }
    };
    Ok(AdmissionRequest {
        call,
        caller: AdmissionCaller {
            identity: i.caller.clone().unwrap_or_else(|| "management".into()),
            policies: i.policies.clone(),
        },
        namespace: i.namespace.clone().unwrap_or_else(|| "default".into()),
        plugin: i.plugin.clone().unwrap_or_else(|| "hostpath".into()),
        volume,
        secret: i.secret.clone(),
        usage: AdmissionUsage {
            volumes: i.usage.volumes,
            bytes: i.usage.bytes,
            snapshots: i.usage.snapshots,
        },
        settings,
    })
}

/// A change as `volume explain` and the events show it.
pub fn change_text(change: &AdmissionChange) -> String {
    match change {
        AdmissionChange::Parameter((k, v)) => format!("parameter {k}={v}"),
        AdmissionChange::Label((k, v)) => format!("label {k}={v}"),
        AdmissionChange::RequiredBytes(b) => format!("required-bytes {b}"),
        AdmissionChange::LimitBytes(b) => format!("limit-bytes {b}"),
        AdmissionChange::Plugin(p) => format!("plugin {p}"),
        AdmissionChange::AccessMode(m) => format!("access-mode {}", m.wit_name()),
        AdmissionChange::RequisiteTopology(t) => {
            let each: Vec<String> = t
                .iter()
                .map(|p| {
                    p.iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .collect();
            format!("requisite-topology {}", each.join(" or "))
        }
    }
}

/// Whether `verdict` is what the case expects.
pub(crate) fn check(e: &Expect, verdict: &AdmissionVerdict) -> Result<String, Failed> {
    let (admitted, said) = match verdict {
        AdmissionVerdict::Allow => (true, "admitted".to_string()),
        AdmissionVerdict::Deny(why) => (false, format!("denied: {why}")),
        AdmissionVerdict::AllowWith(changes) => (
            true,
            format!(
                "admitted with {}",
                changes
                    .iter()
                    .map(|c| change_text(&c.change))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ),
    };
    let want_admitted = e.admitted.unwrap_or(e.denial_contains.is_none());
    if admitted != want_admitted {
        return Err(Failed::from(format!(
            "expected {}, got: {said}",
            if want_admitted {
                "the request admitted"
            } else {
                "a denial"
            }
        )));
    }
    if let (Some(part), AdmissionVerdict::Deny(why)) = (&e.denial_contains, verdict)
        && !why.contains(part.as_str())
    {
        return Err(Failed::from(format!(
            "expected a denial containing {part:?}, got {why:?}"
        )));
    }
    if let Some(want) = &e.changes {
        let got: Vec<String> = match verdict {
            AdmissionVerdict::AllowWith(changes) => changes.iter().map(|c| change_text(&c.change)).collect(),
            _ => Vec::new(),
        };
        if &got != want {
            return Err(Failed::from(format!(
                "expected the changes {want:?}, got {got:?}"
            )));
        }
    }
    Ok(said)
}
