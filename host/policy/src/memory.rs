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
