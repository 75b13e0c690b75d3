//! Hostile input never panics and always gets a clear error: arbitrary bytes
//! as API requests, arbitrary specs through the API's checks, arbitrary
//! guest answers through a real guest and the wasmtime sandbox, arbitrary
//! text as `berth.toml`. `BERTH_RELIABILITY=long` runs 10,000 cases of each.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use berth::config::Config;
use berth::policy::builtin::Builtins;
use berth::policy::samples::{self, failure, volume};
use berth::policy::{
    Code, Decision, EngineOptions, GuestFailure, ModuleConfig, NamingOutcome, OnError, Operation, Policies,
    PolicyEngine, PolicyError, Purpose, RetryDecision, candidates,
};
use berth::policy::{MAX_NAME_BYTES, MAX_REASON_BYTES, MAX_RETRY_DELAY_MS};
use berth_proto::berth::v1 as api;
use berth_tests::{block_on, guest};
use proptest::prelude::*;
use prost::Message;

/// 256 cases of each property in the test suite; 10,000 in the long run.
fn cases() -> u32 {
    if std::env::var("BERTH_RELIABILITY").is_ok_and(|v| v == "long") {
        10_000
    } else {
        256
    }
}

/// One echo guest for every case: its answers are whatever the request carries.
fn echo() -> &'static Policies {
    static P: OnceLock<Policies> = OnceLock::new();
    P.get_or_init(|| {
        let engine = Arc::new(PolicyEngine::new(EngineOptions::default()).expect("engine"));
        let p = Policies::new(engine, Builtins::default());
        let mut c = ModuleConfig::from_path(&guest("berth_hostile_guest"));
        c.settings = [("behaviour".to_string(), "echo".to_string())].into();
        c.on_error = OnError::Fail;
        p.load(c, &[]).expect("echo guest loads");
        p
    })
}

fn invalid_answer(e: &PolicyError, decision: Decision) -> bool {
    e.decision == decision
        && e.module == "berth_hostile_guest"
        && matches!(&e.failure, GuestFailure::InvalidAnswer(_))
}

/// The CSI spec's rule for names, stated here independently of the host's check.
fn csi_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && !name
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
}

fn with_labels(labels: &[(&str, &str)]) -> berth::policy::Volume {
    let mut v = volume("v");
    v.labels = samples::pairs(labels);
    v
}

fn config_text() -> impl Strategy<Value = String> {
    let valid = "state = \"s/berth.redb\"\nworkers = 4\n[[plugin]]\nname = \"hp\"\ncontroller = \"unix:///tmp/c.sock\"\n[[node]]\nname = \"n1\"\ndir = \"nodes/n1\"\nplugins = { hp = \"unix:///tmp/n.sock\" }\n[[policy]]\nmodule = \"p.wasm\"\non_error = \"builtin\"\nmemory = \"16MiB\"\n";
    prop_oneof![
        // Arbitrary text.
        any::<String>(),
        // A valid file with a slice replaced by arbitrary text: near misses.
        (0..valid.len(), 0..40usize, "\\PC{0,20}").prop_map(move |(at, len, junk)| {
            let mut s = valid.to_string();
            let end = (at + len).min(s.len());
            if s.is_char_boundary(at) && s.is_char_boundary(end) {
                s.replace_range(at..end, &junk);
            }
            s
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_as_api_requests_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        // Every request message the API takes: decoding never panics.
        let _ = api::CreateVolumeRequest::decode(bytes.as_slice());
        let _ = api::PublishVolumeRequest::decode(bytes.as_slice());
        let _ = api::DeleteVolumeRequest::decode(bytes.as_slice());
        if let Ok(r) = api::CreateVolumeRequest::decode(bytes.as_slice()) {
            // And whatever decodes goes through the API's checks with an answer.
            let checked = berth::api::spec_from_api(r.spec.unwrap_or_default())
                .and_then(|spec| berth::manager::validate_spec(&spec, &test_config()));
            if let Err(e) = checked {
                prop_assert!(e.to_string().contains(':'), "names the field: {e}");
            }
        }
    }

    #[test]
    fn arbitrary_specs_are_accepted_or_refused_naming_the_field(
        name in "\\PC{0,300}|[\\x00-\\x1f]{1,3}",
        plugin in prop_oneof![Just("hp".to_string()), any::<String>()],
        required in any::<i64>(),
        limit in any::<i64>(),
        access_mode in prop_oneof![Just(String::new()), Just("multi-node-multi-writer".to_string()), any::<String>()],
        block in any::<bool>(),
        fs_type in prop_oneof![Just(String::new()), any::<String>()],
        secret in prop_oneof![Just(String::new()), any::<String>()],
        topology in proptest::collection::vec(proptest::collection::btree_map(any::<String>(), any::<String>(), 0..3), 0..3),
    ) {
        let known_mode = access_mode.is_empty() || access_mode.parse::<berth::model::AccessMode>().is_ok();
        let checked = berth::api::spec_from_api(api::VolumeSpec {
            name, plugin, required_bytes: required, limit_bytes: limit, access_mode, block, fs_type,
            secret,
            requisite_topology: topology.into_iter().map(|t| api::Topology { segments: t.into_iter().collect() }).collect(),
            ..Default::default()
        })
        .and_then(|spec| berth::manager::validate_spec(&spec, &test_config()).map(|()| spec));
        match checked {
            Ok(spec) => {
                prop_assert!(known_mode, "an unknown access mode is refused");
                prop_assert!(!spec.name.is_empty() && spec.name.len() <= 253);
                prop_assert!(spec.required_bytes >= 0 && spec.limit_bytes >= 0);
                prop_assert_eq!(spec.plugin.as_str(), "hp");
            }
            Err(e) => {
                prop_assert!(e.to_string().len() < 1024, "a refusal echoes little of its input: {e}");
                let field = e.to_string();
                let field = field.split(':').next().unwrap_or("");
                prop_assert!(
                    ["name", "plugin", "required_bytes", "required_bytes/limit_bytes", "access_mode",
                     "fs_type/mount_flags", "fs_type", "secret", "requisite_topology/preferred_topology"].contains(&field),
                    "the error names a field: {e}"
                );
            }
        }
    }

    #[test]
    fn any_name_a_guest_answers_is_used_only_if_csi_allows_it(answer in "\\PC{0,200}|[\\x00-\\x1f\\x7f-\\x9f]{1,4}|.{0,200}") {
        match block_on(echo().volume_name(with_labels(&[("answer", &answer)]))) {
            Ok(NamingOutcome::Named(name)) => {
                prop_assert_eq!(&name, &answer);
                prop_assert!(csi_name_ok(&name), "{:?} breaks the CSI rules", name);
            }
            Ok(other) => prop_assert!(false, "unexpected {:?}", other),
            Err(e) => {
                prop_assert!(invalid_answer(&e, Decision::Naming), "{e}");
                prop_assert!(!csi_name_ok(&answer), "{:?} was valid: {}", answer, e);
            }
        }
    }

    #[test]
    fn any_verdicts_a_guest_answers_are_used_only_if_they_fit(
        refusals in proptest::collection::vec(0..4u32, 0..6),
        scores in proptest::collection::vec(any::<i32>(), 0..6),
        reasons in proptest::collection::vec("[^;]{1,300}", 0..3),
        nodes in 1..4usize,
    ) {
        let join = |v: Vec<String>, sep: &str| v.join(sep);
        let labels = [
            ("refusals", join(refusals.iter().map(u32::to_string).collect(), ",")),
            ("scores", join(scores.iter().map(i32::to_string).collect(), ",")),
            ("reasons", reasons.join(";")),
        ];
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let nodes: Vec<_> = (0..nodes).map(|i| samples::node(&format!("n{i}"), &[("zone", "a")])).collect();
        let result = block_on(echo().place(with_labels(&labels), Purpose::Create, vec![], &candidates(&nodes)));
        // A reason is one line: bounded, no control characters.
        let line = |r: &str| r.len() <= MAX_REASON_BYTES && !r.chars().any(char::is_control);
        let fits = refusals.len() == nodes.len()
            && scores.len() == nodes.len()
            && refusals.iter().all(|r| *r as usize <= reasons.len())
            && reasons.iter().all(|r| line(r));
        match result {
            Ok(got) => {
                prop_assert!(fits);
                prop_assert_eq!((&got.refusals, &got.scores, &got.reasons), (&refusals, &scores, &reasons));
                for (i, r) in refusals.iter().enumerate() {
                    prop_assert_eq!(got.reason(i), (*r > 0).then(|| reasons[*r as usize - 1].as_str()));
                }
            }
            Err(e) => {
                prop_assert!(invalid_answer(&e, Decision::Placement), "{e}");
                prop_assert!(!fits, "a fitting answer was refused: {e}");
            }
        }
    }

    #[test]
    fn any_retry_decision_a_guest_answers_is_used_only_if_sane(
        kind in 0..3u8,
        delay in prop_oneof![0..=MAX_RETRY_DELAY_MS, any::<u64>()],
        reason in "\\PC{0,100}|[ \\t\\n]{0,5}",
    ) {
        let message = match kind {
            0 => format!("retry-after {delay}"),
            1 => format!("give-up {reason}"),
            _ => "done".to_string(),
        };
        let mut f = failure(Operation::CreateVolume, Code::Unavailable, 1);
        f.message = message;
        match block_on(echo().classify(f)) {
            Ok(RetryDecision::RetryAfter(ms)) => {
                prop_assert_eq!((kind, ms), (0, delay));
                prop_assert!(ms <= MAX_RETRY_DELAY_MS);
            }
            Ok(RetryDecision::GiveUp(r)) => {
                prop_assert_eq!((kind, &r), (1, &reason));
                prop_assert!(!r.trim().is_empty());
            }
            Ok(RetryDecision::Done) => prop_assert_eq!(kind, 2),
            Err(e) => {
                prop_assert!(invalid_answer(&e, Decision::Retry), "{e}");
                prop_assert!(
                    (kind == 0 && delay > MAX_RETRY_DELAY_MS) || (kind == 1 && reason.trim().is_empty()),
                    "a sane decision was refused: {e}"
                );
            }
        }
    }

    #[test]
    fn arbitrary_config_text_parses_or_names_what_is_wrong(text in config_text()) {
        match Config::parse(&text, Path::new("/etc/berth")) {
            Ok(c) => prop_assert!(c.workers > 0),
            Err(e) => prop_assert!(!e.to_string().trim().is_empty(), "an empty error for {text:?}"),
        }
    }
}

fn test_config() -> Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| {
        Config::parse(
            "[[plugin]]\nname = \"hp\"\ncontroller = \"unix:///tmp/c.sock\"\n",
            Path::new("/tmp"),
        )
        .expect("test config")
    })
    .clone()
}
