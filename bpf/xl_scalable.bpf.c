// SPDX-License-Identifier: GPL-2.0
/*
 * xl_scalable: xferlab's BPF implementation of Scalable TCP (T. Kelly, "Scalable TCP:
 * Improving Performance in Highspeed Wide Area Networks", ACM SIGCOMM CCR 33(2), 2003),
 * with the same laws and constants as the simulator's crates/sim/src/cc/scalable.rs.
 *
 * Kelly's multiplicative increase, multiplicative decrease:
 *   congestion avoidance: cwnd += a per acknowledged segment, a = 0.01 (1 % per RTT);
 *   congestion event:     cwnd -= b * cwnd, b = 0.125 (the window becomes 0.875 * cwnd).
 * The increase is counted in acknowledged segments: one segment per min(cwnd, 100) of them,
 * i.e. exactly a = 0.01 at and above 100 segments and one segment per window below (the
 * legacy region, where Scalable TCP must not be less aggressive than standard TCP).
 * Slow start is standard (RFC 5681 with RFC 3465 byte counting).
 */
#include "xl_cc.h"

char _license[] SEC("license") = "GPL";

/* 1/a with Kelly's a = 0.01: segments acknowledged per segment of growth. */
#define AI_CNT 100
/* The decrease is cwnd >> MD_SHIFT: b = 1/8. */
#define MD_SHIFT 3

SEC("struct_ops/xl_scalable_cong_avoid")
void BPF_PROG(xl_scalable_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = xl_tcp(sk);

	acked = xl_slow_start_then_avoid(tp, acked);
	if (!acked)
		return;
	xl_cong_avoid_ai(tp, xl_min(tp->snd_cwnd, AI_CNT), acked);
}

/* Kelly's decrease, b = 0.125: cwnd - floor(cwnd / 8), at least two segments. */
SEC("struct_ops/xl_scalable_ssthresh")
__u32 BPF_PROG(xl_scalable_ssthresh, struct sock *sk)
{
	const struct tcp_sock *tp = xl_tcp(sk);

	return xl_max(tp->snd_cwnd - (tp->snd_cwnd >> MD_SHIFT), 2);
}

SEC("struct_ops/xl_scalable_undo_cwnd")
__u32 BPF_PROG(xl_scalable_undo_cwnd, struct sock *sk)
{
	return xl_undo_cwnd(xl_tcp(sk));
}

SEC(".struct_ops")
struct tcp_congestion_ops xl_scalable = {
	.cong_avoid = (void *)xl_scalable_cong_avoid,
	.ssthresh = (void *)xl_scalable_ssthresh,
	.undo_cwnd = (void *)xl_scalable_undo_cwnd,
	.name = "xl_scalable",
};
