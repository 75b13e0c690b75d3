//! The decision log's layout, the same in both stores.
//!
//! An append stores each kind's new entries together, as one key or a few
//! (a chunk of at most [`CHUNK_BYTES`]), instead of a key per entry: a
//! thousand decisions logged in one batch are a write or two, not a
//! thousand. A chunk's key is its newest entry's key, `+`, and how many
//! entries it holds, so chunk keys sort in time order as entry keys do, and
//! the ring is trimmed from the keys alone.
//!
//! Compatibility: releases before chunks stored one entry per key (the
//! entry's key, its JSON as the value). Such a key has no `+`, counts as one
//! entry, and reads as before; it is trimmed as the oldest chunks are.
//!
//! Invariant: a kind holds its newest `keep` entries and no more: chunks
//! past them are dropped whole, oldest first, and the one across the edge
//! is written again without its oldest entries (a write per append, not
//! per entry).

/// The most one chunk takes; every entry fits alone (an entry is at most a
/// quarter of a MiB), and a chunk stays well within a store write.
pub(crate) const CHUNK_BYTES: usize = 512 << 10;
/// A chunk's first byte; an entry stored alone is JSON and starts with `{`.
const CHUNK_TAG: u8 = 1;
/// Between the newest entry's key and the count in a chunk's key.
const COUNT_MARK: char = '+';

/// `entries` (oldest first) as chunks: each its key and its value.
pub(crate) fn chunks(entries: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut value = vec![CHUNK_TAG];
    let mut last = (String::new(), 0usize);
    for (key, json) in entries {
        let size = 6 + key.len() + json.len();
        if last.1 > 0 && value.len() + size > CHUNK_BYTES {
            out.push(close(&last, std::mem::replace(&mut value, vec![CHUNK_TAG])));
            last.1 = 0;
        }
        // A key is at most a few dozen bytes, an entry at most 256 KiB.
        value.extend_from_slice(&u16::try_from(key.len()).unwrap_or(u16::MAX).to_le_bytes());
        value.extend_from_slice(key.as_bytes());
        value.extend_from_slice(&u32::try_from(json.len()).unwrap_or(u32::MAX).to_le_bytes());
        value.extend_from_slice(&json);
        last = (key, last.1 + 1);
    }
    if last.1 > 0 {
        out.push(close(&last, value));
    }
    out
}

fn close((newest, count): &(String, usize), value: Vec<u8>) -> (String, Vec<u8>) {
    (format!("{newest}{COUNT_MARK}{count:06}"), value)
}

/// How many entries the chunk stored under `key` holds.
pub(crate) fn count(key: &str) -> usize {
    match key.rsplit_once(COUNT_MARK) {
        Some((_, n)) => n.parse().unwrap_or(1),
        None => 1,
    }
}

/// The entries of the chunk stored under `key`, oldest first. What does not
/// read (a value cut short) ends the chunk: the entries before it are kept.
pub(crate) fn entries(key: &str, value: Vec<u8>) -> Vec<(String, Vec<u8>)> {
    if value.first() != Some(&CHUNK_TAG) {
        return vec![(key.to_string(), value)];
    }
    let mut out = Vec::new();
    let mut rest = &value[1..];
    while !rest.is_empty() {
        let Some((key, json, after)) = frame(rest) else {
            break;
        };
        out.push((key, json));
        rest = after;
    }
    out
}

fn frame(bytes: &[u8]) -> Option<(String, Vec<u8>, &[u8])> {
    let (len, rest) = bytes.split_first_chunk::<2>()?;
    let (key, rest) = rest.split_at_checked(usize::from(u16::from_le_bytes(*len)))?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let (json, rest) = rest.split_at_checked(usize::try_from(u32::from_le_bytes(*len)).ok()?)?;
    Some((String::from_utf8(key.to_vec()).ok()?, json.to_vec(), rest))
}

/// What goes of a kind's stored chunks when entries join them.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Trim {
    /// The oldest chunks that go whole.
    pub whole: usize,
    /// How many of the oldest entries of the chunk after those go: it is
    /// written again without them.
    pub cut: usize,
}

/// What goes of the stored chunks (their keys, oldest first) when `added`
/// entries join them and `keep` are kept.
pub(crate) fn trim(stored: &[String], added: usize, keep: usize) -> Trim {
    let mut held = added;
    for (i, key) in stored.iter().enumerate().rev() {
        if held >= keep {
            return Trim { whole: i + 1, cut: 0 };
        }
        let n = count(key);
        if held + n > keep {
            return Trim {
                whole: i,
                cut: held + n - keep,
            };
        }
        held += n;
    }
    Trim { whole: 0, cut: 0 }
}

/// The chunk stored under `key` without its oldest `cut` entries: its new
/// key and value.
fn without_oldest(key: &str, value: Vec<u8>, cut: usize) -> Vec<(String, Vec<u8>)> {
    chunks(entries(key, value).into_iter().skip(cut).collect())
}

/// One kind's changes for an append, by chunk key: the stored chunks that
/// go (`None`), the one across the edge (`edge`: its value, read when
/// `trim` cuts it) written again without its oldest entries, and `fresh`'s
/// chunks.
pub(crate) fn appended(
    stored: &[String],
    trim: &Trim,
    edge: Option<Vec<u8>>,
    fresh: Vec<(String, Vec<u8>)>,
) -> Vec<(String, Option<Vec<u8>>)> {
    let mut changes: Vec<(String, Option<Vec<u8>>)> =
        stored[..trim.whole].iter().map(|k| (k.clone(), None)).collect();
    if trim.cut > 0 {
        let key = &stored[trim.whole];
        changes.push((key.clone(), None));
        let left = without_oldest(key, edge.unwrap_or_default(), trim.cut);
        changes.extend(left.into_iter().map(|(k, v)| (k, Some(v))));
    }
    changes.extend(chunks(fresh).into_iter().map(|(k, v)| (k, Some(v))));
    changes
}

/// A page of entries read chunk by chunk: those after `after`, at most `limit`.
pub(crate) struct Page {
    after: String,
    limit: usize,
    pub entries: Vec<(String, Vec<u8>)>,
}

impl Page {
    pub fn new(after: &str, limit: usize) -> Page {
        Page {
            after: after.to_string(),
            limit,
            entries: Vec::new(),
        }
    }

    /// Takes a chunk's entries after the page's start; whether the page is full.
    pub fn take(&mut self, key: &str, value: Vec<u8>) -> bool {
        for entry in entries(key, value) {
            if self.entries.len() >= self.limit {
                break;
            }
            if entry.0.as_str() > self.after.as_str() {
                self.entries.push(entry);
            }
        }
        self.full()
    }

    pub fn full(&self) -> bool {
        self.entries.len() >= self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(range: std::ops::Range<usize>, size: usize) -> Vec<(String, Vec<u8>)> {
        range.map(|i| (format!("{i:06}"), vec![b'x'; size])).collect()
    }

    #[test]
    fn entries_go_in_chunks_named_by_their_newest_key_and_count_and_read_back() {
        let all = numbered(0..10, 100);
        let stored = chunks(all.clone());
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].0, "000009+000010");
        assert_eq!(count(&stored[0].0), 10);
        assert_eq!(entries(&stored[0].0, stored[0].1.clone()), all);
        // Large entries fill chunks of at most CHUNK_BYTES.
        let big = numbered(0..9, 200 << 10);
        let stored = chunks(big.clone());
        assert_eq!(stored.len(), 5, "two entries a chunk, and the last alone");
        assert!(stored.iter().all(|(_, v)| v.len() <= CHUNK_BYTES));
        let back: Vec<_> = stored.into_iter().flat_map(|(k, v)| entries(&k, v)).collect();
        assert_eq!(back, big);
        assert!(chunks(Vec::new()).is_empty());
    }

    #[test]
    fn an_entry_stored_alone_by_an_older_release_reads_as_one() {
        let json = br#"{"at_ms":1}"#.to_vec();
        assert_eq!(count("000001"), 1);
        assert_eq!(
            entries("000001", json.clone()),
            vec![("000001".to_string(), json)]
        );
    }

    #[test]
    fn a_chunk_cut_short_keeps_the_entries_before_the_cut() {
        let (key, mut value) = chunks(numbered(0..3, 10)).remove(0);
        value.truncate(value.len() - 4);
        assert_eq!(entries(&key, value), numbered(0..2, 10));
    }

    #[test]
    fn the_oldest_chunks_go_whole_and_the_one_across_the_edge_is_cut() {
        let keys = |counts: &[usize]| -> Vec<String> {
            counts
                .iter()
                .enumerate()
                .map(|(i, n)| format!("{i:06}+{n:06}"))
                .collect()
        };
        let t = |whole, cut| Trim { whole, cut };
        assert_eq!(trim(&keys(&[4, 4, 4]), 2, 20), t(0, 0), "room for all");
        assert_eq!(
            trim(&keys(&[4, 4, 4]), 2, 10),
            t(1, 0),
            "the newer two and the new hold 10"
        );
        assert_eq!(
            trim(&keys(&[4, 4, 4]), 2, 9),
            t(1, 1),
            "the second loses its oldest"
        );
        assert_eq!(trim(&keys(&[4, 4, 4]), 12, 10), t(3, 0), "the new alone hold it");
        let singles = ["000001".to_string(), "000002".to_string()];
        assert_eq!(trim(&singles, 1, 2), t(1, 0), "older entries alone");
        let (key, value) = chunks(numbered(0..4, 1)).remove(0);
        let left = without_oldest(&key, value, 3);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].0, "000003+000001");
        assert_eq!(entries(&left[0].0, left[0].1.clone()), numbered(3..4, 1));
    }

    #[test]
    fn a_page_takes_entries_after_its_start_up_to_its_limit() {
        let mut page = Page::new("000003", 4);
        for (key, value) in chunks(numbered(0..5, 1))
            .into_iter()
            .chain(chunks(numbered(5..20, 1)))
        {
            if page.take(&key, value) {
                break;
            }
        }
        let keys: Vec<_> = page.entries.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["000004", "000005", "000006", "000007"]);
    }
}
