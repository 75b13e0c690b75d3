//! What every concern of the manager shares: the records' table, the
//! plugins' registry, the configuration, the store, the secrets and the
//! node side, with the work queue and the policies, in one [`Core`]; and
//! the few primitives each concern uses (may this server act, queue a
//! volume again later, log a decision, drop a record). Each concern is a
//! view of the core (`view!`), with methods of its own.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::decisions::capacity;
use crate::decisions::log::DecisionLog;
use crate::secrets::Secrets;
use crate::table::VolumeTable;
use crate::worker::outcome::{Apply, StepError, step_error};
use crate::worker::steps::capability;
use crate::worker::work::Work;
use crate::{Missing, RequestError, nodes, now_ms};
use berth_config::Config;
use berth_csi::proto;
use berth_csi::proto::controller_service_capability::rpc::Type as ControllerCap;
use berth_csi::registry::{Plugin, Registry};
use berth_model::{VolumeName, VolumeRecord, VolumeSpec};
use berth_policy::{Code, Policies};
use berth_store::{Store, StoreError};

/// The manager's state. Opaque outside the crate: the concerns reach it
/// through their views.
pub struct Core {
    pub(crate) config: Config,
    pub(crate) table: VolumeTable,
    /// What each namespace may hold.
    pub(crate) quotas: crate::quotas::Quotas,
    pub(crate) registry: Arc<Registry>,
    pub(crate) policies: Arc<Policies>,
    pub(crate) secrets: Secrets,
    /// Every node, through its agent.
    pub(crate) nodes: Arc<dyn nodes::NodeAgent>,
    /// The worker's queue, retries and tenure.
    pub(crate) work: Work,
    pub(crate) capacity: capacity::CapacityCache,
    /// When this manager (a term) started, by the monotonic clock: until a
    /// heartbeat timeout after it, a node not heard from yet may be an agent
    /// still reattaching, not a node gone.
    pub(crate) started: tokio::time::Instant,
    /// Where decisions are logged; started with the workers.
    pub(crate) store: Arc<dyn Store>,
    pub(crate) decision_log: std::sync::OnceLock<DecisionLog>,
}

impl Core {
    /// Whether this server may act (always, with one server).
    pub(crate) fn may_act(&self) -> bool {
        self.work.may_act()
    }

    /// Keeps a decision in the decision log (once the workers started).
    pub(crate) fn log_decision(&self, entry: berth_policy::logged::Logged) {
        if let Some(log) = self.decision_log.get() {
            log.record(entry);
        }
    }

    /// Removes a volume for good (after DeleteVolume, or if it never existed on a plugin).
    pub(crate) async fn remove_record(&self, id: &str) -> Result<(), StoreError> {
        self.work.deadlines.clear(id);
        self.table.remove(id).await
    }

    /// Queues a volume again after `delay`.
    pub(crate) fn wake_after(self: &Arc<Self>, id: &str, delay: Duration) {
        let m = Arc::downgrade(self);
        let id = id.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(m) = m.upgrade() {
                m.work.queue.push(&id);
            }
        });
    }

    /// Whether the volume's plugin offers a controller capability: `None`
    /// while it is not fingerprinted yet.
    pub(crate) fn offers(&self, plugin: &str, cap: ControllerCap) -> Option<bool> {
        self.registry
            .get(plugin)
            .and_then(|p| p.status().fingerprint)
            .map(|f| f.has_controller_capability(cap))
    }
    /// A clear refusal when the plugin is known not to offer `cap`.
    pub(crate) fn require(&self, plugin: &str, cap: ControllerCap, what: &str) -> Result<(), RequestError> {
        if self.offers(plugin, cap) == Some(false) {
            return Err(RequestError::Invalid(format!(
                "plugin {plugin:?} does not offer {} ({what})",
                cap.as_str_name()
            )));
        }
        Ok(())
    }
    /// An operator's change: durable with its event, then queued for the reconciler.
    pub(crate) async fn modify(
        &self,
        id: &str,
        request: String,
        change: impl FnOnce(&mut VolumeRecord) -> Result<(), RequestError>,
    ) -> Result<VolumeRecord, RequestError> {
        let event = self.event("request".into(), "OK", request);
        let ((), r) = self
            .table
            .modify(id, |r| {
                change(r)?;
                event(r);
                Ok(())
            })
            .await?;
        self.work.queue.push(id);
        Ok(r)
    }
    /// The volume of that operator name, as it is now.
    pub(crate) fn named(&self, name: &VolumeName) -> Result<VolumeRecord, RequestError> {
        self.id_of(name)
            .ok()
            .and_then(|id| self.table.by_id(&id))
            .ok_or_else(|| Missing::Volume(name.to_string()).into())
    }
    pub(crate) fn id_of(&self, name: &VolumeName) -> Result<String, RequestError> {
        self.table
            .id_of(name)
            .ok_or_else(|| Missing::Volume(name.to_string()).into())
    }
    /// An event, as an effect to write with the change it describes.
    pub(crate) fn event(&self, step: String, code: &'static str, message: String) -> Apply {
        let keep = self.config.events_per_volume;
        let at = now_ms();
        let texts = berth_model::EventTexts::new(step, code, message);
        Box::new(move |r: &mut VolumeRecord| r.note_texts(keep, at, texts.clone()))
    }
    pub(crate) fn controller(&self, plugin: &str) -> Result<Arc<Plugin>, StepError> {
        self.registry.get(plugin).ok_or_else(|| {
            step_error(
                Code::FailedPrecondition,
                format!("plugin {plugin:?} has no controller"),
            )
        })
    }
    pub(crate) fn secrets_for(&self, spec: &VolumeSpec) -> Result<HashMap<String, String>, StepError> {
        match &spec.secret {
            None => Ok(HashMap::new()),
            Some(name) => self
                .secrets
                .get(name)
                .map(|s| s.into_inner())
                .map_err(|e| step_error(Code::FailedPrecondition, e.to_string())),
        }
    }
    /// The volume capability for the plugin's controller calls.
    pub(crate) fn controller_capability(&self, spec: &VolumeSpec) -> proto::VolumeCapability {
        let newer = self
            .registry
            .get(&spec.plugin)
            .and_then(|p| p.status().fingerprint)
            .is_some_and(|f| f.has_controller_capability(ControllerCap::SingleNodeMultiWriter));
        capability(spec, newer)
    }
    /// What each namespace may hold.
    pub fn quotas(&self) -> &crate::quotas::Quotas {
        &self.quotas
    }

    /// Whether `namespace`'s quota takes `more` on top of `used` (what it
    /// holds and what is reserved there), judged under the table's lock:
    /// the admission of a new volume, a growth or a snapshot.
    pub(crate) fn admit(
        &self,
        namespace: &berth_model::Namespace,
        used: &crate::quotas::Usage,
        more: &crate::quotas::Usage,
    ) -> Result<(), RequestError> {
        let Some(quota) = self.quotas.get(namespace.as_str()) else {
            return Ok(());
        };
        Ok(crate::quotas::admits(&quota, used, more)?)
    }

    /// The volume of that name (a bare name is in the default namespace).
    pub fn get(&self, name: impl Into<VolumeName>) -> Option<VolumeRecord> {
        self.table.by_name(&name.into())
    }
}

/// A concern of the manager: a view of the [`Core`] whose methods are the
/// concern's, reached with `core.<accessor>()` (and from the
/// [`VolumeManager`](crate::VolumeManager) for those the server calls).
macro_rules! view {
    ($(#[$doc:meta])* $name:ident, $accessor:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name<'a> {
            core: &'a std::sync::Arc<$crate::shared::Core>,
        }

        impl std::ops::Deref for $name<'_> {
            type Target = std::sync::Arc<$crate::shared::Core>;
            fn deref(&self) -> &Self::Target {
                self.core
            }
        }

        impl $crate::shared::Core {
            pub fn $accessor(self: &std::sync::Arc<Self>) -> $name<'_> {
                $name { core: self }
            }
        }
    };
}
pub(crate) use view;

/// A view that works within one namespace: its names are looked up there,
/// what it makes is made there. `core.<accessor>()` works in the default
/// namespace, `core.<accessor_in>(namespace)` in the one named.
macro_rules! namespaced_view {
    ($(#[$doc:meta])* $name:ident, $accessor:ident, $accessor_in:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name<'a> {
            core: &'a std::sync::Arc<$crate::shared::Core>,
            namespace: berth_model::Namespace,
        }

        impl std::ops::Deref for $name<'_> {
            type Target = std::sync::Arc<$crate::shared::Core>;
            fn deref(&self) -> &Self::Target {
                self.core
            }
        }

        impl $name<'_> {
            /// `name` in this view's namespace.
            pub(crate) fn in_namespace(&self, name: &str) -> berth_model::VolumeName {
                berth_model::VolumeName::new(self.namespace.clone(), name)
            }
        }

        impl $crate::shared::Core {
            pub fn $accessor(self: &std::sync::Arc<Self>) -> $name<'_> {
                self.$accessor_in(berth_model::Namespace::default())
            }
            pub fn $accessor_in(self: &std::sync::Arc<Self>, namespace: berth_model::Namespace) -> $name<'_> {
                $name { core: self, namespace }
            }
        }
    };
}
pub(crate) use namespaced_view;
