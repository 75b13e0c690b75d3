//! Fault injection: errors with chosen gRPC codes, added latency and hangs,
//! so reliability tests meet real failures over a real socket.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::{Code, Status};

use crate::config::Config;

const IDENTITY_CALLS: [&str; 3] = ["GetPluginInfo", "GetPluginCapabilities", "Probe"];

pub struct Faults {
    codes: Vec<(Code, f64)>,
    hang_rate: f64,
    lie_rate: f64,
    latency: Option<Duration>,
    reply_delay: Option<Duration>,
    calls: Option<HashSet<String>>,
    rng: Mutex<StdRng>,
    started: Instant,
    not_ready_for: Option<Duration>,
}

impl Faults {
    pub fn new(config: &Config) -> Self {
        let rng = match config.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        Faults {
            codes: config.faults.clone(),
            hang_rate: config.hang_rate,
            lie_rate: config.lie_rate,
            latency: config.latency,
            reply_delay: config.reply_delay,
            calls: (!config.fault_calls.is_empty()).then(|| config.fault_calls.iter().cloned().collect()),
            rng: Mutex::new(rng),
            started: Instant::now(),
            not_ready_for: config.not_ready_for,
        }
    }

    /// Runs before a call's real work: may delay it, hang it, or fail it.
    pub async fn inject(&self, call: &str) -> Result<(), Status> {
        let applies = match &self.calls {
            Some(calls) => calls.contains(call),
            None => !IDENTITY_CALLS.contains(&call),
        };
        if !applies {
            return Ok(());
        }
        if let Some(latency) = self.latency {
            tokio::time::sleep(latency).await;
        }
        let roll: f64 = self.rng.lock().unwrap_or_else(|p| p.into_inner()).random();
        if roll < self.hang_rate {
            tracing::info!(call, "injected hang");
            // The server drops this future when the caller's deadline passes or it goes away.
            std::future::pending::<()>().await;
        }
        let mut threshold = self.hang_rate;
        for (code, rate) in &self.codes {
            threshold += rate;
            if roll < threshold {
                tracing::info!(call, code = berth_proto::code::name(*code), "injected fault");
                return Err(Status::new(*code, format!("injected fault in {call}")));
            }
        }
        Ok(())
    }

    /// Whether `call` (an undo) answers OK without doing its work this time.
    pub fn lies(&self, call: &str) -> bool {
        let applies = self.calls.as_ref().is_none_or(|calls| calls.contains(call));
        if !applies || self.lie_rate <= 0.0 {
            return false;
        }
        let roll: f64 = self.rng.lock().unwrap_or_else(|p| p.into_inner()).random();
        let lies = roll < self.lie_rate;
        if lies {
            tracing::warn!(call, "answering OK without doing the work (--lie-rate)");
        }
        lies
    }

    /// Runs after a call's work is committed, before it answers.
    pub async fn reply(&self, call: &str) {
        let applies = self.calls.as_ref().is_none_or(|calls| calls.contains(call));
        if let Some(delay) = self.reply_delay.filter(|_| applies) {
            tracing::info!(call, "done; answering after the reply delay");
            tokio::time::sleep(delay).await;
        }
    }

    pub fn ready(&self) -> bool {
        self.not_ready_for.is_none_or(|d| self.started.elapsed() >= d)
    }
}
