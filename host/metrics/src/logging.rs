//! How a Berth process logs: to stderr, filtered by `BERTH_LOG` (info for a
//! long-running process, warn for a command), as text or as one JSON object
//! a line (`BERTH_LOG_FORMAT=json`) for log shippers.

/// Logs on stderr: warnings by default for commands, and what `serve` starts
/// and changes (info) for the server.
pub fn init(serve: bool) {
    let default = if serve { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("BERTH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // One JSON object a line, fields at the top level, for log shippers.
    match std::env::var("BERTH_LOG_FORMAT").as_deref() {
        Ok("json") => logs.json().flatten_event(true).init(),
        format => {
            logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .init();
            if let Ok(other) = format
                && other != "text"
            {
                tracing::warn!(format = other, "BERTH_LOG_FORMAT is text or json; logging text");
            }
        }
    }
}
