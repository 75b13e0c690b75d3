//! The sample plugin's CSI behaviour, driven through Berth's own CSI client
//! over a real socket: the lifecycle, the spec's idempotency and error rules,
//! persistence across restarts, containment, and injected faults.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use berth::csi::proto as csi;
use berth::csi::{ClientOptions, CsiClient, Endpoint};
use berth_tests::{Plugin, PluginBuilder, test_dir};
use tonic::Code;

fn client(plugin: &Plugin) -> CsiClient {
    CsiClient::lazy(
        Endpoint::parse(&plugin.endpoint()).unwrap(),
        ClientOptions {
            deadline: Duration::from_secs(5),
            wait: Duration::ZERO,
        },
    )
}

fn mount_capability() -> csi::VolumeCapability {
    use csi::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
    csi::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
    }
}

fn create(name: &str, bytes: i64) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![mount_capability()],
        ..Default::default()
    }
}

fn publish(volume_id: &str, node_id: &str) -> csi::ControllerPublishVolumeRequest {
    csi::ControllerPublishVolumeRequest {
        volume_id: volume_id.into(),
        node_id: node_id.into(),
        volume_capability: Some(mount_capability()),
        ..Default::default()
    }
}

fn stage(volume_id: &str, ctx: &HashMap<String, String>, staging: &Path) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: volume_id.into(),
        publish_context: ctx.clone(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(mount_capability()),
        ..Default::default()
    }
}

fn node_publish(
    volume_id: &str,
    ctx: &HashMap<String, String>,
    staging: &Path,
    target: &Path,
) -> csi::NodePublishVolumeRequest {
    csi::NodePublishVolumeRequest {
        volume_id: volume_id.into(),
        publish_context: ctx.clone(),
        staging_target_path: staging.display().to_string(),
        target_path: target.display().to_string(),
        volume_capability: Some(mount_capability()),
        ..Default::default()
    }
}

async fn volume_count(c: &CsiClient) -> usize {
    c.list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .entries
        .len()
}

/// The whole lifecycle; a file written through the published path lands in
/// the volume. Runs with whatever mount method the machine allows.
async fn lifecycle(mount_mode: &str) {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--mount-mode", mount_mode])
        .spawn();
    let c = client(&plugin);

    let vol = c
        .create_volume(create("pvc-1", 1 << 20))
        .await
        .unwrap()
        .volume
        .unwrap();
    let ctx = c
        .controller_publish_volume(publish(&vol.volume_id, "node1"))
        .await
        .unwrap()
        .publish_context;
    let staging = dir.path().join("staging/pvc-1");
    std::fs::create_dir_all(&staging).unwrap();
    let target = dir.path().join("pods/p1/volumes/pvc-1");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();

    c.node_stage_volume(stage(&vol.volume_id, &ctx, &staging))
        .await
        .unwrap();
    c.node_stage_volume(stage(&vol.volume_id, &ctx, &staging))
        .await
        .expect("stage is idempotent");
    c.node_publish_volume(node_publish(&vol.volume_id, &ctx, &staging, &target))
        .await
        .unwrap();
    c.node_publish_volume(node_publish(&vol.volume_id, &ctx, &staging, &target))
        .await
        .expect("publish is idempotent");

    std::fs::write(target.join("hello.txt"), "from the pod").unwrap();
    let in_volume = plugin
        .state_dir
        .join("data")
        .join(&vol.volume_id)
        .join("hello.txt");
    assert_eq!(std::fs::read_to_string(in_volume).unwrap(), "from the pod");

    let unpublish = csi::NodeUnpublishVolumeRequest {
        volume_id: vol.volume_id.clone(),
        target_path: target.display().to_string(),
    };
    c.node_unpublish_volume(unpublish.clone()).await.unwrap();
    c.node_unpublish_volume(unpublish)
        .await
        .expect("unpublish is idempotent");
    assert!(!target.exists(), "the target path is removed");
    let unstage = csi::NodeUnstageVolumeRequest {
        volume_id: vol.volume_id.clone(),
        staging_target_path: staging.display().to_string(),
    };
    c.node_unstage_volume(unstage.clone()).await.unwrap();
    c.node_unstage_volume(unstage).await.unwrap();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(dir.path().to_str().unwrap()),
        "no mount left behind"
    );

    let delete = csi::DeleteVolumeRequest {
        volume_id: vol.volume_id.clone(),
        secrets: Default::default(),
    };
    let err = c.delete_volume(delete.clone()).await.unwrap_err();
    assert_eq!(
        err.code(),
        Code::FailedPrecondition,
        "still controller-published: {err}"
    );
    let unpublish = csi::ControllerUnpublishVolumeRequest {
        volume_id: vol.volume_id.clone(),
        node_id: "node1".into(),
        secrets: Default::default(),
    };
    c.controller_unpublish_volume(unpublish.clone()).await.unwrap();
    c.controller_unpublish_volume(unpublish).await.unwrap();
    c.delete_volume(delete.clone()).await.unwrap();
    c.delete_volume(delete)
        .await
        .expect("deleting a deleted volume is OK");
    assert_eq!(volume_count(&c).await, 0);
    assert!(!plugin.state_dir.join("data").join(&vol.volume_id).exists());
}

#[tokio::test]
async fn lifecycle_with_symlinks() {
    lifecycle("symlink").await;
}

/// Real bind mounts where this machine lets the process mount, symlinks where not.
#[tokio::test]
async fn lifecycle_with_the_mount_method_the_machine_allows() {
    lifecycle("auto").await;
}

/// Plugins sharing a state directory probe for bind mounts at the same time
/// (as a node's plugins started together do): none leaves its probe mounted.
#[tokio::test]
async fn plugins_probing_one_state_directory_at_once_leave_no_mount_behind() {
    let dir = test_dir();
    let state = dir.path().join("state");
    // The race is narrow: a few rounds of a dozen plugins each.
    for round in 0..4 {
        let mut plugins: Vec<_> = (0..12)
            .map(|i| {
                PluginBuilder::new(dir.path(), &format!("r{round}p{i}"))
                    .args(&["--mount-mode", "auto"])
                    .spawn_unready()
            })
            .collect();
        for p in &mut plugins {
            p.wait_ready();
        }
    }
    let left = berth_tests::nemesis::check::mounts_below(&state);
    for point in &left {
        let _ = std::process::Command::new("umount").args(["-l", point]).status();
    }
    assert!(left.is_empty(), "probes left mounted: {left:?}");
    let probes: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".mount-probe"))
        .map(|e| e.path())
        .collect();
    assert!(probes.is_empty(), "probe directories left: {probes:?}");
}

#[tokio::test]
async fn create_is_idempotent_by_name() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi").spawn();
    let c = client(&plugin);
    let a = c
        .create_volume(create("same", 4096))
        .await
        .unwrap()
        .volume
        .unwrap();
    let b = c
        .create_volume(create("same", 4096))
        .await
        .unwrap()
        .volume
        .unwrap();
    assert_eq!(a.volume_id, b.volume_id);
    assert_eq!(volume_count(&c).await, 1);
    let err = c.create_volume(create("same", 8192)).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err}");
}

#[tokio::test]
async fn state_survives_a_restart() {
    let dir = test_dir();
    let mut plugin = PluginBuilder::new(dir.path(), "csi").spawn();
    let c = client(&plugin);
    let before = c
        .create_volume(create("durable", 4096))
        .await
        .unwrap()
        .volume
        .unwrap();
    c.controller_publish_volume(publish(&before.volume_id, "node1"))
        .await
        .unwrap();

    plugin.restart();
    let c = client(&plugin);
    let after = c
        .create_volume(create("durable", 4096))
        .await
        .unwrap()
        .volume
        .unwrap();
    assert_eq!(before.volume_id, after.volume_id);
    let list = c.list_volumes(csi::ListVolumesRequest::default()).await.unwrap();
    assert_eq!(list.entries.len(), 1);
    assert_eq!(
        list.entries[0].status.as_ref().unwrap().published_node_ids,
        ["node1"]
    );
}

#[tokio::test]
async fn ids_cannot_escape_the_state_directory() {
    let dir = test_dir();
    let outside = dir.path().join("precious");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("keep.txt"), "x").unwrap();
    let plugin = PluginBuilder::new(dir.path(), "csi").spawn();
    let c = client(&plugin);
    for id in [
        "../precious",
        "../../precious",
        "/tmp",
        "hp-../../precious",
        "data/../../precious",
    ] {
        c.delete_volume(csi::DeleteVolumeRequest {
            volume_id: id.into(),
            secrets: Default::default(),
        })
        .await
        .expect("a volume that does not exist is already deleted");
        let err = c
            .controller_publish_volume(publish(id, "node1"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{id}: {err}");
    }
    assert!(outside.join("keep.txt").exists());
    // A volume name is only hashed into an id, never used as a path.
    let vol = c
        .create_volume(create("../../precious", 4096))
        .await
        .unwrap()
        .volume
        .unwrap();
    assert!(plugin.state_dir.join("data").join(&vol.volume_id).is_dir());
}

#[tokio::test]
async fn the_spec_error_codes() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "n1")
        .args(&["--node-id", "n1", "--topology", "zone=a", "--max-volumes", "1"])
        .spawn();
    let _other_zone = PluginBuilder::new(dir.path(), "n2")
        .state_dir(&plugin.state_dir)
        .args(&["--controller", "false", "--node-id", "n2", "--topology", "zone=b"])
        .spawn();
    let c = client(&plugin);

    let mut no_caps = create("x", 1);
    no_caps.volume_capabilities.clear();
    assert_eq!(
        c.create_volume(no_caps).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(
        c.create_volume(create("", 1)).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert_eq!(
        c.create_volume(create("huge", 1 << 50)).await.unwrap_err().code(),
        Code::ResourceExhausted
    );

    let in_a = c.create_volume(create("in-a", 1)).await.unwrap().volume.unwrap();
    assert_eq!(in_a.accessible_topology[0].segments["zone"], "a");
    let err = c
        .controller_publish_volume(publish(&in_a.volume_id, "n2"))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::FailedPrecondition,
        "zone b cannot reach zone a: {err}"
    );
    let err = c
        .controller_publish_volume(publish(&in_a.volume_id, "nowhere"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "unknown node: {err}");

    let ctx = c
        .controller_publish_volume(publish(&in_a.volume_id, "n1"))
        .await
        .unwrap()
        .publish_context;
    let second = c
        .create_volume(create("second", 1))
        .await
        .unwrap()
        .volume
        .unwrap();
    let err = c
        .controller_publish_volume(publish(&second.volume_id, "n1"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "max one volume on n1: {err}");

    let staging = dir.path().join("staging");
    let target = dir.path().join("target");
    let err = c
        .node_publish_volume(node_publish(&in_a.volume_id, &ctx, &staging, &target))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::FailedPrecondition,
        "publish before stage: {err}"
    );
    let err = c
        .node_stage_volume(stage(&second.volume_id, &HashMap::new(), &staging))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::FailedPrecondition,
        "stage before controller publish: {err}"
    );

    let page = c
        .list_volumes(csi::ListVolumesRequest {
            max_entries: 1,
            starting_token: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(page.entries.len(), 1);
    let rest = c
        .list_volumes(csi::ListVolumesRequest {
            max_entries: 5,
            starting_token: page.next_token.clone(),
        })
        .await
        .unwrap();
    assert_eq!(rest.entries.len(), 1);
    assert!(rest.next_token.is_empty());
    let err = c
        .list_volumes(csi::ListVolumesRequest {
            max_entries: 1,
            starting_token: "bogus".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
}

#[tokio::test]
async fn required_secrets_are_checked() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--require-secret", "token=s3cret"])
        .spawn();
    let c = client(&plugin);
    let err = c.create_volume(create("v", 1)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut with = create("v", 1);
    with.secrets.insert("token".into(), "s3cret".into());
    c.create_volume(with).await.unwrap();
}

#[tokio::test]
async fn injected_faults_hit_only_the_chosen_calls() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--fault", "UNAVAILABLE=1", "--fault-calls", "CreateVolume"])
        .spawn();
    let c = client(&plugin);
    for _ in 0..3 {
        let err = c.create_volume(create("v", 1)).await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable);
        assert!(
            err.to_string().contains("injected fault in CreateVolume"),
            "{err}"
        );
    }
    assert_eq!(volume_count(&c).await, 0);
}

/// `--lie-rate 1`: DeleteVolume answers OK and keeps the volume, and the
/// journal marks the answer a lie (what the nemesis's checker reads).
#[tokio::test]
async fn a_lying_plugin_answers_ok_for_work_it_did_not_do_and_its_journal_says_so() {
    let dir = test_dir();
    let journal = dir.path().join("journal.jsonl");
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--lie-rate", "1", "--fault-calls", "DeleteVolume", "--journal"])
        .args(&[journal.to_str().unwrap()])
        .spawn();
    let c = client(&plugin);
    let id = c
        .create_volume(create("v", 1))
        .await
        .unwrap()
        .volume
        .unwrap()
        .volume_id;
    c.delete_volume(csi::DeleteVolumeRequest {
        volume_id: id.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(volume_count(&c).await, 1, "the volume is still there");
    let text = std::fs::read_to_string(&journal).unwrap();
    let line = text.lines().find(|l| l.contains("DeleteVolume")).unwrap();
    assert!(line.contains(&id) && line.contains("\"lied\":true"), "{line}");
    let create = text.lines().find(|l| l.contains("CreateVolume")).unwrap();
    assert!(!create.contains("lied"), "only the chosen calls lie: {create}");
}

#[tokio::test]
async fn a_fault_rate_fails_about_that_share_of_calls() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&[
            "--fault",
            "UNAVAILABLE=0.3",
            "--fault",
            "ABORTED=0.2",
            "--seed",
            "7",
        ])
        .args(&["--fault-calls", "GetCapacity"])
        .spawn();
    let c = client(&plugin);
    let (mut unavailable, mut aborted, mut ok) = (0, 0, 0);
    for _ in 0..400 {
        match c.get_capacity(csi::GetCapacityRequest::default()).await {
            Ok(_) => ok += 1,
            Err(e) if e.code() == Code::Unavailable => unavailable += 1,
            Err(e) if e.code() == Code::Aborted => aborted += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    // Binomial(400, p): these bounds are more than five standard deviations wide.
    assert!((80..=160).contains(&unavailable), "UNAVAILABLE {unavailable}/400");
    assert!((45..=115).contains(&aborted), "ABORTED {aborted}/400");
    assert!((150..=250).contains(&ok), "OK {ok}/400");
}

/// A SINGLE_NODE_SINGLE_WRITER volume is published at one target path of a
/// node at most (CSI: FAILED_PRECONDITION at a second), also when the
/// controller and the node are separate processes; `--misbehave
/// second-writer` breaks that one rule, for `plugin check` to catch.
#[tokio::test]
async fn a_single_writer_volume_is_published_at_one_target_only() {
    use csi::volume_capability::access_mode::Mode;
    for misbehave in [false, true] {
        let dir = test_dir();
        let mut flags = vec!["--mode", "controller"];
        let controller = PluginBuilder::new(dir.path(), "controller").args(&flags).spawn();
        flags[1] = "node";
        if misbehave {
            flags.extend(["--misbehave", "second-writer"]);
        }
        let node = PluginBuilder::new(dir.path(), "node").args(&flags).spawn();
        let (ctl, n) = (client(&controller), client(&node));
        let single_writer = |mut c: csi::VolumeCapability| {
            c.access_mode = Some(csi::volume_capability::AccessMode {
                mode: Mode::SingleNodeSingleWriter as i32,
            });
            c
        };
        let mut req = create("one-writer", 1 << 20);
        req.volume_capabilities = vec![single_writer(mount_capability())];
        let vol = ctl.create_volume(req).await.unwrap().volume.unwrap();
        let mut p = publish(&vol.volume_id, "node1");
        p.volume_capability = Some(single_writer(mount_capability()));
        let ctx = ctl.controller_publish_volume(p).await.unwrap().publish_context;
        let staging = dir.path().join("staging");
        std::fs::create_dir_all(&staging).unwrap();
        let mut s = stage(&vol.volume_id, &ctx, &staging);
        s.volume_capability = Some(single_writer(mount_capability()));
        n.node_stage_volume(s).await.unwrap();
        let pods = dir.path().join("pods");
        std::fs::create_dir_all(&pods).unwrap();
        let at = |target: &str| {
            let mut r = node_publish(&vol.volume_id, &ctx, &staging, &pods.join(target));
            r.volume_capability = Some(single_writer(mount_capability()));
            r
        };
        n.node_publish_volume(at("first")).await.unwrap();
        n.node_publish_volume(at("first"))
            .await
            .expect("the same target again is idempotent");
        let second = n.node_publish_volume(at("second")).await;
        match misbehave {
            false => assert_eq!(second.unwrap_err().code(), Code::FailedPrecondition),
            true => {
                second.expect("the fault flag accepts a second writer");
                n.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
                    volume_id: vol.volume_id.clone(),
                    target_path: pods.join("second").display().to_string(),
                })
                .await
                .unwrap();
            }
        }
        // Once unpublished at the first, a second target is fine.
        n.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
            volume_id: vol.volume_id.clone(),
            target_path: pods.join("first").display().to_string(),
        })
        .await
        .unwrap();
        n.node_publish_volume(at("second")).await.unwrap();
        n.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
            volume_id: vol.volume_id.clone(),
            target_path: pods.join("second").display().to_string(),
        })
        .await
        .unwrap();
    }
}
