// SPDX-License-Identifier: GPL-2.0
/*
 * xl_bic: xferlab's BPF implementation of BIC-TCP, Binary Increase Congestion control
 * (L. Xu, K. Harfoush, I. Rhee, "Binary Increase Congestion Control (BIC) for Fast
 * Long-Distance Networks", IEEE INFOCOM 2004), with the same laws and constants as the
 * simulator's crates/sim/src/cc/bic.rs.
 *
 * After a congestion event the window that saw the loss, W_max, is the upper end of a binary
 * search and the reduced window its lower end.  Once per round-trip time the window moves by
 * an increment chosen from its distance to W_max:
 *   below W_max (binary search increase): half the distance (to the midpoint), at most
 *     S_max = 16 segments (additive increase when far away) and at least S_min = 0.01;
 *   at or above W_max (max probing): the distance already travelled beyond W_max, clamped
 *     to [S_min, S_max] (the overshoot doubles each round, then grows by S_max);
 *   at or below low_window = 14 segments: standard TCP, one segment per round-trip time.
 * On a congestion event the window becomes beta * cwnd, beta = 819/1024 (about 0.8), or half
 * at or below low_window.  Fast convergence: a loss below the previous W_max sets
 * W_max = cwnd * (1 + beta) / 2 instead of cwnd.  A timeout forgets W_max.
 *
 * The increment is chosen at the start of each round (the acknowledgement of the window in
 * force when it started) and spread evenly over that round's acknowledged segments; the
 * window is real-valued: snd_cwnd plus a fraction kept in fixed point.
 */
#include "xl_cc.h"

char _license[] SEC("license") = "GPL";

#define LOW_WINDOW 14			/* segments */
#define S_MAX ((__u64)16 * XL_ONE)	/* segments per RTT */
#define S_MIN ((__u64)XL_ONE / 100)	/* 0.01 segment per RTT */
#define BETA 819			/* beta = BETA / BETA_SCALE */
#define BETA_SCALE 1024

struct bic {
	__u64 w_max;		/* W_max in XL_ONE units; 0: none (before any loss, after a timeout) */
	__u64 round_inc;	/* increment of the current round, XL_ONE units per round */
	__u32 frac;		/* fractional part of the window, XL_ONE units */
	__u32 round_left;	/* segments still to be acknowledged in the round; 0: start one */
	__u32 round_cwnd;	/* window at the start of the round: its segments share round_inc */
	__u32 in_reduction;	/* a congestion event happened and the window is being reduced */
};

static __always_inline struct bic *bic_of(struct sock *sk)
{
	return (struct bic *)xl_priv(sk);
}

static __always_inline void reset_round(struct bic *ca)
{
	ca->frac = 0;
	ca->round_left = 0;
}

/* The increment per round-trip time (XL_ONE units) for a window of `w` (XL_ONE units). */
static __always_inline __u64 increment(const struct bic *ca, __u64 w)
{
	__u64 inc;

	if (w <= (__u64)LOW_WINDOW * XL_ONE)
		return XL_ONE;
	if (w < ca->w_max)
		inc = (ca->w_max - w) / 2;
	else
		inc = w - ca->w_max;
	if (inc < S_MIN)
		inc = S_MIN;
	if (inc > S_MAX)
		inc = S_MAX;
	return inc;
}

SEC("struct_ops/xl_bic_init")
void BPF_PROG(xl_bic_init, struct sock *sk)
{
	struct bic *ca = bic_of(sk);

	ca->w_max = 0;
	ca->round_inc = 0;
	ca->round_cwnd = 0;
	ca->in_reduction = 0;
	reset_round(ca);
}

SEC("struct_ops/xl_bic_cong_avoid")
void BPF_PROG(xl_bic_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = xl_tcp(sk);
	struct bic *ca = bic_of(sk);
	int i;

	acked = xl_slow_start_then_avoid(tp, acked);
	/* Each pass consumes the rest of a round; an ACK rarely spans more than two rounds. */
	for (i = 0; i < 4 && acked; i++) {
		__u32 n;

		if (!ca->round_left) {
			ca->round_cwnd = xl_max(tp->snd_cwnd, 1);
			ca->round_left = ca->round_cwnd;
			ca->round_inc = increment(ca, (__u64)tp->snd_cwnd * XL_ONE + ca->frac);
		}
		n = xl_min(acked, ca->round_left);
		ca->round_left -= n;
		acked -= n;
		xl_grow_fraction(tp, &ca->frac, (__u64)n * ca->round_inc / ca->round_cwnd);
	}
	if (acked && ca->round_cwnd)
		xl_grow_fraction(tp, &ca->frac, (__u64)acked * ca->round_inc / ca->round_cwnd);
}

/* Records W_max (with fast convergence); returns beta * cwnd (half at or below low_window). */
SEC("struct_ops/xl_bic_ssthresh")
__u32 BPF_PROG(xl_bic_ssthresh, struct sock *sk)
{
	const struct tcp_sock *tp = xl_tcp(sk);
	struct bic *ca = bic_of(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u64 w = (__u64)cwnd * XL_ONE;

	if (w < ca->w_max)
		ca->w_max = w * (BETA_SCALE + BETA) / (2 * BETA_SCALE);
	else
		ca->w_max = w;
	reset_round(ca);
	ca->in_reduction = 1;
	if (cwnd <= LOW_WINDOW)
		return xl_max(cwnd / 2, 2);
	return xl_max((__u32)((__u64)cwnd * BETA / BETA_SCALE), 2);
}

SEC("struct_ops/xl_bic_set_state")
void BPF_PROG(xl_bic_set_state, struct sock *sk, __u8 new_state)
{
	struct bic *ca = bic_of(sk);

	if (new_state == TCP_CA_Loss) {
		/* A timeout: forget W_max, probe from scratch. */
		ca->w_max = 0;
		reset_round(ca);
	} else if (new_state == TCP_CA_Open && ca->in_reduction) {
		/* Recovery ended with cwnd = ssthresh: a new round starts from there. */
		reset_round(ca);
		ca->in_reduction = 0;
	}
}

SEC("struct_ops/xl_bic_undo_cwnd")
__u32 BPF_PROG(xl_bic_undo_cwnd, struct sock *sk)
{
	return xl_undo_cwnd(xl_tcp(sk));
}

SEC(".struct_ops")
struct tcp_congestion_ops xl_bic = {
	.init = (void *)xl_bic_init,
	.cong_avoid = (void *)xl_bic_cong_avoid,
	.ssthresh = (void *)xl_bic_ssthresh,
	.set_state = (void *)xl_bic_set_state,
	.undo_cwnd = (void *)xl_bic_undo_cwnd,
	.name = "xl_bic",
};
