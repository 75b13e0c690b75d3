//! gRPC status codes by their canonical names (`NOT_FOUND`, `UNAVAILABLE`, ...),
//! as the CSI spec's error tables and operators write them.

use tonic::Code;

const NAMES: [(Code, &str); 17] = [
    (Code::Ok, "OK"),
    (Code::Cancelled, "CANCELLED"),
    (Code::Unknown, "UNKNOWN"),
    (Code::InvalidArgument, "INVALID_ARGUMENT"),
    (Code::DeadlineExceeded, "DEADLINE_EXCEEDED"),
    (Code::NotFound, "NOT_FOUND"),
    (Code::AlreadyExists, "ALREADY_EXISTS"),
    (Code::PermissionDenied, "PERMISSION_DENIED"),
    (Code::ResourceExhausted, "RESOURCE_EXHAUSTED"),
    (Code::FailedPrecondition, "FAILED_PRECONDITION"),
    (Code::Aborted, "ABORTED"),
    (Code::OutOfRange, "OUT_OF_RANGE"),
    (Code::Unimplemented, "UNIMPLEMENTED"),
    (Code::Internal, "INTERNAL"),
    (Code::Unavailable, "UNAVAILABLE"),
    (Code::DataLoss, "DATA_LOSS"),
    (Code::Unauthenticated, "UNAUTHENTICATED"),
];

/// The canonical upper-case name of a code.
pub fn name(code: Code) -> &'static str {
    NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, n)| *n)
        .unwrap_or("UNKNOWN")
}

/// Every code's name but OK's: the codes a call can fail with.
pub fn failure_names() -> impl Iterator<Item = &'static str> {
    NAMES.iter().filter(|(c, _)| *c != Code::Ok).map(|(_, n)| *n)
}

/// Reads a code from its canonical name (case-insensitive) or its number.
pub fn from_name(text: &str) -> Option<Code> {
    let t = text.trim();
    if let Ok(n) = t.parse::<i32>() {
        return NAMES.iter().map(|(c, _)| *c).find(|c| *c as i32 == n);
    }
    NAMES
        .iter()
        .find(|(_, n)| n.eq_ignore_ascii_case(t))
        .map(|(c, _)| *c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_grpc_numbers() {
        for (code, n) in NAMES {
            assert_eq!(from_name(n), Some(code));
            assert_eq!(from_name(&n.to_lowercase()), Some(code));
            assert_eq!(from_name(&(code as i32).to_string()), Some(code));
            assert_eq!(name(code), n);
        }
        assert_eq!(Code::Unavailable as i32, 14);
        assert_eq!(from_name("NOT_A_CODE"), None);
        assert_eq!(from_name("17"), None);
    }
}
