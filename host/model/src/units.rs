//! Sizes as operators write them: `32MiB`, `1.5GiB`, `2TiB`, `4096`.

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
    #[error("size {text:?} has unknown unit {unit:?}; use B, KiB, MiB, GiB, TiB or PiB")]
    UnknownUnit { text: String, unit: String },
    #[error("size {0:?} must start with a number, e.g. 32MiB or 1.5GiB")]
    NotANumber(String),
    #[error("size {0:?} is too large")]
    TooLarge(String),
    #[error("size {0:?} has more decimals than a size needs")]
    TooPrecise(String),
    #[error("size {0:?} is not a whole number of bytes")]
    Fractional(String),
}

/// Parses a byte size: a number (decimals allowed when they come to whole
/// bytes) with an optional binary unit (B, KiB, MiB, GiB, TiB, PiB).
pub fn parse_bytes(text: &str) -> Result<usize, SizeError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim();
    let shift = if unit.is_empty() {
        0
    } else {
        UNITS
            .iter()
            .find(|(u, _)| *u == unit)
            .map(|(_, s)| *s)
            .ok_or_else(|| SizeError::UnknownUnit {
                text: text.into(),
                unit: unit.into(),
            })?
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
        return Err(SizeError::NotANumber(text.into()));
    }
    let too_large = || SizeError::TooLarge(text.into());
    let whole: u128 = whole.parse().map_err(|_| too_large())?;
    // The fraction, exactly: digits / 10^len, scaled by the unit.
    let mut bytes = whole.checked_shl(shift).ok_or_else(too_large)?;
    if !fraction.is_empty() {
        if fraction.len() > 18 {
            return Err(SizeError::TooPrecise(text.into()));
        }
        let digits: u128 = fraction.parse().map_err(|_| too_large())?;
        let denominator = 10u128.pow(fraction.len() as u32);
        let scaled = digits << shift;
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
        assert!(matches!(parse_bytes("32MB"), Err(SizeError::UnknownUnit { .. })));
        assert_eq!(parse_bytes("1.3B"), Err(SizeError::Fractional("1.3B".into())));
        for bad in ["MiB", ".5GiB", "1.GiB", "1.2.3GiB", ""] {
            assert!(parse_bytes(bad).is_err(), "{bad:?}");
        }
        // Sizes travel as int64 on the wire: 2^63 bytes and more are refused.
        assert_eq!(parse_bytes("8192PiB"), Err(SizeError::TooLarge("8192PiB".into())));
        assert!(parse_bytes("9223372036854775808").is_err());
        assert_eq!(parse_bytes("9223372036854775807"), Ok(i64::MAX as usize));
        assert!(parse_bytes("99999999999999999999GiB").is_err());
        for n in [0, 1500, 4096, 32 << 20, 3 << 30, 5 << 40] {
            assert_eq!(parse_bytes(&format_bytes(n)), Ok(n));
        }
    }
}
