//! Fingerprinting: what a plugin is and what it can do, asked over Identity,
//! Controller and Node, and checked against the CSI spec's rules.

use std::collections::BTreeMap;

use serde::Serialize;
use tonic::Code;

use crate::client::CsiClient;
use crate::error::CsiError;
use crate::proto;
use proto::controller_service_capability::rpc::Type as ControllerCap;
use proto::group_controller_service_capability::rpc::Type as GroupCap;
use proto::node_service_capability::rpc::Type as NodeCap;
use proto::plugin_capability::service::Type as ServiceCap;

/// Everything Berth learns about a plugin when it fingerprints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fingerprint {
    pub endpoint: String,
    pub name: String,
    pub vendor_version: String,
    pub manifest: BTreeMap<String, String>,
    /// From Probe; an absent readiness means ready.
    pub ready: bool,
    /// GetPluginCapabilities, by their spec names (`CONTROLLER_SERVICE`, `VOLUME_EXPANSION_ONLINE`, ...).
    pub plugin_capabilities: Vec<String>,
    /// Present when the plugin offers the Controller service and this
    /// endpoint serves it.
    pub controller: Option<ControllerInfo>,
    /// Present when the plugin serves the Node service.
    pub node: Option<NodeInfo>,
    /// Services the driver has but this endpoint does not serve (answered
    /// UNIMPLEMENTED), e.g. `Controller` on a node-only process.
    pub unserved: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ControllerInfo {
    pub capabilities: Vec<String>,
    /// GroupControllerGetCapabilities, asked when the plugin offers
    /// GROUP_CONTROLLER_SERVICE.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub group_capabilities: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct NodeInfo {
    pub node_id: String,
    /// None when the plugin reports no limit (0).
    pub max_volumes_per_node: Option<u64>,
    pub accessible_topology: BTreeMap<String, String>,
    pub capabilities: Vec<String>,
}

impl Fingerprint {
    pub fn has_plugin_capability(&self, cap: ServiceCap) -> bool {
        self.plugin_capabilities.iter().any(|c| c == cap.as_str_name())
    }

    pub fn has_controller_capability(&self, cap: ControllerCap) -> bool {
        self.controller
            .as_ref()
            .is_some_and(|c| c.capabilities.iter().any(|n| n == cap.as_str_name()))
    }

    pub fn has_group_capability(&self, cap: GroupCap) -> bool {
        self.controller
            .as_ref()
            .is_some_and(|c| c.group_capabilities.iter().any(|n| n == cap.as_str_name()))
    }

    pub fn has_node_capability(&self, cap: NodeCap) -> bool {
        self.node
            .as_ref()
            .is_some_and(|n| n.capabilities.iter().any(|c| c == cap.as_str_name()))
    }
}

/// What the GroupController service offers; nothing when the endpoint
/// does not serve it (UNIMPLEMENTED).
async fn group_capabilities(client: &CsiClient) -> Result<Vec<String>, CsiError> {
    match client
        .group_controller_get_capabilities(proto::GroupControllerGetCapabilitiesRequest {})
        .await
    {
        Ok(resp) => Ok(resp
            .capabilities
            .iter()
            .filter_map(|c| c.r#type.as_ref())
            .map(|proto::group_controller_service_capability::Type::Rpc(rpc)| {
                enum_name(rpc.r#type, |v| {
                    GroupCap::try_from(v).ok().map(|t| t.as_str_name())
                })
            })
            .collect()),
        Err(e) if e.code() == Code::Unimplemented => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Which CSI services an endpoint is there for. Drivers are commonly run as
/// one controller process and one process per node, each serving only its own
/// service while reporting the driver's capabilities (CONTROLLER_SERVICE
/// included) from every process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// Identity and Controller; the Node service is not asked for.
    Controller,
    /// Identity and Node; the Controller service is not asked for.
    Node,
    /// Whatever the endpoint serves (`berth plugin probe`).
    #[default]
    Any,
}

/// Asks the plugin who it is and what it can do, for the services of `role`.
/// A service the endpoint does not serve (UNIMPLEMENTED) is recorded in
/// [`Fingerprint::unserved`], not an error, unless `role` needs it. Fails on
/// the first call that errors or answers against the spec, naming the call.
pub async fn fingerprint(client: &CsiClient, role: Role) -> Result<Fingerprint, CsiError> {
    let info = client.get_plugin_info(proto::GetPluginInfoRequest {}).await?;
    validate_plugin_name(&info.name).map_err(|why| client.invalid("GetPluginInfo", why.to_string()))?;
    if info.vendor_version.trim().is_empty() {
        return Err(client.invalid("GetPluginInfo", "vendor_version is empty; the spec requires it"));
    }

    let probe = client.probe(proto::ProbeRequest {}).await?;
    let ready = probe.ready.is_none_or(|r| r);

    let caps = client
        .get_plugin_capabilities(proto::GetPluginCapabilitiesRequest {})
        .await?;
    let plugin_capabilities: Vec<String> = caps
        .capabilities
        .iter()
        .filter_map(plugin_capability_name)
        .collect();
    let offers_controller = plugin_capabilities
        .iter()
        .any(|c| c == ServiceCap::ControllerService.as_str_name());

    let mut unserved = Vec::new();
    let controller = if offers_controller && role != Role::Node {
        match client
            .controller_get_capabilities(proto::ControllerGetCapabilitiesRequest {})
            .await
        {
            Ok(resp) => {
                let capabilities = resp
                    .capabilities
                    .iter()
                    .filter_map(|c| c.r#type.as_ref())
                    .map(|proto::controller_service_capability::Type::Rpc(rpc)| {
                        enum_name(rpc.r#type, |v| {
                            ControllerCap::try_from(v).ok().map(|t| t.as_str_name())
                        })
                    })
                    .collect();
                let offers_groups = plugin_capabilities
                    .iter()
                    .any(|c| c == ServiceCap::GroupControllerService.as_str_name());
                let group_capabilities = match offers_groups {
                    true => group_capabilities(client).await?,
                    false => Vec::new(),
                };
                Some(ControllerInfo {
                    capabilities,
                    group_capabilities,
                })
            }
            // The driver offers the service; this process does not serve it.
            Err(e) if e.code() == Code::Unimplemented => {
                unserved.push("Controller".to_string());
                None
            }
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    if role == Role::Controller && controller.is_none() {
        return Err(client.invalid(
            "ControllerGetCapabilities",
            if offers_controller {
                "a controller endpoint that does not serve the Controller service"
            } else {
                "a controller endpoint whose plugin does not offer CONTROLLER_SERVICE"
            },
        ));
    }

    // CSI has no capability saying "I serve Node"; a plugin without it answers UNIMPLEMENTED.
    let node_answer = if role == Role::Controller {
        None
    } else {
        Some(
            client
                .node_get_capabilities(proto::NodeGetCapabilitiesRequest {})
                .await,
        )
    };
    let node = match node_answer {
        None => None,
        Some(Ok(resp)) => {
            let capabilities = resp
                .capabilities
                .iter()
                .filter_map(|c| c.r#type.as_ref())
                .map(|proto::node_service_capability::Type::Rpc(rpc)| {
                    enum_name(rpc.r#type, |v| NodeCap::try_from(v).ok().map(|t| t.as_str_name()))
                })
                .collect();
            let info = client.node_get_info(proto::NodeGetInfoRequest {}).await?;
            Some(node_info(client, info, capabilities)?)
        }
        Some(Err(e)) if e.code() == Code::Unimplemented => {
            unserved.push("Node".to_string());
            None
        }
        Some(Err(e)) => return Err(e),
    };
    if role == Role::Node && node.is_none() {
        return Err(client.invalid(
            "NodeGetCapabilities",
            "a node endpoint that does not serve the Node service",
        ));
    }

    if controller.is_none() && node.is_none() {
        return Err(client.invalid(
            "GetPluginCapabilities",
            "the plugin serves neither the Controller nor the Node service",
        ));
    }

    Ok(Fingerprint {
        endpoint: client.endpoint().to_string(),
        name: info.name,
        vendor_version: info.vendor_version,
        manifest: info.manifest.into_iter().collect(),
        ready,
        plugin_capabilities,
        controller,
        node,
        unserved,
    })
}

fn node_info(
    client: &CsiClient,
    info: proto::NodeGetInfoResponse,
    capabilities: Vec<String>,
) -> Result<NodeInfo, CsiError> {
    if info.node_id.is_empty() {
        return Err(client.invalid("NodeGetInfo", "node_id is empty; the spec requires it"));
    }
    if info.node_id.len() > 256 {
        return Err(client.invalid(
            "NodeGetInfo",
            format!(
                "node_id is {} bytes; the spec allows at most 256",
                info.node_id.len()
            ),
        ));
    }
    let max_volumes_per_node = match info.max_volumes_per_node {
        0 => None,
        n if n < 0 => {
            return Err(client.invalid(
                "NodeGetInfo",
                format!("max_volumes_per_node is {n}; it must not be negative"),
            ));
        }
        n => Some(n as u64),
    };
    Ok(NodeInfo {
        node_id: info.node_id,
        max_volumes_per_node,
        accessible_topology: info
            .accessible_topology
            .map(|t| t.segments.into_iter().collect())
            .unwrap_or_default(),
        capabilities,
    })
}

fn plugin_capability_name(cap: &proto::PluginCapability) -> Option<String> {
    use proto::plugin_capability::{Type, volume_expansion};
    match &cap.r#type {
        Some(Type::Service(s)) => Some(enum_name(s.r#type, |v| {
            ServiceCap::try_from(v).ok().map(|t| t.as_str_name())
        })),
        Some(Type::VolumeExpansion(e)) => Some(format!(
            "VOLUME_EXPANSION_{}",
            enum_name(e.r#type, |v| volume_expansion::Type::try_from(v)
                .ok()
                .map(|t| t.as_str_name()))
        )),
        None => None,
    }
}

/// A newer plugin may send values this build does not know: keep them visible.
fn enum_name(value: i32, known: impl Fn(i32) -> Option<&'static str>) -> String {
    known(value).map_or_else(|| format!("UNKNOWN({value})"), str::to_string)
}

/// How a plugin name breaks the spec's rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PluginNameError {
    #[error("plugin name is empty; the spec requires one")]
    Empty,
    #[error("plugin name {name:?} is {len} characters; the spec allows at most 63")]
    TooLong { name: String, len: usize },
    #[error("plugin name {0:?} must begin and end with a letter or digit")]
    Ends(String),
    #[error("plugin name {name:?} contains {bad:?}; only letters, digits, '-' and '.' are allowed")]
    Character { name: String, bad: char },
}

/// The spec's rule for plugin names: domain-name form, at most 63 characters,
/// alphanumeric at both ends, only alphanumerics, `-` and `.` between.
pub fn validate_plugin_name(name: &str) -> Result<(), PluginNameError> {
    if name.is_empty() {
        return Err(PluginNameError::Empty);
    }
    if name.len() > 63 {
        return Err(PluginNameError::TooLong {
            name: name.into(),
            len: name.len(),
        });
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if !name.starts_with(alnum) || !name.ends_with(alnum) {
        return Err(PluginNameError::Ends(name.into()));
    }
    if let Some(bad) = name.chars().find(|&c| !(alnum(c) || c == '-' || c == '.')) {
        return Err(PluginNameError::Character {
            name: name.into(),
            bad,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_follow_the_spec() {
        for good in [
            "hostpath.csi.k8s.io",
            "a",
            "ebs.csi.aws.com",
            "x-1.y",
            &"a".repeat(63),
        ] {
            assert_eq!(validate_plugin_name(good), Ok(()), "{good}");
        }
        let cases = [
            ("", "empty"),
            (&"a".repeat(64) as &str, "at most 63"),
            ("-abc", "begin and end"),
            ("abc.", "begin and end"),
            ("my_plugin", "contains '_'"),
            ("dr\u{e9}.io", "contains"),
            ("a b", "contains ' '"),
        ];
        for (bad, needle) in cases {
            let err = validate_plugin_name(bad).unwrap_err().to_string();
            assert!(err.contains(needle), "{bad:?}: {err}");
        }
    }

    #[test]
    fn unknown_enum_values_stay_visible() {
        assert_eq!(enum_name(99, |_| None), "UNKNOWN(99)");
        assert_eq!(
            enum_name(1, |v| ServiceCap::try_from(v).ok().map(|t| t.as_str_name())),
            "CONTROLLER_SERVICE"
        );
    }
}
