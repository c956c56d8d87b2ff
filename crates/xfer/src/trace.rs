//! `--json` output in the project's Trace layout (tables run, flows,
//! goodput, tcp as lists of row objects).

use crate::limiter::{Limiter, RateChange};
use crate::monitor::TcpRow;
use crate::proto::{Done, Sink};
use crate::session::{Outcome, SendOpts};
use crate::signal::Sent;
use crate::start::StartRecord;
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::fs::File;
use std::io::Write;

#[derive(Serialize)]
pub struct Trace {
    pub run: Run,
    pub flows: Vec<FlowRow>,
    pub goodput: Vec<GoodputRow>,
    pub tcp: Vec<TcpRow>,
    /// Each step of the rate plan as it was applied (empty: unlimited).
    pub rate_changes: Vec<RateChange>,
    /// The goodput achieved during each step of the plan.
    pub segments: Vec<SegmentRow>,
    /// `--streams auto`: each tick the search measured (time, streams,
    /// goodput, loss, utility) and the count it ran next.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub streams_auto: Vec<crate::autotune::AutoStep>,
}

#[derive(Serialize)]
pub struct Run {
    pub tool: &'static str,
    pub version: &'static str,
    pub args: Vec<String>,
    /// Unix time (seconds) when the command started.
    pub start_time: f64,
    pub mode: &'static str,
    pub streams: u32,
    /// Requested aggregate goodput in bit/s (from --rate or --deadline).
    pub rate: Option<u64>,
    pub bytes: u64,
    pub total_size: u64,
    pub resumed_bytes: u64,
    pub completion_time: f64,
    pub receiver_elapsed: f64,
    pub hash: Option<&'static str>,
    pub e2e_hash: Option<String>,
    pub interval: f64,
    /// Whether the connections were encrypted (Noise, see docs/xfer.md).
    pub encrypted: bool,
    /// How the rate was enforced: pacing, sleep or cwnd (null: unlimited).
    pub limiter: Option<&'static str>,
    /// The sleep limiter's timer frequency.
    pub timer_hz: Option<u32>,
    /// The plan followed: goodput from `t` seconds after the data start on.
    pub profile: Option<Vec<StepRow>>,
    /// When the data was planned to start and when it did (Unix times).
    pub start: Option<StartRecord>,
    /// Unix time the receiver's verdict arrived.
    pub end_time: f64,
    /// The sender's data start in the receiver's session time (the origin
    /// of `flows` and `goodput`): t − data_start_receiver is data time.
    pub data_start_receiver: Option<f64>,
    /// The start signal sent to the next transfer (`--signal-done`).
    pub signal_done: Option<Sent>,
}

#[derive(Serialize)]
pub struct StepRow {
    pub t: f64,
    pub rate_bps: u64,
}

/// A step of the plan and what the receiver got during it. Times are
/// seconds after the data start (sender's clock; receiver samples are moved
/// onto it with `data_start_receiver`).
#[derive(Serialize, Debug)]
pub struct SegmentRow {
    pub step: usize,
    pub start: f64,
    /// Planned end (null: the last step, open-ended).
    pub end: Option<f64>,
    /// Planned goodput, bit/s (0: paused).
    pub rate_bps: u64,
    /// Where the step ended in fact: its planned end or the last byte's
    /// arrival, whichever came first (null: never reached).
    pub actual_end: Option<f64>,
    /// Payload bytes received during the step.
    pub bytes: u64,
    /// bytes × 8 / (actual_end − start).
    pub goodput_bps: Option<f64>,
    /// (goodput − rate) / rate (null for a pause).
    pub error: Option<f64>,
}

#[derive(Serialize)]
pub struct FlowRow {
    pub flow_id: u32,
    pub source: String,
    pub sink: String,
    pub stream: u32,
    pub variant: &'static str,
    pub start: f64,
    pub end: f64,
    pub bytes: u64,
    pub completion_time: f64,
}

#[derive(Serialize)]
pub struct GoodputRow {
    pub t: f64,
    pub flow_id: u32,
    pub bytes: u64,
    pub goodput_mbps: f64,
}

/// The trace of a finished send. `start_unix`: when the command started.
pub fn build(
    o: &SendOpts,
    out: &Outcome,
    start_unix: f64,
    start: Option<&StartRecord>,
    signal_done: Option<&Sent>,
) -> Trace {
    let d = &out.done;
    let goodput = goodput_rows(o, d);
    let plan = out.plan.as_ref();
    let segments = plan
        .map(|p| segment_rows(&p.profile, d, &goodput))
        .unwrap_or_default();
    Trace {
        run: Run {
            tool: "xfer",
            version: env!("CARGO_PKG_VERSION"),
            args: o.args.clone(),
            start_time: start_unix,
            mode: out.mode.name(),
            streams: out.streams,
            rate: out.rate_bps,
            bytes: d.bytes,
            total_size: d.total_size,
            resumed_bytes: out.resumed,
            completion_time: out.elapsed,
            receiver_elapsed: d.elapsed,
            hash: o
                .hash
                .then_some("xxh3-64 per chunk, sum of xxh3-128 end to end"),
            e2e_hash: out.e2e.clone(),
            interval: o.interval.as_secs_f64(),
            encrypted: out.encrypted,
            limiter: plan.map(|p| p.limiter.name()),
            timer_hz: plan
                .filter(|p| p.limiter == Limiter::Sleep)
                .map(|p| p.timer_hz),
            profile: plan.map(|p| {
                p.profile
                    .steps()
                    .iter()
                    .map(|s| StepRow {
                        t: s.at,
                        rate_bps: s.rate_bps,
                    })
                    .collect()
            }),
            start: start.cloned(),
            end_time: out.end_unix,
            data_start_receiver: d.data_start,
            signal_done: signal_done.cloned(),
        },
        // Streams announced but never opened (`--streams auto`) carried nothing.
        flows: flow_rows(o, d, out.mode)
            .into_iter()
            .take(out.streams as usize)
            .collect(),
        goodput,
        tcp: out.tcp.clone(),
        rate_changes: out.changes.clone(),
        segments,
        streams_auto: out.auto_steps.clone(),
    }
}

fn flow_rows(o: &SendOpts, d: &Done, mode: crate::proto::Mode) -> Vec<FlowRow> {
    let source = match &o.src {
        crate::session::SrcSpec::Path(p) => p.display().to_string(),
        crate::session::SrcSpec::Stdin => "-".into(),
        crate::session::SrcSpec::Mem(n) => format!("mem:{n}"),
        crate::session::SrcSpec::Cmd(c) => format!("cmd:{c}"),
        crate::session::SrcSpec::Pull(_) => "pull".into(),
    };
    let dest = match &o.sink {
        Sink::Path(p) => format!("{}:{}:/{}", o.host, o.port, p),
        Sink::Cmd(c) => format!("{}:{} cmd:{c}", o.host, o.port),
        Sink::Discard => format!("{}:{} discard", o.host, o.port),
    };
    d.flows
        .iter()
        .map(|f| FlowRow {
            flow_id: f.stream,
            source: source.clone(),
            sink: dest.clone(),
            stream: f.stream,
            variant: mode.name(),
            start: f.start,
            end: f.end,
            bytes: f.bytes,
            completion_time: f.end - f.start,
        })
        .collect()
}

fn goodput_rows(o: &SendOpts, d: &Done) -> Vec<GoodputRow> {
    // Samples carry the end of their interval; the first starts at 0.
    let mut prev_t = vec![0.0f64; o.streams as usize];
    d.goodput
        .iter()
        .map(|g| {
            let i = g.stream as usize;
            let dt = if i < prev_t.len() {
                g.t - prev_t[i]
            } else {
                o.interval.as_secs_f64()
            };
            if i < prev_t.len() {
                prev_t[i] = g.t;
            }
            GoodputRow {
                t: g.t,
                flow_id: g.stream,
                bytes: g.bytes,
                goodput_mbps: if dt > 0.0 {
                    g.bytes as f64 * 8.0 / dt / 1e6
                } else {
                    0.0
                },
            }
        })
        .collect()
}

/// The plan's steps against what the receiver counted. The receiver's
/// samples are moved onto data time with its record of the data start (an
/// older server has none: its first data byte stands in).
fn segment_rows(
    profile: &crate::profile::Profile,
    d: &Done,
    goodput: &[GoodputRow],
) -> Vec<SegmentRow> {
    let first_byte = d
        .flows
        .iter()
        .map(|f| f.start)
        .fold(f64::INFINITY, f64::min);
    let origin = d.data_start.unwrap_or(if first_byte.is_finite() {
        first_byte
    } else {
        0.0
    });
    let data_end = d.flows.iter().map(|f| f.end).fold(0.0, f64::max) - origin;
    let mut prev = std::collections::HashMap::new();
    let spans: Vec<(f64, f64, u64)> = goodput
        .iter()
        .map(|g| {
            let a = prev.insert(g.flow_id, g.t).unwrap_or(0.0);
            (a - origin, g.t - origin, g.bytes)
        })
        .collect();
    let bytes = profile.bytes_per_step(&spans);
    profile
        .steps()
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let end = profile.end_of(k);
            let reached = s.at < data_end;
            let actual_end = reached.then(|| end.unwrap_or(f64::INFINITY).min(data_end));
            let goodput_bps = actual_end
                .filter(|e| *e > s.at)
                .map(|e| bytes[k] * 8.0 / (e - s.at));
            SegmentRow {
                step: k,
                start: s.at,
                end,
                rate_bps: s.rate_bps,
                actual_end,
                bytes: bytes[k].round() as u64,
                goodput_bps,
                error: goodput_bps
                    .filter(|_| s.rate_bps > 0)
                    .map(|g| (g - s.rate_bps as f64) / s.rate_bps as f64),
            }
        })
        .collect()
}

/// The `--json` trace, written beside its destination and renamed into
/// place when complete. Created before the transfer, so a destination that
/// cannot be written fails first.
pub(crate) struct TraceFile {
    tmp: std::path::PathBuf,
    dest: std::path::PathBuf,
    file: Option<File>,
}

impl TraceFile {
    pub(crate) fn create(dest: &std::path::Path) -> Result<TraceFile> {
        let name = dest
            .file_name()
            .ok_or_else(|| anyhow!("--json {} names no file", dest.display()))?;
        if dest.is_dir() {
            bail!("--json {} is a directory", dest.display());
        }
        let tmp = dest.with_file_name(format!(
            ".{}.xfer-tmp{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        // A new file of our own: never through a symlink planted at its name.
        let file = std::os::unix::fs::OpenOptionsExt::custom_flags(
            File::options().write(true).create_new(true),
            libc::O_NOFOLLOW,
        )
        .open(&tmp)
        .with_context(|| format!("cannot write the trace {}", dest.display()))?;
        Ok(TraceFile {
            tmp,
            dest: dest.to_path_buf(),
            file: Some(file),
        })
    }

    pub(crate) fn commit(&mut self, t: &Trace) -> Result<()> {
        let f = self.file.take().unwrap();
        let mut w = std::io::BufWriter::new(f);
        serde_json::to_writer_pretty(&mut w, t)?;
        w.flush()
            .with_context(|| format!("writing the trace {}", self.dest.display()))?;
        std::fs::rename(&self.tmp, &self.dest)
            .with_context(|| format!("writing the trace {}", self.dest.display()))
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
