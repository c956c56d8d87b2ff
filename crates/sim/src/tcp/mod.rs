//! TCP endpoints, sans-IO: they are given `now` and packets, and return packets to send.
//!
//! Sequence numbers count segments (every segment carries `mss` bytes except the last of a
//! volume-bound flow), as Linux counts its window in packets.
//!
//! The sender follows Linux 6.x (`net/ipv4/tcp_output.c`, `tcp_input.c`, `tcp_recovery.c`,
//! `tcp_rate.c`), one piece per file:
//!
//! | file          | what                                                        | Linux                                   |
//! |---------------|-------------------------------------------------------------|-----------------------------------------|
//! | `board.rs`    | per-segment scoreboard, transmission-ordered list           | `TCP_SKB_CB()->sacked`, `tsorted_sent_queue` |
//! | `rack.rs`     | RACK-TLP loss detection (RFC 8985)                          | `tcp_recovery.c`                        |
//! | `rate.rs`     | delivery-rate sampling                                      | `tcp_rate.c`                            |
//! | `sender.rs`   | send path (TSQ, pacing, cwnd validation), ACK path, recovery | `tcp_write_xmit`, `tcp_ack`, `tcp_fastretrans_alert` |
//! | `timers.rs`   | the retransmission timer (RTO, loss probe, reorder timeout) | `tcp_timer.c`, `tcp_schedule_loss_probe` |
//! | `tsq.rs`      | TSQ's limit in segments, kept between ACKs                  | `tcp_small_queue_check`                 |
//! | `receiver.rs` | reassembly, delayed ACKs, SACK blocks, SACK compression      | `tcp_data_queue`, `__tcp_ack_snd_check` |
//! | `rwnd.rs`     | the receive window and its autotuning (DRS)                 | `tcp_select_window`, `tcp_rcv_space_adjust` |

mod board;
mod rack;
mod rate;
mod receiver;
mod rwnd;
mod sender;
mod timers;
mod tsq;

pub use rate::RateSample;
pub use receiver::{Received, Receiver};
pub use rwnd::RMEM_DEFAULT;
pub use sender::{Poll, Sender, SenderStats};
pub use timers::TimerKind;

use crate::time::{Time, NS_PER_MS};

/// Whole milliseconds from the timestamp `echo` to `now` on the clock TCP timestamps run
/// on (Linux's `TCP_TS_HZ`, 1000 Hz): the difference of the two truncated clocks, so a
/// 10.06 ms round trip reads as 10 or 11 ms depending on its phase.
pub(crate) fn ts_delta_ms(now: Time, echo: Time) -> u64 {
    ts_ms(now).saturating_sub(ts_ms(echo))
}

/// The TCP timestamp clock's value at `t`: whole milliseconds (`TCP_TS_HZ`).
pub(crate) fn ts_ms(t: Time) -> u64 {
    t / NS_PER_MS
}

/// A data segment in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub seq: u64,
    /// Send time, echoed by the receiver (RFC 7323 timestamps).
    pub ts: Time,
    /// The receiver's timestamp this segment echoes (the sender's `ts_recent`): the
    /// receiver measures its RTT from it.
    pub ts_echo: Time,
    pub retransmission: bool,
    /// The receiver acknowledges this segment at the read that empties its queue (Linux
    /// `ICSK_ACK_PUSHED`): it ends what the application wrote (PSH; a full-sized PSH
    /// segment counts since Linux 6.6) or reaches the receive window's edge, where Linux
    /// sends the window's sub-MSS remainder (always counted). New data only.
    pub push: bool,
}

/// Up to three SACK blocks, as fit in a segment with timestamps (RFC 2018).
pub const MAX_SACK_BLOCKS: usize = 3;

/// An acknowledgement in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckSegment {
    /// Next segment expected (cumulative ACK).
    pub cum: u64,
    /// Timestamp echoed by the receiver (its `ts_recent`, RFC 7323 §4.3).
    pub ts_echo: Time,
    /// The receiver's own timestamp (its send time).
    pub ts_val: Time,
    /// The window offered, bytes past `cum` (`u64::MAX`: the receive window is not
    /// modelled).
    pub wnd: u64,
    /// SACK blocks `[start, end)`, most recent first; `n_sack` of them are valid.
    pub sack: [(u64, u64); MAX_SACK_BLOCKS],
    pub n_sack: u8,
    /// A duplicate segment this ACK reports (D-SACK, RFC 2883).
    pub dsack: Option<u64>,
}

/// Congestion state, as Linux's `icsk_ca_state`, with Linux's numbering (`enum
/// tcp_ca_state`: Open 0, Disorder 1, CWR 2, Recovery 3, Loss 4), which the trace's
/// `tcp.ca_state` column stores. Disorder is not distinguished from Open, and CWR, entered
/// only when a loss probe repairs a loss, lasts no longer than the ACK that enters it, as in
/// Linux's `tcp_process_tlp_ack`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum CaState {
    #[default]
    Open = 0,
    Recovery = 3,
    Loss = 4,
}
