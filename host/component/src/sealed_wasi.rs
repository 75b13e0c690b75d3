//! A WASI preview 1 that answers inside the component: the adapter
//! `berth policy component` links by default. It imports nothing but the
//! module's memory, so the component imports nothing at all: no clock (a
//! counter that moves 1 µs per reading), randomness from a fixed seed (the
//! same in every instance, as a decision must be), no arguments, no
//! environment, no files (no preopened directories; stdout and stderr take
//! writes and drop them), no sleeping (`poll_oneoff` answers ENOSYS), and
//! `proc_exit` traps.
//!
//! It also allocates nothing: the standard adapter allocates its state and
//! stack through the module's `cabi_realloc` or `memory.grow` on the first
//! call, which Go's runtime does in `_initialize` before its allocator works,
//! and a page taken by `memory.grow` is one Go's allocator believes is its own.

/// WASI's errno values used here.
const ESUCCESS: u32 = 0;
const EBADF: u32 = 8;
const ENOSYS: u32 = 52;

/// Where the clock and the random source stand: where a component's sealed
/// preview 1 starts (after pre-initialisation, where it left them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    /// Nanoseconds the clock reads: 1 µs more at each reading.
    pub now: i64,
    /// The xorshift64 state random bytes come from.
    pub seed: u64,
}

impl Default for Sealed {
    fn default() -> Self {
        Sealed {
            now: 0,
            seed: 0x2545_f491_4f6c_dd1d,
        }
    }
}

impl Sealed {
    fn tick(&mut self) -> i64 {
        self.now += TICK;
        self.now
    }

    fn next_byte(&mut self) -> u8 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        self.seed as u8
    }
}

/// The clock's step and resolution, nanoseconds.
const TICK: i64 = 1000;

/// What a function does, beyond its signature.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// Nothing to do: success.
    Succeed,
    /// Stores 0 at both pointers (argument and environment counts, sizes).
    ZeroSizes,
    /// A trap (process exit or signal: a policy has no process to end).
    Trap,
    /// The standard streams answer; any other descriptor is EBADF.
    Stdio,
    /// fd_write: the standard output streams take everything and drop it.
    Discard,
    /// fd_fdstat_get: the standard streams are character devices.
    Fdstat,
    /// No such descriptor (there are no files and no preopened directories).
    BadDescriptor,
    /// clock_time_get: a counter.
    Clock,
    /// clock_res_get: 1 µs.
    Resolution,
    /// random_get: xorshift64 from a fixed seed.
    Random,
    /// Not available to a policy.
    Unsupported,
}

use Body::*;

/// What the function `name` does, if preview 1 has it.
pub fn behaviour(name: &str) -> Option<Body> {
    FUNCTIONS.iter().find(|(n, _, _)| *n == name).map(|(_, _, b)| *b)
}

/// A call answered outside the component, as the module's text answers it
/// inside: `args` are the first four arguments as addresses and sizes
/// (`clock_time_get`'s second, an i64, is unused). The errno, or the
/// address where a store fell outside `memory`.
pub fn answer(what: Body, memory: &mut [u8], state: &mut Sealed, args: [usize; 4]) -> Result<u32, usize> {
    fn put(memory: &mut [u8], at: usize, bytes: &[u8]) -> Result<(), usize> {
        memory
            .get_mut(at..at + bytes.len())
            .map(|m| m.copy_from_slice(bytes))
            .ok_or(at)
    }
    let stdio = args[0] <= 2;
    Ok(match what {
        Succeed => ESUCCESS,
        ZeroSizes => {
            put(memory, args[0], &0u32.to_le_bytes())?;
            put(memory, args[1], &0u32.to_le_bytes())?;
            ESUCCESS
        }
        Trap => return Err(usize::MAX),
        Stdio if stdio => ESUCCESS,
        Discard if stdio => {
            let mut total = 0u32;
            for i in 0..args[2] {
                let len = args[1] + i * 8 + 4;
                let bytes = memory.get(len..len + 4).ok_or(len)?;
                total = total.wrapping_add(u32::from_le_bytes(bytes.try_into().unwrap_or_default()));
            }
            put(memory, args[3], &total.to_le_bytes())?;
            ESUCCESS
        }
        Fdstat if stdio => {
            put(memory, args[1], &2u64.to_le_bytes())?;
            put(memory, args[1] + 8, &u64::MAX.to_le_bytes())?;
            put(memory, args[1] + 16, &0u64.to_le_bytes())?;
            ESUCCESS
        }
        Stdio | Discard | Fdstat | BadDescriptor => EBADF,
        Clock => {
            let now = state.tick();
            put(memory, args[2], &now.to_le_bytes())?;
            ESUCCESS
        }
        Resolution => {
            put(memory, args[1], &TICK.to_le_bytes())?;
            ESUCCESS
        }
        Random => {
            let (at, len) = (args[0], args[1]);
            let out = memory.get_mut(at..at + len).ok_or(at)?;
            for byte in out {
                *byte = state.next_byte();
            }
            ESUCCESS
        }
        Unsupported => ENOSYS,
    })
}

/// Every WASI preview 1 function: name, parameter types ('i' i32, 'I'
/// i64), whether it returns an errno, and what it does.
const FUNCTIONS: &[(&str, &str, Body)] = &[
    ("args_get", "ii", Succeed),
    ("args_sizes_get", "ii", ZeroSizes),
    ("environ_get", "ii", Succeed),
    ("environ_sizes_get", "ii", ZeroSizes),
    ("clock_res_get", "ii", Resolution),
    ("clock_time_get", "iIi", Clock),
    ("fd_advise", "iIIi", BadDescriptor),
    ("fd_allocate", "iII", BadDescriptor),
    ("fd_close", "i", Stdio),
    ("fd_datasync", "i", BadDescriptor),
    ("fd_fdstat_get", "ii", Fdstat),
    ("fd_fdstat_set_flags", "ii", Stdio),
    ("fd_fdstat_set_rights", "iII", BadDescriptor),
    ("fd_filestat_get", "ii", BadDescriptor),
    ("fd_filestat_set_size", "iI", BadDescriptor),
    ("fd_filestat_set_times", "iIIi", BadDescriptor),
    ("fd_pread", "iiiIi", BadDescriptor),
    ("fd_prestat_get", "ii", BadDescriptor),
    ("fd_prestat_dir_name", "iii", BadDescriptor),
    ("fd_pwrite", "iiiIi", BadDescriptor),
    ("fd_read", "iiii", BadDescriptor),
    ("fd_readdir", "iiiIi", BadDescriptor),
    ("fd_renumber", "ii", BadDescriptor),
    ("fd_seek", "iIii", BadDescriptor),
    ("fd_sync", "i", BadDescriptor),
    ("fd_tell", "ii", BadDescriptor),
    ("fd_write", "iiii", Discard),
    ("path_create_directory", "iii", BadDescriptor),
    ("path_filestat_get", "iiiii", BadDescriptor),
    ("path_filestat_set_times", "iiiiIIi", BadDescriptor),
    ("path_link", "iiiiiii", BadDescriptor),
    ("path_open", "iiiiiIIii", BadDescriptor),
    ("path_readlink", "iiiiii", BadDescriptor),
    ("path_remove_directory", "iii", BadDescriptor),
    ("path_rename", "iiiiii", BadDescriptor),
    ("path_symlink", "iiiii", BadDescriptor),
    ("path_unlink_file", "iii", BadDescriptor),
    ("poll_oneoff", "iiii", Unsupported),
    ("proc_exit", "i", Trap),
    ("proc_raise", "i", Trap),
    ("sched_yield", "", Succeed),
    ("random_get", "ii", Random),
    ("sock_accept", "iii", BadDescriptor),
    ("sock_recv", "iiiiii", BadDescriptor),
    ("sock_send", "iiiii", BadDescriptor),
    ("sock_shutdown", "ii", BadDescriptor),
];

/// The body of a function returning an errno, in WAT.
fn body(what: Body) -> String {
    let stdio = "(i32.gt_u (local.get 0) (i32.const 2))";
    match what {
        Succeed => format!("(i32.const {ESUCCESS})"),
        ZeroSizes => format!(
            "(i32.store (local.get 0) (i32.const 0)) (i32.store (local.get 1) (i32.const 0)) (i32.const {ESUCCESS})"
        ),
        Trap => "(unreachable)".into(),
        Stdio => format!("(select (i32.const {EBADF}) (i32.const {ESUCCESS}) {stdio})"),
        Discard => format!(
            "(if {stdio} (then (return (i32.const {EBADF})))) \
             (local.set 4 (i32.const 0)) (local.set 5 (i32.const 0)) \
             (block $done (loop $each \
               (br_if $done (i32.ge_u (local.get 5) (local.get 2))) \
               (local.set 4 (i32.add (local.get 4) \
                 (i32.load offset=4 (i32.add (local.get 1) (i32.shl (local.get 5) (i32.const 3)))))) \
               (local.set 5 (i32.add (local.get 5) (i32.const 1))) \
               (br $each))) \
             (i32.store (local.get 3) (local.get 4)) (i32.const {ESUCCESS})"
        ),
        Fdstat => format!(
            "(if {stdio} (then (return (i32.const {EBADF})))) \
             (i64.store (local.get 1) (i64.const 2)) \
             (i64.store offset=8 (local.get 1) (i64.const -1)) \
             (i64.store offset=16 (local.get 1) (i64.const 0)) (i32.const {ESUCCESS})"
        ),
        BadDescriptor => format!("(i32.const {EBADF})"),
        Clock => format!(
            "(global.set $now (i64.add (global.get $now) (i64.const 1000))) \
             (i64.store (local.get 2) (global.get $now)) (i32.const {ESUCCESS})"
        ),
        Resolution => format!("(i64.store (local.get 1) (i64.const {TICK})) (i32.const {ESUCCESS})"),
        Random => format!(
            "(local.set 2 (i32.const 0)) \
             (block $done (loop $each \
               (br_if $done (i32.ge_u (local.get 2) (local.get 1))) \
               (global.set $seed (i64.xor (global.get $seed) (i64.shl (global.get $seed) (i64.const 13)))) \
               (global.set $seed (i64.xor (global.get $seed) (i64.shr_u (global.get $seed) (i64.const 7)))) \
               (global.set $seed (i64.xor (global.get $seed) (i64.shl (global.get $seed) (i64.const 17)))) \
               (i32.store8 (i32.add (local.get 0) (local.get 2)) (i32.wrap_i64 (global.get $seed))) \
               (local.set 2 (i32.add (local.get 2) (i32.const 1))) \
               (br $each))) \
             (i32.const {ESUCCESS})"
        ),
        Unsupported => format!("(i32.const {ENOSYS})"),
    }
}

/// Scratch locals some bodies use beyond the parameters.
fn scratch(what: Body, params: usize) -> &'static str {
    match (what, params) {
        (Discard, 4) => "(local i32 i32)",
        (Random, 2) => "(local i32)",
        _ => "",
    }
}

/// The module's text, its clock and random source starting at `start`.
pub fn wat(start: Sealed) -> String {
    let mut out = format!(
        "(module\n  (import \"env\" \"memory\" (memory 0))\n  \
         (global $now (mut i64) (i64.const {}))\n  \
         (global $seed (mut i64) (i64.const {}))\n",
        start.now, start.seed as i64
    );
    for (name, params, what) in FUNCTIONS {
        let types: Vec<&str> = params
            .chars()
            .map(|c| if c == 'I' { "i64" } else { "i32" })
            .collect();
        let param = if types.is_empty() {
            String::new()
        } else {
            format!("(param {})", types.join(" "))
        };
        let (result, code) = match (name, what) {
            (&"proc_exit", _) => ("", "(unreachable)".to_string()),
            _ => ("(result i32)", body(*what)),
        };
        out.push_str(&format!(
            "  (func (export \"{name}\") {param} {result} {} {code})\n",
            scratch(*what, types.len())
        ));
    }
    out.push(')');
    out
}

/// The module's bytes.
pub fn module(start: Sealed) -> anyhow::Result<Vec<u8>> {
    Ok(wat::parse_str(wat(start))?)
}

#[cfg(test)]
mod tests {
    use crate::{Contract, Wasi, componentize};
    use wasmparser::{Parser, Payload};

    /// A core module calling WASI preview 1 the way Go's runtime does, with
    /// one naming export.
    const CORE: &str = r#"(module
      (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
      (import "wasi_snapshot_preview1" "random_get" (func (param i32 i32) (result i32)))
      (import "wasi_snapshot_preview1" "clock_time_get" (func (param i32 i64 i32) (result i32)))
      (import "wasi_snapshot_preview1" "proc_exit" (func (param i32)))
      (memory (export "memory") 1)
      (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
      (func (export "berth:policy/naming@0.4.0#volume-name") (param i32) (result i32) (i32.const 0))
    )"#;

    fn imports(component: &[u8]) -> Vec<String> {
        let mut names = Vec::new();
        let mut depth = 0;
        for payload in Parser::new(0).parse_all(component) {
            match payload.expect("the component parses") {
                Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
                Payload::End(_) if depth > 0 => depth -= 1,
                Payload::ComponentImportSection(section) if depth == 0 => {
                    for import in section {
                        names.push(import.expect("an import").name.name.to_string());
                    }
                }
                _ => {}
            }
        }
        names
    }

    #[test]
    fn a_sealed_component_imports_no_wasi_and_the_adapted_one_imports_wasi() {
        let core = wat::parse_str(CORE).unwrap();
        let sealed = componentize(
            &core,
            Contract::Berth,
            "naming-policy",
            Wasi::Sealed,
            Default::default(),
        )
        .expect("sealed");
        // Only the contract's own types, which carry no functions.
        assert_eq!(imports(&sealed), ["berth:policy/types@0.4.0"]);
        let adapted = componentize(
            &core,
            Contract::Berth,
            "naming-policy",
            Wasi::Preview2,
            Default::default(),
        )
        .expect("adapted");
        let names = imports(&adapted);
        assert!(
            names.iter().any(|n| n.starts_with("wasi:")),
            "the standard adapter imports WASI: {names:?}"
        );
    }
}
