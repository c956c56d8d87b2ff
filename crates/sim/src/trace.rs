//! The Trace: the tables every backend produces (docs/architecture.md; the contract,
//! with each column's nullability, is python/xferlab/trace.py).
//!
//! Column-oriented so that the binding can hand them to Arrow without reshaping.

/// `flows`: one row per TCP connection.
#[derive(Clone, Debug, Default)]
pub struct FlowsTable {
    pub flow_id: Vec<u32>,
    /// Pair (transfer) the flow belongs to; its streams share the sender host.
    pub pair: Vec<u32>,
    pub stream: Vec<u32>,
    pub source: Vec<String>,
    pub sink: Vec<String>,
    pub variant: Vec<String>,
    /// `transfer` (measured) or `reverse` (traffic in the opposite direction).
    pub role: Vec<String>,
    pub start_s: Vec<f64>,
    /// When the flow stopped: end of its duration, completion of its volume, or the run end.
    pub end_s: Vec<f64>,
    /// Bytes delivered in order to the receiving application.
    pub bytes: Vec<u64>,
    pub volume_bytes: Vec<Option<u64>>,
    /// Completion time (last byte delivered − start), for volume-bound flows that completed.
    pub completion_time_s: Vec<Option<f64>>,
    pub segments_sent: Vec<u64>,
    pub retransmissions: Vec<u64>,
    pub fast_recoveries: Vec<u64>,
    pub timeouts: Vec<u64>,
}

/// `goodput`: receiver-side bytes per interval per flow (iperf-like).
#[derive(Clone, Debug, Default)]
pub struct GoodputTable {
    /// Interval start, seconds.
    pub t_s: Vec<f64>,
    pub flow_id: Vec<u32>,
    pub bytes: Vec<u64>,
    pub goodput_mbps: Vec<f64>,
}

/// `link`: bottleneck-side counters per interval (GtrcNET-like).
#[derive(Clone, Debug, Default)]
pub struct LinkTable {
    pub t_s: Vec<f64>,
    /// `bottleneck` (data direction) or `reverse`.
    pub link: Vec<String>,
    /// IP bytes that left the link in the interval (headers and retransmissions included).
    pub bytes: Vec<u64>,
    pub packets: Vec<u64>,
    pub throughput_mbps: Vec<f64>,
    /// Packets dropped by the full queue.
    pub drops: Vec<u64>,
    /// Packets lost at random.
    pub losses: Vec<u64>,
    /// Packets waiting at the interval start, and at most during it.
    pub queue_pkts: Vec<u32>,
    pub queue_max_pkts: Vec<u32>,
}

/// `tcp`: sender-side state sampled per flow (Web100 / TCP_INFO-like).
#[derive(Clone, Debug, Default)]
pub struct TcpTable {
    pub t_s: Vec<f64>,
    pub flow_id: Vec<u32>,
    /// Congestion window and slow-start threshold, segments (ssthresh null until the first loss).
    pub cwnd: Vec<u32>,
    pub ssthresh: Vec<Option<u32>>,
    pub srtt_ms: Vec<Option<f64>>,
    pub rto_ms: Vec<f64>,
    pub in_flight: Vec<u32>,
    /// Cumulative retransmitted segments.
    pub retransmissions: Vec<u64>,
    /// Linux's numbering (`tcp_ca_state`): 0 open, 3 fast recovery, 4 loss (after a timeout).
    pub ca_state: Vec<u8>,
    /// The receive window the receiver last offered, segments (null: not modelled).
    pub rwnd: Vec<Option<u32>>,
    /// Cumulative segments the sender received from its peer: the ACK clock.
    pub acks_in: Vec<u64>,
}

/// Counters of the simulation itself.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub events: u64,
    /// Data segments put on the wire (retransmissions included).
    pub packets: u64,
    pub acks: u64,
    pub end_s: f64,
    pub bottleneck_drops: u64,
    pub bottleneck_losses: u64,
    pub bottleneck_max_queue: u32,
    /// Packets sent and dropped by the background ON/OFF sources.
    pub background_packets: u64,
    pub background_drops: u64,
    /// Over all flows: tail loss probes sent, segments the senders marked lost (originals
    /// and lost retransmissions, Linux `tp->lost`), and duplicates the receivers reported
    /// (D-SACK: retransmissions that were not needed).
    pub loss_probes: u64,
    pub segments_lost: u64,
    pub duplicate_segments: u64,
    /// The batch a data packet was handed to its receiver's stack in (receive coalescing),
    /// averaged over packets, over the hosts that receive flows (0 with the noise off).
    pub rx_batch_packet_mean: f64,
}

#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub flows: FlowsTable,
    pub goodput: GoodputTable,
    pub link: LinkTable,
    pub tcp: TcpTable,
    pub stats: RunStats,
}

#[cfg(feature = "arrow")]
mod arrow_impl {
    use std::sync::Arc;

    use arrow_array::{
        ArrayRef, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array, UInt8Array,
    };
    use arrow_schema::{ArrowError, Field, Schema};

    use super::*;

    /// A batch whose fields carry the contract's nullability (python/xferlab/trace.py,
    /// `TABLES`): declared per column, never inferred from whether this run has nulls.
    fn batch(cols: Vec<(&str, ArrayRef)>, nullable: &[&str]) -> Result<RecordBatch, ArrowError> {
        let fields: Vec<Field> = cols
            .iter()
            .map(|(name, a)| Field::new(*name, a.data_type().clone(), nullable.contains(name)))
            .collect();
        let arrays = cols.into_iter().map(|(_, a)| a).collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
    }

    /// Columns a producer may not know (null): the same lists as the Python contract.
    const FLOWS_NULLABLE: &[&str] = &[
        "volume_bytes",
        "completion_time",
        "segments_sent",
        "retransmissions",
        "fast_recoveries",
        "timeouts",
    ];
    const LINK_NULLABLE: &[&str] = &["drops", "losses", "queue_pkts", "queue_max_pkts"];
    const TCP_NULLABLE: &[&str] = &[
        "ssthresh",
        "srtt_ms",
        "rto_ms",
        "in_flight",
        "retransmissions",
        "ca_state",
        "rwnd",
        "acks_in",
    ];
    fn u32s(v: &[u32]) -> ArrayRef {
        Arc::new(UInt32Array::from(v.to_vec()))
    }
    fn u64s(v: &[u64]) -> ArrayRef {
        Arc::new(UInt64Array::from(v.to_vec()))
    }
    fn f64s(v: &[f64]) -> ArrayRef {
        Arc::new(Float64Array::from(v.to_vec()))
    }
    fn strs(v: &[String]) -> ArrayRef {
        Arc::new(StringArray::from_iter_values(v.iter()))
    }

    impl Trace {
        /// The four tables as Arrow record batches, named and typed as the contract says.
        pub fn to_record_batches(&self) -> Result<Vec<(&'static str, RecordBatch)>, ArrowError> {
            let f = &self.flows;
            let flows = batch(
                vec![
                    ("flow_id", u32s(&f.flow_id)),
                    ("pair", u32s(&f.pair)),
                    ("stream", u32s(&f.stream)),
                    ("source", strs(&f.source)),
                    ("sink", strs(&f.sink)),
                    ("variant", strs(&f.variant)),
                    ("role", strs(&f.role)),
                    ("start", f64s(&f.start_s)),
                    ("end", f64s(&f.end_s)),
                    ("bytes", u64s(&f.bytes)),
                    (
                        "volume_bytes",
                        Arc::new(UInt64Array::from(f.volume_bytes.clone())),
                    ),
                    (
                        "completion_time",
                        Arc::new(Float64Array::from(f.completion_time_s.clone())),
                    ),
                    ("segments_sent", u64s(&f.segments_sent)),
                    ("retransmissions", u64s(&f.retransmissions)),
                    ("fast_recoveries", u64s(&f.fast_recoveries)),
                    ("timeouts", u64s(&f.timeouts)),
                ],
                FLOWS_NULLABLE,
            )?;
            let g = &self.goodput;
            let goodput = batch(
                vec![
                    ("t", f64s(&g.t_s)),
                    ("flow_id", u32s(&g.flow_id)),
                    ("bytes", u64s(&g.bytes)),
                    ("goodput_mbps", f64s(&g.goodput_mbps)),
                ],
                &[],
            )?;
            let l = &self.link;
            let link = batch(
                vec![
                    ("t", f64s(&l.t_s)),
                    ("link", strs(&l.link)),
                    ("bytes", u64s(&l.bytes)),
                    ("packets", u64s(&l.packets)),
                    ("throughput_mbps", f64s(&l.throughput_mbps)),
                    ("drops", u64s(&l.drops)),
                    ("losses", u64s(&l.losses)),
                    ("queue_pkts", u32s(&l.queue_pkts)),
                    ("queue_max_pkts", u32s(&l.queue_max_pkts)),
                ],
                LINK_NULLABLE,
            )?;
            let t = &self.tcp;
            let tcp = batch(
                vec![
                    ("t", f64s(&t.t_s)),
                    ("flow_id", u32s(&t.flow_id)),
                    ("cwnd", u32s(&t.cwnd)),
                    ("ssthresh", Arc::new(UInt32Array::from(t.ssthresh.clone()))),
                    ("srtt_ms", Arc::new(Float64Array::from(t.srtt_ms.clone()))),
                    ("rto_ms", f64s(&t.rto_ms)),
                    ("in_flight", u32s(&t.in_flight)),
                    ("retransmissions", u64s(&t.retransmissions)),
                    ("ca_state", Arc::new(UInt8Array::from(t.ca_state.clone()))),
                    ("rwnd", Arc::new(UInt32Array::from(t.rwnd.clone()))),
                    ("acks_in", u64s(&t.acks_in)),
                ],
                TCP_NULLABLE,
            )?;
            Ok(vec![
                ("flows", flows),
                ("goodput", goodput),
                ("link", link),
                ("tcp", tcp),
            ])
        }
    }
}
