//! Who may do what through the Berth API. A caller is the management
//! identity (the API socket's user), the holder of an ACL token, or the
//! subject of a client certificate bound to policies; a token holds
//! policies, and a policy's rules grant capabilities on volumes per
//! namespace (`list`, `read`, `write`, `mount`) and levels in the areas
//! beyond namespaces (`node`, `plugin`, `policy`, `operator`). Deny wins.
//!
//! - `capability` — what a call needs ([`Needs`]).
//! - `rules` — a policy's rules, parsed strictly, and how verdicts combine.
//! - `bearer` — a token's text: minted, read, its secret checked.
//! - `access` — the state a leading server holds ([`Acl`]) and its changes.
//! - `certificates` — client certificates' subjects bound to policies.
//!
//! *Never depends on* the API, the manager or the server: the server maps
//! each call to what it needs and asks [`Acl::check`].

mod access;
pub mod bearer;
mod capability;
mod certificates;
pub mod rules;

pub use access::{Acl, AclError, Caller, Denied, Unauthenticated};
pub use capability::{Area, Level, Needs, VolumeCap};
pub use certificates::{SUBJECT_MAX, valid_subject};
