//! Every volume record in memory, by the id it holds: one pointer a slot
//! (see [`berth_model::ById`]).

use berth_model::{ById, VolumeRecord};

pub(crate) type Records = ById<VolumeRecord>;
