//! Errors from CSI calls. They keep the plugin's gRPC code and message and say
//! which plugin and which call failed, because the retry policy decides on the
//! code and the operator needs the message.

use std::fmt;
use std::io;
use std::time::Duration;

use berth_proto::code;
use tonic::Code;

/// What went wrong in one CSI call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The plugin answered with a gRPC error status.
    Status { code: Code, message: String },
    /// No answer within the per-RPC deadline.
    Deadline(Duration),
    /// The plugin's socket could not be reached.
    Unreachable(String),
    /// The plugin answered, but the answer breaks the CSI spec.
    Invalid(String),
    /// Berth's own side of the call failed, not the plugin: a node agent
    /// that could not record the step, or refused what it was sent.
    Local { code: Code, message: String },
}

impl Failure {
    /// The gRPC code this failure is classified under.
    pub fn code(&self) -> Code {
        match self {
            Failure::Status { code, .. } => *code,
            Failure::Deadline(_) => Code::DeadlineExceeded,
            Failure::Unreachable(_) => Code::Unavailable,
            Failure::Invalid(_) => Code::Internal,
            Failure::Local { code, .. } => *code,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Status { code: c, message } if message.is_empty() => f.write_str(code::name(*c)),
            Failure::Status { code: c, message } => write!(f, "{}: {message}", code::name(*c)),
            Failure::Deadline(d) => write!(
                f,
                "DEADLINE_EXCEEDED: no answer within {}",
                humantime::format_duration(*d)
            ),
            Failure::Unreachable(why) => write!(f, "plugin unreachable: {why}"),
            Failure::Invalid(why) => write!(f, "invalid answer: {why}"),
            Failure::Local { code: c, message } => write!(f, "{}: {message}", code::name(*c)),
        }
    }
}

/// A failed call to a CSI plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsiError {
    /// The plugin's endpoint, or its name once fingerprinted.
    pub plugin: String,
    /// The CSI method, e.g. `NodeGetInfo`.
    pub call: &'static str,
    pub failure: Failure,
}

impl fmt::Display for CsiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failure {
            // Not dressed as the plugin's: `plugin` names the agent then.
            Failure::Local { .. } => write!(f, "{}: {}: {}", self.plugin, self.call, self.failure),
            _ => write!(
                f,
                "CSI plugin at {}: {}: {}",
                self.plugin, self.call, self.failure
            ),
        }
    }
}

impl std::error::Error for CsiError {}

impl CsiError {
    pub fn code(&self) -> Code {
        self.failure.code()
    }

    pub fn invalid(plugin: &str, call: &'static str, why: impl Into<String>) -> Self {
        CsiError {
            plugin: plugin.to_string(),
            call,
            failure: Failure::Invalid(why.into()),
        }
    }
}

/// Joins an error and its sources: `a: b: c`, skipping repeats.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![err.to_string()];
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = e.source();
    }
    parts.join(": ")
}

/// Why a call did not reach the plugin, or lost it midway. tonic turns it
/// into a status whose source is this error, which is how a transport
/// failure is told from a status the plugin sent.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("connecting to {path}: {source}")]
    Dial { path: String, source: io::Error },
    #[error("HTTP/2 handshake with {path}: {source}")]
    Handshake { path: String, source: h2::Error },
    #[error("reading the request body: {0}")]
    Body(tonic::Status),
    #[error(transparent)]
    Http2(#[from] h2::Error),
    #[error("request URI: {0}")]
    Uri(#[from] http::Error),
}

/// Why a unary call failed.
#[derive(Debug)]
pub enum CallError {
    /// The plugin answered with this status.
    Status(tonic::Status),
    /// The call did not reach the plugin, or its connection was lost.
    Channel(ChannelError),
    /// The plugin answered, but not in gRPC's form.
    Invalid(String),
}

impl From<ChannelError> for CallError {
    fn from(e: ChannelError) -> CallError {
        CallError::Channel(e)
    }
}
