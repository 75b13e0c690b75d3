//! What loading reads from a component before any of it runs: its footprint
//! in the engine's pools, its imports (only WASI and Berth's types), and the
//! decisions it exports and from which release.

use wasmtime::component::{Component, ComponentExportIndex};

use crate::Decision;
use crate::bindings::{Contract, PACKAGE, PACKAGE_VERSION};
use crate::engine::{Footprint, PolicyEngine};
use crate::memory::core_instances;

/// Interfaces a policy module may never import, whatever its context grants.
const FORBIDDEN_IMPORTS: [(&str, &str); 2] = [
    ("wasi:sockets/", "policy modules may not use the network"),
    ("wasi:http/", "policy modules may not use the network"),
];

/// A component's needs from the pools. A binary the reader does not
/// understand (the text format, in tests) counts as the typical Rust guest.
pub(super) fn footprint(component: &Component, wasm: &[u8]) -> Footprint {
    let resources = component.resources_required();
    Footprint {
        core_instances: core_instances(wasm).unwrap_or(4).max(1),
        memories: resources.as_ref().map_or(1, |r| r.num_memories),
        tables: resources.as_ref().map_or(1, |r| r.num_tables),
    }
}

/// What a component offers or asks for that Berth cannot take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("it imports {name}, and {why}")]
    Forbidden { name: String, why: &'static str },
    #[error(
        "it imports {0}, which Berth does not provide (policy modules may import only WASI and {PACKAGE}/types)"
    )]
    Unknown(String),
    #[error("it exports {0} and {1}: one module implements one release of {PACKAGE}")]
    Mixed(String, String),
    #[error("cannot look up export {0}")]
    Lookup(String),
    #[error("{export} does not export the function {function}")]
    NoFunction { export: String, function: &'static str },
    #[error(
        "it exports no policy decision ({PACKAGE}/naming, placement or retry @{PACKAGE_VERSION}); it exports {0}"
    )]
    NoDecision(String),
    #[error("it exports {exports}, which this host cannot use: it implements {known}")]
    Release { exports: String, known: String },
}

pub(super) fn check_imports(engine: &PolicyEngine, component: &Component) -> Result<(), ShapeError> {
    let ty = component.component_type();
    for (name, _) in ty.imports(engine.engine()) {
        if let Some((_, why)) = FORBIDDEN_IMPORTS
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix))
        {
            return Err(ShapeError::Forbidden {
                name: name.to_string(),
                why,
            });
        }
        let types = name
            .strip_prefix(PACKAGE)
            .and_then(|rest| rest.strip_prefix("/types@"))
            .and_then(Contract::of_version);
        if !name.starts_with("wasi:") && types.is_none() {
            return Err(ShapeError::Unknown(name.to_string()));
        }
    }
    Ok(())
}

/// Finds each decision's exported function, and the package release they
/// come from; rejects a module that serves none, exports a release this host
/// does not know, or mixes releases.
pub(super) fn find_exports(
    engine: &PolicyEngine,
    component: &Component,
) -> Result<([Option<ComponentExportIndex>; 4], Contract), ShapeError> {
    let ty = component.component_type();
    let names: Vec<String> = ty.exports(engine.engine()).map(|(n, _)| n.to_string()).collect();
    let mut served: Vec<(usize, Decision, &str, Contract)> = Vec::new();
    let mut incompatible = Vec::new();
    for (slot, decision) in Decision::ALL.into_iter().enumerate() {
        let prefix = format!("{PACKAGE}/{}@", decision.interface());
        let Some(name) = names.iter().find(|n| n.starts_with(&prefix)) else {
            continue;
        };
        match Contract::of_version(&name[prefix.len()..]) {
            Some(contract) if contract.has(decision) => served.push((slot, decision, name, contract)),
            _ => incompatible.push(name.clone()),
        }
    }
    if let [(_, _, first, contract), rest @ ..] = served.as_slice()
        && let Some((_, _, other, _)) = rest.iter().find(|s| s.3 != *contract)
    {
        return Err(ShapeError::Mixed(first.to_string(), other.to_string()));
    }
    let mut found = [None, None, None, None];
    for (slot, decision, name, _) in &served {
        let iface = component
            .get_export_index(None, name)
            .ok_or_else(|| ShapeError::Lookup(name.to_string()))?;
        let func = component
            .get_export_index(Some(&iface), decision.function())
            .ok_or_else(|| ShapeError::NoFunction {
                export: name.to_string(),
                function: decision.function(),
            })?;
        found[*slot] = Some(func);
    }
    if found.iter().all(Option::is_none) {
        let exported = if names.is_empty() {
            "nothing".to_string()
        } else {
            names.join(", ")
        };
        let mut known: Vec<String> = Contract::ALL.iter().map(ToString::to_string).collect();
        let last = known.pop().unwrap_or_default();
        let known = match known.is_empty() {
            true => last,
            false => format!("{} and {last}", known.join(", ")),
        };
        return Err(if incompatible.is_empty() {
            ShapeError::NoDecision(exported)
        } else {
            ShapeError::Release {
                exports: incompatible.join(", "),
                known,
            }
        });
    }
    Ok((found, served[0].3))
}

/// Drives a future to completion on this thread. Only loading uses it: the
/// one instantiation that proves a module's signatures calls no host
/// function that needs the async runtime, and loading is rare.
pub(super) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}
