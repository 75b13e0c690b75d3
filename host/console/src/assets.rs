//! The console's stylesheet and script, built into the binary.

pub const CSS: &str = include_str!("../assets/console.css");
pub const JS: &str = include_str!("../assets/console.js");
pub const ICON: &str = include_str!("../assets/icon.svg");
