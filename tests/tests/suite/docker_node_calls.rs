//! The calls a node's Docker plugin makes to the server (`NodeVolumes`),
//! made directly as a node's certificate or the unix endpoint's header
//! makes them, over TLS and the unix socket: what a node may reach is its
//! own Docker's, whatever it sends.

use std::time::Duration;

use berth_tests::{Cluster, ClusterSpec, wait_for};

use crate::docker::{published_on, volume};

/// `message` as node `node` sends it on the unix endpoint.
fn with<M>(node: &str, message: M) -> tonic::Request<M> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("berth-node", node.parse().unwrap());
    request
}

/// The node-bounded calls themselves, as a node's certificate (or the
/// unix endpoint's header) makes them, whatever its Docker plugin would
/// send: a node reaches only its Docker's scope, publishes on itself only,
/// sees no parameters or secret names, creates only where the server
/// allows and with the secrets it allows, removes only what Docker made
/// and undoes only what its own Docker asked for.
#[test]
fn a_node_reaches_only_what_its_docker_owns() {
    use berth::agent::config::{AgentConfig, ServerAddress};
    use berth_proto::berth::v1 as api;
    use berth_proto::berth::v1::node_volumes_client::NodeVolumesClient;
    use tonic::Code;

    for tls in [true, false] {
        let mut c = Cluster::start(ClusterSpec {
            agents: true,
            tls,
            extra: "docker_create_from = [\"node-a\"]\ndocker_secrets = [\"docker-db\"]\n",
            controller_topology: None,
            ..ClusterSpec::default()
        });
        c.ok(&[
            "volume",
            "create",
            "v",
            "--plugin",
            "hostpath",
            "--size",
            "1MiB",
            "--param",
            "tier=gold",
            "--label",
            "team=db",
            "--wait",
        ]);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _entered = rt.enter();
        let mut channel_of = |node: &str| {
            let config = AgentConfig::load(&c.agent(node).config).unwrap();
            match &config.servers[0] {
                ServerAddress::Tls { host, port } => {
                    let creds = berth::agent::tls::Credentials::load(&config.dir)
                        .unwrap()
                        .unwrap();
                    berth::agent::tls::session_channel(host, *port, &creds).unwrap()
                }
                ServerAddress::Unix(e) => berth::csi::unix_channel(e.path()),
            }
        };
        let (chan_a, chan_b) = (channel_of("node-a"), channel_of("node-b"));
        let c = c;
        let client = |node: &str| {
            let channel = if node == "node-a" { &chan_a } else { &chan_b };
            NodeVolumesClient::new(channel.clone())
        };
        let code = |r: Result<tonic::Response<api::Volume>, tonic::Status>| r.map(drop).map_err(|s| s.code());
        let get = |node: &str, name: &str| {
            rt.block_on(client(node).get_volume(with(node, api::GetVolumeRequest { name: name.into() })))
        };
        let list = |node: &str| {
            let r = rt.block_on(client(node).list_volumes(with(node, api::ListVolumesRequest::default())));
            let names: Vec<String> = r
                .unwrap()
                .into_inner()
                .volumes
                .into_iter()
                .map(|v| v.spec.unwrap().name)
                .collect();
            names
        };
        let publish = |node: &str, name: &str, on: &str| {
            let request = api::PublishVolumeRequest {
                name: name.into(),
                node: on.into(),
                readonly: false,
            };
            rt.block_on(client(node).publish_volume(with(node, request)))
        };
        let unpublish = |node: &str, name: &str| {
            let request = api::UnpublishVolumeRequest {
                name: name.into(),
                node: node.into(),
            };
            rt.block_on(client(node).unpublish_volume(with(node, request)))
        };
        let create = |node: &str, name: &str, secret: &str| {
            let spec = api::VolumeSpec {
                name: name.into(),
                plugin: "hostpath".into(),
                required_bytes: 1 << 20,
                secret: secret.into(),
                ..Default::default()
            };
            rt.block_on(client(node).create_volume(with(node, api::CreateVolumeRequest { spec: Some(spec) })))
        };
        let delete = |node: &str, name: &str| {
            rt.block_on(client(node).delete_volume(with(
                node,
                api::DeleteVolumeRequest {
                    name: name.into(),
                    force: false,
                },
            )))
        };

        // A volume made through the API is no Docker's: not listed, not
        // found, not publishable, and no call reaches the plugin for it.
        assert!(list("node-b").is_empty(), "tls {tls}");
        assert_eq!(code(get("node-b", "v")), Err(Code::NotFound), "tls {tls}");
        assert_eq!(code(publish("node-b", "v", "")), Err(Code::NotFound), "tls {tls}");
        assert!(published_on(&c, "v").is_empty());

        // Marked for node-b's Docker: node-b sees it without its parameters,
        // and publishes it on itself only; node-a still sees nothing.
        c.ok(&["volume", "docker", "v", "node-b"]);
        let seen = get("node-b", "v").unwrap().into_inner();
        let spec = seen.spec.clone().unwrap();
        assert!(
            spec.parameters.is_empty() && spec.secret.is_empty() && seen.csi_name.is_empty(),
            "{seen:?}"
        );
        assert_eq!(spec.labels.get("team").map(String::as_str), Some("db"));
        assert_eq!(code(get("node-a", "v")), Err(Code::NotFound));
        assert_eq!(
            code(publish("node-b", "v", "node-a")),
            Err(Code::PermissionDenied)
        );
        assert_eq!(code(publish("node-b", "v", "")), Ok(()));
        wait_for(
            "the publish on node-b",
            Duration::from_secs(30),
            || volume(&c, "v")["publications"][0]["state"] == "published",
            || c.log(),
        );
        // Another node's target path is not shown to node-a.
        c.ok(&["volume", "docker", "v", "all"]);
        let from_a = get("node-a", "v").unwrap().into_inner();
        assert_eq!(from_a.publications[0].node, "node-b");
        assert!(from_a.publications[0].target_path.is_empty(), "{from_a:?}");
        // Docker removes nothing the API made, even where it may create.
        assert_eq!(code(delete("node-a", "v")), Err(Code::PermissionDenied));

        // Creating: only where the server allows, naming only allowed secrets.
        assert_eq!(code(create("node-b", "from-b", "")), Err(Code::PermissionDenied));
        assert_eq!(
            code(create("node-a", "secretive", "db")),
            Err(Code::PermissionDenied)
        );
        assert!(c.berth(&["volume", "get", "secretive"]).status.code() != Some(0));
        assert_eq!(code(create("node-a", "from-a", "")), Ok(()));
        let made = volume(&c, "from-a");
        assert_eq!(made["made_by"], "docker:node-a", "{made:#}");
        // A name the API holds is not Docker's to take over.
        c.ok(&["volume", "docker", "v", "none"]);
        assert_eq!(code(create("node-a", "v", "")), Err(Code::AlreadyExists));
        // Volumes made through Docker are every node's Docker's.
        assert_eq!(list("node-b"), ["from-a"]);

        // An operator's publication is never undone by Docker.
        wait_for(
            "from-a to be created",
            Duration::from_secs(30),
            || volume(&c, "from-a")["state"] == "available",
            || c.log(),
        );
        c.ok(&["volume", "publish", "from-a", "--node", "node-b", "--wait"]);
        assert_eq!(code(unpublish("node-b", "from-a")), Err(Code::PermissionDenied));
        assert_eq!(published_on(&c, "from-a"), ["node-b"]);
        // node-b's own publication of it is node-b's to undo (and node-a's Docker
        // cannot remove it while it is published).
        c.ok(&["volume", "unpublish", "from-a", "--node", "node-b", "--wait"]);
        let again = publish("node-b", "from-a", "");
        assert!(again.is_ok(), "tls {tls}: {again:?}");
        assert_eq!(code(delete("node-a", "from-a")), Err(Code::FailedPrecondition));
        assert_eq!(code(unpublish("node-b", "from-a")), Ok(()));
        wait_for(
            "from-a to be unpublished",
            Duration::from_secs(30),
            || published_on(&c, "from-a").is_empty(),
            || c.log(),
        );
        assert_eq!(code(delete("node-a", "from-a")), Ok(()));
    }
}
