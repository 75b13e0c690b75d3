//! Built-in native policies: the defaults when no module is configured, the
//! fallback for `on_error = "builtin"`, and the reference for tests and benchmarks.

mod naming;
mod placement;
mod retry;

pub use naming::BuiltinNaming;
pub use placement::BuiltinPlacement;
pub use retry::BuiltinRetry;

/// The three built-in policies with their settings.
#[derive(Clone, Debug, Default)]
pub struct Builtins {
    pub naming: BuiltinNaming,
    pub placement: BuiltinPlacement,
    pub retry: BuiltinRetry,
}
