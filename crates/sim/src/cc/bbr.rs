//! BBR v1 (N. Cardwell, Y. Cheng, C. S. Gunn, S. Hassas Yeganeh, V. Jacobson, "BBR:
//! Congestion-Based Congestion Control", ACM Queue 14(5), 2016; draft-cardwell-iccrg-bbr-
//! congestion-control-00), as Linux 6.x `tcp_bbr.c`.
//!
//! BBR models the path by two numbers measured from ACKs: the bottleneck bandwidth
//! `BtlBw`, the largest delivery rate over the last 10 round trips (Linux
//! `minmax_running_max` over `bbr_bw_rtts`), and `RTprop`, the smallest RTT over the last
//! 10 s. It paces at `pacing_gain × BtlBw` and caps what is in flight at
//! `cwnd_gain × BtlBw × RTprop` (plus a quantization budget and an allowance for ACK
//! aggregation), and moves through four modes:
//!
//! * STARTUP: gains 2/ln 2 ≈ 2.885 until the bandwidth has not grown by 25 % in three
//!   rounds (`bbr_check_full_bw_reached`);
//! * DRAIN: pacing gain 1/2.885 until what is in flight falls to one BDP; ssthresh is set
//!   then (so slow-start exit is visible in `ssthresh`, as in Linux);
//! * PROBE_BW: an 8-phase gain cycle 5/4, 3/4, 1, 1, 1, 1, 1, 1, each phase one RTprop,
//!   starting at a random phase other than 3/4;
//! * PROBE_RTT: when RTprop has not been refreshed for 10 s, cwnd 4 for at least 200 ms
//!   and one round.
//!
//! Loss is not a congestion signal, except through packet conservation in fast recovery
//! and the long-term bandwidth estimate that detects token-bucket policers
//! (`bbr_lt_bw_sampling`). Units: bandwidth in segments per second (Linux: segments per µs
//! scaled by 2^24), gains as Linux's fixed-point values (`BBR_UNIT` = 256).
//!
//! Not modelled: the idle restart of `bbr_cwnd_event(CA_EVENT_TX_START)` (bulk senders are
//! never idle while they have data) and `bbr_undo_cwnd` (the sender has no undo).

use rand_core::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use super::{Ack, CongestionControl, Control, Window, MIN_TSO_SEGS};
use crate::tcp::CaState;
use crate::time::{Time, NS_PER_MS, NS_PER_S};

/// Gains in Linux's fixed point (`BBR_UNIT` = 256).
const fn gain(x: u32) -> f64 {
    x as f64 / 256.0
}
/// STARTUP's gain, 2/ln 2 (`bbr_high_gain` = 256·2885/1000 + 1).
pub const HIGH_GAIN: f64 = gain(256 * 2885 / 1000 + 1);
/// DRAIN's pacing gain, its inverse (`bbr_drain_gain`).
pub const DRAIN_GAIN: f64 = gain(256 * 1000 / 2885);
/// PROBE_BW's cwnd gain.
pub const CWND_GAIN: f64 = 2.0;
/// PROBE_BW's pacing gain cycle (`bbr_pacing_gain`).
pub const PACING_GAINS: [f64; CYCLE_LEN] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
const CYCLE_LEN: usize = 8;
/// Rounds the bandwidth filter spans (`bbr_bw_rtts` = cycle + 2).
const BW_RTTS: u32 = CYCLE_LEN as u32 + 2;
/// RTprop's window (`bbr_min_rtt_win_sec`).
const MIN_RTT_WIN: Time = 10 * NS_PER_S;
/// Least time in PROBE_RTT (`bbr_probe_rtt_mode_ms`).
const PROBE_RTT_TIME: Time = 200 * NS_PER_MS;
/// Below this pacing rate (bytes/s) one segment per TSO burst (`bbr_min_tso_rate` / 8).
const MIN_TSO_RATE: f64 = 1_200_000.0 / 8.0;
/// The pacing rate is 1 % below the bandwidth estimate (`bbr_pacing_margin_percent`).
const PACING_MARGIN: f64 = 0.99;
/// Smallest cwnd (`bbr_cwnd_min_target`).
const CWND_MIN_TARGET: u32 = 4;
/// Full bandwidth: growth below 25 % (`bbr_full_bw_thresh`) for three rounds.
const FULL_BW_THRESH: f64 = gain(256 * 5 / 4);
const FULL_BW_CNT: u32 = 3;
/// Long-term (policer) sampling: intervals of 4–16 rounds with ≥ 20 % loss
/// (`bbr_lt_loss_thresh` = 50/256), estimates within 1/8 or 4 kbit/s of each other,
/// used for 48 rounds.
const LT_INTVL_MIN_RTTS: u32 = 4;
const LT_LOSS_THRESH: f64 = gain(50);
const LT_BW_RATIO: f64 = gain(256 / 8);
const LT_BW_DIFF: f64 = 4000.0 / 8.0;
const LT_BW_MAX_RTTS: u32 = 48;
/// ACK aggregation: window of 5 rounds, at most 100 ms of bandwidth.
const EXTRA_ACKED_WIN_RTTS: u32 = 5;
const EXTRA_ACKED_MAX: Time = 100 * NS_PER_MS;
const ACK_EPOCH_ACKED_RESET: u32 = 1 << 20;
/// Initial window the BDP falls back to before any RTT (`TCP_INIT_CWND`).
const INIT_CWND: u32 = 10;
/// Largest TSO burst in bytes (`GSO_LEGACY_MAX_SIZE − 1 − MAX_TCP_HEADER`).
const TSO_MAX_BYTES: f64 = 65536.0 - 1.0 - 320.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// Kathleen Nichols' windowed max filter with three samples (Linux `lib/win_minmax.c`):
/// the best, second best and third best values within the window, by round.
#[derive(Clone, Copy, Debug, Default)]
struct MaxFilter {
    s: [(u32, f64); 3],
}

impl MaxFilter {
    fn get(&self) -> f64 {
        self.s[0].1
    }

    fn reset(&mut self, t: u32, v: f64) {
        self.s = [(t, v); 3];
    }

    /// Linux `minmax_running_max`.
    fn update(&mut self, win: u32, t: u32, v: f64) {
        if v >= self.s[0].1 || t.wrapping_sub(self.s[2].0) > win {
            self.reset(t, v);
            return;
        }
        if v >= self.s[1].1 {
            self.s[2] = (t, v);
            self.s[1] = (t, v);
        } else if v >= self.s[2].1 {
            self.s[2] = (t, v);
        }
        // `minmax_subwin_update`: age out the best once it leaves the window.
        let dt = t.wrapping_sub(self.s[0].0);
        if dt > win {
            self.s[0] = self.s[1];
            self.s[1] = self.s[2];
            self.s[2] = (t, v);
            if t.wrapping_sub(self.s[0].0) > win {
                self.s[0] = self.s[1];
                self.s[1] = self.s[2];
                self.s[2] = (t, v);
            }
        } else if self.s[1].0 == self.s[0].0 && dt > win / 4 {
            self.s[2] = (t, v);
            self.s[1] = (t, v);
        } else if self.s[2].0 == self.s[1].0 && dt > win / 2 {
            self.s[2] = (t, v);
        }
    }
}

/// BBR's per-flow state (Linux `struct bbr`).
#[derive(Debug, Clone)]
pub struct Bbr {
    rng: Pcg64Mcg,
    pub mode: Mode,
    /// RTprop (ns) and when it was last refreshed; `Time::MAX` until known.
    min_rtt: Time,
    min_rtt_stamp: Time,
    probe_rtt_done_stamp: Option<Time>,
    probe_rtt_round_done: bool,
    /// BtlBw filter, segments per second, by round.
    bw: MaxFilter,
    rtt_cnt: u32,
    next_rtt_delivered: u64,
    cycle_mstamp: Time,
    cycle_idx: usize,
    prev_ca_state: CaState,
    packet_conservation: bool,
    round_start: bool,
    idle_restart: bool,
    lt_is_sampling: bool,
    lt_rtt_cnt: u32,
    lt_use_bw: bool,
    lt_bw: f64,
    lt_last_delivered: u64,
    lt_last_stamp: Time,
    lt_last_lost: u64,
    pacing_gain: f64,
    cwnd_gain: f64,
    full_bw_reached: bool,
    full_bw_cnt: u32,
    full_bw: f64,
    has_seen_rtt: bool,
    prior_cwnd: u32,
    ack_epoch_mstamp: Time,
    ack_epoch_acked: u32,
    extra_acked: [u32; 2],
    extra_acked_win_rtts: u32,
    extra_acked_win_idx: usize,
    /// `sk_pacing_rate`, payload bytes per second.
    pacing_rate: f64,
    mss: u32,
}

impl Bbr {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Pcg64Mcg::seed_from_u64(seed ^ 0x0bb4_0001),
            mode: Mode::Startup,
            min_rtt: Time::MAX,
            min_rtt_stamp: 0,
            probe_rtt_done_stamp: None,
            probe_rtt_round_done: false,
            bw: MaxFilter::default(),
            rtt_cnt: 0,
            next_rtt_delivered: 0,
            cycle_mstamp: 0,
            cycle_idx: 0,
            prev_ca_state: CaState::Open,
            packet_conservation: false,
            round_start: false,
            idle_restart: false,
            lt_is_sampling: false,
            lt_rtt_cnt: 0,
            lt_use_bw: false,
            lt_bw: 0.0,
            lt_last_delivered: 0,
            lt_last_stamp: 0,
            lt_last_lost: 0,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: HIGH_GAIN,
            full_bw_reached: false,
            full_bw_cnt: 0,
            full_bw: 0.0,
            has_seen_rtt: false,
            prior_cwnd: 0,
            ack_epoch_mstamp: 0,
            ack_epoch_acked: 0,
            extra_acked: [0; 2],
            extra_acked_win_rtts: 0,
            extra_acked_win_idx: 0,
            pacing_rate: 0.0,
            mss: 1448,
        }
    }

    /// BtlBw, segments per second (the long-term estimate while a policer is detected).
    pub fn bw(&self) -> f64 {
        if self.lt_use_bw {
            self.lt_bw
        } else {
            self.bw.get()
        }
    }

    pub fn min_rtt(&self) -> Time {
        self.min_rtt
    }

    pub fn full_bw_reached(&self) -> bool {
        self.full_bw_reached
    }

    fn rate_bytes_per_sec(&self, bw: f64, gain: f64) -> f64 {
        bw * self.mss as f64 * gain * PACING_MARGIN
    }

    /// Linux `bbr_init_pacing_rate_from_rtt`: the initial window over the SYN's RTT.
    fn init_pacing_rate_from_rtt(&mut self, cwnd: u32, srtt: Option<Time>) {
        let rtt = match srtt {
            Some(s) => {
                self.has_seen_rtt = true;
                s.max(1000)
            }
            None => NS_PER_MS,
        };
        let bw = cwnd as f64 / (rtt as f64 / 1e9);
        self.pacing_rate = self.rate_bytes_per_sec(bw, HIGH_GAIN);
    }

    /// Linux `bbr_set_pacing_rate`: never lower before the pipe is known to be full.
    fn set_pacing_rate(&mut self, bw: f64, gain: f64, cwnd: u32, srtt: Option<Time>) {
        let rate = self.rate_bytes_per_sec(bw, gain);
        if !self.has_seen_rtt && srtt.is_some() {
            self.init_pacing_rate_from_rtt(cwnd, srtt);
        }
        if self.full_bw_reached || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
    }

    /// Linux `bbr_tso_segs_goal`.
    fn tso_segs_goal(&self) -> u32 {
        let bytes = (self.pacing_rate / 1024.0).min(TSO_MAX_BYTES);
        ((bytes / self.mss as f64) as u32)
            .max(CongestionControl::min_tso_segs(self))
            .min(0x7f)
    }

    /// Linux `bbr_bdp`: `gain × bw × RTprop`, rounded up.
    fn bdp(&self, bw: f64, gain: f64) -> u32 {
        if self.min_rtt == Time::MAX {
            return INIT_CWND;
        }
        (bw * (self.min_rtt as f64 / 1e9) * gain).ceil() as u32
    }

    /// Linux `bbr_quantization_budget`.
    fn quantization_budget(&self, cwnd: u32) -> u32 {
        let mut cwnd = cwnd + 3 * self.tso_segs_goal();
        cwnd = (cwnd + 1) & !1;
        if self.mode == Mode::ProbeBw && self.cycle_idx == 0 {
            cwnd += 2;
        }
        cwnd
    }

    /// Linux `bbr_inflight`.
    fn inflight(&self, bw: f64, gain: f64) -> u32 {
        self.quantization_budget(self.bdp(bw, gain))
    }

    /// Linux `bbr_packets_in_net_at_edt`: what will still be in flight when the next
    /// segment leaves under the pacing schedule.
    fn packets_in_net_at_edt(&self, ack: &Ack, inflight_now: u32) -> u32 {
        let interval = ack.pacing_next.max(ack.now) - ack.now;
        let delivered = (self.bw() * interval as f64 / 1e9) as u32;
        let mut at_edt = inflight_now;
        if self.pacing_gain > 1.0 {
            at_edt += self.tso_segs_goal();
        }
        at_edt.saturating_sub(delivered)
    }

    fn ack_aggregation_cwnd(&self) -> u32 {
        if !self.full_bw_reached {
            return 0;
        }
        let max_aggr = (self.bw() * EXTRA_ACKED_MAX as f64 / 1e9) as u32;
        self.extra_acked[0].max(self.extra_acked[1]).min(max_aggr)
    }

    fn save_cwnd(&mut self, cwnd: u32) {
        if self.prev_ca_state < CaState::Recovery && self.mode != Mode::ProbeRtt {
            self.prior_cwnd = cwnd;
        } else {
            self.prior_cwnd = self.prior_cwnd.max(cwnd);
        }
    }

    /// Linux `bbr_set_cwnd_to_recover_or_restore`: packet conservation in the first round
    /// of recovery, the window before it restored after. Returns the window, and whether
    /// conservation decides it.
    fn recover_or_restore(&mut self, w: &Window, ack: &Ack, acked: u32) -> (u32, bool) {
        let (prev, state) = (self.prev_ca_state, ack.state);
        let mut cwnd = w.cwnd;
        if ack.rate.losses > 0 {
            cwnd = cwnd.saturating_sub(ack.rate.losses).max(1);
        }
        if state == CaState::Recovery && prev != CaState::Recovery {
            self.packet_conservation = true;
            self.next_rtt_delivered = ack.delivered;
            cwnd = ack.in_flight + acked;
        } else if prev >= CaState::Recovery && state < CaState::Recovery {
            cwnd = cwnd.max(self.prior_cwnd);
            self.packet_conservation = false;
        }
        self.prev_ca_state = state;
        if self.packet_conservation {
            return (cwnd.max(ack.in_flight + acked), true);
        }
        (cwnd, false)
    }

    /// Linux `bbr_set_cwnd`.
    fn set_cwnd(&mut self, w: &mut Window, ack: &Ack, bw: f64, gain: f64) {
        let acked = ack.rate.acked_sacked;
        let mut cwnd = w.cwnd;
        if acked > 0 {
            let (c, conserving) = self.recover_or_restore(w, ack, acked);
            cwnd = c;
            if !conserving {
                let target = self.bdp(bw, gain) + self.ack_aggregation_cwnd();
                let target = self.quantization_budget(target);
                if self.full_bw_reached {
                    cwnd = (cwnd + acked).min(target);
                } else if cwnd < target || ack.delivered < INIT_CWND as u64 {
                    cwnd += acked;
                }
                cwnd = cwnd.max(CWND_MIN_TARGET);
            }
        }
        w.cwnd = cwnd;
        if self.mode == Mode::ProbeRtt {
            w.cwnd = w.cwnd.min(CWND_MIN_TARGET);
        }
    }

    /// Linux `bbr_is_next_cycle_phase`.
    fn is_next_cycle_phase(&self, ack: &Ack) -> bool {
        let full_length = ack.delivered_mstamp.saturating_sub(self.cycle_mstamp) > self.min_rtt;
        if self.pacing_gain == 1.0 {
            return full_length;
        }
        let inflight = self.packets_in_net_at_edt(ack, ack.rate.prior_in_flight);
        let bw = self.bw.get();
        if self.pacing_gain > 1.0 {
            return full_length
                && (ack.rate.losses > 0 || inflight >= self.inflight(bw, self.pacing_gain));
        }
        full_length || inflight <= self.inflight(bw, 1.0)
    }

    fn advance_cycle_phase(&mut self, now_delivered: Time) {
        self.cycle_idx = (self.cycle_idx + 1) % CYCLE_LEN;
        self.cycle_mstamp = now_delivered;
    }

    /// Linux `bbr_reset_probe_bw_mode`: a random phase other than the draining one.
    fn reset_probe_bw_mode(&mut self, delivered_mstamp: Time) {
        self.mode = Mode::ProbeBw;
        self.cycle_idx = CYCLE_LEN - 1 - (self.rng.next_u64() % 7) as usize;
        self.advance_cycle_phase(delivered_mstamp);
    }

    fn reset_mode(&mut self, delivered_mstamp: Time) {
        if self.full_bw_reached {
            self.reset_probe_bw_mode(delivered_mstamp);
        } else {
            self.mode = Mode::Startup;
        }
    }

    fn reset_lt_interval(&mut self, ack: &Ack) {
        self.lt_last_stamp = ack.delivered_mstamp / NS_PER_MS * NS_PER_MS;
        self.lt_last_delivered = ack.delivered;
        self.lt_last_lost = ack.lost;
        self.lt_rtt_cnt = 0;
    }

    fn reset_lt(&mut self, ack: &Ack) {
        self.lt_bw = 0.0;
        self.lt_use_bw = false;
        self.lt_is_sampling = false;
        self.reset_lt_interval(ack);
    }

    /// Linux `bbr_lt_bw_interval_done`.
    fn lt_interval_done(&mut self, ack: &Ack, bw: f64) {
        if self.lt_bw > 0.0 {
            let diff = (bw - self.lt_bw).abs();
            if diff <= LT_BW_RATIO * self.lt_bw || self.rate_bytes_per_sec(diff, 1.0) <= LT_BW_DIFF
            {
                self.lt_bw = (bw + self.lt_bw) / 2.0;
                self.lt_use_bw = true;
                self.pacing_gain = 1.0;
                self.lt_rtt_cnt = 0;
                return;
            }
        }
        self.lt_bw = bw;
        self.reset_lt_interval(ack);
    }

    /// Linux `bbr_lt_bw_sampling`: a steady delivery rate with heavy loss over 4–16
    /// rounds is a policer's rate; use it for 48 rounds.
    fn lt_sampling(&mut self, ack: &Ack, losses: u32, app_limited: bool) {
        if self.lt_use_bw {
            if self.mode == Mode::ProbeBw && self.round_start {
                self.lt_rtt_cnt += 1;
                if self.lt_rtt_cnt >= LT_BW_MAX_RTTS {
                    self.reset_lt(ack);
                    self.reset_probe_bw_mode(ack.delivered_mstamp);
                }
            }
            return;
        }
        if !self.lt_is_sampling {
            if losses == 0 {
                return;
            }
            self.reset_lt_interval(ack);
            self.lt_is_sampling = true;
        }
        if app_limited {
            self.reset_lt(ack);
            return;
        }
        if self.round_start {
            self.lt_rtt_cnt += 1;
        }
        if self.lt_rtt_cnt < LT_INTVL_MIN_RTTS {
            return;
        }
        if self.lt_rtt_cnt > 4 * LT_INTVL_MIN_RTTS {
            self.reset_lt(ack);
            return;
        }
        if losses == 0 {
            return;
        }
        let lost = ack.lost - self.lt_last_lost;
        let delivered = ack.delivered - self.lt_last_delivered;
        if delivered == 0 || (lost as f64) < LT_LOSS_THRESH * delivered as f64 {
            return;
        }
        let t = (ack.delivered_mstamp / NS_PER_MS * NS_PER_MS).saturating_sub(self.lt_last_stamp);
        if t < NS_PER_MS {
            return;
        }
        self.lt_interval_done(ack, delivered as f64 / (t as f64 / 1e9));
    }

    /// Linux `bbr_update_bw`: count rounds, feed the BtlBw filter.
    fn update_bw(&mut self, ack: &Ack) {
        self.round_start = false;
        let rs = &ack.rate;
        let (Some(delivered), Some(interval)) = (rs.delivered, rs.interval) else {
            return;
        };
        if interval == 0 {
            return;
        }
        if rs.prior_delivered >= self.next_rtt_delivered {
            self.next_rtt_delivered = ack.delivered;
            self.rtt_cnt += 1;
            self.round_start = true;
            self.packet_conservation = false;
        }
        self.lt_sampling(ack, rs.losses, rs.is_app_limited);
        let bw = delivered as f64 / (interval as f64 / 1e9);
        if !rs.is_app_limited || bw >= self.bw.get() {
            self.bw.update(BW_RTTS, self.rtt_cnt, bw);
        }
    }

    /// Linux `bbr_update_ack_aggregation`: how far ACKs ran ahead of the bandwidth.
    fn update_ack_aggregation(&mut self, ack: &Ack, cwnd: u32) {
        let rs = &ack.rate;
        if rs.acked_sacked == 0 || rs.delivered.is_none() || rs.interval.is_none() {
            return;
        }
        if self.round_start {
            self.extra_acked_win_rtts = (self.extra_acked_win_rtts + 1).min(0x1f);
            if self.extra_acked_win_rtts >= EXTRA_ACKED_WIN_RTTS {
                self.extra_acked_win_rtts = 0;
                self.extra_acked_win_idx ^= 1;
                self.extra_acked[self.extra_acked_win_idx] = 0;
            }
        }
        let epoch = ack.delivered_mstamp.saturating_sub(self.ack_epoch_mstamp);
        let mut expected = (self.bw() * epoch as f64 / 1e9) as u32;
        if self.ack_epoch_acked <= expected
            || self.ack_epoch_acked + rs.acked_sacked >= ACK_EPOCH_ACKED_RESET
        {
            self.ack_epoch_acked = 0;
            self.ack_epoch_mstamp = ack.delivered_mstamp;
            expected = 0;
        }
        self.ack_epoch_acked = (self.ack_epoch_acked + rs.acked_sacked).min(0xfffff);
        let extra = (self.ack_epoch_acked - expected).min(cwnd);
        let slot = &mut self.extra_acked[self.extra_acked_win_idx];
        *slot = (*slot).max(extra);
    }

    /// Linux `bbr_check_full_bw_reached`.
    fn check_full_bw_reached(&mut self, ack: &Ack) {
        if self.full_bw_reached || !self.round_start || ack.rate.is_app_limited {
            return;
        }
        if self.bw.get() >= self.full_bw * FULL_BW_THRESH {
            self.full_bw = self.bw.get();
            self.full_bw_cnt = 0;
            return;
        }
        self.full_bw_cnt += 1;
        self.full_bw_reached = self.full_bw_cnt >= FULL_BW_CNT;
    }

    /// Linux `bbr_check_drain`.
    fn check_drain(&mut self, w: &mut Window, ack: &Ack) {
        if self.mode == Mode::Startup && self.full_bw_reached {
            self.mode = Mode::Drain;
            w.ssthresh = self.inflight(self.bw.get(), 1.0);
        }
        if self.mode == Mode::Drain
            && self.packets_in_net_at_edt(ack, ack.in_flight) <= self.inflight(self.bw.get(), 1.0)
        {
            self.reset_probe_bw_mode(ack.delivered_mstamp);
        }
    }

    fn check_probe_rtt_done(&mut self, w: &mut Window, ack: &Ack) {
        if self.probe_rtt_done_stamp.is_none_or(|d| ack.now <= d) {
            return;
        }
        self.min_rtt_stamp = ack.now;
        w.cwnd = w.cwnd.max(self.prior_cwnd);
        self.reset_mode(ack.delivered_mstamp);
    }

    /// Linux `bbr_update_min_rtt`: RTprop's 10 s window, and PROBE_RTT. Returns whether
    /// the sender is to be marked application-limited.
    fn update_min_rtt(&mut self, w: &mut Window, ack: &Ack) -> bool {
        let expired = ack.now > self.min_rtt_stamp.saturating_add(MIN_RTT_WIN);
        if let Some(rtt) = ack.rate.rtt {
            if rtt < self.min_rtt || (expired && !ack.rate.is_ack_delayed) {
                self.min_rtt = rtt;
                self.min_rtt_stamp = ack.now;
            }
        }
        if expired && !self.idle_restart && self.mode != Mode::ProbeRtt {
            self.mode = Mode::ProbeRtt;
            self.save_cwnd(w.cwnd);
            self.probe_rtt_done_stamp = None;
        }
        let mut app_limited = false;
        if self.mode == Mode::ProbeRtt {
            // Ignore low rate samples during this mode.
            app_limited = true;
            if self.probe_rtt_done_stamp.is_none() && ack.in_flight <= CWND_MIN_TARGET {
                self.probe_rtt_done_stamp = Some(ack.now + PROBE_RTT_TIME);
                self.probe_rtt_round_done = false;
                self.next_rtt_delivered = ack.delivered;
            } else if self.probe_rtt_done_stamp.is_some() {
                if self.round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done {
                    self.check_probe_rtt_done(w, ack);
                }
            }
        }
        if ack.rate.delivered.is_some_and(|d| d > 0) {
            self.idle_restart = false;
        }
        app_limited
    }

    fn update_gains(&mut self) {
        (self.pacing_gain, self.cwnd_gain) = match self.mode {
            Mode::Startup => (HIGH_GAIN, HIGH_GAIN),
            Mode::Drain => (DRAIN_GAIN, HIGH_GAIN),
            Mode::ProbeBw if self.lt_use_bw => (1.0, CWND_GAIN),
            Mode::ProbeBw => (PACING_GAINS[self.cycle_idx], CWND_GAIN),
            Mode::ProbeRtt => (1.0, 1.0),
        };
    }
}

impl CongestionControl for Bbr {
    fn name(&self) -> &'static str {
        "bbr"
    }

    /// Linux `bbr_init`.
    fn init(&mut self, w: &mut Window, ack: &Ack) {
        self.mss = ack.mss;
        w.ssthresh = u32::MAX;
        self.next_rtt_delivered = ack.delivered;
        self.min_rtt = ack.min_rtt;
        self.min_rtt_stamp = ack.now;
        self.bw.reset(0, 0.0);
        self.init_pacing_rate_from_rtt(w.cwnd, ack.srtt);
        self.reset_lt(ack);
        self.mode = Mode::Startup;
        self.update_gains();
        self.ack_epoch_mstamp = ack.now;
    }

    fn on_ack(&mut self, _w: &mut Window, _ack: &Ack) {}

    /// Linux `bbr_ssthresh`: remember the window, leave ssthresh as it is.
    fn ssthresh_on_loss(&mut self, w: &Window, _now: Time) -> u32 {
        self.save_cwnd(w.cwnd);
        w.ssthresh
    }

    /// Linux `bbr_set_state`: a timeout restarts the full-bandwidth check.
    fn on_state(&mut self, state: CaState, _w: &Window, ack: &Ack) {
        if state == CaState::Loss {
            self.prev_ca_state = CaState::Loss;
            self.full_bw = 0.0;
            self.round_start = true;
            self.lt_sampling(ack, 1, false);
        }
    }

    fn has_cong_control(&self) -> bool {
        true
    }

    /// Linux `bbr_main`.
    fn cong_control(&mut self, w: &mut Window, ack: &Ack) -> Control {
        self.update_bw(ack);
        self.update_ack_aggregation(ack, w.cwnd);
        if self.mode == Mode::ProbeBw && self.is_next_cycle_phase(ack) {
            self.advance_cycle_phase(ack.delivered_mstamp);
        }
        self.check_full_bw_reached(ack);
        self.check_drain(w, ack);
        let app_limited = self.update_min_rtt(w, ack);
        self.update_gains();
        let bw = self.bw();
        self.set_pacing_rate(bw, self.pacing_gain, w.cwnd, ack.srtt);
        self.set_cwnd(w, ack, bw, self.cwnd_gain);
        Control { app_limited }
    }

    fn pacing_rate(&self) -> Option<f64> {
        Some(self.pacing_rate)
    }

    /// Linux `bbr_min_tso_segs`: one segment per skb below `bbr_min_tso_rate`.
    fn min_tso_segs(&self) -> u32 {
        if self.pacing_rate < MIN_TSO_RATE {
            1
        } else {
            MIN_TSO_SEGS
        }
    }
}

#[cfg(test)]
#[path = "bbr_tests.rs"]
mod tests;
