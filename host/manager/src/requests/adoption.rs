//! Adopting and releasing volumes: import takes over a volume that exists
//! on a plugin already; forget drops one from Berth and leaves the plugin
//! alone.

use crate::Missing;
use crate::RequestError;
use crate::Taken;
use crate::Unready;
use crate::requests::Requests;
use crate::table::{Inserted, RemoveError};
use crate::{Conflict, Unforgettable};
use berth_csi::proto;
use berth_csi::proto::controller_service_capability::rpc::Type as ControllerCap;
use berth_model::text::echo;
use berth_model::{Backend, VolumeRecord, VolumeSpec, new_id};

impl Requests<'_> {
    /// Takes over backend volume `volume_id` of `spec.plugin` under
    /// `spec.name`. The plugin is asked for the volume first (GET_VOLUME,
    /// else LIST_VOLUMES); one it does not know is refused.
    pub async fn import(&self, mut spec: VolumeSpec, volume_id: &str) -> Result<VolumeRecord, RequestError> {
        spec.namespace = self.namespace.clone();
        crate::validate_spec(&spec, &self.config)?;
        crate::secrets::given(&self.config, &spec)?;
        self.new_name_ok(&spec.name)?;
        if spec.source.is_some() {
            return Err(RequestError::Invalid(
                "from_snapshot/from_volume: an imported volume exists already".into(),
            ));
        }
        if volume_id.is_empty() || volume_id.len() > 128 {
            return Err(RequestError::Invalid(format!(
                "volume_id: {} must be 1 to 128 bytes",
                echo(volume_id)
            )));
        }
        // Looked for in place: a copy of every record (a million, at scale) to find one.
        let adopted_as = self.table.collect(|r, out| {
            if out.is_empty()
                && r.spec.plugin == spec.plugin
                && r.backend.as_ref().is_some_and(|b| b.volume_id == volume_id)
            {
                out.push(r.spec.name.clone());
            }
        });
        if let Some(volume) = adopted_as.into_iter().next() {
            return Err(Taken::Adopted {
                volume_id: volume_id.to_string(),
                plugin: spec.plugin.clone(),
                volume,
            }
            .into());
        }
        let found = self.look_up(&spec.plugin, volume_id).await?;
        let mut record = VolumeRecord::new(new_id(), spec);
        record.backend = Some(std::sync::Arc::new(found));
        let more = super::new_volume(&record.spec);
        let namespace = record.spec.namespace.clone();
        match self
            .table
            .insert_new(record, |_| false, |used| self.admit(&namespace, used, &more))
            .await?
        {
            Inserted::New(r) => {
                self.work.queue.push(&r.id);
                Ok(r)
            }
            Inserted::Existing(r) => Ok(r),
        }
    }

    /// The plugin's view of one of its volumes.
    async fn look_up(&self, plugin: &str, volume_id: &str) -> Result<Backend, RequestError> {
        let controller = self
            .registry
            .get(plugin)
            .ok_or_else(|| RequestError::Invalid(format!("plugin {plugin:?} has no controller")))?;
        let unavailable = |e: berth_csi::CsiError| -> RequestError {
            if e.code() == tonic::Code::NotFound {
                Missing::OnPlugin {
                    plugin: plugin.to_string(),
                    volume_id: volume_id.to_string(),
                }
                .into()
            } else {
                Unready::Plugin(e).into()
            }
        };
        let volume = match (
            self.offers(plugin, ControllerCap::GetVolume),
            self.offers(plugin, ControllerCap::ListVolumes),
        ) {
            (None, _) => {
                return Err(Unready::NotFingerprinted(plugin.to_string()).into());
            }
            (Some(true), _) => {
                controller
                    .client()
                    .controller_get_volume(proto::ControllerGetVolumeRequest {
                        volume_id: volume_id.to_string(),
                    })
                    .await
                    .map_err(unavailable)?
                    .volume
            }
            (_, Some(true)) => self
                .backend_volumes(plugin)
                .await?
                .into_iter()
                .find(|v| v.volume_id == volume_id),
            _ => {
                return Err(RequestError::Invalid(format!(
                    "plugin {plugin:?} offers neither GET_VOLUME nor LIST_VOLUMES: Berth cannot check that the volume exists"
                )));
            }
        };
        let v = volume
            .filter(|v| v.volume_id == volume_id)
            .ok_or_else(|| Missing::OnPlugin {
                plugin: plugin.to_string(),
                volume_id: volume_id.to_string(),
            })?;
        Ok(crate::worker::steps::backend_of(v))
    }

    /// Every volume the plugin lists, page by page.
    pub(crate) async fn backend_volumes(&self, plugin: &str) -> Result<Vec<proto::Volume>, RequestError> {
        let controller = self
            .registry
            .get(plugin)
            .ok_or_else(|| RequestError::Invalid(format!("plugin {plugin:?} has no controller")))?;
        controller
            .client()
            .list_all_volumes()
            .await
            .map_err(|e| Unready::Plugin(e).into())
    }

    /// Drops a volume from Berth without a call to any plugin; returns it
    /// as it was. A volume still published, with snapshots, or perhaps
    /// being created right now is refused: forgetting it would lose track
    /// of something on the plugin.
    pub async fn forget(&self, name: &str) -> Result<VolumeRecord, RequestError> {
        let id = self.id_of(&self.in_namespace(name))?;
        self.refuse_if_grouped(&id, name)?;
        let mut forgotten = None;
        self.table
            .remove_if(&id, |r| {
                let refuse = |why: Unforgettable| {
                    Err(Conflict::Unforgettable {
                        volume: name.to_string(),
                        why,
                    }
                    .into())
                };
                if let Some(node) = r.publications.keys().next() {
                    return refuse(Unforgettable::Published(node.clone()));
                }
                if let Some(snap) = r.snapshots.keys().next() {
                    return refuse(Unforgettable::HasSnapshot(snap.clone()));
                }
                if r.backend.is_none() && r.create_sent {
                    return refuse(Unforgettable::MayBeCreating);
                }
                forgotten = Some(r.clone());
                Ok(())
            })
            .await
            .map_err(|e| match e {
                RemoveError::Refused(e) => e,
                RemoveError::Store(e) => Unready::store("the change", e).into(),
            })?;
        let r = forgotten.ok_or_else(|| Missing::Volume(name.to_string()))?;
        tracing::info!(volume = %r.spec.name, volume_id = r.backend.as_ref().map(|b| b.volume_id.as_str()), "forgotten");
        Ok(r)
    }
}
