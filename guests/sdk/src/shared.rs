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
/// key/value pairs read from the shared string table of `$tables` (the
/// candidates' columns: `strings`, `pair_keys`, `pair_values`, `topologies`,
/// `topology`, `label_sets`, `labels`, `max_volumes`, `health`), shown as
/// `k=v,k2=v2`; and the readers of `$tables` that topology matching and
/// each node's entries need. Needs `std::fmt`, `std::ops::Range`, `Pairs`
/// and `Health` in scope.
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

        impl $tables {
            /// The index in `strings` of `text`, when a topology or label set uses it.
            pub fn string_index(&self, text: &str) -> Option<u32> {
                self.strings
                    .iter()
                    .position(|s| s == text)
                    .map(|i| i as u32)
            }

            /// For each distinct topology, in index order: whether it has every
            /// segment of `required` with the same value. Strings are looked up once
            /// and topologies compared as indexes.
            pub fn satisfying(&self, required: &Pairs) -> Vec<bool> {
                let count = self.topologies.len().saturating_sub(1);
                let wanted: Option<Vec<(u32, u32)>> = required
                    .iter()
                    .map(|(k, v)| Some((self.string_index(k)?, self.string_index(v)?)))
                    .collect();
                let Some(wanted) = wanted else {
                    return vec![false; count];
                };
                (0..count)
                    .map(|t| {
                        let pairs = self.topologies[t] as usize..self.topologies[t + 1] as usize;
                        wanted.iter().all(|&(k, v)| {
                            pairs
                                .clone()
                                .any(|p| self.pair_keys[p] == k && self.pair_values[p] == v)
                        })
                    })
                    .collect()
            }

            /// For each distinct topology, in index order: whether a node in it
            /// reaches a volume accessible from any of `accessible` (empty: everywhere).
            pub fn reaching(&self, accessible: &[Pairs]) -> Vec<bool> {
                let count = self.topologies.len().saturating_sub(1);
                if accessible.is_empty() {
                    return vec![true; count];
                }
                let mut reach = vec![false; count];
                for a in accessible {
                    for (r, s) in reach.iter_mut().zip(self.satisfying(a)) {
                        *r |= s;
                    }
                }
                reach
            }

            /// Node `i`'s topology segments.
            pub fn topology_of(&self, i: usize) -> Segments<'_> {
                Segments::of(self, &self.topologies, self.topology[i] as usize)
            }

            /// The operator's labels on node `i`.
            pub fn labels_of(&self, i: usize) -> Segments<'_> {
                Segments::of(self, &self.label_sets, self.labels[i] as usize)
            }

            /// Node `i`'s volume limit; `None` when it has none.
            pub fn max_volumes_of(&self, i: usize) -> Option<u64> {
                Some(self.max_volumes[i]).filter(|m| *m > 0)
            }

            /// Node `i`'s health.
            pub fn health_of(&self, i: usize) -> Health {
                match self.health[i] {
                    0 => Health::Healthy,
                    1 => Health::Unhealthy,
                    _ => Health::Unknown,
                }
            }
        }
    };
}
pub(crate) use segments;

/// `pairs` and `volume`, the inputs a test of a policy starts from, over the
/// `Pairs`, `Volume`, `CapacityRange`, `AccessMode` and `AccessType` in
/// scope; a sample volume's id is its name after `$id`.
macro_rules! samples {
    ($id:literal) => {
        /// Pairs from string slices.
        pub fn pairs(kv: &[(&str, &str)]) -> Pairs {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        }

        /// A 1 GiB single-node-writer mount volume named `name`, with no
        /// requirements.
        pub fn volume(name: &str) -> Volume {
            Volume {
                id: format!("{}{name}", $id),
                name: name.to_string(),
                driver: "hostpath.csi.berth.dev".to_string(),
                capacity: CapacityRange {
                    required_bytes: 1 << 30,
                    limit_bytes: 0,
                },
                access_mode: AccessMode::SingleNodeWriter,
                access_type: AccessType::Mount,
                parameters: vec![],
                labels: vec![],
                requisite_topology: vec![],
                preferred_topology: vec![],
            }
        }
    };
}
pub(crate) use samples;

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
