//! The operators' requests: declare, delete, publish, unpublish, retry.
//! Each is checked, then made durable; the reconciler acts on it after.

use super::table::Inserted;
use super::{RequestError, VolumeManager};
use crate::config::Config;
use crate::model::{AccessType, Publication, PublishStep, Segments, VolumeRecord, VolumeSpec, new_id};

impl VolumeManager {
    pub async fn create(&self, spec: VolumeSpec) -> Result<VolumeRecord, RequestError> {
        validate_spec(&spec, &self.config)?;
        let record = VolumeRecord::new(new_id(), spec);
        let spec = record.spec.clone();
        // Creating the same volume again is not an error.
        match self
            .table
            .insert_new(record, |existing| existing.spec == spec)
            .await?
        {
            Inserted::New(r) => {
                self.queue.push(&r.id);
                Ok(r)
            }
            Inserted::Existing(r) => Ok(r),
        }
    }

    fn id_of(&self, name: &str) -> Result<String, RequestError> {
        self.table
            .id_of(name)
            .ok_or_else(|| RequestError::NotFound(format!("no volume named {name:?}")))
    }

    pub async fn delete(&self, name: &str) -> Result<VolumeRecord, RequestError> {
        let id = self.id_of(name)?;
        self.modify(&id, |r| {
            r.deleting = true;
            // Deleting is the operator's answer to a give-up too.
            r.failure = None;
            r.retrying = None;
            for p in r.publications.values_mut() {
                p.unwant();
            }
            Ok(())
        })
        .await
    }

    pub async fn publish(
        &self,
        name: &str,
        node: Option<&str>,
        readonly: bool,
    ) -> Result<VolumeRecord, RequestError> {
        let id = self.id_of(name)?;
        let current = self
            .table
            .by_id(&id)
            .ok_or_else(|| RequestError::NotFound(format!("no volume named {name:?}")))?;
        let node = match node {
            Some(n) => {
                let cfg = self
                    .config
                    .node(n)
                    .ok_or_else(|| RequestError::Invalid(format!("node: there is no node named {n:?}")))?;
                if !cfg.plugins.contains_key(&current.spec.plugin) {
                    return Err(RequestError::Invalid(format!(
                        "node: {n:?} has no node plugin for {:?}",
                        current.spec.plugin
                    )));
                }
                n.to_string()
            }
            None => self.choose_node(&current).await?,
        };
        self.modify(&id, |r| {
            if r.deleting {
                return Err(RequestError::Conflict(format!(
                    "volume {name:?} is being deleted"
                )));
            }
            let mode = r.spec.access_mode;
            if mode.is_single_node() && r.publications.iter().any(|(n, p)| p.wanted && n != &node) {
                return Err(RequestError::Conflict(format!(
                    "volume {name:?} is {mode} and already published to another node"
                )));
            }
            let p = r.publications.get_or_insert_with(&node, || Publication {
                wanted: true,
                readonly,
                step: PublishStep::None,
                publish_context: Default::default(),
            });
            p.want(readonly);
            Ok(())
        })
        .await
    }

    pub async fn unpublish(&self, name: &str, node: &str) -> Result<VolumeRecord, RequestError> {
        let id = self.id_of(name)?;
        self.modify(&id, |r| match r.publications.get_mut(node) {
            Some(p) => {
                p.unwant();
                Ok(())
            }
            None => Err(RequestError::NotFound(format!(
                "volume {name:?} is not published to {node:?}"
            ))),
        })
        .await
    }

    pub async fn retry(&self, name: &str) -> Result<VolumeRecord, RequestError> {
        let id = self.id_of(name)?;
        self.modify(&id, |r| {
            r.failure = None;
            r.retrying = None;
            Ok(())
        })
        .await
    }

    /// An operator's change: durable, then queued for the reconciler.
    async fn modify(
        &self,
        id: &str,
        change: impl FnOnce(&mut VolumeRecord) -> Result<(), RequestError>,
    ) -> Result<VolumeRecord, RequestError> {
        let ((), r) = self.table.modify(id, change).await?;
        self.queue.push(id);
        Ok(r)
    }
}

/// Checks an operator's spec, naming the field at fault.
pub fn validate_spec(spec: &VolumeSpec, config: &Config) -> Result<(), RequestError> {
    let bad = |m: String| Err(RequestError::Invalid(m));
    if spec.name.is_empty() || spec.name.len() > 253 || spec.name.chars().any(char::is_control) {
        return bad(format!(
            "name: {:?} must be 1 to 253 bytes without control characters",
            spec.name
        ));
    }
    if config.plugin(&spec.plugin).is_none() {
        let known: Vec<&str> = config.plugins.iter().map(|p| p.name.as_str()).collect();
        return bad(format!(
            "plugin: no plugin named {:?} (configured: {known:?})",
            spec.plugin
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
    if let Some(s) = &spec.secret
        && (s.is_empty() || s.contains('/') || s.starts_with('.'))
    {
        return bad(format!("secret: {s:?} must be a plain secret name"));
    }
    let empty_segment = |t: &Segments| t.is_empty() || t.keys().any(String::is_empty);
    if spec
        .requisite_topology
        .iter()
        .chain(&spec.preferred_topology)
        .any(empty_segment)
    {
        return bad(
            "requisite_topology/preferred_topology: every topology needs at least one KEY=VALUE".into(),
        );
    }
    Ok(())
}
