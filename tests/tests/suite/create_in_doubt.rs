//! A CreateVolume whose answer is in doubt (the plugin did the work and
//! was killed holding its answer): what may change meanwhile, and what a
//! delete must still undo on the plugin.

use std::time::{Duration, Instant};

use berth_tests::texts;

use super::csi_operations::{replies_held, slow_replies};

/// A CreateVolume the plugin did but whose answer was lost (the plugin
/// killed while holding it): until the plugin answers, the volume's size
/// may not change (asked again, CreateVolume must ask what it first asked,
/// or the plugin refuses the name as taken); and a volume deleted then is
/// deleted on the plugin too, never left there. Found by the nemesis
/// (a crash-looping plugin, then an expand and a delete): 11 volumes left
/// on the plugin after a 600 s run.
#[test]
fn a_volume_whose_create_answer_was_lost_is_not_resized_and_not_left_behind() {
    let mut c = slow_replies();
    let before = replies_held(&c);
    c.ok(&[
        "volume", "create", "lost", "--plugin", "hostpath", "--size", "1MiB",
    ]);
    let started = Instant::now();
    while replies_held(&c) <= before {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the plugin never did the work"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    c.controller.kill();
    assert_eq!(c.plugin_volumes(), 1, "made on the plugin, its answer lost");
    let out = c.berth(&["volume", "expand", "lost", "--size", "2MiB"]);
    let (_, stderr) = texts(&out);
    assert!(
        !out.status.success(),
        "a size change while the create is unanswered"
    );
    assert!(
        stderr.contains("FAILED_PRECONDITION") && stderr.contains("being created"),
        "{stderr}"
    );
    c.controller.restart();
    c.ok(&["volume", "delete", "lost", "--wait"]);
    assert_eq!(c.plugin_volumes(), 0, "deleted on the plugin too");
}
