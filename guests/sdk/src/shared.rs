//! What Berth's policy engine and this SDK both say about the contract's
//! types, written once. The engine (`host/policy`) takes this file as a
//! module of its own too; each side calls the macros where its own
//! bindings' types are in scope (wit-bindgen's here, wasmtime's there: two
//! types of the same shape, so code over them cannot be shared as
//! functions), and what needs no type of theirs.

/// `Operation::name` (its CSI method) and `Operation::is_undo`, for the
/// `Operation` in scope where it is called.
macro_rules! operation_names {
    () => {
        impl Operation {
            /// The CSI method name: `CreateVolume`, `NodePublishVolume`...
            pub fn name(self) -> &'static str {
                match self {
                    Operation::CreateVolume => "CreateVolume",
                    Operation::DeleteVolume => "DeleteVolume",
                    Operation::ControllerPublishVolume => "ControllerPublishVolume",
                    Operation::ControllerUnpublishVolume => "ControllerUnpublishVolume",
                    Operation::NodeStageVolume => "NodeStageVolume",
                    Operation::NodeUnstageVolume => "NodeUnstageVolume",
                    Operation::NodePublishVolume => "NodePublishVolume",
                    Operation::NodeUnpublishVolume => "NodeUnpublishVolume",
                    Operation::ControllerExpandVolume => "ControllerExpandVolume",
                    Operation::NodeExpandVolume => "NodeExpandVolume",
                    Operation::CreateSnapshot => "CreateSnapshot",
                    Operation::DeleteSnapshot => "DeleteSnapshot",
                    Operation::ControllerModifyVolume => "ControllerModifyVolume",
                    Operation::CreateVolumeGroupSnapshot => "CreateVolumeGroupSnapshot",
                    Operation::DeleteVolumeGroupSnapshot => "DeleteVolumeGroupSnapshot",
                }
            }

            /// Whether the operation undoes something (delete, unpublish,
            /// unstage), so that NOT_FOUND means the work is already done.
            pub fn is_undo(self) -> bool {
                matches!(
                    self,
                    Operation::DeleteVolume
                        | Operation::ControllerUnpublishVolume
                        | Operation::NodeUnstageVolume
                        | Operation::NodeUnpublishVolume
                        | Operation::DeleteSnapshot
                        | Operation::DeleteVolumeGroupSnapshot
                )
            }
        }
    };
}
pub(crate) use operation_names;

/// `Segments<'a>`: one topology or label set of placement's candidates,
/// key/value pairs read from the shared string table of `$tables` (a type
/// with `strings`, `pair_keys` and `pair_values`), shown as `k=v,k2=v2`.
/// Needs `std::fmt`, `std::ops::Range` and `Pairs` in scope.
macro_rules! segments {
    ($tables:ty) => {
        /// One topology or label set of the candidates: key/value pairs
        /// read from the shared string table.
        #[derive(Clone, Debug)]
        pub struct Segments<'a> {
            tables: &'a $tables,
            pairs: Range<usize>,
        }

        impl<'a> Segments<'a> {
            fn of(tables: &'a $tables, offsets: &[u32], i: usize) -> Segments<'a> {
                Segments {
                    tables,
                    pairs: offsets[i] as usize..offsets[i + 1] as usize,
                }
            }

            pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + use<'a> {
                let c = self.tables;
                self.pairs.clone().map(move |p| {
                    (
                        c.strings[c.pair_keys[p] as usize].as_str(),
                        c.strings[c.pair_values[p] as usize].as_str(),
                    )
                })
            }

            /// The value of `key`.
            pub fn get(&self, key: &str) -> Option<&'a str> {
                self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
            }

            pub fn to_pairs(&self) -> Pairs {
                self.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }
        }

        /// `k=v,k2=v2`, as reasons show a topology.
        impl fmt::Display for Segments<'_> {
            // Pieces rather than `write!`: reasons are built in the hot path.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                for (i, (k, v)) in self.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    f.write_str(k)?;
                    f.write_str("=")?;
                    f.write_str(v)?;
                }
                Ok(())
            }
        }
    };
}
pub(crate) use segments;

/// FNV-1a as a `Hasher`, for the reasons a placement answer's builder has
/// seen: they are short and come from policy code, so SipHash's defence
/// against chosen keys buys nothing.
pub(crate) struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}
