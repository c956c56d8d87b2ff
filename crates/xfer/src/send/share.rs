//! `--streams auto` in stripe mode: the missing chunks in one shared queue.
//! Stream `id` takes the next chunk while `id < active`; a stream beyond it
//! is parked (its connection stays open and idle) until the count grows
//! again or the queue runs dry, when every stream sends its END frame.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

pub(crate) struct Shared {
    inner: Mutex<Queue>,
    cv: Condvar,
    abort: Arc<AtomicBool>,
}

struct Queue {
    ranges: VecDeque<(u64, u64)>,
    active: u32,
}

impl Shared {
    pub(crate) fn new(missing: &[(u64, u64)], active: u32, abort: Arc<AtomicBool>) -> Arc<Shared> {
        Arc::new(Shared {
            inner: Mutex::new(Queue {
                ranges: missing.iter().copied().filter(|r| r.0 < r.1).collect(),
                active,
            }),
            cv: Condvar::new(),
            abort,
        })
    }

    /// Streams `0..n` take chunks from now on; the others park after the
    /// chunk they are sending.
    pub(crate) fn set_active(&self, n: u32) {
        self.inner.lock().unwrap().active = n;
        self.cv.notify_all();
    }

    /// Every chunk has been taken.
    pub(crate) fn exhausted(&self) -> bool {
        self.inner.lock().unwrap().ranges.is_empty()
    }

    /// The next chunk for stream `id` (None: none left, or aborted).
    fn take(&self, id: u32) -> Option<u64> {
        let mut q = self.inner.lock().unwrap();
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return None;
            }
            let active = id < q.active;
            let front = q.ranges.front_mut()?;
            if active {
                let i = front.0;
                front.0 += 1;
                if front.0 == front.1 {
                    q.ranges.pop_front();
                }
                if q.ranges.is_empty() {
                    // Parked streams end now.
                    self.cv.notify_all();
                }
                return Some(i);
            }
            // The timeout only bounds the wait for an abort.
            q = self
                .cv
                .wait_timeout(q, Duration::from_millis(100))
                .unwrap()
                .0;
        }
    }
}

/// The chunks stream `id` sends, taken one at a time.
pub(crate) struct Claims {
    pub shared: Arc<Shared>,
    pub id: u32,
}

impl Iterator for Claims {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        self.shared.take(self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_streams_share_every_chunk_once_and_parked_ones_end() {
        let abort = Arc::new(AtomicBool::new(false));
        let s = Shared::new(&[(0, 3), (5, 9)], 2, abort);
        let parked = {
            let s = s.clone();
            std::thread::spawn(move || Claims { shared: s, id: 2 }.count())
        };
        let mut got: Vec<u64> = Claims {
            shared: s.clone(),
            id: 0,
        }
        .take(4)
        .collect();
        got.extend(Claims {
            shared: s.clone(),
            id: 1,
        });
        got.sort();
        assert_eq!(got, vec![0, 1, 2, 5, 6, 7, 8]);
        assert!(s.exhausted());
        assert_eq!(parked.join().unwrap(), 0);
    }
}
