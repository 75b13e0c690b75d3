//! Gauges of current state, read at scrape time from whoever holds it (the
//! volume manager of the current term, an agent) rather than kept in step
//! on every change.

use std::sync::{Mutex, Weak};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

/// Something that can report gauges of its current state.
pub trait Observed: Send + Sync {
    fn observe(&self, out: &mut Gauges);
}

/// Gauges gathered for one scrape.
#[derive(Default)]
pub struct Gauges {
    families: Vec<GaugeFamily>,
}

struct GaugeFamily {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, i64)>,
}

impl Gauges {
    /// Adds one sample; samples of one name share its first help text.
    pub fn gauge(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: Vec<(&'static str, String)>,
        value: i64,
    ) {
        let family = match self.families.iter_mut().position(|f| f.name == name) {
            Some(i) => &mut self.families[i],
            None => {
                self.families.push(GaugeFamily {
                    name,
                    help,
                    samples: vec![],
                });
                self.families.last_mut().expect("just pushed")
            }
        };
        family.samples.push((labels, value));
    }
}

/// The registered sources, each under a key a newer source of the same
/// kind replaces it by (the next term's manager replaces the last's).
#[derive(Default)]
pub struct Live {
    sources: Mutex<Vec<(&'static str, Weak<dyn Observed>)>>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live")
    }
}

impl Live {
    /// Reads gauges from `source` on every scrape while it lives.
    pub fn set(&self, key: &'static str, source: Weak<dyn Observed>) {
        let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        sources.retain(|(k, s)| *k != key && s.strong_count() > 0);
        sources.push((key, source));
    }

    fn gather(&self) -> Gauges {
        let sources: Vec<_> = self
            .sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(_, s)| s.upgrade())
            .collect();
        let mut gauges = Gauges::default();
        for s in sources {
            s.observe(&mut gauges);
        }
        gauges
    }
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in self.gather().families {
            let mut metric = encoder.encode_descriptor(family.name, family.help, None, MetricType::Gauge)?;
            for (labels, value) in &family.samples {
                if labels.is_empty() {
                    metric.encode_gauge(value)?;
                } else {
                    metric.encode_family(labels)?.encode_gauge(value)?;
                }
            }
        }
        Ok(())
    }
}
