//! Delivery-rate sampling, as Linux `tcp_rate.c` (Y. Cheng, N. Cardwell, S. Hassas
//! Yeganeh, V. Jacobson, "Delivery Rate Estimation", draft-cheng-iccrg-delivery-rate-estimation).
//!
//! Every transmission records how much had been delivered, and when, at that moment; when
//! the segment is (S)ACKed the sample is the data delivered since over the longer of the
//! send and ACK intervals, so that neither ACK compression nor send bursts inflate it. BBR
//! is built on these samples; the other congestion controls only use the loss count.

use super::board::{Seg, EVER_RETRANS, NO_TIME};
use super::rack::sent_after;
use crate::time::Time;

/// One ACK's rate sample (Linux `struct rate_sample`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateSample {
    /// `tp->delivered` when the newest (S)ACKed segment was sent.
    pub prior_delivered: u64,
    /// `tp->delivered_mstamp` then; `None`: no segment gave a sample.
    pub prior_mstamp: Option<Time>,
    /// Segments delivered in the interval; `None` when the sample is invalid.
    pub delivered: Option<u64>,
    /// The sample's interval (the longer of the send and ACK intervals); `None`: invalid.
    pub interval: Option<Time>,
    /// RTT of the most recently sent segment this ACK delivered (`rs->rtt_us`).
    pub rtt: Option<Time>,
    /// Segments newly marked lost by this ACK (`rs->losses`).
    pub losses: u32,
    /// Segments newly (S)ACKed by this ACK (`rs->acked_sacked`).
    pub acked_sacked: u32,
    /// Segments in flight before this ACK (`rs->prior_in_flight`).
    pub prior_in_flight: u32,
    /// The sampled segment was sent while the sender was application-limited.
    pub is_app_limited: bool,
    /// The sampled segment was a retransmission.
    pub is_retrans: bool,
    /// The ACK may have been delayed by the receiver (it acknowledged one segment).
    pub is_ack_delayed: bool,
    /// End of the sampled segment (`rs->last_end_seq`).
    pub(crate) last_end_seq: u64,
}

/// The sender's side of the sampling (fields of Linux `struct tcp_sock`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RateState {
    /// Segments delivered (cumulatively ACKed or SACKed) so far (`tp->delivered`).
    pub delivered: u64,
    /// When `delivered` last changed (`tp->delivered_mstamp`).
    pub delivered_mstamp: Time,
    /// Send time of the segment that started the current sampling interval.
    pub first_tx_mstamp: Time,
    /// Non-zero while application-limited: the `delivered` count that ends that phase
    /// (`tp->app_limited`).
    pub app_limited: u64,
    /// Segments marked lost so far (`tp->lost`).
    pub lost: u64,
}

impl RateState {
    /// A segment is (re)sent at `now` (Linux `tcp_rate_skb_sent`); `packets_out` is the
    /// count before it.
    pub fn on_sent(&mut self, now: Time, packets_out: u32, seg: &mut Seg) {
        if packets_out == 0 {
            self.first_tx_mstamp = now;
            self.delivered_mstamp = now;
        }
        seg.tx_first = self.first_tx_mstamp;
        seg.tx_delivered_at = self.delivered_mstamp;
        seg.tx_delivered = self.delivered;
        seg.app_limited = self.app_limited != 0;
    }

    /// Segment `seq` is (S)ACKed (Linux `tcp_rate_skb_delivered`): the newest such segment
    /// of an ACK gives the sample.
    pub fn on_delivered(&mut self, seg: &mut Seg, seq: u64, sacked: bool, rs: &mut RateSample) {
        if seg.tx_delivered_at == NO_TIME {
            return;
        }
        if rs.prior_delivered == 0
            || sent_after(seg.xmit, seq + 1, self.first_tx_mstamp, rs.last_end_seq)
        {
            rs.prior_delivered = seg.tx_delivered;
            rs.prior_mstamp = Some(seg.tx_delivered_at);
            rs.is_app_limited = seg.app_limited;
            rs.is_retrans = seg.flags & EVER_RETRANS != 0;
            rs.last_end_seq = seq + 1;
            self.first_tx_mstamp = seg.xmit;
            rs.interval = Some(seg.xmit.saturating_sub(seg.tx_first));
        }
        if sacked {
            // A SACKed segment gives no second sample when cumulatively acknowledged.
            seg.tx_delivered_at = NO_TIME;
        }
    }

    /// Completes the ACK's sample (Linux `tcp_rate_gen`): `delivered` segments newly
    /// delivered, `lost` newly marked lost; samples shorter than `min_rtt` are dropped.
    pub fn gen(
        &mut self,
        now: Time,
        delivered: u32,
        lost: u32,
        min_rtt: Time,
        rs: &mut RateSample,
    ) {
        if self.app_limited != 0 && self.delivered > self.app_limited {
            self.app_limited = 0;
        }
        if delivered > 0 {
            self.delivered_mstamp = now;
        }
        rs.acked_sacked = delivered;
        rs.losses = lost;
        let Some(prior_mstamp) = rs.prior_mstamp else {
            rs.delivered = None;
            rs.interval = None;
            return;
        };
        rs.delivered = Some(self.delivered - rs.prior_delivered);
        let snd = rs.interval.unwrap_or(0);
        let ack = now.saturating_sub(prior_mstamp);
        let interval = snd.max(ack);
        rs.interval = (interval >= min_rtt).then_some(interval);
    }
}
