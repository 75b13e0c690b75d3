//! The operators' requests: declare, delete, publish, unpublish, retry.
//! Each is checked, then made durable; the reconciler acts on it after.

pub(crate) mod adoption;
mod changes;
pub(crate) mod inquiries;
mod naming;
pub(crate) mod topology;

use crate::Conflict;
use crate::Missing;
use crate::RequestError;
use crate::Taken;
use crate::table::Inserted;
use berth_config::Config;
use berth_csi::proto::controller_service_capability::rpc::Type as ControllerCap;
use berth_model::text::echo;
use berth_model::{
    AccessType, DockerScope, Origin, Publication, Segments, SourceKind, VolumeRecord, VolumeSource,
    VolumeSpec, new_id,
};

crate::shared::namespaced_view!(
    /// The request path: what the API asks of volumes (declare, change, publish,
    /// unpublish, delete, retry, import, forget) and of their plugins (health,
    /// orphans), within one namespace. Each request is made durable first,
    /// then queued for the worker.
    Requests,
    requests,
    requests_in
);

impl Requests<'_> {
    pub async fn create(&self, spec: VolumeSpec) -> Result<VolumeRecord, RequestError> {
        self.create_as(spec, Origin::Api, DockerScope::ByOrigin).await
    }

    /// Declares a volume made by `made_by`, in `docker`'s scope. Declaring
    /// one that exists with the same spec answers it as it is.
    pub(crate) async fn create_as(
        &self,
        mut spec: VolumeSpec,
        made_by: Origin,
        docker: DockerScope,
    ) -> Result<VolumeRecord, RequestError> {
        spec.namespace = self.namespace.clone();
        // Within bounds before a module sees it; admitted (and completed)
        // before anything else is checked or kept, and what the module set
        // checked again as the caller's own.
        validate_spec(&spec, &self.config)?;
        let id = new_id();
        let admitted = self
            .ask_admission(
                berth_policy::AdmissionCall::CreateVolume,
                &VolumeRecord::new(id.clone(), spec.clone()),
            )
            .await?;
        if admitted.changes_anything() {
            admitted.apply(&mut spec);
            validate_spec(&spec, &self.config)?;
        }
        crate::secrets::given(&self.config, &spec)?;
        self.new_name_ok(&spec.name)?;
        self.check_requisite(&spec)?;
        if !spec.mutable_parameters.is_empty() {
            // CSI: CreateVolume carries them only to a plugin that can change them.
            self.require(&spec.plugin, ControllerCap::ModifyVolume, "mutable parameters")?;
        }
        if let Some(source) = &mut spec.source {
            let size = self.resolve_source(&spec.plugin, source)?;
            // As Kubernetes does: a restore or a clone asks for at least its
            // source's size (a driver may refuse 0 as smaller than the source).
            if spec.required_bytes == 0 && size > 0 {
                if spec.limit_bytes > 0 && size > spec.limit_bytes {
                    return Err(RequestError::Invalid(format!(
                        "limit_bytes: {} is less than the source's {size} bytes",
                        spec.limit_bytes
                    )));
                }
                spec.required_bytes = size;
            }
        }
        let mut record = VolumeRecord::new(id, spec);
        record.made_by = made_by;
        record.docker = docker;
        let what = format!("create on plugin {}", record.spec.plugin);
        self.event("request".into(), "OK", what)(&mut record);
        admitted.keep(self, &mut record);
        let named = self.name_ahead(&mut record).await;
        let (id, spec) = (record.id.clone(), record.spec.clone());
        // Creating the same volume again is not an error.
        match self
            .table
            .insert_new(
                record,
                |existing| existing.spec == spec,
                |used| self.admit(&spec.namespace, used, &new_volume(&spec)),
            )
            .await
        {
            Ok(Inserted::New(r)) => {
                self.work.queue.push(&r.id);
                Ok(r)
            }
            Ok(Inserted::Existing(r)) => {
                self.unname(&id, named);
                Ok(r)
            }
            Err(e) => {
                self.unname(&id, named);
                Err(e)
            }
        }
    }

    /// A name for a new volume follows Docker's rule; one that exists
    /// already (made before the rule) keeps working, re-created included.
    pub(crate) fn new_name_ok(&self, name: &str) -> Result<(), RequestError> {
        if self.id_of(&self.in_namespace(name)).is_ok() {
            return Ok(());
        }
        Ok(berth_model::bounds::volume_name(name)?)
    }

    /// Finds a content source's id on the plugin: it must exist there
    /// already (a snapshot ready to use, a volume created), on the same plugin.
    /// Resolves the source to its id on `plugin`; its size in bytes (0:
    /// not known).
    fn resolve_source(&self, plugin: &str, source: &mut VolumeSource) -> Result<i64, RequestError> {
        let (owner, id, size) = match source.kind {
            SourceKind::Snapshot => {
                self.require(
                    plugin,
                    ControllerCap::CreateDeleteSnapshot,
                    "restoring a snapshot",
                )?;
                let snapshots = self.snapshots_in(self.namespace.clone());
                let view = match snapshots.get_snapshot(&source.name) {
                    Ok(view) => view,
                    // A member of a group snapshot, as GROUP/VOLUME.
                    Err(RequestError::NotFound(_)) if source.name.contains('/') => {
                        let (anchor, id) = snapshots.group_member_snapshot(&source.name)?;
                        let size = volume_size(&anchor);
                        return self.resolved(plugin, source, anchor, id).map(|()| size);
                    }
                    Err(e) => return Err(e),
                };
                let (id, size) = match &view.snapshot.backend {
                    Some(b) if b.ready && !view.snapshot.deleting => (b.snapshot_id.clone(), b.size_bytes),
                    _ => {
                        return Err(Conflict::SnapshotNotReady {
                            name: source.name.clone(),
                            state: view.snapshot.state().to_string(),
                        }
                        .into());
                    }
                };
                let size = if size > 0 { size } else { volume_size(&view.volume) };
                (view.volume, id, size)
            }
            SourceKind::Volume => {
                self.require(plugin, ControllerCap::CloneVolume, "cloning a volume")?;
                let v = self
                    .table
                    .by_name(&self.in_namespace(&source.name))
                    .ok_or_else(|| Missing::Volume(source.name.clone()))?;
                let id = match &v.backend {
                    Some(b) if !v.deleting => b.volume_id.clone(),
                    _ => {
                        return Err(Conflict::NotToClone {
                            name: source.name.clone(),
                            state: v.state().to_string(),
                        }
                        .into());
                    }
                };
                let size = volume_size(&v);
                (v, id, size)
            }
        };
        self.resolved(plugin, source, owner, id)?;
        Ok(size)
    }

    /// The source's id, once its owner is known to be on `plugin`.
    fn resolved(
        &self,
        plugin: &str,
        source: &mut VolumeSource,
        owner: VolumeRecord,
        id: String,
    ) -> Result<(), RequestError> {
        if owner.spec.plugin != plugin {
            return Err(RequestError::Invalid(format!(
                "from_{}: {} is on plugin {:?}, not {plugin:?}",
                source.kind.as_str(),
                echo(&source.name),
                owner.spec.plugin
            )));
        }
        source.id = id;
        Ok(())
    }

    /// Deletes the volume. One published somewhere is refused ([`InUse`])
    /// unless `force`: then it is unpublished everywhere, then deleted.
    pub async fn delete(&self, name: &str, force: bool) -> Result<VolumeRecord, RequestError> {
        self.delete_checked(name, |r| {
            let nodes: Vec<String> = r
                .publications
                .iter()
                .filter(|(_, p)| p.wanted)
                .map(|(node, _)| node.clone())
                .collect();
            if force || nodes.is_empty() {
                return Ok(());
            }
            Err(crate::InUse {
                volume: echo(name),
                nodes,
            }
            .into())
        })
        .await
    }

    /// Deletes the volume if `may` allows it, judged on the record under
    /// the volume's lock.
    pub(crate) async fn delete_checked(
        &self,
        name: &str,
        may: impl FnOnce(&VolumeRecord) -> Result<(), RequestError>,
    ) -> Result<VolumeRecord, RequestError> {
        let current = self.named(&self.in_namespace(name))?;
        let id = current.id.clone();
        self.refuse_if_grouped(&id, name)?;
        if !current.deleting {
            self.ask_admission(berth_policy::AdmissionCall::DeleteVolume, &current)
                .await?;
        }
        let deleted = self
            .modify(&id, "delete".into(), |r| {
                may(r)?;
                if let Some((snap, _)) = r.snapshots.iter().find(|(_, s)| !s.deleting) {
                    return Err(Conflict::HasSnapshot {
                        volume: name.to_string(),
                        snapshot: snap.clone(),
                    }
                    .into());
                }
                r.deleting = true;
                // Named and marked sent by its request, and not called yet:
                // nothing to ask the plugin. The note goes once this is written:
                // a write that failed may have been kept all the same, and the
                // first call then vouches for the record as held here.
                if self.table.uncalled().create_noted(&id) {
                    r.create_sent = false;
                }
                // Deleting is the operator's answer to a give-up too.
                r.failure = None;
                r.retrying = None;
                for (node, p) in r.publications.iter_mut() {
                    self.unwant(&id, node, p);
                }
                Ok(())
            })
            .await?;
        self.table.uncalled().withdraw_create(&id);
        Ok(deleted)
    }

    /// A volume in a group snapshot stays until the group is deleted: the
    /// group's record holds what the plugin needs to delete it.
    pub(crate) fn refuse_if_grouped(&self, id: &str, name: &str) -> Result<(), RequestError> {
        match self.table.claims().grouped(id) {
            0 => Ok(()),
            n => Err(Conflict::InGroups {
                volume: name.to_string(),
                count: n,
            }
            .into()),
        }
    }

    pub async fn publish(
        &self,
        name: &str,
        node: Option<&str>,
        readonly: bool,
    ) -> Result<VolumeRecord, RequestError> {
        self.publish_as(name, node, readonly, Origin::Api, |_| Ok(()))
            .await
    }

    /// Publishes for `by` if `may` allows it (judged on the record as it
    /// is, and again under the volume's lock).
    pub(crate) async fn publish_as(
        &self,
        name: &str,
        node: Option<&str>,
        readonly: bool,
        by: Origin,
        may: impl Fn(&VolumeRecord) -> Result<(), RequestError>,
    ) -> Result<VolumeRecord, RequestError> {
        let current = self.named(&self.in_namespace(name))?;
        may(&current)?;
        let id = current.id.clone();
        let (node, placed) = match node {
            Some(n) => {
                self.check_node(&current, n)?;
                (n.to_string(), None)
            }
            None => {
                let (node, note) = self.decisions().choose_node(&current).await?;
                (node, Some(note))
            }
        };
        self.ask_admission(berth_policy::AdmissionCall::PublishVolume(node.clone()), &current)
            .await?;
        self.modify(&id, format!("publish on {node}, {}", access(readonly)), |r| {
            may(r)?;
            if r.deleting {
                return Err(Conflict::VolumeDeleting(name.to_string()).into());
            }
            let mode = r.spec.access_mode;
            if mode.is_single_node() && r.publications.iter().any(|(n, p)| p.wanted && n != &node) {
                return Err(Conflict::PublishedElsewhere {
                    volume: name.to_string(),
                    mode: mode.to_string(),
                }
                .into());
            }
            if let Some(p) = r.publications.get(&node).filter(|p| p.wanted)
                && p.readonly != readonly
            {
                // CSI's rule for a repeated publish that differs: the node
                // keeps what it has, so the record must not claim otherwise.
                return Err(Taken::PublishedOtherwise {
                    volume: name.to_string(),
                    node: node.clone(),
                    now: access(p.readonly),
                    asked: access(readonly),
                }
                .into());
            }
            // A node whose agent is there is called next: the publication is
            // marked sent with this write, which saves the write of its own
            // the first call would need. Withdrawn before that call, it is
            // unmarked again (`withdraw_uncalled`), so it still goes without
            // a call. A node that is away is left unmarked: a restart forgets
            // what was not called, and undoing would then wait for the node.
            let connected = self.nodes.connected(&node);
            let p = r.publications.get_or_insert_with(&node, || Publication {
                by: by.clone(),
                ..Publication::new(readonly)
            });
            p.want_for(readonly, by);
            if !p.sent && connected {
                p.sent = true;
                self.table.uncalled().note(&id, &node);
            }
            if let Some(note) = &placed {
                r.explain_mut().placement = Some(Box::new(note.clone()));
            }
            Ok(())
        })
        .await
    }

    /// Unpublishes from `node`; a volume not published there is already
    /// where the operator wants it (as CSI's unpublish calls answer).
    pub async fn unpublish(&self, name: &str, node: &str) -> Result<VolumeRecord, RequestError> {
        self.unpublish_checked(name, node, |_| Ok(())).await
    }

    /// Unpublishes from `node` if `may` allows it (judged on the
    /// publication as it is, and again under the volume's lock).
    pub(crate) async fn unpublish_checked(
        &self,
        name: &str,
        node: &str,
        may: impl Fn(&Publication) -> Result<(), RequestError>,
    ) -> Result<VolumeRecord, RequestError> {
        let id = self.id_of(&self.in_namespace(name))?;
        if self.nodes.node(node).is_none() {
            return Err(RequestError::Invalid(format!(
                "node: there is no node named {}",
                echo(node)
            )));
        }
        let current = self
            .table
            .by_id(&id)
            .ok_or_else(|| Missing::Volume(name.to_string()))?;
        match current.publications.get(node).filter(|p| p.wanted) {
            None => return Ok(current),
            Some(p) => may(p)?,
        }
        self.modify(&id, format!("unpublish from {node}"), |r| {
            if let Some(p) = r.publications.get_mut(node).filter(|p| p.wanted) {
                may(p)?;
                self.unwant(&id, node, p);
            }
            Ok(())
        })
        .await
    }

    pub async fn retry(&self, name: &str) -> Result<VolumeRecord, RequestError> {
        let id = self.id_of(&self.in_namespace(name))?;
        self.modify(&id, "retry".into(), |r| {
            r.failure = None;
            r.retrying = None;
            Ok(())
        })
        .await
    }

    /// Withdraws a publication, inside a change of its volume: one its
    /// request marked sent and never called is unmarked, so it goes without
    /// a call.
    fn unwant(&self, id: &str, node: &str, p: &mut Publication) {
        if self.table.uncalled().withdraw(id, node) {
            p.sent = false;
        }
        p.unwant();
    }
}

fn access(readonly: bool) -> &'static str {
    if readonly { "read-only" } else { "read-write" }
}

/// CSI's size limits (spec, "Size Limits"): a string field at most 128
/// bytes, a map at most 4 KiB. Berth applies them to what it forwards.
const MAX_STRING_BYTES: usize = 128;
const MAX_MAP_BYTES: usize = 4096;
/// Operator names are Berth's own: a DNS subdomain's length.
const MAX_NAME_BYTES: usize = 253;
/// Topologies an operator may list, per kind.
const MAX_TOPOLOGIES: usize = 64;

fn map_bytes(m: &Segments) -> usize {
    m.iter().map(|(k, v)| k.len() + v.len()).sum()
}

/// A volume's size as best known: the plugin's capacity, else what it
/// was last made for, else what was asked (0: none of them).
fn volume_size(v: &VolumeRecord) -> i64 {
    v.backend
        .as_ref()
        .map(|b| {
            if b.capacity_bytes > 0 {
                b.capacity_bytes
            } else {
                b.sized_for.unwrap_or(0)
            }
        })
        .filter(|n| *n > 0)
        .unwrap_or(v.spec.required_bytes)
}

/// Checks an operator's spec, naming the field at fault. Every field is
/// bounded, and a message echoes at most the start of what it was given.
pub fn validate_spec(spec: &VolumeSpec, config: &Config) -> Result<(), RequestError> {
    let bad = |m: String| Err(RequestError::Invalid(m));
    if spec.name.is_empty() || spec.name.len() > MAX_NAME_BYTES || spec.name.chars().any(char::is_control) {
        return bad(format!(
            "name: {} must be 1 to {MAX_NAME_BYTES} bytes without control characters",
            echo(&spec.name)
        ));
    }
    if config.plugin(&spec.plugin).is_none() {
        let known: Vec<&str> = config.plugins.iter().map(|p| p.name.as_str()).collect();
        return bad(format!(
            "plugin: no plugin named {} (configured: {known:?})",
            echo(&spec.plugin)
        ));
    }
    if spec.required_bytes < 0 || spec.limit_bytes < 0 {
        return bad("required_bytes/limit_bytes: must not be negative".into());
    }
    if spec.limit_bytes > 0 && spec.required_bytes > spec.limit_bytes {
        return bad(format!(
            "required_bytes: {} is more than limit_bytes {}",
            spec.required_bytes, spec.limit_bytes
        ));
    }
    if spec.access_type == AccessType::Block && (!spec.fs_type.is_empty() || !spec.mount_flags.is_empty()) {
        return bad("fs_type/mount_flags: a block volume has no file system".into());
    }
    if spec.fs_type.len() > MAX_STRING_BYTES || spec.fs_type.chars().any(char::is_control) {
        return bad(format!(
            "fs_type: {} must be at most {MAX_STRING_BYTES} bytes without control characters",
            echo(&spec.fs_type)
        ));
    }
    if spec.mount_flags.iter().any(|f| f.len() > MAX_STRING_BYTES)
        || spec.mount_flags.iter().map(String::len).sum::<usize>() > MAX_MAP_BYTES
    {
        return bad(format!(
            "mount_flags: each flag at most {MAX_STRING_BYTES} bytes, {MAX_MAP_BYTES} bytes in all"
        ));
    }
    if let Some(s) = &spec.secret
        && (s.is_empty()
            || s.len() > MAX_NAME_BYTES
            || s.contains('/')
            || s.starts_with('.')
            || s.chars().any(char::is_control))
    {
        return bad(format!("secret: {} must be a plain secret name", echo(s)));
    }
    for (field, map) in [
        ("parameters", &spec.parameters),
        ("labels", &spec.labels),
        ("mutable_parameters", &spec.mutable_parameters),
    ] {
        if map_bytes(map) > MAX_MAP_BYTES {
            return bad(format!(
                "{field}: {} bytes of keys and values; CSI allows at most {MAX_MAP_BYTES}",
                map_bytes(map)
            ));
        }
        if let Some(k) = map
            .keys()
            .find(|k| k.is_empty() || k.chars().any(char::is_control))
        {
            return bad(format!(
                "{field}: key {} must be non-empty without control characters",
                echo(k)
            ));
        }
    }
    let topologies = spec.requisite_topology.iter().chain(&spec.preferred_topology);
    let empty_segment = |t: &Segments| t.is_empty() || t.keys().any(String::is_empty);
    if spec.requisite_topology.len() > MAX_TOPOLOGIES
        || spec.preferred_topology.len() > MAX_TOPOLOGIES
        || topologies.clone().any(|t| map_bytes(t) > MAX_MAP_BYTES)
    {
        return bad(format!(
            "requisite_topology/preferred_topology: at most {MAX_TOPOLOGIES} topologies of at most {MAX_MAP_BYTES} bytes each"
        ));
    }
    if topologies.clone().any(empty_segment) {
        return bad(
            "requisite_topology/preferred_topology: every topology needs at least one KEY=VALUE".into(),
        );
    }
    Ok(())
}

/// What a new volume of `spec` adds to its namespace's usage.
pub(crate) fn new_volume(spec: &VolumeSpec) -> crate::quotas::Usage {
    crate::quotas::Usage {
        volumes: 1,
        bytes: spec.required_bytes.max(0) as u64,
        snapshots: 0,
    }
}
