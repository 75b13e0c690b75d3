//! Sample admission policy: the scaffold's policy (`berth policy new
//! --decisions admission`), shipped built so that the book's walk and the
//! tests load it. Settings, each optional: `max-volumes` a namespace may
//! hold, `max-bytes` one volume may ask for, `plugins` a new volume may
//! use, `required-labels` it must carry; a new volume without an `owner`
//! label gets its namespace's name.

/// The policy (the scaffold's module names it `Policy`).
pub struct Policy;

#[path = "../../../host/berth/templates/policy/rust/admission.rs"]
mod admission;

berth_guest::export_admission!(Policy);
