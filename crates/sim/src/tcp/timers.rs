//! The retransmission timer: one deadline, armed for a retransmission timeout, a tail loss
//! probe or a RACK reorder timeout (Linux `icsk_retransmit_timer` and `icsk_pending`).
//!
//! Linux counts these timers in jiffies (1/HZ s): every timeout is rounded up to whole
//! jiffies (`usecs_to_jiffies`). On a real host the timer then fires at a tick of the timer
//! wheel, whose phase relative to the connection is arbitrary, and beyond 63 jiffies at a
//! coarser granularity (8, 64, 512 jiffies: `kernel/time/timer.c`, `calc_index`, which
//! rounds up so that a timer never fires early). [`Jiffies`] models both; the wheel only
//! when host noise is on (a random phase per host), so that exact experiments keep exact
//! timeouts.

use super::sender::Sender;
use super::CaState;
use crate::config::Kernel;
use crate::time::{Time, NS_PER_MS, NS_PER_S};

/// What the retransmission timer is armed for (Linux `ICSK_TIME_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerKind {
    /// Retransmission timeout (`ICSK_TIME_RETRANS`, RFC 6298).
    Rto,
    /// Tail loss probe (`ICSK_TIME_LOSS_PROBE`, RFC 8985 §7).
    LossProbe,
    /// RACK reorder timeout (`ICSK_TIME_REO_TIMEOUT`, RFC 8985 §6.2).
    ReorderTimeout,
}

/// Largest RTO (Linux `TCP_RTO_MAX`, 120 s).
pub const RTO_MAX: Time = 120 * NS_PER_S;

/// The retransmission timeout of an RTT estimate (Linux `__tcp_set_rto` after
/// `tcp_rtt_estimator`): `srtt + max(4·rttvar, rto_min)`, at most `RTO_MAX`. A first sample
/// `r` gives `srtt = r`, `rttvar = r/2`.
pub fn rto_of(srtt: Time, rttvar: Time, rto_min: Time) -> Time {
    (srtt + (4 * rttvar).max(rto_min)).min(RTO_MAX)
}
/// Probe timeout added for a lone segment, covering the peer's delayed ACK (`TCP_RTO_MIN`).
const TLP_DELACK: Time = 200 * NS_PER_MS;
/// Slack added to the reorder timeout (`TCP_TIMEOUT_MIN_US`).
const REO_SLACK: Time = 2 * NS_PER_MS;
/// Probe timeout before any RTT sample (`TCP_TIMEOUT_INIT`).
const TIMEOUT_INIT: Time = NS_PER_S;

/// Kernel time in jiffies.
#[derive(Clone, Copy, Debug)]
pub struct Jiffies {
    /// One jiffy (1/HZ).
    pub tick: Time,
    /// Phase of the host's timer wheel against the simulation clock; `None`: timers fire
    /// exactly when due (no host noise).
    pub phase: Option<Time>,
}

impl Jiffies {
    pub fn new(hz: u32) -> Self {
        Self {
            tick: NS_PER_S / hz.max(1) as Time,
            phase: None,
        }
    }

    /// A duration rounded up to whole jiffies (`usecs_to_jiffies`).
    pub fn round_up(&self, d: Time) -> Time {
        d.div_ceil(self.tick) * self.tick
    }

    /// When a timer armed at `now` for `d` fires.
    pub fn expiry(&self, now: Time, d: Time) -> Time {
        let d = self.round_up(d);
        let Some(phase) = self.phase else {
            return now.saturating_add(d);
        };
        let j = d / self.tick;
        let gran = match j {
            0..63 => 1,
            63..504 => 8,
            504..4032 => 64,
            _ => 512,
        };
        let expires = (now + phase) / self.tick + j;
        ((expires / gran + 1) * gran * self.tick).saturating_sub(phase)
    }
}

impl Sender {
    /// The timer's deadline, if armed.
    pub fn timer_deadline(&self) -> Option<Time> {
        self.timer.map(|(t, _)| t).filter(|&t| t != Time::MAX)
    }

    /// The timer's purpose, if armed.
    pub fn timer_kind(&self) -> Option<TimerKind> {
        self.timer.map(|(_, k)| k)
    }

    pub(super) fn reset_timer(&mut self, kind: TimerKind, now: Time, timeout: Time) {
        let at = self.clock.expiry(now, timeout.min(RTO_MAX));
        self.timer = Some((at, kind));
    }

    /// Time left until the head segment's RTO, from its last transmission (Linux
    /// `tcp_rto_delta_us`); may be negative.
    pub(super) fn rto_delta(&self, now: Time) -> i64 {
        if self.board.packets_out() == 0 {
            return self.rto() as i64;
        }
        let head = self.board.seg(self.board.una).xmit;
        (head + self.rto()) as i64 - now as i64
    }

    /// Linux `tcp_rearm_rto`.
    pub(super) fn rearm_rto(&mut self, now: Time) {
        if self.board.packets_out() == 0 {
            self.timer = None;
            return;
        }
        let rto = match self.timer_kind() {
            Some(TimerKind::LossProbe | TimerKind::ReorderTimeout) => {
                self.rto_delta(now).max(1000) as Time
            }
            _ => self.rto(),
        };
        self.reset_timer(TimerKind::Rto, now, rto);
    }

    /// Arms a tail loss probe two smoothed RTTs ahead when the connection is open (Linux
    /// `tcp_schedule_loss_probe`); false if none applies.
    pub(super) fn schedule_loss_probe(&mut self, now: Time, advancing_rto: bool) -> bool {
        let packets_out = self.board.packets_out();
        if packets_out == 0 || self.state != CaState::Open || self.kernel == Kernel::Linux2006 {
            return false;
        }
        let mut timeout = match self.srtt {
            Some(s) if packets_out == 1 => 2 * s + TLP_DELACK,
            Some(s) => 2 * s + 2 * self.clock.tick,
            None => TIMEOUT_INIT,
        };
        let rto_delta = if advancing_rto {
            self.rto() as i64
        } else {
            self.rto_delta(now)
        };
        if rto_delta > 0 {
            timeout = timeout.min(rto_delta as Time);
        }
        self.reset_timer(TimerKind::LossProbe, now, timeout);
        true
    }

    /// RACK found holes not yet due: check again when the longest wait is over.
    pub(super) fn arm_reorder_timer(&mut self, now: Time, wait: Time) {
        self.reset_timer(TimerKind::ReorderTimeout, now, wait + REO_SLACK);
    }

    /// The timer fired at `now` (call once `now >= timer_deadline()`); afterwards the
    /// caller polls for segments to send (Linux `tcp_write_timer_handler`).
    pub fn on_timer(&mut self, now: Time) {
        let Some((at, kind)) = self.timer else {
            return;
        };
        if at > now {
            return;
        }
        // A fired probe or reorder timer stays pending while it is handled, so that
        // re-arming the RTO counts from the head's transmission (Linux keeps
        // `icsk_pending` during these handlers).
        self.timer = (kind != TimerKind::Rto).then_some((Time::MAX, kind));
        if self.board.packets_out() == 0 {
            self.timer = None;
            return;
        }
        match kind {
            TimerKind::ReorderTimeout => self.reorder_timeout(now),
            TimerKind::LossProbe => self.loss_probe_due(now),
            TimerKind::Rto => self.retransmit_timeout(now),
        }
    }

    /// Linux `tcp_rack_reo_timeout`.
    fn reorder_timeout(&mut self, now: Time) {
        let prior_in_flight = self.in_flight();
        let lost_before = self.rate.lost;
        let reo = self.rack_reo_wnd();
        let (lost, _) = self.rack.detect_loss(&mut self.board, now, reo);
        self.rate.lost += lost as u64;
        self.stats.lost += lost as u64;
        if prior_in_flight != self.in_flight() && self.state != CaState::Recovery {
            self.enter_recovery(now);
            if !self.cc_controls {
                let newly_lost = (self.rate.lost - lost_before) as u32;
                self.cwnd_reduction(1, newly_lost, false);
            }
        }
        if self.timer_kind() != Some(TimerKind::Rto) {
            self.rearm_rto(now);
        }
    }

    /// Linux `tcp_send_loss_probe`: new data if any may be sent, else the last segment
    /// again. The probe itself goes out with the next poll (see `Sender::poll_transmit`).
    fn loss_probe_due(&mut self, now: Time) {
        if self.tlp_high_seq.is_some() {
            self.rearm_rto(now);
            return;
        }
        self.probe_due = true;
        self.tlp_retrans = false;
    }

    /// Linux `tcp_retransmit_timer`: enter Loss, resend the head, back off.
    fn retransmit_timeout(&mut self, now: Time) {
        self.stats.timeouts += 1;
        self.enter_loss(now);
        self.backoff = (self.backoff * 2).min(1 << 10);
        self.retransmits += 1;
        self.reset_timer(TimerKind::Rto, now, self.rto());
    }

    /// Linux `tcp_enter_loss`: everything old enough is presumed lost, the window becomes
    /// what is still in flight plus one segment, and ssthresh is reduced once per episode.
    pub(super) fn enter_loss(&mut self, now: Time) {
        let new_episode = self.state == CaState::Open
            || self.high_seq <= self.board.una
            || (self.state == CaState::Loss && self.retransmits == 0);
        self.timeout_mark_lost(now);
        if new_episode {
            self.prior_cwnd = self.win.cwnd;
            self.win.ssthresh = self.cc.ssthresh_on_loss(&self.win, now);
            self.cc.on_rto(&self.win, now);
        }
        self.win.cwnd = match self.kernel {
            Kernel::Linux6 => self.in_flight() + 1,
            Kernel::Linux2006 => 1,
        };
        self.win.cwnd_cnt = 0;
        self.set_state(CaState::Loss, now);
        self.high_seq = self.board.nxt();
        self.tlp_high_seq = None;
    }

    /// Linux `tcp_timeout_mark_lost`: the head, and every segment sent longer than the
    /// latest RTT ago; segments sent more recently may still arrive.
    fn timeout_mark_lost(&mut self, now: Time) {
        let una = self.board.una;
        // The 2006 kernel presumes everything outstanding lost (go-back-N over holes).
        let rack_rtt = match self.kernel {
            Kernel::Linux6 => self.rack.rtt,
            Kernel::Linux2006 => 0,
        };
        let due: Vec<u64> = self
            .board
            .unsacked_from(una)
            .filter(|&(seq, s)| seq == una || now.saturating_sub(s.xmit) >= rack_rtt)
            .map(|(seq, _)| seq)
            .collect();
        let mut lost = 0;
        for seq in due {
            lost += self.board.mark_lost(seq) as u64;
        }
        self.rate.lost += lost;
        self.stats.lost += lost;
        self.board.retx_hint = una;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_round_up_to_jiffies_and_the_wheel() {
        let mut j = Jiffies::new(250);
        assert_eq!(j.tick, 4 * NS_PER_MS);
        assert_eq!(j.round_up(201 * NS_PER_MS), 204 * NS_PER_MS);
        // Exact without a phase.
        assert_eq!(j.expiry(1_000_000, 8 * NS_PER_MS), 9_000_000);
        // With a wheel at phase 0: armed at 1 ms for 2 jiffies, fires at the 3rd tick
        // (never early: up to one jiffy late).
        j.phase = Some(0);
        assert_eq!(j.expiry(NS_PER_MS, 8 * NS_PER_MS), 12 * NS_PER_MS);
        // 1 s = 250 jiffies lies in level 1 (8-jiffy granularity): jiffy 256, 1.024 s.
        assert_eq!(j.expiry(0, NS_PER_S), 1_024 * NS_PER_MS);
    }
}
