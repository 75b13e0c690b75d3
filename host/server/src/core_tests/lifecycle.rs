//! Reconcile, retry, give-up and node convergence, in paused time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tonic::Code;

use super::{retry, start};
use crate::model::VolumeState;

const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);

/// The waits between consecutive calls.
fn gaps(calls: &[tokio::time::Instant]) -> Vec<Duration> {
    calls.windows(2).map(|w| w[1] - w[0]).collect()
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_is_made_again_when_the_retry_policy_says_and_not_before() {
    let core = start(retry(SECOND, 5), false, None).await;
    core.plugin.fail("CreateVolume", Code::Unavailable, 3);
    core.create("v1").await;
    core.until("the volume is created", |c| {
        c.volume("v1").state() == VolumeState::Available
    })
    .await;
    let calls = core.plugin.calls("CreateVolume");
    assert_eq!(calls.len(), 4, "three failures, then the call that succeeded");
    // The policy asked for 1 s, 2 s and 4 s (no jitter): each call came
    // when it said, give or take the reconciler's own few steps.
    for (gap, asked) in gaps(&calls).into_iter().zip([1, 2, 4]) {
        let asked = asked * SECOND;
        assert!(
            gap >= asked && gap < asked + Duration::from_millis(50),
            "waited {gap:?} where the policy asked for {asked:?}"
        );
    }
    assert!(core.volume("v1").retrying.is_none(), "done retrying");
}

#[tokio::test(start_paused = true)]
async fn a_give_up_stops_every_call_until_an_operator_retries() {
    let core = start(retry(SECOND, 3), false, None).await;
    core.plugin.fail("CreateVolume", Code::Internal, usize::MAX);
    core.create("v1").await;
    core.until("the volume is given up", |c| c.volume("v1").failure.is_some())
        .await;
    assert_eq!(
        core.plugin.calls("CreateVolume").len(),
        3,
        "INTERNAL given up at the third attempt"
    );
    tokio::time::sleep(HOUR).await;
    assert_eq!(
        core.plugin.calls("CreateVolume").len(),
        3,
        "nothing is called for a given-up volume, however long it waits"
    );
    assert_eq!(core.volume("v1").state(), VolumeState::Failed);

    core.manager.requests().retry("v1").await.unwrap();
    core.until("given up again", |c| {
        c.volume("v1").failure.is_some() && c.plugin.calls("CreateVolume").len() == 6
    })
    .await;
    core.plugin.heal("CreateVolume");
    core.manager.requests().retry("v1").await.unwrap();
    core.until("created at last", |c| {
        c.volume("v1").state() == VolumeState::Available
    })
    .await;
    assert_eq!(core.plugin.calls("CreateVolume").len(), 7);
    assert_eq!(
        core.plugin.volumes(),
        1,
        "one backend volume for one Berth volume"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_node_call_is_retried_by_the_policy_alone_and_stops_at_its_give_up() {
    let core = start(retry(SECOND, 3), true, None).await;
    core.create("v1").await;
    core.until("created", |c| c.volume("v1").state() == VolumeState::Available)
        .await;
    core.plugin.fail("NodeStageVolume", Code::Internal, usize::MAX);
    core.manager
        .requests()
        .publish("v1", Some("n1"), false)
        .await
        .unwrap();
    core.until("given up", |c| c.volume("v1").failure.is_some()).await;
    let stages = core.plugin.calls("NodeStageVolume");
    assert_eq!(stages.len(), 3, "the node calls what the policy allows, no more");
    for (gap, asked) in gaps(&stages).into_iter().zip([1, 2]) {
        let asked = asked * SECOND;
        assert!(
            gap >= asked && gap < asked + Duration::from_millis(50),
            "the node called again after {gap:?} where the policy asked for {asked:?}"
        );
    }
    tokio::time::sleep(HOUR).await;
    assert_eq!(
        core.plugin.calls("NodeStageVolume").len(),
        3,
        "none after the give-up"
    );
    assert!(core.plugin.calls("NodePublishVolume").is_empty());

    core.plugin.heal("NodeStageVolume");
    core.manager.requests().retry("v1").await.unwrap();
    core.until("published", |c| c.volume("v1").state() == VolumeState::Published)
        .await;
    assert_eq!(core.plugin.calls("NodeStageVolume").len(), 4);
    assert_eq!(core.plugin.calls("NodePublishVolume").len(), 1);
    assert_eq!(
        core.plugin.calls("ControllerPublishVolume").len(),
        1,
        "the controller's side, done once, is not done again for the node's failures"
    );
}

#[tokio::test(start_paused = true)]
async fn a_publication_converges_through_the_agent_in_the_spec_order_both_ways() {
    let core = start(retry(SECOND, 3), true, None).await;
    core.create("v1").await;
    core.manager
        .requests()
        .publish("v1", Some("n1"), false)
        .await
        .unwrap();
    core.until("published", |c| c.volume("v1").state() == VolumeState::Published)
        .await;
    core.manager.requests().unpublish("v1", "n1").await.unwrap();
    core.until("unpublished", |c| c.volume("v1").publications.is_empty())
        .await;
    core.manager.requests().delete("v1", false).await.unwrap();
    core.until("deleted", |c| c.manager.get("v1").is_none()).await;
    assert_eq!(
        core.plugin.log(),
        [
            "CreateVolume",
            "ControllerPublishVolume",
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume",
            "ControllerUnpublishVolume",
            "DeleteVolume",
        ],
        "each call once, in the spec's order"
    );
    assert_eq!(core.plugin.volumes(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_publication_is_marked_sent_by_its_request_and_needs_no_write_of_its_own() {
    let core = start(retry(SECOND, 3), true, None).await;
    core.node_ready().await;
    core.create("v1").await;
    core.until("created", |c| c.volume("v1").state() == VolumeState::Available)
        .await;
    let before = core.record_writes();
    core.manager
        .requests()
        .publish("v1", Some("n1"), false)
        .await
        .unwrap();
    assert!(
        core.volume("v1").publications["n1"].sent,
        "marked sent with the request's own write"
    );
    core.until("published", |c| c.volume("v1").state() == VolumeState::Published)
        .await;
    core.assert_writes_since(
        before,
        2,
        "the request's write and the outcomes': none before the first call",
    );
}

#[tokio::test(start_paused = true)]
async fn a_volume_is_named_and_marked_sent_by_its_create_request_with_no_write_before_the_call() {
    let core = start(retry(SECOND, 3), false, None).await;
    let before = core.record_writes();
    let made = core.create("v1").await;
    assert!(
        made.csi_name.is_some() && made.create_sent,
        "named and marked by the request"
    );
    core.until("created", |c| c.volume("v1").state() == VolumeState::Available)
        .await;
    core.assert_writes_since(
        before,
        2,
        "the request's write and the outcome's, none before CreateVolume",
    );
    assert_eq!(core.plugin.calls("CreateVolume").len(), 1);
}

/// A request that follows a worker's last outcomes within a moment carries
/// them in its own write: under load a create and its publish cost the
/// worker no write of the create's outcome.
#[tokio::test(start_paused = true)]
async fn parked_outcomes_ride_with_the_next_request_or_go_as_the_term_ends() {
    let core = start(retry(SECOND, 3), true, None).await;
    core.node_ready().await;
    let before = core.record_writes();
    core.create("v1").await;
    core.idle_after_creates(1).await;
    assert!(core.volume("v1").backend.is_none(), "parked, in no record yet");
    core.manager
        .requests()
        .publish("v1", Some("n1"), false)
        .await
        .unwrap();
    assert!(
        core.volume("v1").backend.is_some(),
        "written with the publish request"
    );
    core.until("published", |c| c.volume("v1").state() == VolumeState::Published)
        .await;
    core.assert_writes_since(
        before,
        3,
        "the create request, the publish request with the outcome, the publication's outcomes",
    );

    // A term that ends writes what is parked, so the next makes no call again.
    core.create("v2").await;
    core.idle_after_creates(2).await;
    let id = core.volume("v2").id;
    assert!(core.store.stored(&id).unwrap().backend.is_none(), "parked");
    assert_eq!(core.manager.write_parked().await, 1);
    assert!(
        core.store.stored(&id).unwrap().backend.is_some(),
        "written as the term ends"
    );
    assert_eq!(core.manager.write_parked().await, 0, "nothing parked twice");
}

/// The worker runs only once the test's task waits: a delete right after
/// the create request comes before the volume's first CreateVolume.
#[tokio::test(start_paused = true)]
async fn a_volume_deleted_before_its_first_create_volume_is_forgotten_without_a_call() {
    let core = start(retry(SECOND, 3), false, None).await;
    let id = core.create("v1").await.id;
    let deleting = core.manager.requests().delete("v1", false).await.unwrap();
    assert!(
        !deleting.create_sent,
        "unmarked by the delete: no plugin has heard of it"
    );
    assert!(!core.store.stored(&id).unwrap().create_sent);
    core.until("forgotten", |c| c.manager.get("v1").is_none()).await;
    assert!(core.plugin.log().is_empty(), "no call: {:?}", core.plugin.log());
}

/// A delete kept by the store though it answered an error: the store says
/// no CreateVolume went out. None may then go out on the strength of the
/// record held here (the next leader would forget a volume the plugin
/// has) until that record is written again.
#[tokio::test(start_paused = true)]
async fn no_create_volume_goes_out_while_the_store_may_say_a_delete_unmarked_it() {
    use super::store::Writes;
    let core = start(retry(SECOND, 3), false, None).await;
    let id = core.create("v1").await.id;
    core.store.writes(Writes::KeptUnanswered);
    assert!(core.manager.requests().delete("v1", false).await.is_err());
    assert!(!core.store.stored(&id).unwrap().create_sent, "kept");
    core.store.writes(Writes::Refused);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        core.plugin.calls("CreateVolume").is_empty(),
        "CreateVolume went out while the store says none did: {:?}",
        core.writes_since(0)
    );
    core.store.writes(Writes::Answered);
    core.until("created", |c| c.plugin.volumes() == 1).await;
    assert!(
        core.store.stored(&id).unwrap().create_sent,
        "written again before the call"
    );
}

/// Volume `v1` (its id), published on `n1` while CreateVolume keeps
/// failing: the publication is marked sent by its request, and no call
/// for it has gone out.
async fn published_before_its_first_call() -> (super::Core, String) {
    let core = start(retry(SECOND, 3), true, None).await;
    core.node_ready().await;
    core.plugin.fail("CreateVolume", Code::Unavailable, usize::MAX);
    let id = core.create("v1").await.id;
    core.until("CreateVolume tried", |c| {
        !c.plugin.calls("CreateVolume").is_empty()
    })
    .await;
    core.manager
        .requests()
        .publish("v1", Some("n1"), false)
        .await
        .unwrap();
    (core, id)
}

#[tokio::test(start_paused = true)]
async fn a_publication_withdrawn_before_its_first_call_is_dropped_without_one() {
    let (core, _) = published_before_its_first_call().await;
    assert!(core.volume("v1").publications["n1"].sent, "marked by the request");
    core.manager.requests().unpublish("v1", "n1").await.unwrap();
    assert!(
        !core.volume("v1").publications["n1"].sent,
        "unmarked by the withdrawal: no plugin has heard of it"
    );
    core.plugin.heal("CreateVolume");
    core.until("created, the publication dropped", |c| {
        let v = c.volume("v1");
        v.state() == VolumeState::Available && v.publications.is_empty()
    })
    .await;
    assert!(
        core.plugin.log().iter().all(|c| *c == "CreateVolume"),
        "nothing but CreateVolume was called: {:?}",
        core.plugin.log()
    );

    // A publication whose first call went out is undone with calls.
    core.manager
        .requests()
        .publish("v1", Some("n1"), false)
        .await
        .unwrap();
    core.until("published", |c| c.volume("v1").state() == VolumeState::Published)
        .await;
    // Not while published, unless forced: the refusal names the node.
    match core.manager.requests().delete("v1", false).await {
        Err(crate::manager::RequestError::InUse(e)) => assert_eq!(e.nodes, ["n1"]),
        other => panic!("deleting a published volume: {other:?}"),
    }
    assert!(!core.volume("v1").deleting);
    assert_eq!(core.plugin.calls("NodeUnpublishVolume").len(), 0);
    core.manager.requests().delete("v1", true).await.unwrap();
    core.until("deleted", |c| c.manager.get("v1").is_none()).await;
    assert_eq!(core.plugin.calls("NodeUnpublishVolume").len(), 1);
    assert_eq!(core.plugin.calls("ControllerUnpublishVolume").len(), 1);
    assert_eq!(core.plugin.volumes(), 0);
}

/// A store may keep a write whose answer is lost (etcd through a
/// partition). An unpublish kept that way withdrew a publication no call
/// had gone out for: the store says no plugin heard of it. No call may
/// then go out on the strength of the record held in memory, or the
/// next leader, loading the store, drops a publication the plugin has.
#[tokio::test(start_paused = true)]
async fn a_call_never_goes_out_for_a_publication_the_store_may_say_was_withdrawn() {
    use super::store::Writes;
    let (core, id) = published_before_its_first_call().await;
    core.store.writes(Writes::KeptUnanswered);
    assert!(core.manager.requests().unpublish("v1", "n1").await.is_err());
    assert!(!core.store.stored(&id).unwrap().publications["n1"].wanted);
    // The store answers nothing now; the plugin creates.
    core.store.writes(Writes::Refused);
    core.plugin.heal("CreateVolume");
    core.until("created", |c| {
        c.plugin.log().contains(&"CreateVolume") && c.plugin.volumes() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let stored = core.store.stored(&id).unwrap();
    let covered = stored.publications.get("n1").is_some_and(|p| p.sent);
    assert!(
        core.plugin.calls("ControllerPublishVolume").is_empty() || covered,
        "ControllerPublishVolume went out while the store says no plugin heard of the publication: {:?}",
        stored.publications
    );

    // Once the store answers, the record held here is written again, and
    // the publication goes on from there.
    core.store.writes(Writes::Answered);
    core.until("published", |c| c.volume("v1").state() == VolumeState::Published)
        .await;
    let stored = core.store.stored(&id).unwrap();
    assert!(stored.publications["n1"].sent && stored.publications["n1"].wanted);
}

#[tokio::test(start_paused = true)]
async fn a_server_that_cannot_vouch_for_its_lease_calls_no_plugin() {
    let vouches = Arc::new(AtomicBool::new(false));
    let tenure = {
        let vouches = vouches.clone();
        Box::new(move || vouches.load(Ordering::SeqCst))
    };
    let core = start(retry(SECOND, 3), false, Some(tenure)).await;
    core.create("v1").await;
    tokio::time::sleep(HOUR).await;
    assert!(
        core.plugin.calls("CreateVolume").is_empty(),
        "a deposed leader's workers wait for their term to end"
    );
    assert_eq!(core.volume("v1").state(), VolumeState::Pending);
}

#[tokio::test(start_paused = true)]
async fn a_restart_waits_out_the_retry_left_and_creates_nothing_twice() {
    let core = start(retry(60 * SECOND, 3), false, None).await;
    core.plugin.fail("CreateVolume", Code::Unavailable, 1);
    core.create("v1").await;
    core.until("the first call failed", |c| c.volume("v1").retrying.is_some())
        .await;
    tokio::time::sleep(10 * SECOND).await;
    let core = core.restart().await;
    let restarted = tokio::time::Instant::now();
    core.until("created after the restart", |c| {
        c.volume("v1").state() == VolumeState::Available
    })
    .await;
    let calls = core.plugin.calls("CreateVolume");
    assert_eq!(calls.len(), 2);
    let waited = calls[1] - restarted;
    assert!(
        waited <= 60 * SECOND + Duration::from_millis(50),
        "a restart never waits longer than the policy asked ({waited:?})"
    );
    assert_eq!(core.plugin.volumes(), 1, "the stored CSI name was used again");
}

#[tokio::test(start_paused = true)]
async fn a_retry_policy_answering_zero_is_held_to_the_host_floor() {
    let core = start(retry(Duration::ZERO, 3), false, None).await;
    core.plugin.fail("CreateVolume", Code::Unavailable, usize::MAX);
    core.create("storm").await;
    core.until("eight attempts", |c| c.plugin.calls("CreateVolume").len() >= 8)
        .await;
    // 10 ms doubling, whatever the policy said.
    for (i, gap) in gaps(&core.plugin.calls("CreateVolume")).into_iter().enumerate() {
        let floor = Duration::from_millis(10 << i);
        assert!(
            gap >= floor && gap < floor + Duration::from_millis(5),
            "attempt {} came {gap:?} after the one before; the floor is {floor:?}",
            i + 2
        );
    }
}

#[tokio::test(start_paused = true)]
async fn placement_waits_for_an_agent_not_heard_from_since_the_term_started() {
    use crate::csi::fingerprint::NodeInfo;
    use crate::store::{NodeRecord, Store};
    // A node this store knows, whose agent has not come back to this term.
    let store = Arc::new(super::store::MemoryStore::default());
    let info = NodeInfo {
        node_id: "n9".into(),
        max_volumes_per_node: None,
        accessible_topology: [("zone".to_string(), "a".to_string())].into(),
        capabilities: vec![],
    };
    store
        .put_node(&NodeRecord {
            name: "n9".into(),
            labels: Default::default(),
            plugins: [("mem".to_string(), Some(info))].into(),
            draining: false,
            forgotten: false,
            cert: None,
            paths: None,
        })
        .await
        .unwrap();
    let core = super::start_with(
        super::plugin::MemoryPlugin::constrained(),
        store,
        retry(SECOND, 3),
    )
    .await;
    let v = core.create("v1").await;

    // Within the heartbeat timeout: waiting for the agent, not failing.
    tokio::time::sleep(10 * 60 * SECOND).await;
    assert!(core.plugin.calls("CreateVolume").is_empty());
    assert!(
        core.volume("v1").retrying.is_none(),
        "no failure for the retry policy"
    );
    let waiting = core.manager.waiting(&v.id).expect("a waiting reason");
    assert!(
        waiting.reason.contains("n9") && waiting.reason.contains("agent"),
        "{}",
        waiting.reason
    );

    // Past it, the node is taken as absent: placement fails, and the retry policy decides.
    tokio::time::sleep(HOUR).await;
    core.until("the retry policy was asked", |c| {
        c.volume("v1").retrying.is_some()
    })
    .await;
    assert!(core.plugin.calls("CreateVolume").is_empty());
}

/// New volumes are named by Docker's rule; a volume stored before the rule
/// with a name outside it keeps working: created, re-created as the same
/// volume, deleted.
#[tokio::test(start_paused = true)]
async fn new_names_follow_dockers_rule_and_a_name_from_before_keeps_working() {
    use crate::model::{VolumeRecord, VolumeSpec, new_id};
    use crate::store::Store;
    let spec = |name: &str| VolumeSpec {
        name: name.into(),
        plugin: "mem".into(),
        required_bytes: 1 << 20,
        ..VolumeSpec::default()
    };
    let store = Arc::new(super::store::MemoryStore::default());
    store
        .put(&VolumeRecord::new(new_id(), spec("my vol")))
        .await
        .unwrap();
    let core = super::start_with(super::plugin::MemoryPlugin::default(), store, retry(SECOND, 3)).await;

    for bad in ["../etc", "vol/a", "my other vol", ".hidden", "a:b"] {
        match core.manager.requests().create(spec(bad)).await {
            Err(crate::manager::RequestError::OutOfBounds(e)) => {
                assert!(e.to_string().contains("Docker's rule"), "{e}")
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    core.until("the old volume created", |c| {
        c.volume("my vol").state() == VolumeState::Available
    })
    .await;
    let again = core.manager.requests().create(spec("my vol")).await.unwrap();
    assert_eq!(again.id, core.volume("my vol").id);
    core.manager.requests().delete("my vol", false).await.unwrap();
    core.until("deleted", |c| c.manager.get("my vol").is_none()).await;
    assert_eq!(core.plugin.volumes(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_restart_with_a_long_queue_leaves_the_runtime_to_others_between_volumes() {
    use crate::model::{Backend, VolumeRecord, VolumeSpec, new_id};
    use crate::store::Store;
    // Created volumes published nowhere: reconciling one needs no call, so
    // nothing in it ever waits.
    let store = Arc::new(super::store::MemoryStore::default());
    for i in 0..2000 {
        let mut r = VolumeRecord::new(
            new_id(),
            VolumeSpec {
                name: format!("v{i}"),
                plugin: "mem".into(),
                required_bytes: 1 << 20,
                ..VolumeSpec::default()
            },
        );
        r.csi_name = Some(format!("pv-{i}"));
        r.create_sent = true;
        r.backend = Some(Arc::new(Backend {
            volume_id: format!("mem-{i}"),
            capacity_bytes: 1 << 20,
            sized_for: None,
            context: Default::default(),
            accessible_topology: Vec::new(),
            node_expansion_required: false,
            mutable_parameters: Default::default(),
        }));
        store.put(&r).await.unwrap();
    }
    let core = super::start_with(super::plugin::MemoryPlugin::default(), store, retry(SECOND, 3)).await;
    let queued = core.manager.summary().busy;
    // One turn for everyone else: the workers must not drain the queue in it
    // (the API's tasks waited behind a restart's every volume).
    tokio::task::yield_now().await;
    let after_a_turn = core.manager.summary().busy;
    assert!(
        after_a_turn > 0 && after_a_turn < queued.max(1),
        "queued {queued}, after one turn {after_a_turn}"
    );
    core.until("every volume looked at", |c| c.manager.summary().busy == 0)
        .await;
    assert_eq!(
        core.manager.summary().states,
        vec![(VolumeState::Available, 2000)]
    );
}
