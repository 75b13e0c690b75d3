//! What a component's binary says it needs: the initial linear memory its
//! core modules declare (each decision starts from it, so a guest that asks
//! for much more than it needs makes every decision slower), and how many
//! core instances it makes (a Rust guest a few, a Python one dozens).

const PAGE: u64 = 64 << 10;

/// The largest initial memory any core module in `wasm` declares, in bytes;
/// `None` when the binary is not one this reader understands.
pub fn initial_memory(wasm: &[u8]) -> Option<u64> {
    let (magic, rest) = wasm.split_at_checked(8)?;
    if &magic[..4] != b"\0asm" {
        return None;
    }
    match magic[4..] {
        [1, 0, 0, 0] => module(rest),
        [0x0d, 0, 1, 0] => component(rest),
        _ => None,
    }
}

/// Reads an unsigned LEB128 number.
fn leb(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Splits the sections of a module or component body: (id, contents).
fn sections(mut body: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    let mut out = Vec::new();
    while let Some((&id, rest)) = body.split_first() {
        body = rest;
        let size = usize::try_from(leb(&mut body)?).ok()?;
        let (contents, rest) = body.split_at_checked(size)?;
        out.push((id, contents));
        body = rest;
    }
    Some(out)
}

fn component(body: &[u8]) -> Option<u64> {
    let mut most = 0;
    for (id, contents) in sections(body)? {
        let found = match id {
            1 => initial_memory(contents)?,
            4 => initial_memory(contents)?,
            _ => 0,
        };
        most = most.max(found);
    }
    Some(most)
}

fn module(body: &[u8]) -> Option<u64> {
    let mut most = 0;
    for (id, mut contents) in sections(body)? {
        if id != 5 {
            continue;
        }
        for _ in 0..leb(&mut contents)? {
            let (&flags, rest) = contents.split_first()?;
            contents = rest;
            let min = leb(&mut contents)?;
            if flags & 1 != 0 {
                leb(&mut contents)?;
            }
            if flags & 8 != 0 {
                leb(&mut contents)?; // a custom page size; pages are 64 KiB here
            }
            most = most.max(min.saturating_mul(PAGE));
        }
    }
    Some(most)
}

/// The language a guest was written in, as far as its binary tells; each
/// needs its own room at start (a runtime's heap comes with its guest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestLanguage {
    /// With Berth's SDK (wit-bindgen): stack and data only.
    Rust,
    /// Go's runtime (`berth policy component`): about 3.5 MiB.
    Go,
    /// componentize-qjs's QuickJS: about 1.4 MiB.
    JavaScript,
    /// componentize-py's CPython: about 12.4 MiB.
    Python,
    /// Anything else (C with wasi-libc, another toolchain).
    Other,
}

impl GuestLanguage {
    /// What the guest's binary names of its toolchain: Go's compiler in
    /// the producers section, the runtime crates of componentize-qjs and
    /// componentize-py, wit-bindgen's Rust generator.
    pub fn of(wasm: &[u8]) -> GuestLanguage {
        let has = |needle: &[u8]| memchr::memmem::find(wasm, needle).is_some();
        if has(b"Go cmd/compile") {
            GuestLanguage::Go
        } else if has(b"componentize_qjs") {
            GuestLanguage::JavaScript
        } else if has(b"componentize_py") {
            GuestLanguage::Python
        } else if has(b"wit-bindgen-rust") {
            GuestLanguage::Rust
        } else {
            GuestLanguage::Other
        }
    }

    /// An initial memory past this is more than the language needs.
    fn room(self) -> u64 {
        match self {
            GuestLanguage::Rust | GuestLanguage::Other => 1 << 20,
            GuestLanguage::JavaScript => 3 << 20,
            GuestLanguage::Go => 6 << 20,
            GuestLanguage::Python => 24 << 20,
        }
    }

    /// What usually makes it larger, and what to do.
    fn advice(self) -> &'static str {
        match self {
            GuestLanguage::Rust => {
                "; a Rust guest built without the SDK's stack setting (-zstack-size=131072, see the book, \
                 Writing a policy) reserves a 1 MiB stack"
            }
            GuestLanguage::Go => {
                "; Go's runtime needs about 3.5 MiB: look at what the module's init allocates"
            }
            GuestLanguage::JavaScript => {
                "; QuickJS needs about 1.4 MiB: look at what the module's top level allocates"
            }
            GuestLanguage::Python => {
                "; CPython needs about 12.4 MiB: look at what the module imports and builds at import time"
            }
            GuestLanguage::Other => "",
        }
    }
}

/// Why `wasm`'s initial memory is more than its language needs (each
/// decision starts from it), or `None` when it is not.
pub fn memory_warning(wasm: &[u8]) -> Option<String> {
    let bytes = initial_memory(wasm).filter(|b| *b > 1 << 20)?;
    let language = GuestLanguage::of(wasm);
    (bytes > language.room()).then(|| {
        format!(
            "starts with {} of linear memory, more than a {}policy needs, and every decision \
             resets it{}",
            berth_model::units::format_bytes(usize::try_from(bytes).unwrap_or(usize::MAX)),
            match language {
                GuestLanguage::Other => String::new(),
                named => format!("{named:?} "),
            },
            language.advice()
        )
    })
}

/// How many core modules a component instantiates, nested components
/// included: what one decision takes from the engine's pool of core
/// instances. (Instances a component bundles from exports allocate nothing.)
/// `None` when the binary is not a component this reader understands.
pub fn core_instances(wasm: &[u8]) -> Option<u32> {
    let (magic, rest) = wasm.split_at_checked(8)?;
    (magic == b"\0asm\x0d\0\x01\0").then_some(())?;
    let mut count = 0u32;
    for (id, contents) in sections(rest)? {
        count = count.saturating_add(match id {
            2 => instantiations(contents)?,
            4 => core_instances(contents)?,
            _ => 0,
        });
    }
    Some(count)
}

/// The `instantiate` entries of a core instance section.
fn instantiations(mut contents: &[u8]) -> Option<u32> {
    let skip_name = |bytes: &mut &[u8]| -> Option<()> {
        let len = usize::try_from(leb(bytes)?).ok()?;
        *bytes = bytes.get(len..)?;
        Some(())
    };
    let mut count = 0;
    for _ in 0..leb(&mut contents)? {
        let (&kind, rest) = contents.split_first()?;
        contents = rest;
        match kind {
            // instantiate: module index, then (name, 0x12, instance index) arguments.
            0x00 => {
                leb(&mut contents)?;
                for _ in 0..leb(&mut contents)? {
                    skip_name(&mut contents)?;
                    contents = contents.get(1..)?;
                    leb(&mut contents)?;
                }
                count += 1;
            }
            // from exports: (name, sort, index) entries.
            0x01 => {
                for _ in 0..leb(&mut contents)? {
                    skip_name(&mut contents)?;
                    contents = contents.get(1..)?;
                    leb(&mut contents)?;
                }
            }
            _ => return None,
        }
    }
    Some(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_memory_of_modules_and_components() {
        let module = wat::parse_str("(module (memory 17 100))").unwrap();
        assert_eq!(initial_memory(&module), Some(17 * PAGE));
        let component =
            wat::parse_str("(component (core module (memory 2)) (core module (memory 3)))").unwrap();
        assert_eq!(initial_memory(&component), Some(3 * PAGE));
        assert_eq!(initial_memory(b"(module)"), None);
        assert_eq!(initial_memory(b"\0asm\x01\0\0\0\x05\xff"), None, "a cut section");
    }

    #[test]
    fn each_language_is_warned_past_its_own_room() {
        let with = |pages: u32, marker: &str| {
            wat::parse_str(format!(
                "(module (memory {pages}) (data (i32.const 0) \"{marker}\"))"
            ))
            .unwrap()
        };
        // 2 MiB: too much for Rust, room for Go, JavaScript and Python.
        let rust = memory_warning(&with(32, "wit-bindgen-rust")).unwrap();
        assert!(
            rust.contains("Rust policy") && rust.contains("-zstack-size"),
            "{rust}"
        );
        for marker in ["Go cmd/compile", "componentize_qjs", "componentize_py"] {
            assert_eq!(memory_warning(&with(32, marker)), None, "{marker}");
        }
        // Past each language's own room, its own advice.
        let go = memory_warning(&with(128, "Go cmd/compile")).unwrap();
        assert!(go.contains("Go policy") && !go.contains("stack setting"), "{go}");
        let js = memory_warning(&with(64, "componentize_qjs")).unwrap();
        assert!(js.contains("JavaScript policy") && js.contains("QuickJS"), "{js}");
        assert_eq!(memory_warning(&with(16, "")), None, "1 MiB is room for anyone");
    }

    #[test]
    fn counts_the_core_instances_of_components() {
        let component = wat::parse_str(
            "(component (core module $m (func (export \"f\")))
               (core instance $a (instantiate $m)) (core instance (instantiate $m))
               (core instance (export \"g\" (func $a \"f\")))
               (component (core module $n) (core instance (instantiate $n))))",
        )
        .unwrap();
        assert_eq!(core_instances(&component), Some(3));
        assert_eq!(core_instances(&wat::parse_str("(module)").unwrap()), None);
    }
}
