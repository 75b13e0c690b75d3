//! The API's answers about the fleet: nodes and their plugins, and the
//! join tokens new nodes come in with.

use berth_proto::berth::v1 as api;
use tonic::{Request, Response, Status};

use super::BerthApi;
use super::codes::{Refusal, status};
use crate::csi::registry::Health;
use crate::manager::RequestError;

/// A plugin's health as the API says it: a word, and the reason when unhealthy.
pub(super) fn health(h: &Health) -> (&'static str, String) {
    match h {
        Health::Unknown => ("unknown", String::new()),
        Health::Healthy => ("healthy", String::new()),
        Health::Unhealthy { reason } => ("unhealthy", reason.clone()),
    }
}

impl BerthApi {
    /// The servers sharing the etcd store, this one (the leader) first.
    pub(super) async fn servers(&self) -> Vec<api::Server> {
        let Some(election) = &self.election else {
            return Vec::new();
        };
        let mut members = election.members().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "listing the servers in etcd failed");
            vec![election.me().clone()]
        });
        members.sort_by_key(|m| (m.name != election.me().name, m.name.clone()));
        members
            .into_iter()
            .map(|m| api::Server {
                leader: m.name == election.me().name,
                name: m.name,
                api: m.api,
                cluster_address: m.forward.unwrap_or_default(),
                policy_set: m.policy_set.unwrap_or_default(),
                policy_error: m.policy_error.unwrap_or_default(),
            })
            .collect()
    }

    /// How many volumes are in each state, the work outstanding, the
    /// policies' counters and the servers.
    pub(super) async fn answer_summary(&self) -> api::SummaryResponse {
        let s = self.manager.summary();
        api::SummaryResponse {
            volumes: s.volumes,
            states: s.states.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            busy: s.busy,
            retrying: s.retrying,
            policies: super::policies::counters(self.manager.policies().stats()),
            waiting: s.waiting,
            servers: self.servers().await,
        }
    }

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
    pub(super) async fn answer_drain_node(
        &self,
        req: Request<api::DrainNodeRequest>,
    ) -> Result<Response<api::NodeChangeResponse>, Status> {
        let r = req.into_inner();
        let publications = self
            .manager
            .fleet()
            .drain_node(&r.name, r.undo)
            .await
            .map_err(status)?;
        Ok(Response::new(api::NodeChangeResponse { publications }))
    }

    pub(super) async fn answer_forget_node(
        &self,
        req: Request<api::ForgetNodeRequest>,
    ) -> Result<Response<api::NodeChangeResponse>, Status> {
        let r = req.into_inner();
        let publications = self
            .manager
            .fleet()
            .forget_node(&r.name, r.force)
            .await
            .map_err(status)?;
        Ok(Response::new(api::NodeChangeResponse { publications }))
    }

    pub(super) async fn answer_remove_node(
        &self,
        req: Request<api::RemoveNodeRequest>,
    ) -> Result<Response<api::NodeChangeResponse>, Status> {
        self.manager
            .fleet()
            .remove_node(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(api::NodeChangeResponse { publications: 0 }))
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
}
