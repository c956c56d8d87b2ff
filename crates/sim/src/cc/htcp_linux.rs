//! H-TCP as Linux's `tcp_htcp.c` computes it (variant `htcp_linux`), beside the published
//! law of [`super::htcp`] (variant `htcp`, which the project's BPF port on netns follows).
//!
//! What Linux does differently from the paper's law, all of it kept here:
//!
//! * times are jiffies (`HZ`, 250 on this project's machines): RTT samples are rounded up
//!   to a jiffy, the time since the last congestion event counts whole jiffies;
//! * the adaptive backoff β = RTT_min/RTT_max needs RTT_min > 10 ms **in jiffies**, so
//!   with HZ = 250 an RTT of 11.5 ms (3 jiffies, not more than the 3 of 10 ms) always
//!   backs off by 0.5;
//! * RTT_max only grows from samples taken in the Open state and at most 20 ms above it,
//!   and fades towards RTT_min by 5 % at each congestion event;
//! * the throughput B is an average (B ← (3B + b)/4) of samples each over at least a
//!   window of segments and RTT_min, restarted during the first 3 RTT_min after a backoff;
//!   a change of its maximum by more than 20 % between two events resets β to 0.5 and
//!   keeps it there for the next event too (`modeswitch`);
//! * α is scaled by RTT_min/100 ms (`use_rtt_scaling`, clamped to [0.1, 2]) in integer
//!   arithmetic, and recomputed only when the window grows by a segment.

use super::{Ack, CongestionControl, Window};
use crate::tcp::CaState;
use crate::time::{Time, NS_PER_S};

const ALPHA_BASE: u32 = 1 << 7;
const BETA_MIN: u32 = 1 << 6;
const BETA_MAX: u32 = 102;

#[derive(Debug, Clone)]
pub struct HtcpLinux {
    hz: u64,
    alpha: u32,
    beta: u32,
    modeswitch: bool,
    pkts_acked: u32,
    packetcount: u32,
    min_rtt: u32,
    max_rtt: u32,
    last_cong: u64,
    undo_last_cong: u64,
    min_b: u32,
    max_b: u32,
    old_max_b: u32,
    bi: u32,
    lasttime: u64,
    cwnd_cnt: u32,
}

impl HtcpLinux {
    pub fn new(hz: u32) -> Self {
        Self {
            hz: hz.max(1) as u64,
            alpha: ALPHA_BASE,
            beta: BETA_MIN,
            modeswitch: false,
            pkts_acked: 1,
            packetcount: 0,
            min_rtt: 0,
            max_rtt: 0,
            last_cong: 0,
            undo_last_cong: 0,
            min_b: 0,
            max_b: 0,
            old_max_b: 0,
            bi: 0,
            lasttime: 0,
            cwnd_cnt: 0,
        }
    }

    fn jiffies(&self, t: Time) -> u64 {
        t * self.hz / NS_PER_S
    }

    /// `usecs_to_jiffies` / `msecs_to_jiffies`: rounded up.
    fn to_jiffies(&self, d: Time) -> u32 {
        (d * self.hz).div_ceil(NS_PER_S) as u32
    }

    pub fn beta(&self) -> f64 {
        self.beta as f64 / 128.0
    }

    pub fn alpha(&self) -> f64 {
        self.alpha as f64 / 128.0
    }

    fn ccount(&self, now: u64) -> u64 {
        (now - self.last_cong) / self.min_rtt.max(1) as u64
    }

    fn measure_rtt(&mut self, srtt: u32, state: CaState) {
        if self.min_rtt > srtt || self.min_rtt == 0 {
            self.min_rtt = srtt;
        }
        if state == CaState::Open {
            self.max_rtt = self.max_rtt.max(self.min_rtt);
            if self.max_rtt < srtt && srtt <= self.max_rtt + self.to_jiffies(20_000_000) {
                self.max_rtt = srtt;
            }
        }
    }

    fn measure_throughput(&mut self, w: &Window, ack: &Ack) {
        let now = self.jiffies(ack.now);
        if ack.state != CaState::Open {
            self.packetcount = 0;
            self.lasttime = now;
            return;
        }
        self.packetcount += ack.acked;
        let need = w.cwnd.saturating_sub((self.alpha >> 7).max(1));
        if self.packetcount >= need
            && now - self.lasttime >= self.min_rtt as u64
            && self.min_rtt > 0
        {
            let cur = (self.packetcount as u64 * self.hz / (now - self.lasttime).max(1)) as u32;
            if self.ccount(now) <= 3 {
                (self.min_b, self.max_b, self.bi) = (cur, cur, cur);
            } else {
                self.bi = ((3 * self.bi as u64 + cur as u64) / 4) as u32;
                self.max_b = self.max_b.max(self.bi);
                self.min_b = self.min_b.min(self.max_b);
            }
            self.packetcount = 0;
            self.lasttime = now;
        }
    }

    fn beta_update(&mut self) {
        let (max_b, old) = (self.max_b as u64, self.old_max_b as u64);
        self.old_max_b = self.max_b;
        if !(4 * old..=6 * old).contains(&(5 * max_b)) {
            self.beta = BETA_MIN;
            self.modeswitch = false;
            return;
        }
        if self.modeswitch && self.min_rtt > self.to_jiffies(10_000_000) && self.max_rtt > 0 {
            self.beta = ((self.min_rtt << 7) / self.max_rtt).clamp(BETA_MIN, BETA_MAX);
        } else {
            self.beta = BETA_MIN;
            self.modeswitch = true;
        }
    }

    fn alpha_update(&mut self, now: u64) {
        let hz = self.hz;
        let mut diff = now - self.last_cong;
        let mut factor = 1u64;
        if diff > hz {
            diff -= hz;
            factor = 1 + (10 * diff + (diff / 2) * (diff / 2) / hz) / hz;
        }
        if self.min_rtt > 0 {
            let scale = ((hz << 3) / (10 * self.min_rtt as u64)).clamp(1 << 2, 10 << 3);
            factor = ((factor << 3) / scale).max(1);
        }
        let alpha = 2 * factor * (128 - self.beta as u64);
        self.alpha = if alpha == 0 {
            ALPHA_BASE
        } else {
            alpha.min(u32::MAX as u64) as u32
        };
    }
}

impl CongestionControl for HtcpLinux {
    fn name(&self) -> &'static str {
        "htcp_linux"
    }

    fn init(&mut self, _w: &mut Window, ack: &Ack) {
        self.last_cong = self.jiffies(ack.now);
    }

    fn has_packets_acked(&self) -> bool {
        true
    }

    fn on_packets_acked(&mut self, w: &mut Window, ack: &Ack) {
        if ack.state == CaState::Open {
            self.pkts_acked = ack.acked;
        }
        if let Some(r) = ack.rtt.filter(|&r| r > 0) {
            self.measure_rtt(self.to_jiffies(r), ack.state);
        }
        self.measure_throughput(w, ack);
    }

    fn on_ack(&mut self, w: &mut Window, ack: &Ack) {
        if !ack.cwnd_limited {
            return;
        }
        if w.in_slow_start() {
            w.slow_start(ack.acked);
            return;
        }
        if ((self.cwnd_cnt as u64 * self.alpha as u64) >> 7) >= w.cwnd as u64 {
            w.cwnd += 1;
            self.cwnd_cnt = 0;
            self.alpha_update(self.jiffies(ack.now));
        } else {
            self.cwnd_cnt += self.pkts_acked;
        }
        self.pkts_acked = 1;
    }

    fn ssthresh_on_loss(&mut self, w: &Window, now: Time) -> u32 {
        self.beta_update();
        self.alpha_update(self.jiffies(now));
        if self.min_rtt > 0 && self.max_rtt > self.min_rtt {
            self.max_rtt = self.min_rtt + (self.max_rtt - self.min_rtt) * 95 / 100;
        }
        // `htcp_reset` on entering Recovery/Loss.
        self.undo_last_cong = self.last_cong;
        self.last_cong = self.jiffies(now);
        ((w.cwnd as u64 * self.beta as u64) >> 7).max(2) as u32
    }

    fn on_rto(&mut self, _w: &Window, now: Time) {
        self.undo_last_cong = self.last_cong;
        self.last_cong = self.jiffies(now);
    }

    fn on_recovery_exit(&mut self, _w: &mut Window, now: Time) {
        // `htcp_state(TCP_CA_Open)`: the event ends now.
        if self.undo_last_cong != 0 {
            self.last_cong = self.jiffies(now);
            self.undo_last_cong = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NS_PER_MS;

    #[test]
    fn at_hz_250_an_rtt_of_11_5_ms_always_backs_off_by_half() {
        let mut h = HtcpLinux::new(250);
        h.measure_rtt(h.to_jiffies(11_500_000), CaState::Open);
        h.max_rtt = h.to_jiffies(13 * NS_PER_MS);
        h.modeswitch = true;
        h.beta_update();
        assert_eq!(h.beta, BETA_MIN);
        // At HZ = 1000 it is adaptive: 12/13 clamps to 0.8.
        let mut h = HtcpLinux::new(1000);
        h.measure_rtt(h.to_jiffies(11_500_000), CaState::Open);
        h.max_rtt = h.to_jiffies(13 * NS_PER_MS);
        h.modeswitch = true;
        h.beta_update();
        assert_eq!(h.beta, BETA_MAX);
    }

    #[test]
    fn alpha_is_scaled_by_the_rtt_over_100_ms() {
        // 3 s after the last event: 1 + 10·2 + 1 = 22 at 100 ms, 22·8/66 → 2 at 12 ms.
        for (rtt_ms, want) in [(100, 22), (12, 2)] {
            let mut h = HtcpLinux::new(250);
            h.min_rtt = h.to_jiffies(rtt_ms * NS_PER_MS);
            h.last_cong = 0;
            h.alpha_update(750);
            assert_eq!(h.alpha, 2 * want * (128 - BETA_MIN), "{rtt_ms} ms");
        }
    }

    #[test]
    fn a_throughput_change_of_more_than_a_fifth_resets_beta_for_two_events() {
        let mut h = HtcpLinux::new(1000);
        h.min_rtt = 100;
        h.max_rtt = 120;
        (h.old_max_b, h.max_b, h.modeswitch) = (1000, 1000, true);
        h.beta_update();
        assert_eq!(h.beta, 106.min(BETA_MAX));
        h.max_b = 1300;
        h.beta_update();
        assert_eq!(h.beta, BETA_MIN);
        h.beta_update(); // steady again, but modeswitch was cleared
        assert_eq!(h.beta, BETA_MIN);
        h.beta_update();
        assert_eq!(h.beta, BETA_MAX.min((100 << 7) / 120));
    }
}
