//! The reconciler's work queue: volume ids, each queued at most once and
//! handled by at most one worker at a time (CSI allows one operation in flight
//! per volume). A volume queued while a worker has it runs again afterwards.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use tokio::sync::Notify;

#[derive(Default)]
struct State {
    ready: VecDeque<String>,
    queued: HashSet<String>,
    running: HashSet<String>,
    again: HashSet<String>,
    /// The most queued at once since the queue was last empty.
    peak: usize,
}

impl State {
    /// After a large backlog (a restart's every volume), the empty queue
    /// and the memory the backlog's work freed are given back.
    fn settle(&mut self) {
        if self.peak < berth_metrics::allocator::TRIM_FROM
            || !self.ready.is_empty()
            || !self.running.is_empty()
        {
            return;
        }
        self.peak = 0;
        self.ready.shrink_to_fit();
        self.queued.shrink_to_fit();
        self.running.shrink_to_fit();
        self.again.shrink_to_fit();
        berth_metrics::allocator::release_freed();
    }
}

#[derive(Default)]
pub struct Queue {
    state: Mutex<State>,
    notify: Notify,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn push(&self, id: &str) {
        let mut s = self.lock();
        if s.running.contains(id) {
            s.again.insert(id.to_string());
        } else if s.queued.insert(id.to_string()) {
            s.ready.push_back(id.to_string());
            s.peak = s.peak.max(s.ready.len());
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Queues every one of `ids` (a start's every volume), under one lock,
    /// with room made once.
    pub fn push_all(&self, ids: Vec<String>) {
        let mut s = self.lock();
        s.ready.reserve(ids.len());
        s.queued.reserve(ids.len());
        for id in ids {
            if s.running.contains(&id) {
                s.again.insert(id);
            } else if s.queued.insert(id.clone()) {
                s.ready.push_back(id);
            }
        }
        s.peak = s.peak.max(s.ready.len());
        let any = !s.ready.is_empty();
        drop(s);
        if any {
            self.notify.notify_one();
        }
    }

    /// The next volume to work on; waits while there is none.
    pub async fn take(&self) -> String {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.lock();
                if let Some(id) = s.ready.pop_front() {
                    s.queued.remove(&id);
                    s.running.insert(id.clone());
                    if !s.ready.is_empty() {
                        self.notify.notify_one();
                    }
                    return id;
                }
            }
            notified.await;
        }
    }

    /// A worker is done with `id`; requeues it if it was pushed meanwhile.
    pub fn done(&self, id: &str) {
        let again = {
            let mut s = self.lock();
            s.running.remove(id);
            let again = s.again.remove(id);
            if !again {
                s.settle();
            }
            again
        };
        if again {
            self.push(id);
        }
    }

    pub fn len(&self) -> usize {
        let (ready, running) = self.depth();
        ready + running
    }

    /// Volumes waiting for a worker, and volumes a worker is on.
    pub fn depth(&self) -> (usize, usize) {
        let s = self.lock();
        (s.ready.len(), s.running.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_worker_per_volume_and_no_lost_wakeups() {
        let q = Queue::default();
        q.push("a");
        q.push("a");
        q.push("b");
        assert_eq!(q.take().await, "a");
        q.push("a"); // while running: comes back after done
        assert_eq!(q.take().await, "b");
        q.done("b");
        q.done("a");
        assert_eq!(q.take().await, "a");
        q.done("a");
        assert_eq!(q.len(), 0);
    }
}
