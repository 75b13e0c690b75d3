//! `ListVolumes`: one namespace, or every namespace the caller may list
//! (`*`), whole or a page at a time.

use berth_proto::berth::v1 as api;
use tonic::{Request, Response, Status};

use super::BerthApi;
use super::codes::status;
use super::convert::volume_summary;
use super::scope::{Within, within};
use crate::manager::{Pages, RequestError};

pub(super) fn list_volumes(
    server: &BerthApi,
    req: Request<api::ListVolumesRequest>,
) -> Result<Response<api::ListVolumesResponse>, Status> {
    let within = within(&req).map_err(status)?;
    let caller = req.extensions().get::<crate::acl::Caller>().cloned();
    let may_list = |ns: &berth_model::Namespace| match &caller {
        Some(caller) => server.acl.may_list(caller, ns.as_str()),
        None => true,
    };
    let req = req.into_inner();
    let filter = Filter::of(&req)?;
    if filter.is_some() && req.max_entries == 0 {
        return Err(status(RequestError::Invalid(
            "a filtered list is paged: set max_entries".into(),
        )));
    }
    // No page size: every volume at once, as before paging existed.
    let (records, next) = match (req.max_entries, within) {
        (0, Within::Every) => (server.manager.list(Some(&may_list)), None),
        (0, Within::One(ns)) => (server.manager.list(Some(&|n| *n == ns)), None),
        (max, within) => {
            // A token is a volume's name, longer ones of earlier releases included.
            berth_model::bounds::text("starting_token", &req.starting_token, 1024)
                .map_err(|e| status(RequestError::from(e)))?;
            let pages = match &within {
                Within::One(ns) => Pages::One(ns.as_str()),
                Within::Every => Pages::Every(&may_list),
            };
            let matches = |r: &berth_model::VolumeRecord| filter.as_ref().is_none_or(|f| f.takes(r));
            server
                .manager
                .list_page(pages, &req.starting_token, max as usize, &matches)
        }
    };
    let volumes = records
        .iter()
        .map(|r| volume_summary(&server.manager, r))
        .collect();
    Ok(Response::new(api::ListVolumesResponse {
        volumes,
        next_token: next.unwrap_or_default(),
    }))
}

/// What a filtered `ListVolumes` takes.
struct Filter {
    /// Lowercased.
    name_contains: String,
    state: Option<berth_model::VolumeState>,
    plugin: String,
    node: String,
    /// `key`, and the value it must have (any when `None`).
    label: Option<(String, Option<String>)>,
}

impl Filter {
    /// The request's filter, `None` when it names none.
    fn of(req: &api::ListVolumesRequest) -> Result<Option<Filter>, Status> {
        let invalid = |e| status(RequestError::from(e));
        for (field, text) in [
            ("name_contains", &req.name_contains),
            ("state", &req.state),
            ("plugin", &req.plugin),
            ("node", &req.node),
            ("label", &req.label),
        ] {
            berth_model::bounds::text(field, text, 256).map_err(invalid)?;
        }
        let state = match req.state.as_str() {
            "" => None,
            s => Some(
                berth_model::VolumeState::ALL
                    .into_iter()
                    .find(|state| state.as_str() == s)
                    .ok_or_else(|| {
                        status(RequestError::Invalid(format!(
                            "state {s:?}: one of pending, creating, available, published, deleting, failed"
                        )))
                    })?,
            ),
        };
        let filter = Filter {
            name_contains: req.name_contains.to_lowercase(),
            state,
            plugin: req.plugin.clone(),
            node: req.node.clone(),
            label: match req.label.split_once('=') {
                _ if req.label.is_empty() => None,
                Some((k, v)) => Some((k.to_string(), Some(v.to_string()))),
                None => Some((req.label.clone(), None)),
            },
        };
        let none = filter.name_contains.is_empty()
            && state.is_none()
            && filter.plugin.is_empty()
            && filter.node.is_empty()
            && filter.label.is_none();
        Ok((!none).then_some(filter))
    }

    fn takes(&self, r: &berth_model::VolumeRecord) -> bool {
        (self.name_contains.is_empty() || contains_any_case(&r.spec.name, &self.name_contains))
            && self.state.is_none_or(|s| r.state() == s)
            && (self.plugin.is_empty() || r.spec.plugin == self.plugin)
            && (self.node.is_empty() || r.publications.contains_key(&self.node))
            && self.label.as_ref().is_none_or(|(key, value)| {
                let has = r.spec.labels.get(key);
                has.is_some() && value.as_ref().is_none_or(|v| has == Some(v))
            })
    }
}

/// Whether `name` contains `lowered` (lowercase already), in any case. It
/// runs on every volume a filtered page looks at, under the table's lock:
/// an ASCII text is matched in place, with no copy of each name.
fn contains_any_case(name: &str, lowered: &str) -> bool {
    if !lowered.is_ascii() {
        return name.to_lowercase().contains(lowered);
    }
    let (name, lowered) = (name.as_bytes(), lowered.as_bytes());
    name.windows(lowered.len())
        .any(|w| w.eq_ignore_ascii_case(lowered))
}

fn quota_to_api(q: &crate::store::QuotaRecord) -> api::NamespaceQuota {
    api::NamespaceQuota {
        volumes: q.volumes,
        bytes: q.bytes,
        snapshots: q.snapshots,
    }
}

/// What each namespace the call names holds and may hold: with `*`, those
/// the caller may list that hold volumes or have a quota.
pub(super) fn list_namespaces(
    server: &BerthApi,
    req: Request<api::ListNamespacesRequest>,
) -> Result<Response<api::ListNamespacesResponse>, Status> {
    let within = within(&req).map_err(status)?;
    let caller = req.extensions().get::<crate::acl::Caller>().cloned();
    let taken = |ns: &str| match (&within, &caller) {
        (Within::One(one), _) => one.as_str() == ns,
        (Within::Every, Some(caller)) => server.acl.may_list(caller, ns),
        (Within::Every, None) => true,
    };
    let mut all: std::collections::BTreeMap<String, api::NamespaceStatus> = Default::default();
    for (ns, usage) in server.manager.namespace_usage() {
        if taken(ns.as_str()) {
            all.insert(
                ns.to_string(),
                api::NamespaceStatus {
                    namespace: ns.to_string(),
                    volumes: usage.volumes,
                    bytes: usage.bytes,
                    snapshots: usage.snapshots,
                    quota: None,
                },
            );
        }
    }
    for q in server.manager.quotas().all() {
        if taken(&q.namespace) {
            all.entry(q.namespace.clone())
                .or_insert_with(|| api::NamespaceStatus {
                    namespace: q.namespace.clone(),
                    ..Default::default()
                })
                .quota = Some(quota_to_api(&q));
        }
    }
    if let Within::One(ns) = &within {
        all.entry(ns.to_string()).or_insert_with(|| api::NamespaceStatus {
            namespace: ns.to_string(),
            ..Default::default()
        });
    }
    Ok(Response::new(api::ListNamespacesResponse {
        namespaces: all.into_values().collect(),
    }))
}

/// Sets a namespace's quota, durably, and answers how it stands.
pub(super) async fn set_quota(
    server: &BerthApi,
    req: Request<api::SetNamespaceQuotaRequest>,
) -> Result<Response<api::NamespaceStatus>, Status> {
    let req = req.into_inner();
    let namespace =
        berth_model::Namespace::parse(&req.namespace).map_err(|e| status(RequestError::from(e)))?;
    let quota = req.quota.unwrap_or_default();
    let record = crate::store::QuotaRecord {
        namespace: namespace.to_string(),
        volumes: quota.volumes,
        bytes: quota.bytes,
        snapshots: quota.snapshots,
    };
    server
        .manager
        .quotas()
        .set(record.clone())
        .await
        .map_err(|e| status(super::codes::Refusal::Store(e)))?;
    let usage = server
        .manager
        .namespace_usage()
        .into_iter()
        .find(|(n, _)| *n == namespace)
        .map(|(_, u)| u)
        .unwrap_or_default();
    Ok(Response::new(api::NamespaceStatus {
        namespace: namespace.to_string(),
        volumes: usage.volumes,
        bytes: usage.bytes,
        snapshots: usage.snapshots,
        quota: Some(quota_to_api(&record)),
    }))
}

#[cfg(test)]
mod tests {
    use super::contains_any_case;

    #[test]
    fn a_name_is_found_by_part_of_it_in_any_case() {
        assert!(contains_any_case("Vol-004321", "l-0043"));
        assert!(contains_any_case("DATA", "data"));
        assert!(!contains_any_case("vol-1", "vol-2"));
        assert!(!contains_any_case("ab", "abc"));
        assert!(contains_any_case("Ünïcode-vol", "ünï"));
    }
}
