//! An agent's plugin directory (`plugin_dir`): node plugins found by their
//! sockets appearing and going, and sockets it must not take.

use std::time::Duration;

use berth_tests::{AgentProcess, Cluster, ClusterSpec, PluginBuilder, wait_for};

fn agents(nodes: Vec<(&'static str, &'static str)>) -> Cluster {
    Cluster::start(ClusterSpec {
        nodes,
        agents: true,
        ..ClusterSpec::default()
    })
}

/// A `berth agent` for node-d with no configured plugin, watching a plugin
/// directory of its own (returned), started and ready.
fn plugin_dir_agent(c: &Cluster) -> (AgentProcess, std::path::PathBuf) {
    let plugins = c.dir.path().join("plugins-d");
    std::fs::create_dir_all(&plugins).unwrap();
    let mut agent = AgentProcess::with_config(
        c.dir.path(),
        "node-d",
        &format!(
            "node = \"node-d\"\nserver = \"unix://{}\"\ndir = \"{}\"\nplugin_dir = \"{}\"\nheartbeat_interval = \"200ms\"\nfingerprint_interval = \"500ms\"\n",
            c.dir.path().join("state/cluster.sock").display(),
            c.volumes_dir.join("nodes/node-d").display(),
            plugins.display()
        ),
    );
    agent.start();
    c.wait_nodes(&["node-d"], "ready", Duration::from_secs(20));
    (agent, plugins)
}

#[test]
fn a_socket_appearing_in_the_plugin_directory_is_registered_and_one_going_is_unregistered() {
    let c = agents(vec![("node-a", "a")]);
    let (agent, plugins) = plugin_dir_agent(&c);
    let plugins_of = |c: &Cluster| -> Vec<(String, String)> {
        c.node_list()
            .into_iter()
            .find(|n| n.name == "node-d")
            .map(|n| n.plugins.into_iter().map(|p| (p.plugin, p.health)).collect())
            .unwrap_or_default()
    };
    assert!(plugins_of(&c).is_empty(), "{:?}", plugins_of(&c));

    let mut plugin = PluginBuilder::new(&plugins, "hostpath")
        .state_dir(&c.volumes_dir.join("hostpath"))
        .args(&[
            "--controller",
            "false",
            "--node-id",
            "node-d",
            "--topology",
            "zone=a",
        ])
        .spawn();
    wait_for(
        "the plugin to be registered and healthy",
        Duration::from_secs(20),
        || plugins_of(&c) == [("hostpath".to_string(), "healthy".to_string())],
        || format!("{:?}\n{}", plugins_of(&c), agent.log_text()),
    );
    c.create_in("v", "zone=a");
    c.ok(&["volume", "publish", "v", "--node", "node-d", "--wait"]);

    plugin.kill();
    std::fs::remove_file(&plugin.socket).unwrap();
    wait_for(
        "the plugin to be unregistered",
        Duration::from_secs(20),
        || plugins_of(&c).is_empty(),
        || format!("{:?}\n{}", plugins_of(&c), agent.log_text()),
    );
    assert!(agent.log_text().contains("node plugin socket gone"));
}

/// A socket in the plugin directory owned by another user is not taken (it
/// would be sent volumes' secrets); owned by root again, it is.
#[test]
fn a_plugin_socket_owned_by_another_user_is_not_taken() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: changing a socket's owner needs root");
        return;
    }
    let c = agents(vec![("node-a", "a")]);
    let (agent, plugins) = plugin_dir_agent(&c);
    let elsewhere = c.dir.path().join("plugins-elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    // Made elsewhere, given to nobody, then moved in: never seen as root's.
    let plugin = PluginBuilder::new(&elsewhere, "planted")
        .state_dir(&c.volumes_dir.join("hostpath"))
        .args(&["--controller", "false", "--node-id", "node-d"])
        .spawn();
    std::os::unix::fs::chown(&plugin.socket, Some(65534), Some(65534)).unwrap();
    let planted = plugins.join("planted.sock");
    std::fs::rename(&plugin.socket, &planted).unwrap();
    wait_for(
        "the agent to refuse the socket",
        Duration::from_secs(20),
        || agent.log_text().contains("is not taken"),
        || agent.log_text(),
    );
    assert!(
        agent.log_text().contains("owned by uid 65534"),
        "{}",
        agent.log_text()
    );
    let plugins_of = |c: &Cluster| -> Vec<String> {
        c.node_list()
            .into_iter()
            .find(|n| n.name == "node-d")
            .map(|n| n.plugins.into_iter().map(|p| p.plugin).collect())
            .unwrap_or_default()
    };
    assert!(plugins_of(&c).is_empty(), "{:?}", plugins_of(&c));

    std::os::unix::fs::chown(&planted, Some(0), Some(0)).unwrap();
    wait_for(
        "the agent to take the socket once root's",
        Duration::from_secs(20),
        || plugins_of(&c) == ["planted"],
        || format!("{:?}\n{}", plugins_of(&c), agent.log_text()),
    );
}
