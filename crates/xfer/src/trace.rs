//! `--json` output in the project's Trace layout (tables run, flows,
//! goodput, tcp as lists of row objects).

use crate::client::SendOpts;
use crate::proto::{Done, Mode, Sink};
use serde::Serialize;

#[derive(Serialize)]
pub struct Trace {
    pub run: Run,
    pub flows: Vec<FlowRow>,
    pub goodput: Vec<GoodputRow>,
    pub tcp: Vec<TcpRow>,
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

#[derive(Serialize, Clone)]
pub struct TcpRow {
    pub t: f64,
    pub flow_id: u32,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub srtt_ms: f64,
    pub retransmissions: u32,
}

#[allow(clippy::too_many_arguments)]
pub fn build(
    o: &SendOpts,
    d: &Done,
    mode: Mode,
    rate: Option<u64>,
    resumed: u64,
    completion: f64,
    start_unix: f64,
    e2e: Option<String>,
    tcp: Vec<TcpRow>,
) -> Trace {
    let source = match &o.src {
        crate::client::SrcSpec::Path(p) => p.display().to_string(),
        crate::client::SrcSpec::Stdin => "-".into(),
        crate::client::SrcSpec::Mem(n) => format!("mem:{n}"),
        crate::client::SrcSpec::Cmd(c) => format!("cmd:{c}"),
        crate::client::SrcSpec::Pull(_) => "pull".into(),
    };
    let dest = match &o.sink {
        Sink::Path(p) => format!("{}:{}:/{}", o.host, o.port, p),
        Sink::Cmd(c) => format!("{}:{} cmd:{c}", o.host, o.port),
        Sink::Discard => format!("{}:{} discard", o.host, o.port),
    };
    let flows = d
        .flows
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
        .collect();
    // Samples carry the end of their interval; the first starts at 0.
    let mut prev_t = vec![0.0f64; o.streams as usize];
    let goodput = d
        .goodput
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
        .collect();
    Trace {
        run: Run {
            tool: "xfer",
            version: env!("CARGO_PKG_VERSION"),
            args: o.args.clone(),
            start_time: start_unix,
            mode: mode.name(),
            streams: o.streams,
            rate,
            bytes: d.bytes,
            total_size: d.total_size,
            resumed_bytes: resumed,
            completion_time: completion,
            receiver_elapsed: d.elapsed,
            hash: o
                .hash
                .then_some("xxh3-64 per chunk, sum of xxh3-128 end to end"),
            e2e_hash: e2e,
            interval: o.interval.as_secs_f64(),
        },
        flows,
        goodput,
        tcp,
    }
}
