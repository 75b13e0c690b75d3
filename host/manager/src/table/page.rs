//! A page of volumes in name order: the names index walked under the
//! table's lock, the records held as stored decoded after it is let go.

use std::ops::Bound;
use std::sync::Arc;

use berth_model::{Namespace, VolumeRecord};

use super::records::Text;
use super::{PAGE_SCAN, Pages, VolumeTable, Within};

/// A volume a page looked at under the lock.
enum Seen {
    /// Held decoded, and `matches` took it.
    Taken(Box<VolumeRecord>),
    /// Held decoded, and `matches` did not take it.
    Passed,
    /// Held as stored: decoded and matched once the lock is let go.
    Stored(Arc<Text>),
}

impl VolumeTable {
    /// Up to `max` volumes (at least one) after `after` in the namespaces
    /// `pages` names, and the token to continue after when there are more:
    /// a page costs its own volumes, whatever the table holds (and holds
    /// the table's lock for no decoding: at 100,000 volumes held as stored,
    /// a filter that matched none held it for a quarter of a second). Within one
    /// namespace, names in order and a volume's name as the token; across
    /// several, namespace then name, the token `namespace/name` (a
    /// namespace never holds a '/').
    pub fn page(
        &self,
        pages: Pages<'_>,
        after: &str,
        max: usize,
        matches: &dyn Fn(&VolumeRecord) -> bool,
    ) -> (Vec<VolumeRecord>, Option<String>) {
        let max = max.max(1);
        let mut page = Vec::new();
        let (mut after, mut budget) = (after.to_string(), PAGE_SCAN);
        // In parts: each looks, under the lock, at no more volumes held as
        // stored than the page still needs, and decodes them after it.
        loop {
            let part = self.part(pages, &after, max - page.len(), budget, matches);
            budget -= part.seen.len();
            let looked_at = part.seen.len();
            for (i, one) in part.seen.into_iter().enumerate() {
                let r = match one {
                    Seen::Taken(r) => *r,
                    Seen::Passed => continue,
                    // A record that does not decode is left out (and logged).
                    Seen::Stored(text) => match text.decode() {
                        Some(r) if matches(&r) => r,
                        _ => continue,
                    },
                };
                page.push(r);
                if page.len() == max {
                    let more = i + 1 < looked_at || part.more;
                    let next =
                        more.then(|| token(pages, &page[max - 1].spec.namespace, &page[max - 1].spec.name));
                    return (page, next);
                }
            }
            // A filter that matches few is answered in parts too: a page
            // looks at a bounded number of volumes, and the token says
            // where the next one starts.
            match part.last {
                Some(last) if part.more && budget > 0 => after = last,
                last => return (page, last.filter(|_| part.more)),
            }
        }
    }

    /// Looks at the volumes after `after`, under the lock: until `need`
    /// are taken or held as stored, or `budget` are looked at.
    fn part(
        &self,
        pages: Pages<'_>,
        after: &str,
        need: usize,
        budget: usize,
        matches: &dyn Fn(&VolumeRecord) -> bool,
    ) -> Part {
        let (after_ns, after_name, within): (&str, &str, &Within<'_>) = match pages {
            Pages::One(ns) => (ns, after, &move |n: &Namespace| n.as_str() == ns),
            Pages::Every(within) => {
                let (ns, name) = after.split_once('/').unwrap_or((after, ""));
                (ns, name, within)
            }
        };
        let s = self.lock();
        let mut ids = s
            .names
            .range::<str, _>((Bound::Included(after_ns), Bound::Unbounded))
            .filter(|(ns, _)| within(ns))
            .flat_map(|(ns, names)| {
                let from = match ns.as_str() == after_ns && !after_name.is_empty() {
                    true => Bound::Excluded(after_name),
                    false => Bound::Unbounded,
                };
                names
                    .range::<str, _>((from, Bound::Unbounded))
                    .map(move |(name, id)| (ns, name, id))
            });
        let (mut seen, mut candidates, mut looked) = (Vec::new(), 0, None);
        while seen.len() < budget && candidates < need {
            let Some((ns, name, id)) = ids.next() else {
                looked = None;
                break;
            };
            looked = Some((ns, name));
            let one = match s.volumes.decoded(id) {
                Some(r) if matches(r) => Seen::Taken(Box::new(r.clone())),
                Some(_) => Seen::Passed,
                None => s.volumes.stored_text(id).map_or(Seen::Passed, Seen::Stored),
            };
            candidates += usize::from(!matches!(one, Seen::Passed));
            seen.push(one);
        }
        let more = looked.is_some() && ids.next().is_some();
        Part {
            seen,
            last: looked.map(|(ns, name)| token(pages, ns, name)),
            more,
        }
    }
}

/// What one part of a page looked at, the token after its last volume,
/// and whether there are volumes after it.
struct Part {
    seen: Vec<Seen>,
    last: Option<String>,
    more: bool,
}

/// The token a page goes on after, at `name` in `namespace`.
fn token(pages: Pages<'_>, namespace: &Namespace, name: &str) -> String {
    match pages {
        Pages::One(_) => name.to_string(),
        Pages::Every(_) => format!("{namespace}/{name}"),
    }
}
