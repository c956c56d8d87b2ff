// SPDX-License-Identifier: GPL-2.0
/*
 * xl_htcp: xferlab's BPF implementation of H-TCP (D. Leith, R. Shorten, "H-TCP: TCP for
 * high-speed and long-distance networks", PFLDnet 2004; D. Leith, "H-TCP: TCP Congestion
 * Control for High Bandwidth-Delay Product Paths", draft-leith-tcp-htcp), with the same laws
 * and constants as the simulator's crates/sim/src/cc/htcp.rs (its default mode).
 *
 * The increase depends on the time D since the last congestion event:
 *   alpha(D) = 1                                 D <= D_L = 1 s
 *   alpha(D) = 1 + 10 (D - D_L) + ((D - D_L)/2)^2   D >  D_L
 * and the increase applied is 2 (1 - beta) alpha(D) segments per round-trip time
 * (2 (1 - beta) alpha / cwnd per acknowledged segment), so that flows with different backoff
 * factors share fairly.  On a congestion event the window becomes beta * cwnd with the
 * adaptive backoff beta = RTT_min / RTT_max clamped to [0.5, 0.8] (RTT_min and RTT_max: the
 * smallest and largest RTT samples of the connection).
 *
 * As the simulator's default, the draft's throughput-based reset of beta is on: B(k), the
 * highest throughput over intervals of at least RTT_min outside recovery in the k-th
 * congestion epoch, is compared with B(k-1) at each congestion event; if it changed by more
 * than 20 % (or B(k-1) is unknown) beta = 0.5.  In this mode beta is also 0.5 when
 * RTT_min <= 10 ms.  RTT scaling of alpha is not implemented (nor in the simulator).
 * D starts at the first ACK of the connection and restarts at every loss or timeout.
 * Slow start is standard.
 */
#include "xl_cc.h"

char _license[] SEC("license") = "GPL";

#define DELTA_L_US 1000000ull		/* D_L = 1 s */
#define BANDWIDTH_SWITCH_DIV 5		/* throughput change beyond 1/5 = 20 % resets beta */
#define ADAPTIVE_MIN_RTT_US 10000	/* beta = 0.5 when RTT_min <= 10 ms (throughput mode) */
#define ALPHA_ONE 1024			/* alpha in 1/1024 */
#define MAX_DELTA_MS 10000000ull	/* cap on D - D_L in the alpha formula (no overflow) */

struct htcp {
	__u64 last_congestion;	/* tcp_mstamp (us) of the last congestion event; 0: before the first ACK */
	__u64 tp_start;		/* start of the throughput interval (us); 0: none yet */
	__u32 rtt_min;		/* smallest RTT sample, us; 0: none */
	__u32 rtt_max;		/* largest RTT sample, us */
	__u32 beta;		/* backoff factor of the last congestion event, XL_ONE units */
	__u32 frac;		/* fraction of a segment towards the next increase, XL_ONE units */
	__u32 tp_segments;	/* segments delivered since tp_start */
	__u32 b_max;		/* B(k): highest throughput in this epoch, segments/s */
	__u32 b_prev;		/* B(k-1); 0 when unknown */
	__u32 in_reduction;	/* a congestion event happened and the window is being reduced */
};

#ifdef XL_RTT_LOG
/*
 * Test builds only (tests/test_bpfcc_delay.py compiles with -DXL_RTT_LOG): every RTT sample
 * pkts_acked receives is logged, so that the test can apply the law to the same samples
 * from outside.  Slot 0 counts the samples (in t_ns); samples are in slots 1..SLOTS-1,
 * timestamped with bpf_ktime_get_ns() (CLOCK_MONOTONIC).  The test runs one socket at a time.
 */
#define XL_RTT_LOG_SLOTS (1 << 17)
struct xl_rtt_log_entry {
	__u64 t_ns;
	__s64 rtt_us;
};
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, XL_RTT_LOG_SLOTS);
	__type(key, __u32);
	__type(value, struct xl_rtt_log_entry);
} xl_rtt_log SEC(".maps");

static __always_inline void log_rtt(__s32 rtt_us)
{
	__u32 zero = 0, slot;
	struct xl_rtt_log_entry *head = bpf_map_lookup_elem(&xl_rtt_log, &zero), *e;

	if (!head)
		return;
	slot = (__u32)++head->t_ns;
	if (slot >= XL_RTT_LOG_SLOTS)
		return;
	e = bpf_map_lookup_elem(&xl_rtt_log, &slot);
	if (e) {
		e->t_ns = bpf_ktime_get_ns();
		e->rtt_us = rtt_us;
	}
}
#else
#define log_rtt(rtt_us)
#endif

static __always_inline struct htcp *htcp_of(struct sock *sk)
{
	return (struct htcp *)xl_priv(sk);
}

/* alpha(D) before the fairness scaling, 1/1024 units, for D in microseconds. */
static __always_inline __u64 alpha_raw(__u64 delta_us)
{
	__u64 d_ms;

	if (delta_us <= DELTA_L_US)
		return ALPHA_ONE;
	d_ms = (delta_us - DELTA_L_US) / 1000;
	if (d_ms > MAX_DELTA_MS)
		d_ms = MAX_DELTA_MS;
	/* 1 + 10 d + (d/2)^2 with d = d_ms / 1000 s */
	return ALPHA_ONE + d_ms * 10 * ALPHA_ONE / 1000 + d_ms * d_ms * (ALPHA_ONE / 4) / 1000000;
}

SEC("struct_ops/xl_htcp_init")
void BPF_PROG(xl_htcp_init, struct sock *sk)
{
	struct htcp *ca = htcp_of(sk);

	ca->last_congestion = 0;
	ca->tp_start = 0;
	ca->rtt_min = 0;
	ca->rtt_max = 0;
	ca->beta = XL_ONE / 2;
	ca->frac = 0;
	ca->tp_segments = 0;
	ca->b_max = 0;
	ca->b_prev = 0;
	ca->in_reduction = 0;
}

SEC("struct_ops/xl_htcp_pkts_acked")
void BPF_PROG(xl_htcp_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct htcp *ca = htcp_of(sk);
	__s32 rtt = sample->rtt_us;

	log_rtt(rtt);
	if (!ca->last_congestion)
		ca->last_congestion = xl_tcp(sk)->tcp_mstamp;
	if (rtt > 0) {
		if (!ca->rtt_min || (__u32)rtt < ca->rtt_min)
			ca->rtt_min = rtt;
		if ((__u32)rtt > ca->rtt_max)
			ca->rtt_max = rtt;
	}
}

SEC("struct_ops/xl_htcp_cong_avoid")
void BPF_PROG(xl_htcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = xl_tcp(sk);
	struct htcp *ca = htcp_of(sk);
	__u64 now = tp->tcp_mstamp, alpha, inc;
	__u32 cwnd;

	if (!ca->last_congestion)
		ca->last_congestion = now;
	/* Throughput over intervals of at least RTT_min (ACKs outside recovery only). */
	if (!ca->tp_start) {
		ca->tp_start = now;
		ca->tp_segments = 0;
	} else {
		__u64 dt = now - ca->tp_start;

		ca->tp_segments += acked;
		if (ca->rtt_min && dt >= ca->rtt_min) {
			__u64 rate = (__u64)ca->tp_segments * 1000000 / dt;

			if (rate > ca->b_max)
				ca->b_max = (__u32)rate;
			ca->tp_start = now;
			ca->tp_segments = 0;
		}
	}
	acked = xl_slow_start_then_avoid(tp, acked);
	if (!acked)
		return;
	/* 2 (1 - beta) alpha(D) per RTT, in XL_ONE units */
	alpha = alpha_raw(now - ca->last_congestion);
	inc = 2 * (__u64)(XL_ONE - ca->beta) * alpha / ALPHA_ONE;
	cwnd = xl_max(tp->snd_cwnd, 1);
	xl_grow_fraction(tp, &ca->frac, (__u64)acked * inc / cwnd);
}

/*
 * A congestion event: beta <- RTT_min/RTT_max clamped to [0.5, 0.8] (or 0.5 by the
 * throughput-based reset), D restarts, and the window becomes beta * cwnd (at least 2).
 * beta is kept as the fraction num/den, so that the window is the floor of the exact
 * product, as the simulator's (a beta rounded to 1/1000 gave up to cwnd/1000 segments less).
 */
SEC("struct_ops/xl_htcp_ssthresh")
__u32 BPF_PROG(xl_htcp_ssthresh, struct sock *sk)
{
	const struct tcp_sock *tp = xl_tcp(sk);
	struct htcp *ca = htcp_of(sk);
	__u32 diff = ca->b_max > ca->b_prev ? ca->b_max - ca->b_prev : ca->b_prev - ca->b_max;
	int stable = ca->b_prev > 0 && (__u64)diff * BANDWIDTH_SWITCH_DIV <= ca->b_prev;
	__u32 num = 1, den = 2;		/* beta = num / den: 0.5 unless adaptive */

	if (stable && ca->rtt_min > ADAPTIVE_MIN_RTT_US && ca->rtt_max) {
		if ((__u64)ca->rtt_min * 5 >= (__u64)ca->rtt_max * 4) {
			num = 4;		/* clamped to 0.8 */
			den = 5;
		} else if ((__u64)ca->rtt_min * 2 > ca->rtt_max) {
			num = ca->rtt_min;
			den = ca->rtt_max;
		}
	}
	ca->beta = (__u32)((__u64)num * XL_ONE / den);
	ca->b_prev = ca->b_max;
	ca->b_max = 0;
	ca->tp_start = 0;
	ca->last_congestion = tp->tcp_mstamp;
	ca->frac = 0;
	ca->in_reduction = 1;
	return xl_max((__u32)((__u64)tp->snd_cwnd * num / den), 2);
}

SEC("struct_ops/xl_htcp_set_state")
void BPF_PROG(xl_htcp_set_state, struct sock *sk, __u8 new_state)
{
	struct htcp *ca = htcp_of(sk);

	if (new_state == TCP_CA_Loss) {
		/* A timeout is a congestion event: D restarts. */
		ca->last_congestion = xl_tcp(sk)->tcp_mstamp;
		ca->tp_start = 0;
		ca->frac = 0;
	} else if (new_state == TCP_CA_Open && ca->in_reduction) {
		ca->frac = 0;
		ca->in_reduction = 0;
	}
}

SEC("struct_ops/xl_htcp_undo_cwnd")
__u32 BPF_PROG(xl_htcp_undo_cwnd, struct sock *sk)
{
	return xl_undo_cwnd(xl_tcp(sk));
}

SEC(".struct_ops")
struct tcp_congestion_ops xl_htcp = {
	.init = (void *)xl_htcp_init,
	.cong_avoid = (void *)xl_htcp_cong_avoid,
	.ssthresh = (void *)xl_htcp_ssthresh,
	.set_state = (void *)xl_htcp_set_state,
	.pkts_acked = (void *)xl_htcp_pkts_acked,
	.undo_cwnd = (void *)xl_htcp_undo_cwnd,
	.name = "xl_htcp",
};
