//! Sizes as operators write them: `32MiB`, `512KiB`, `1GiB`, `4096`.

/// Parses a byte size with an optional binary unit (B, KiB, MiB, GiB).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: usize = digits
        .parse()
        .map_err(|_| format!("size {text:?} must start with a whole number, e.g. 32MiB"))?;
    let scale: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "size {text:?} has unknown unit {other:?}; use B, KiB, MiB or GiB"
            ));
        }
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// Bytes as the largest exact binary unit: `32MiB`, `1500B`; reads back with `parse_bytes`.
pub fn format_bytes(n: usize) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{}GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}KiB", n >> 10),
        n => format!("{n}B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("32MiB"), Ok(32 << 20));
        assert_eq!(parse_bytes("1 GiB"), Ok(1 << 30));
        assert!(parse_bytes("32MB").unwrap_err().contains("unknown unit"));
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("99999999999999999999GiB").is_err());
        for n in [0, 1500, 4096, 32 << 20, 3 << 30] {
            assert_eq!(parse_bytes(&format_bytes(n)), Ok(n));
        }
    }
}
