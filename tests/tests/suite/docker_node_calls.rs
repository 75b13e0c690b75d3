//! The calls a node's Docker plugin makes to the server (`NodeVolumes`),
//! made directly as a node's certificate or the unix endpoint's header
//! makes them, over TLS and the unix socket: what a node may reach is its
//! own Docker's, whatever it sends.

use std::time::Duration;

use berth::agent::config::{AgentConfig, ServerAddress};
use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::node_volumes_client::NodeVolumesClient;
use berth_tests::{Cluster, ClusterSpec, texts, wait_for};
use tonic::Code;

use crate::docker::{published_on, volume};

/// The channel node `node`'s agent reaches its server on, as its
/// certificate (TLS) or the unix endpoint makes it.
fn channel_of(c: &mut Cluster, node: &str) -> tonic::transport::Channel {
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
}

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
        let (chan_a, chan_b) = (channel_of(&mut c, "node-a"), channel_of(&mut c, "node-b"));
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

/// A node's Docker in the namespace `docker_namespaces` names for it is a
/// tenant like the rest: its names are that namespace's (the same name in
/// another node's namespace is another volume), it sees only that
/// namespace's volumes, and the namespace's quota holds for it.
#[test]
fn a_nodes_docker_works_in_the_namespace_named_for_it() {
    let mut c = Cluster::start(ClusterSpec {
        agents: true,
        extra: "docker_create_from = [\"*\"]\ndocker_namespaces = { node-b = \"team-b\" }\n",
        controller_topology: None,
        ..ClusterSpec::default()
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _entered = rt.enter();
    let (chan_a, chan_b) = (channel_of(&mut c, "node-a"), channel_of(&mut c, "node-b"));
    let client =
        |node: &str| NodeVolumesClient::new(if node == "node-a" { &chan_a } else { &chan_b }.clone());
    let create = |node: &str, name: &str| {
        let spec = api::VolumeSpec {
            name: name.into(),
            plugin: "hostpath".into(),
            required_bytes: 1 << 20,
            ..Default::default()
        };
        let request = with(node, api::CreateVolumeRequest { spec: Some(spec) });
        rt.block_on(client(node).create_volume(request))
            .map(drop)
            .map_err(|s| s.code())
    };
    let list = |node: &str| -> Vec<String> {
        let r = rt.block_on(client(node).list_volumes(with(node, api::ListVolumesRequest::default())));
        r.unwrap()
            .into_inner()
            .volumes
            .into_iter()
            .map(|v| v.spec.unwrap().name)
            .collect()
    };
    let made = |namespace: &str, name: &str| -> serde_json::Value {
        serde_json::from_str(&c.ok(&["volume", "-n", namespace, "get", name, "-o", "json"])).unwrap()
    };

    assert_eq!(create("node-a", "shared"), Ok(()));
    assert_eq!(create("node-b", "shared"), Ok(()));
    let (a, b) = (made("default", "shared"), made("team-b", "shared"));
    assert_eq!(
        (a["made_by"].as_str(), b["made_by"].as_str()),
        (Some("docker:node-a"), Some("docker:node-b"))
    );
    assert_ne!(a["id"], b["id"]);
    c.ok(&[
        "volume", "create", "api-only", "--plugin", "hostpath", "--size", "1MiB", "--docker", "all",
    ]);
    assert_eq!(list("node-a"), ["api-only", "shared"]);
    assert_eq!(list("node-b"), ["shared"], "node-b's Docker sees team-b only");

    // team-b's quota holds for its Docker too.
    c.ok(&["namespace", "quota", "team-b", "--volumes", "1"]);
    assert_eq!(create("node-b", "second"), Err(Code::ResourceExhausted));
    assert_eq!(create("node-a", "second"), Ok(()));

    // Removing through node-b's Docker removes team-b's, not default's.
    let removed = rt.block_on(client("node-b").delete_volume(with(
        "node-b",
        api::DeleteVolumeRequest {
            name: "shared".into(),
            force: false,
        },
    )));
    assert!(removed.is_ok(), "{removed:?}");
    wait_for(
        "team-b's shared to be deleted",
        Duration::from_secs(30),
        || {
            !texts(&c.berth(&["volume", "-n", "team-b", "get", "shared"]))
                .1
                .is_empty()
        },
        || c.log(),
    );
    assert_eq!(made("default", "shared")["made_by"], "docker:node-a");
}

/// A node's Docker is asked about by admission like any caller: as
/// `docker:<node>`, in its node's namespace, under the module's rules.
#[test]
fn a_nodes_docker_goes_through_admission_in_its_namespace() {
    let policies = format!(
        "[[policy]]\nmodule = \"{}\"\n[[policy]]\nmodule = \"{}\"\ndecisions = [\"admission\"]\nsettings = {{ max-volumes = \"1\" }}\n",
        berth_tests::guest("berth_naming_guest").display(),
        berth_tests::guest("berth_admission_guest").display(),
    );
    let mut c = Cluster::start(ClusterSpec {
        agents: true,
        extra: "docker_create_from = [\"*\"]\ndocker_namespaces = { node-b = \"team-b\" }\n",
        controller_topology: None,
        policy_tables: Some(&policies),
        ..ClusterSpec::default()
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _entered = rt.enter();
    let chan_b = channel_of(&mut c, "node-b");
    let create = |name: &str| {
        let spec = api::VolumeSpec {
            name: name.into(),
            plugin: "hostpath".into(),
            required_bytes: 1 << 20,
            ..Default::default()
        };
        let request = with("node-b", api::CreateVolumeRequest { spec: Some(spec) });
        rt.block_on(NodeVolumesClient::new(chan_b.clone()).create_volume(request))
            .map(drop)
    };
    assert!(create("first").is_ok());
    let made: serde_json::Value =
        serde_json::from_str(&c.ok(&["volume", "-n", "team-b", "get", "first", "-o", "json"])).unwrap();
    assert_eq!(
        made["labels"]["owner"], "team-b",
        "the module's default, for the node's namespace: {made:#}"
    );
    let refused = create("second").unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("namespace team-b holds 1 volumes"),
        "{refused:?}"
    );
    // The API's callers in the default namespace are judged on its own count.
    c.ok(&[
        "volume", "create", "api", "--plugin", "hostpath", "--size", "1MiB",
    ]);
}
