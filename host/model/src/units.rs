//! Sizes as operators write them: `32MiB`, `1.5GiB`, `10G`, `10GB`, `500M`,
//! `2Ti`, `4096`. Units are Kubernetes' quantities, in any case: `K`, `M`,
//! `G`, `T`, `P`, `E` (with or without `B`) are powers of 10; `Ki`, `Mi`,
//! `Gi`, `Ti`, `Pi`, `Ei` (with or without `B`) powers of 2. A bare number
//! is bytes where [`parse_bytes`] reads it (configs, Docker's options); the
//! CLI's flags ask for a unit ([`parse_size_flag`]).

/// The binary units as [`format_bytes`] writes them.
const UNITS: [(&str, u32); 6] = [
    ("B", 0),
    ("KiB", 10),
    ("MiB", 20),
    ("GiB", 30),
    ("TiB", 40),
    ("PiB", 50),
];

/// Why a size was refused; each names the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error(
        "size {text:?} has unknown unit {unit:?}; use B, or K, M, G, T, P (powers of 10: 10G, 10GB) or Ki, Mi, Gi, Ti, Pi (powers of 2: 10Gi, 10GiB)"
    )]
    UnknownUnit { text: String, unit: String },
    #[error("size {0:?} must start with a number, e.g. 32MiB or 1.5GiB")]
    NotANumber(String),
    #[error("size {0:?} is negative; sizes are 0 or more")]
    Negative(String),
    #[error("size {0:?} has no unit: write {0}B for bytes, or a unit such as {0}GiB or {0}G")]
    NoUnit(String),
    #[error("size {0:?} is too large")]
    TooLarge(String),
    #[error("size {0:?} has more decimals than a size needs")]
    TooPrecise(String),
    #[error("size {0:?} is not a whole number of bytes")]
    Fractional(String),
}

/// How many bytes one `unit` is: (multiplier base, exponent), or `None`
/// for a unit that is not one. Case does not matter.
fn unit_of(unit: &str) -> Option<(u128, u32)> {
    let u = unit.to_ascii_lowercase();
    let u = u.strip_suffix('b').unwrap_or(&u);
    if u.is_empty() {
        return Some((1, 0));
    }
    let (prefix, binary) = match u.strip_suffix('i') {
        Some(p) => (p, true),
        None => (u, false),
    };
    let power = match prefix {
        "k" => 1,
        "m" => 2,
        "g" => 3,
        "t" => 4,
        "p" => 5,
        "e" => 6,
        _ => return None,
    };
    Some(if binary { (1024, power) } else { (1000, power) })
}

/// Parses a byte size: a number (decimals allowed when they come to whole
/// bytes) with an optional unit (see the module's docs). A bare number is
/// bytes.
pub fn parse_bytes(text: &str) -> Result<usize, SizeError> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(SizeError::Negative(text.into()));
    }
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim();
    let (base, power) = unit_of(unit).ok_or_else(|| SizeError::UnknownUnit {
        text: text.into(),
        unit: unit.into(),
    })?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
        return Err(SizeError::NotANumber(text.into()));
    }
    let too_large = || SizeError::TooLarge(text.into());
    let multiplier = base.pow(power);
    let whole: u128 = whole.parse().map_err(|_| too_large())?;
    // The fraction, exactly: digits / 10^len, times the unit.
    let mut bytes = whole.checked_mul(multiplier).ok_or_else(too_large)?;
    if !fraction.is_empty() {
        if fraction.len() > 18 {
            return Err(SizeError::TooPrecise(text.into()));
        }
        let digits: u128 = fraction.parse().map_err(|_| too_large())?;
        let denominator = 10u128.pow(fraction.len() as u32);
        let scaled = digits * multiplier;
        if !scaled.is_multiple_of(denominator) {
            return Err(SizeError::Fractional(text.into()));
        }
        bytes += scaled / denominator;
    }
    usize::try_from(bytes)
        .ok()
        .filter(|b| (*b as u128) < (1u128 << 63))
        .ok_or_else(too_large)
}

/// A size given on the command line: as [`parse_bytes`], but a bare number
/// other than 0 is refused (`--size 10` is never silently 10 bytes).
pub fn parse_size_flag(text: &str) -> Result<usize, SizeError> {
    let t = text.trim();
    if t.chars().all(|c| c.is_ascii_digit()) && !t.trim_start_matches('0').is_empty() {
        return Err(SizeError::NoUnit(t.into()));
    }
    parse_bytes(text)
}

/// Bytes as the largest exact binary unit: `32MiB`, `1500B`; reads back with `parse_bytes`.
pub fn format_bytes(n: usize) -> String {
    for (unit, shift) in UNITS.iter().rev() {
        if *shift > 0 && n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    format!("{n}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("32MiB"), Ok(32 << 20));
        assert_eq!(parse_bytes("1 GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("0.5KiB"), Ok(512));
        assert_eq!(parse_bytes("1TiB"), Ok(1 << 40));
        assert_eq!(parse_bytes("1048576GiB"), Ok(1 << 50));
        assert!(matches!(parse_bytes("32XB"), Err(SizeError::UnknownUnit { .. })));
        assert_eq!(parse_bytes("1.3B"), Err(SizeError::Fractional("1.3B".into())));
        for bad in ["MiB", ".5GiB", "1.GiB", "1.2.3GiB", ""] {
            assert!(parse_bytes(bad).is_err(), "{bad:?}");
        }
        // Sizes travel as int64 on the wire: 2^63 bytes and more are refused.
        assert_eq!(parse_bytes("8192PiB"), Err(SizeError::TooLarge("8192PiB".into())));
        assert_eq!(parse_bytes("8EiB"), Err(SizeError::TooLarge("8EiB".into())));
        assert!(parse_bytes("9223372036854775808").is_err());
        assert_eq!(parse_bytes("9223372036854775807"), Ok(i64::MAX as usize));
        assert!(parse_bytes("99999999999999999999GiB").is_err());
        for n in [0, 1500, 4096, 32 << 20, 3 << 30, 5 << 40] {
            assert_eq!(parse_bytes(&format_bytes(n)), Ok(n));
        }
    }

    #[test]
    fn quantities_as_kubernetes_and_docker_users_write_them() {
        // Powers of 10, with or without B, in any case.
        for text in ["10G", "10GB", "10g", "10gb", "10 G"] {
            assert_eq!(parse_bytes(text), Ok(10_000_000_000), "{text}");
        }
        assert_eq!(parse_bytes("500M"), Ok(500_000_000));
        assert_eq!(parse_bytes("1k"), Ok(1000));
        assert_eq!(parse_bytes("1.5T"), Ok(1_500_000_000_000));
        assert_eq!(parse_bytes("2E"), Ok(2_000_000_000_000_000_000));
        // Powers of 2: Kubernetes' Gi and the GiB people write, in any case.
        for text in ["10Gi", "10GiB", "10gib", "10GIB", "10gi"] {
            assert_eq!(parse_bytes(text), Ok(10 << 30), "{text}");
        }
        assert_eq!(parse_bytes("1.5Ki"), Ok(1536));
        assert_eq!(parse_bytes("3Ei"), Ok(3 << 60));
        assert_eq!(parse_bytes("0.5G"), Ok(500_000_000));
        assert_eq!(
            parse_bytes("1.0000000001G"),
            Err(SizeError::Fractional("1.0000000001G".into()))
        );
    }

    #[test]
    fn negatives_and_bare_numbers_on_the_command_line() {
        assert_eq!(parse_bytes("-5GiB"), Err(SizeError::Negative("-5GiB".into())));
        assert_eq!(parse_size_flag("-5GiB"), Err(SizeError::Negative("-5GiB".into())));
        assert!(parse_bytes("-5GiB").unwrap_err().to_string().contains("negative"));
        // A bare number is bytes where configs and Docker read it, and
        // asks for a unit on the command line.
        assert_eq!(parse_bytes("10"), Ok(10));
        assert_eq!(parse_size_flag("10"), Err(SizeError::NoUnit("10".into())));
        let said = parse_size_flag("10").unwrap_err().to_string();
        assert!(said.contains("10B") && said.contains("10GiB"), "{said}");
        assert_eq!(parse_size_flag("0"), Ok(0));
        assert_eq!(parse_size_flag("10B"), Ok(10));
        assert_eq!(parse_size_flag("10G"), Ok(10_000_000_000));
    }
}
