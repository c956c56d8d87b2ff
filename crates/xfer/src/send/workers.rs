//! The sender threads, one per data connection, and what they share: the
//! same for a push (the client's workers) and a pull (the server's).

use super::share::{Claims, Shared};
use super::source::StreamSrc;
use super::stream::stream_sender;
use super::stripe::{hash_skipped, stripe_sender, StripeCtx};
use crate::chunkset;
use crate::conn::Conn;
use crate::limiter::{Gate, RateControl};
use crate::proto::E2e;
use anyhow::Result;
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// A sender (or reader) thread; it returns its share of the end-to-end digest.
pub(crate) type Worker = std::thread::JoinHandle<Result<E2e>>;

/// Starts the sender of stream `id` on its connection (`--streams auto`).
pub(crate) type Spawner = Box<dyn Fn(u32, Arc<Conn>) -> Worker + Send>;

/// What the sender threads share.
pub(crate) struct Workers<'a> {
    pub chunk: u32,
    pub streams: u32,
    pub hash: bool,
    /// Test hook (`--fault-stall-after`), see `frame::stall_if_due`.
    pub stall_after: Option<u64>,
    /// Bytes sent by all streams together.
    pub sent: &'a Arc<AtomicU64>,
    pub abort: &'a Arc<AtomicBool>,
    /// Set when senders must ask before each piece (pauses, the sleep limiter).
    pub gates: Option<&'a Arc<RateControl>>,
}

impl Workers<'_> {
    fn gate(&self) -> Option<Gate> {
        self.gates.map(Gate::new)
    }

    /// Stripe mode: the missing chunks in one contiguous range per stream,
    /// read from `file` (None: zeros, the `mem:` source). Returns the
    /// readers (hashing what the receiver already has, so the end-to-end
    /// digest also vouches for the resumed part) and the senders.
    pub(crate) fn spawn_stripe(
        &self,
        file: Option<Arc<File>>,
        size: u64,
        have: &[(u64, u64)],
        conns: Vec<Arc<Conn>>,
    ) -> (Vec<Worker>, Vec<Worker>) {
        let (missing, readers) = self.stripe_plan(&file, size, have);
        let groups = chunkset::split(&missing, self.streams as usize);
        let senders = conns
            .into_iter()
            .zip(groups)
            .map(|(c, g)| {
                let ctx = self.stripe_ctx(&file, size);
                let chunks = g.into_iter().flat_map(|(a, b)| a..b);
                std::thread::spawn(move || stripe_sender(c, chunks, ctx))
            })
            .collect();
        (readers, senders)
    }

    /// Stripe mode with `--streams auto`: the missing chunks in one queue
    /// that the active streams share (see `share`). Returns the readers, the
    /// queue, and what starts the sender of stream `id` on its connection
    /// (the first ones now, later ones as the search adds streams).
    pub(crate) fn spawn_shared(
        &self,
        file: Option<Arc<File>>,
        size: u64,
        have: &[(u64, u64)],
        active: u32,
    ) -> (Vec<Worker>, Arc<Shared>, Spawner) {
        let (missing, readers) = self.stripe_plan(&file, size, have);
        let shared = Shared::new(&missing, active, self.abort.clone());
        let proto = self.stripe_ctx(&file, size);
        let q = shared.clone();
        let spawner: Spawner = Box::new(move |id, c| {
            let ctx = StripeCtx {
                file: proto.file.clone(),
                zero: proto.zero.clone(),
                sent: proto.sent.clone(),
                abort: proto.abort.clone(),
                gate: None,
                ..proto
            };
            let chunks = Claims {
                shared: q.clone(),
                id,
            };
            std::thread::spawn(move || stripe_sender(c, chunks, ctx))
        });
        (readers, shared, spawner)
    }

    /// The chunks still missing, and the reader that hashes the others.
    fn stripe_plan(
        &self,
        file: &Option<Arc<File>>,
        size: u64,
        have: &[(u64, u64)],
    ) -> (Vec<(u64, u64)>, Vec<Worker>) {
        let chunk = self.chunk as u64;
        let n = size.div_ceil(chunk);
        let missing = chunkset::missing(have, n);
        let mut readers = Vec::new();
        let skipped = chunkset::missing(&missing, n);
        if self.hash && !skipped.is_empty() {
            let (f, z) = (file.clone(), self.zero(file));
            readers.push(std::thread::spawn(move || {
                hash_skipped(&skipped, f, z, chunk, size)
            }));
        }
        (missing, readers)
    }

    /// The zeros of the `mem:` source (None: a file).
    fn zero(&self, file: &Option<Arc<File>>) -> Option<Arc<Vec<u8>>> {
        match file {
            Some(_) => None,
            None => Some(Arc::new(vec![0u8; self.chunk as usize])),
        }
    }

    fn stripe_ctx(&self, file: &Option<Arc<File>>, size: u64) -> StripeCtx {
        StripeCtx {
            file: file.clone(),
            zero: self.zero(file),
            chunk: self.chunk as u64,
            size,
            hash: self.hash,
            sent: self.sent.clone(),
            abort: self.abort.clone(),
            stall_after: self.stall_after,
            gate: self.gate(),
        }
    }

    /// Stream mode: every stream takes the next chunk of the shared source.
    pub(crate) fn spawn_stream(&self, src: Arc<StreamSrc>, conns: Vec<Arc<Conn>>) -> Vec<Worker> {
        conns
            .into_iter()
            .map(|c| {
                let (src, sent) = (src.clone(), self.sent.clone());
                let (stall, gate) = (self.stall_after, self.gate());
                std::thread::spawn(move || stream_sender(c, src, sent, stall, gate))
            })
            .collect()
    }
}
