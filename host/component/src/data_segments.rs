//! Fewer data segments in a pre-initialised module.
//!
//! A snapshot writes the memory the start-up left as one active data segment
//! per run of non-zero bytes (up to 10,000), and Go's linker leaves tens of
//! thousands of empty passive ones. Wasmtime fills a pointer and a length for
//! every segment each time it makes an instance, so a Go policy spent more
//! time there than in its decision. Here the passive segments are dropped
//! (without a data count section no instruction can name one) and active ones
//! at most a page apart become one, the bytes between them zeros: an
//! instance's memory comes from the module's image a page at a time, so the
//! zeros cost nothing there, and the module grows by the gaps only.

use std::ops::Range;

use wasm_encoder::{ConstExpr, CustomSection, DataSection, Module, RawSection};
use wasmparser::{DataKind, Operator, Parser, Payload};

/// Two segments at most this many bytes apart become one.
const MERGE_GAP: u64 = 4096;

/// One active segment: the memory it fills, where, and its bytes.
struct Segment<'a> {
    memory: u32,
    offset: u64,
    bytes: Vec<&'a [u8]>,
    len: u64,
}

impl Segment<'_> {
    fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// How many data segments a core module has.
pub fn count(module: &[u8]) -> anyhow::Result<usize> {
    let mut n = 0;
    for payload in Parser::new(0).parse_all(module) {
        if let Payload::DataSection(reader) = payload? {
            n += reader.count() as usize;
        }
    }
    Ok(n)
}

/// The module with its data segments merged, or `None` when it is better
/// left as it is: it has a data count section (an instruction may name a
/// segment by its index), an offset that is not a 32-bit constant, segments
/// that overlap (their order would matter), or nothing to merge.
pub fn merge(module: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
    let mut sections: Vec<Section<'_>> = Vec::new();
    let mut merged = None;
    for payload in Parser::new(0).parse_all(module) {
        let payload = payload?;
        match &payload {
            Payload::DataCountSection { .. } => return Ok(None),
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => {
                anyhow::bail!("a component, not a core module")
            }
            Payload::DataSection(reader) => {
                let mut segments = Vec::new();
                for data in reader.clone() {
                    let data = data?;
                    let DataKind::Active {
                        memory_index,
                        offset_expr,
                    } = data.kind
                    else {
                        continue;
                    };
                    let mut ops = offset_expr.get_operators_reader();
                    let offset = match (ops.read()?, ops.read()?) {
                        (Operator::I32Const { value }, Operator::End) => u64::from(value as u32),
                        _ => return Ok(None),
                    };
                    segments.push(Segment {
                        memory: memory_index,
                        offset,
                        len: data.data.len() as u64,
                        bytes: vec![data.data],
                    });
                }
                let before = reader.count() as usize;
                let Some(joined) = join(segments) else {
                    return Ok(None);
                };
                if joined.len() == before {
                    return Ok(None);
                }
                merged = Some(joined.len());
                sections.push(Section::Data(joined));
            }
            Payload::CustomSection(custom) => sections.push(Section::Custom(custom.name(), custom.data())),
            other => {
                if let Some((id, range)) = other.as_section() {
                    sections.push(Section::Raw(id, range));
                }
            }
        }
    }
    if merged.is_none() {
        return Ok(None);
    }
    let mut out = Module::new();
    for section in &sections {
        match section {
            Section::Raw(id, range) => out.section(&RawSection {
                id: *id,
                data: &module[range.clone()],
            }),
            Section::Custom(name, data) => out.section(&CustomSection {
                name: (*name).into(),
                data: (*data).into(),
            }),
            Section::Data(segments) => {
                let mut data = DataSection::new();
                for segment in segments {
                    let offset = ConstExpr::i32_const(segment.offset as u32 as i32);
                    data.active(segment.memory, &offset, segment.bytes.concat());
                }
                out.section(&data)
            }
        };
    }
    Ok(Some(out.finish()))
}

enum Section<'a> {
    Raw(u8, Range<usize>),
    Custom(&'a str, &'a [u8]),
    Data(Vec<Segment<'a>>),
}

/// The segments sorted and joined where at most [`MERGE_GAP`] apart, or
/// `None` when two overlap.
fn join(mut segments: Vec<Segment<'_>>) -> Option<Vec<Segment<'_>>> {
    segments.sort_by_key(|s| (s.memory, s.offset));
    let mut joined: Vec<Segment<'_>> = Vec::with_capacity(segments.len());
    for segment in segments {
        if let Some(last) = joined.last_mut().filter(|l| l.memory == segment.memory) {
            if segment.offset < last.end() {
                return None;
            }
            let gap = segment.offset - last.end();
            if gap <= MERGE_GAP {
                last.bytes.push(&ZEROS[..gap as usize]);
                last.bytes.extend(segment.bytes);
                last.len += gap + segment.len;
                continue;
            }
        }
        joined.push(segment);
    }
    Some(joined)
}

static ZEROS: [u8; MERGE_GAP as usize] = [0; MERGE_GAP as usize];

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::{Engine, Instance, Module as CoreModule, Store};

    fn memory_after_start(wasm: &[u8]) -> Vec<u8> {
        let engine = Engine::default();
        let module = CoreModule::new(&engine, wasm).unwrap();
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        memory.data(&store).to_vec()
    }

    fn data_segments(wasm: &[u8]) -> usize {
        Parser::new(0)
            .parse_all(wasm)
            .filter_map(|p| match p.unwrap() {
                Payload::DataSection(r) => Some(r.count() as usize),
                _ => None,
            })
            .sum()
    }

    #[test]
    fn near_segments_become_one_and_the_memory_is_the_same() {
        let wasm = wat::parse_str(
            r#"(module
                (memory (export "memory") 2)
                (data (i32.const 100) "abc")
                (data (i32.const 16) "first")
                (data "never named")
                (data (i32.const 4199) "a page later")
                (data (i32.const 70000) "far")
                (func (export "f") (result i32) i32.const 7)
                (@custom "note" "kept"))"#,
        )
        .unwrap();
        let merged = merge(&wasm).unwrap().expect("segments to merge");
        assert_eq!(data_segments(&wasm), 5);
        // 16..103 and 4199 are a page apart (the most merged); 70000 is not;
        // the passive segment is gone.
        assert_eq!(data_segments(&merged), 2);
        assert_eq!(memory_after_start(&merged), memory_after_start(&wasm));
        let custom = Parser::new(0).parse_all(&merged).any(
            |p| matches!(p.unwrap(), Payload::CustomSection(c) if c.name() == "note" && c.data() == b"kept"),
        );
        assert!(custom, "custom sections are kept");
    }

    #[test]
    fn a_module_that_may_name_its_segments_is_left_alone() {
        let wasm = wat::parse_str(
            r#"(module
                (memory (export "memory") 1)
                (data (i32.const 0) "a")
                (data (i32.const 8) "b")
                (data $p "passive")
                (func (export "f") i32.const 0 i32.const 0 i32.const 1 memory.init $p))"#,
        )
        .unwrap();
        assert!(merge(&wasm).unwrap().is_none());
    }

    #[test]
    fn overlapping_segments_are_left_alone() {
        let wasm = wat::parse_str(
            r#"(module
                (memory (export "memory") 1)
                (data (i32.const 0) "abcdef")
                (data (i32.const 2) "XY"))"#,
        )
        .unwrap();
        assert!(merge(&wasm).unwrap().is_none());
    }
}
