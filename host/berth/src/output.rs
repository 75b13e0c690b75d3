//! What the commands print: results as aligned text or one JSON document
//! (`--output`), every line through [`say!`] so that control characters
//! from plugins, guests or requests are shown escaped.

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned, human-readable text.
    Text,
    /// One JSON document on stdout, for scripts.
    Json,
}

/// Prints one line, with control characters in it (from plugins, guests or
/// requests) shown escaped; every text line the CLI prints goes through it.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::out(&berth::model::text::printable(&format!($($arg)*)))
    };
}
pub(crate) use say;

/// One line on stdout. Output closed by its reader (`berth volume list |
/// head`) ends the command quietly, as Unix tools do; SIGPIPE itself stays
/// ignored, so a socket closed under a call is an error, never a silent death.
pub fn out(line: &str) {
    out_raw(&format!("{line}\n"));
}

/// Text on stdout as it is (no line's end added), ending as [`out`] does.
pub fn out_raw(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(text.as_bytes()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        panic!("writing to stdout: {e}");
    }
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    out(&serde_json::to_string_pretty(value)?);
    Ok(())
}
