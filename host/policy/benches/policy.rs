//! Policy decisions: each sample WebAssembly guest against the built-in native
//! policy on the same inputs, in the same run. Every WASM decision runs in a
//! fresh instance, as in production.
//!
//! Run with `cargo xtask bench` (builds the guests first). Prints a table of
//! medians and 99th percentiles and the WASM/native ratios. `--quick` runs
//! briefly; `--only TEXT` runs the rows whose name contains TEXT (`made
//! ahead` for the table of instances made ahead of need against on the
//! decision's path).

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use berth_policy::builtin::Builtins;
use berth_policy::samples::{failure, node, pairs, volume};
use berth_policy::{
    Candidates, Code, EngineOptions, Health, ModuleConfig, NamingRequest, Operation, PlacementRequest,
    PolicyEngine, PolicyModule, Purpose, candidates,
};

struct Stats {
    median: Duration,
    p99: Duration,
}

/// Times `wasm` and `native` alternately for about `budget`, after a warm-up,
/// so both see the same machine conditions and their ratio is fair.
fn measure(budget: Duration, mut wasm: impl FnMut(), mut native: impl FnMut()) -> (Stats, Stats) {
    let warm = Instant::now();
    while warm.elapsed() < budget / 10 {
        wasm();
        native();
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while start.elapsed() < budget || a.len() < 20 {
        let t = Instant::now();
        wasm();
        a.push(t.elapsed());
        let t = Instant::now();
        native();
        b.push(t.elapsed());
    }
    (stats(a), stats(b))
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    Stats {
        median: samples[samples.len() / 2],
        p99: samples[samples.len() * 99 / 100],
    }
}

fn show(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

fn row(name: &str, wasm: &Stats, native: &Stats) {
    println!(
        "| {name:<24} | {:>10} | {:>10} | {:>10} | {:>10} | {:>7.1}× |",
        show(wasm.median),
        show(wasm.p99),
        show(native.median),
        show(native.p99),
        wasm.median.as_secs_f64() / native.median.as_secs_f64()
    );
}

fn guests_dir() -> PathBuf {
    std::env::var_os("BERTH_GUESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/guests/wasm32-wasip2/guest")
        })
}

fn js_guests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/guests/js")
}

fn go_guests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/guests/go")
}

fn python_guests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/guests/python")
}

fn load(engine: &PolicyEngine, file: &str) -> PolicyModule {
    load_from(engine, &guests_dir().join(file))
}

fn load_from(engine: &PolicyEngine, path: &std::path::Path) -> PolicyModule {
    PolicyModule::load(engine, ModuleConfig::from_path(path))
        .unwrap_or_else(|e| panic!("{e} (build the guests with `cargo xtask guests`)"))
}

/// A cluster of `n` nodes over three zones and 40 racks (so 120 distinct
/// topologies), with mixed load, labels and health. `BERTH_BENCH_RACKS`
/// changes the racks, e.g. to 1 to see the cost of the nodes alone.
fn cluster(n: usize) -> Candidates {
    let racks: usize = std::env::var("BERTH_BENCH_RACKS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(40);
    let nodes: Vec<_> = (0..n)
        .map(|i| {
            let zone = ["zone-a", "zone-b", "zone-c"][i % 3];
            let rack = format!("rack-{}", i % racks);
            let mut node = node(&format!("node-{i:05}"), &[("zone", zone), ("rack", &rack)]);
            node.max_volumes = Some(64);
            node.published_volumes = (i as u64 * 7) % 70;
            node.labels = pairs(&[("disk", if i % 2 == 0 { "ssd" } else { "hdd" })]);
            if i % 50 == 0 {
                node.health = Health::Unhealthy;
            }
            node
        })
        .collect();
    candidates(&nodes)
}

/// Placement for creating `volume`, with no settings.
fn create(volume: berth_policy::Volume) -> PlacementRequest {
    PlacementRequest {
        volume,
        purpose: Purpose::Create,
        accessible_topology: vec![],
        settings: vec![],
    }
}

fn main() {
    // `cargo bench` passes --bench; a quick run for CI passes --quick.
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `--only TEXT` runs the rows whose name contains TEXT.
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    if cfg!(debug_assertions) {
        println!(
            "an unoptimised build (the test profile): the figures say the benchmark runs, not how fast Berth is"
        );
    }
    let budget = if quick {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(2)
    };
    let engine = PolicyEngine::new(EngineOptions::default()).expect("policy engine");
    // Decisions run as Berth runs them: awaited on the async runtime, whose
    // workers also make instances ahead of need.
    let rt = runtime();
    let builtins = Builtins::default();
    let naming = load(&engine, "berth_naming_guest.wasm");
    // BERTH_BENCH_PLACEMENT=<file> swaps the placement guest, e.g. to measure
    // the sandbox's own cost with a guest that does no work.
    let placement_file =
        std::env::var("BERTH_BENCH_PLACEMENT").unwrap_or("berth_placement_guest.wasm".into());
    let placement = load(&engine, &placement_file);
    let retry = load(&engine, "berth_retry_guest.wasm");
    let admission = load(&engine, "berth_admission_guest.wasm");

    println!("| decision                 | WASM p50   | WASM p99   | native p50 | native p99 | ratio    |");
    println!("|--------------------------|-----------:|-----------:|-----------:|-----------:|---------:|");

    let request = NamingRequest {
        volume: volume("postgres-data"),
        settings: vec![],
    };
    // The Python, JavaScript and Go components are loaded only when their
    // rows run: each carries a runtime's heap and core instances, reset
    // every decision.
    let python_naming = || load_from(&engine, &python_guests_dir().join("berth_naming_py.wasm"));
    let js_naming = || load_from(&engine, &js_guests_dir().join("berth_naming_js.wasm"));
    let go_naming = || load_from(&engine, &go_guests_dir().join("berth_naming_go.wasm"));
    type Loader<'a> = Option<&'a dyn Fn() -> PolicyModule>;
    let languages: [(&str, Loader); 4] = [
        ("naming", None),
        ("naming, Python", Some(&python_naming)),
        ("naming, JavaScript", Some(&js_naming)),
        ("naming, Go", Some(&go_naming)),
    ];
    // Each language's naming p50 against the Rust guest's, in this run.
    let mut against_rust: Vec<(&str, Duration)> = Vec::new();
    for (name, module) in languages {
        if !wanted(name) {
            continue;
        }
        let module = module.map(|load| load());
        let module = module.as_ref().unwrap_or(&naming);
        let (wasm, native) = measure(
            budget,
            || {
                let _ = black_box(rt.block_on(module.volume_name(&engine, &request)).unwrap());
            },
            || {
                black_box(builtins.naming.volume_name(&request.volume));
            },
        );
        row(name, &wasm, &native);
        against_rust.push((name, wasm.median));
    }

    for n in [10, 100, 1_000, 10_000] {
        let name = format!("placement, {n} nodes");
        if !wanted(&name) {
            continue;
        }
        let nodes = cluster(n);
        let mut v = volume("data");
        v.requisite_topology = vec![pairs(&[("zone", "zone-a")]), pairs(&[("zone", "zone-b")])];
        v.preferred_topology = vec![pairs(&[("zone", "zone-b")])];
        let request = create(v);
        let (wasm, native) = measure(
            budget,
            || {
                black_box(rt.block_on(placement.place(&engine, &request, &nodes)).unwrap());
            },
            || {
                black_box(builtins.placement.place(&request, &nodes));
            },
        );
        row(&name, &wasm, &native);
    }

    // What a new volume asks on one node: naming, then placement, one after
    // the other on the same thread, as the reconciler asks them.
    if wanted("a volume's decisions") {
        let one = cluster(1);
        let request_p = create(volume("data"));
        let (wasm, native) = measure(
            budget,
            || {
                rt.block_on(async {
                    let _ = black_box(naming.volume_name(&engine, &request).await.unwrap());
                    black_box(placement.place(&engine, &request_p, &one).await.unwrap());
                });
            },
            || {
                black_box(builtins.naming.volume_name(&request.volume));
                black_box(builtins.placement.place(&request_p, &one));
            },
        );
        row("a volume's decisions", &wasm, &native);
    }

    if wanted("retry") {
        let f = failure(Operation::CreateVolume, Code::Unavailable, 3);
        let (wasm, native) = measure(
            budget,
            || {
                black_box(rt.block_on(retry.classify(&engine, &f)).unwrap());
            },
            || {
                black_box(builtins.retry.classify(&f));
            },
        );
        row("retry", &wasm, &native);
    }

    if wanted("admission") {
        // A create in a namespace holding a few volumes, without an owner:
        // the sample admits it with one change.
        let mut request =
            berth_policy::cases::admission::request(None, volume("team-a/data"), vec![]).expect("a request");
        request.namespace = "team-a".into();
        request.usage.volumes = 3;
        let (wasm, native) = measure(
            budget,
            || {
                black_box(rt.block_on(admission.admit(&engine, &request)).unwrap());
            },
            // Without a module nothing is asked: every request is admitted.
            || {
                black_box(berth_policy::AdmissionVerdict::Allow);
            },
        );
        row("admission", &wasm, &native);
        println!(
            "\nadmission: a Rust decision takes {} at p50 (goal: at most 15 µs).\n",
            show(wasm.median)
        );
    }

    if let Some(&(_, rust)) = against_rust.iter().find(|(n, _)| *n == "naming") {
        println!();
        for (name, p50) in against_rust.iter().filter(|(n, _)| *n != "naming") {
            println!(
                "{name}: p50 {:.1}× the Rust guest's",
                p50.as_secs_f64() / rust.as_secs_f64()
            );
        }
    }

    made_ahead(budget, &wanted);
    loading(quick, &wanted);
}

/// A runtime of two workers, as Berth's on two cores.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The process's CPU time so far, on every thread (the background refills too).
fn cpu_time() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to write.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// A decision with its instance made on its path (`warm_instances = 0`)
/// against made ahead of need (the default), on a runtime of two workers as
/// Berth runs: latency when decisions come spaced (the instance is ready),
/// latency back to back (the refill races the next call), and the process's
/// CPU per decision back to back, refills included.
fn made_ahead(budget: Duration, wanted: &dyn Fn(&str) -> bool) {
    if !wanted("made ahead") {
        return;
    }
    let rt = runtime();
    let request = NamingRequest {
        volume: volume("postgres-data"),
        settings: vec![],
    };
    let f = failure(Operation::CreateVolume, Code::Unavailable, 3);
    println!();
    println!("| decision, instances      | p50 spaced | p50 back to back | CPU per decision |");
    println!("|--------------------------|-----------:|-----------------:|-----------------:|");
    for warm in [0, EngineOptions::default().warm_instances] {
        let engine = PolicyEngine::new(EngineOptions {
            warm_instances: warm,
            ..EngineOptions::default()
        })
        .expect("policy engine");
        let naming = load(&engine, "berth_naming_guest.wasm");
        let retry = load(&engine, "berth_retry_guest.wasm");
        for (name, module) in [("naming", &naming), ("retry", &retry)] {
            let decide = || {
                rt.block_on(async {
                    if name == "naming" {
                        let _ = black_box(module.volume_name(&engine, &request).await.unwrap());
                    } else {
                        black_box(module.classify(&engine, &f).await.unwrap());
                    }
                })
            };
            // Spaced: each call waits (untimed) for the refill to finish.
            let mut spaced = Vec::new();
            let start = Instant::now();
            while start.elapsed() < budget / 2 || spaced.len() < 20 {
                let ready_by = Instant::now() + Duration::from_millis(100);
                while module.warm_instances() < warm as usize && Instant::now() < ready_by {
                    std::thread::yield_now();
                }
                let t = Instant::now();
                decide();
                spaced.push(t.elapsed());
            }
            let mut back_to_back = Vec::new();
            let (cpu, start) = (cpu_time(), Instant::now());
            while start.elapsed() < budget / 2 || back_to_back.len() < 20 {
                let t = Instant::now();
                decide();
                back_to_back.push(t.elapsed());
            }
            let per = (cpu_time() - cpu) / back_to_back.len() as u32;
            let how = if warm == 0 { "on its path" } else { "made ahead" };
            println!(
                "| {:<24} | {:>10} | {:>16} | {:>16} |",
                format!("{name}, {how}"),
                show(stats(spaced).median),
                show(stats(back_to_back).median),
                show(per)
            );
        }
    }
}

/// Loading a module as a start or a takeover does: compiled from its bytes,
/// against mapped from the compiled-code cache a run before left on disk.
/// Each load on an engine of its own, made outside the timing, so no
/// in-memory copy helps.
fn loading(quick: bool, wanted: &dyn Fn(&str) -> bool) {
    let modules = [
        ("load, Rust naming", guests_dir().join("berth_naming_guest.wasm")),
        (
            "load, Python naming",
            python_guests_dir().join("berth_naming_py.wasm"),
        ),
        (
            "load, JavaScript naming",
            js_guests_dir().join("berth_naming_js.wasm"),
        ),
        ("load, Go naming", go_guests_dir().join("berth_naming_go.wasm")),
    ];
    let modules: Vec<_> = modules.into_iter().filter(|(n, _)| wanted(n)).collect();
    if modules.is_empty() {
        return;
    }
    let cache = tempfile::tempdir().expect("a cache directory");
    let engine = |cached: bool| {
        PolicyEngine::new(EngineOptions {
            concurrency: 4,
            compiled_dir: cached.then(|| cache.path().to_path_buf()),
            ..EngineOptions::default()
        })
        .expect("policy engine")
    };
    let (compiles, loads) = if quick { (1, 3) } else { (3, 10) };
    println!();
    println!("| module                   | size       | compiled   | cached     | cached ÷ compiled |");
    println!("|--------------------------|-----------:|-----------:|-----------:|------------------:|");
    for (name, path) in modules {
        let timed = |cached: bool, n: usize| {
            let mut samples = Vec::new();
            for _ in 0..n {
                let e = engine(cached);
                let t = Instant::now();
                black_box(load_from(&e, &path));
                samples.push(t.elapsed());
            }
            stats(samples)
        };
        let compiled = timed(false, compiles);
        timed(true, 1); // leaves the compiled code in the cache
        let cached = timed(true, loads);
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or_default();
        println!(
            "| {name:<24} | {:>7.1} MB | {:>10} | {:>10} | {:>16.3}× |",
            size as f64 / 1e6,
            show(compiled.median),
            show(cached.median),
            cached.median.as_secs_f64() / compiled.median.as_secs_f64()
        );
    }
}
