//! Changes to a volume that exists: growing it and its mutable parameters.
//! Each is admitted, checked against the namespace's quota and the plugin's
//! capabilities, then made durable; the worker asks the plugin after.

use crate::Conflict;
use crate::RequestError;
use berth_csi::proto::controller_service_capability::rpc::Type as ControllerCap;
use berth_model::{Segments, VolumeRecord};

use super::{Requests, validate_spec};

impl Requests<'_> {
    /// Grows a volume to `required_bytes`; volumes only grow.
    pub async fn expand(&self, name: &str, required_bytes: i64) -> Result<VolumeRecord, RequestError> {
        let current = self.named(&self.in_namespace(name))?;
        let id = current.id.clone();
        self.require(&current.spec.plugin, ControllerCap::ExpandVolume, "expansion")?;
        let asked = u64::try_from(required_bytes).unwrap_or(0);
        self.ask_admission(berth_policy::AdmissionCall::ExpandVolume(asked), &current)
            .await?;
        let growth = crate::quotas::Usage {
            bytes: (required_bytes - current.spec.required_bytes.max(0)).max(0) as u64,
            ..Default::default()
        };
        // The room is held until the growth is written (then the record counts).
        let _room = crate::table::Reservation::take(&self.table, &self.namespace, growth, |used| {
            self.admit(&self.namespace, used, &growth)
        })?;
        self.modify(&id, format!("expand to {required_bytes} bytes"), |r| {
            unchangeable(r, name)?;
            let now = r.backend.as_ref().map_or(r.spec.required_bytes, |b| {
                b.capacity_bytes.max(r.spec.required_bytes)
            });
            if required_bytes <= now {
                return Err(RequestError::Invalid(format!(
                    "size: {required_bytes} bytes is not more than the volume's {now}; volumes only grow"
                )));
            }
            // A capacity never said is measured against the size asked before.
            let asked = r.spec.required_bytes;
            if let Some(b) = r.backend_mut().filter(|b| b.capacity_bytes == 0) {
                b.sized_for.get_or_insert(asked);
            }
            r.spec_mut().required_bytes = required_bytes;
            if r.spec.limit_bytes > 0 && r.spec.limit_bytes < required_bytes {
                // The operator asked for this size: the old ceiling gives way.
                r.spec_mut().limit_bytes = required_bytes;
            }
            r.failure = None;
            r.retrying = None;
            Ok(())
        })
        .await
    }

    /// Sets the mutable parameters named in `changes` (the others are kept:
    /// CSI plugins change only the keys they are given); the plugin is
    /// asked with ControllerModifyVolume.
    pub async fn modify_parameters(
        &self,
        name: &str,
        changes: Segments,
    ) -> Result<VolumeRecord, RequestError> {
        let current = self.named(&self.in_namespace(name))?;
        let id = current.id.clone();
        if changes.is_empty() {
            return Err(RequestError::Invalid(
                "mutable_parameters: name at least one KEY=VALUE to change".into(),
            ));
        }
        self.require(&current.spec.plugin, ControllerCap::ModifyVolume, "modification")?;
        let mut wanted = (*current.spec).clone();
        wanted.mutable_parameters.extend(changes.clone());
        validate_spec(&wanted, &self.config)?;
        let asked = changes.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        self.ask_admission(berth_policy::AdmissionCall::ModifyVolume(asked), &current)
            .await?;
        let what = changes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.modify(&id, format!("modify {what}"), |r| {
            unchangeable(r, name)?;
            r.spec_mut().mutable_parameters.extend(changes);
            r.failure = None;
            r.retrying = None;
            Ok(())
        })
        .await
    }
}

/// Why a volume's size or parameters cannot change now: it is being
/// deleted, or its CreateVolume is out unanswered (asked again, it must
/// ask what it first asked, or a plugin that made the volume refuses the
/// name as taken, ALREADY_EXISTS, and the volume it made is left behind).
fn unchangeable(r: &VolumeRecord, name: &str) -> Result<(), RequestError> {
    if r.deleting {
        return Err(Conflict::VolumeDeleting(name.to_string()).into());
    }
    if r.create_sent && r.backend.is_none() {
        return Err(Conflict::BeingCreated(name.to_string()).into());
    }
    Ok(())
}
