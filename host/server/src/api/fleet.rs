//! The API's answers about the fleet: nodes and their plugins, and the
//! join tokens new nodes come in with.

use berth_proto::berth::v1 as api;
use tonic::{Request, Response, Status};

use super::BerthApi;
use super::codes::{Refusal, status};
use crate::csi::registry::Health;
use crate::manager::RequestError;

fn health(h: &Health) -> (&'static str, String) {
    match h {
        Health::Unknown => ("unknown", String::new()),
        Health::Healthy => ("healthy", String::new()),
        Health::Unhealthy { reason } => ("unhealthy", reason.clone()),
    }
}

impl BerthApi {
    /// The TLS cluster endpoint, which join tokens are for.
    fn cluster(&self) -> Result<&crate::cluster::service::ClusterTls, Status> {
        self.cluster.as_deref().ok_or_else(|| status(Refusal::NoCluster))
    }

    pub(super) async fn answer_list_nodes(
        &self,
        _: Request<api::ListNodesRequest>,
    ) -> Result<Response<api::ListNodesResponse>, Status> {
        let m = &self.manager;
        let mut nodes: Vec<api::Node> = m
            .node_summaries()
            .into_iter()
            .map(|n| api::Node {
                name: n.name,
                labels: n.labels.into_iter().collect(),
                plugins: vec![],
                state: n.state.as_str().into(),
                draining: n.draining,
                last_seen_unix_ms: n
                    .last_seen
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_millis() as u64),
            })
            .collect();
        for v in m.fleet().node_views(None) {
            let (h, reason) = health(&v.health);
            let plugin = api::NodePlugin {
                plugin: v.plugin,
                node_id: v.info.as_ref().map(|i| i.node_id.clone()).unwrap_or_default(),
                health: h.into(),
                reason,
                max_volumes: v
                    .info
                    .as_ref()
                    .and_then(|i| i.max_volumes_per_node)
                    .map_or(0, |n| n as i64),
                published_volumes: v.published_volumes,
                topology: v.info.map(|i| api::Topology {
                    segments: i.accessible_topology.into_iter().collect(),
                }),
            };
            if let Some(n) = nodes.iter_mut().find(|n| n.name == v.node) {
                n.plugins.push(plugin);
            }
        }
        Ok(Response::new(api::ListNodesResponse { nodes }))
    }

    pub(super) async fn answer_create_join_token(
        &self,
        req: Request<api::CreateJoinTokenRequest>,
    ) -> Result<Response<api::CreateJoinTokenResponse>, Status> {
        let cluster = self.cluster()?;
        let r = req.into_inner();
        let request = crate::cluster::tokens::TokenRequest {
            ttl: match r.ttl_seconds {
                0 => std::time::Duration::from_secs(3600).min(cluster.tokens.max_ttl()),
                s => std::time::Duration::from_secs(s),
            },
            node: (!r.node.is_empty()).then_some(r.node),
            uses: r.uses,
            replace: r.replace,
        };
        let (token, record) = cluster.tokens.create(request).await?;
        tracing::warn!(
            token = %record.id,
            node = record.node.as_deref().map(crate::model::text::echo).unwrap_or_else(|| "(any new node)".into()),
            uses = record.uses_left,
            replace = record.replace,
            expires_unix = record.expires_ms / 1000,
            "join token made"
        );
        Ok(Response::new(api::CreateJoinTokenResponse {
            token,
            address: cluster.address.clone(),
            expires_unix: record.expires_ms / 1000,
            id: record.id,
        }))
    }

    pub(super) async fn answer_list_join_tokens(
        &self,
        _: Request<api::ListJoinTokensRequest>,
    ) -> Result<Response<api::ListJoinTokensResponse>, Status> {
        let tokens = self
            .cluster()?
            .tokens
            .list()
            .await
            .into_iter()
            .map(|t| api::JoinTokenInfo {
                id: t.id,
                node: t.node.unwrap_or_default(),
                uses_left: t.uses_left,
                expires_unix: t.expires_ms / 1000,
                created_unix: t.created_ms / 1000,
                replace: t.replace,
            })
            .collect();
        Ok(Response::new(api::ListJoinTokensResponse { tokens }))
    }
    pub(super) async fn answer_revoke_join_token(
        &self,
        req: Request<api::RevokeJoinTokenRequest>,
    ) -> Result<Response<api::RevokeJoinTokenResponse>, Status> {
        let id = req.into_inner().id;
        let revoked = self.cluster()?.tokens.revoke(&id).await.map_err(status)?;
        if !revoked {
            return Err(status(RequestError::from(berth_manager::Missing::JoinToken(id))));
        }
        tracing::warn!(token = %crate::model::text::echo(&id), "join token revoked");
        Ok(Response::new(api::RevokeJoinTokenResponse {}))
    }

    /// Each configured plugin: its controller's health and its nodes'.
    pub(super) async fn answer_plugin_status(
        &self,
        _: Request<api::PluginStatusRequest>,
    ) -> Result<Response<api::PluginStatusResponse>, Status> {
        let m = &self.manager;
        let plugins = m
            .config()
            .plugins
            .iter()
            .map(|p| {
                let controller = m.registry().get(&p.name).map(|c| c.status());
                let (h, reason) = match (&p.controller, &controller) {
                    (None, _) => ("none", String::new()),
                    (Some(_), Some(s)) => health(&s.health),
                    (Some(_), None) => ("unknown", String::new()),
                };
                let nodes = m.fleet().node_views(Some(&p.name));
                let healthy = nodes.iter().filter(|n| n.health == Health::Healthy).count();
                api::PluginStatus {
                    name: p.name.clone(),
                    driver: controller
                        .as_ref()
                        .and_then(|s| s.fingerprint.as_ref().map(|f| f.name.clone()))
                        .or_else(|| p.driver.clone())
                        .unwrap_or_default(),
                    controller_health: h.into(),
                    controller_reason: reason,
                    nodes_healthy: healthy as u32,
                    nodes_expected: nodes.len() as u32,
                    capabilities: controller
                        .and_then(|s| s.fingerprint)
                        .and_then(|f| f.controller.as_ref().map(|c| c.capabilities.clone()))
                        .unwrap_or_default(),
                }
            })
            .collect();
        Ok(Response::new(api::PluginStatusResponse { plugins }))
    }
}
