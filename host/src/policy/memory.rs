//! The initial linear memory a component's core modules declare, read from
//! the binary (the memory section of each core module, in nested
//! components too). Each decision starts from it, so a guest that asks for
//! much more than it needs makes every decision slower.

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
}
