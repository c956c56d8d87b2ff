/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Pieces shared by xferlab's BPF congestion controls (bpf/xl_*.bpf.c): the project's BPF
 * implementations of published algorithms, registered as struct_ops tcp_congestion_ops.
 *
 * The helpers mirror the simulator's `Window` (crates/sim/src/cc/mod.rs) so that each law
 * reads the same in both places: slow start with byte counting (RFC 5681 §3.1, RFC 3465),
 * additive increase of one segment per w acknowledged segments, and a real-valued window
 * whose fractional part is kept in fixed point (XL_ONE = 2^20 per segment).
 */
#ifndef XL_CC_H
#define XL_CC_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

/* One segment in the fixed-point unit of fractional windows and per-RTT increments. */
#define XL_ONE (1u << 20)

static __always_inline struct tcp_sock *xl_tcp(struct sock *sk)
{
	/* struct_ops tcp_congestion_ops programs see their socket argument as a tcp_sock. */
	return (struct tcp_sock *)sk;
}

/* The congestion control's private area (ICSK_CA_PRIV_SIZE = 104 bytes). */
static __always_inline void *xl_priv(struct sock *sk)
{
	return (void *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline __u32 xl_min(__u32 a, __u32 b) { return a < b ? a : b; }
static __always_inline __u32 xl_max(__u32 a, __u32 b) { return a > b ? a : b; }

static __always_inline int xl_in_slow_start(const struct tcp_sock *tp)
{
	return tp->snd_cwnd < tp->snd_ssthresh;
}

/*
 * The window may grow only if the sender used it (the kernel's tcp_is_cwnd_limited rule):
 * in slow start, while cwnd is less than twice the most packets in flight in the last
 * window; otherwise when the stack marked the last window as cwnd-limited.  Without this
 * check a sender limited by the application or the receive window grows cwnd without bound.
 */
static __always_inline int xl_cwnd_limited(const struct tcp_sock *tp)
{
	if (xl_in_slow_start(tp))
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return tp->is_cwnd_limited;
}

static __always_inline void xl_set_cwnd(struct tcp_sock *tp, __u32 cwnd)
{
	tp->snd_cwnd = xl_min(cwnd, tp->snd_cwnd_clamp);
}

/*
 * Slow start (RFC 5681 §3.1 with RFC 3465 byte counting): grow by the segments acknowledged,
 * up to ssthresh.  Returns the acknowledged segments left once ssthresh is reached.
 */
static __always_inline __u32 xl_slow_start(struct tcp_sock *tp, __u32 acked)
{
	__u32 cwnd = xl_min(tp->snd_cwnd + acked, tp->snd_ssthresh);

	acked -= cwnd - tp->snd_cwnd;
	xl_set_cwnd(tp, cwnd);
	return acked;
}

/*
 * The common start of every growth law here (the simulator's Window::slow_start_then_avoid):
 * nothing grows unless the sender was window-limited; below ssthresh the window slow-starts.
 * Returns the acknowledged segments left for congestion avoidance (0: none).
 */
static __always_inline __u32 xl_slow_start_then_avoid(struct tcp_sock *tp, __u32 acked)
{
	if (!xl_cwnd_limited(tp))
		return 0;
	if (xl_in_slow_start(tp))
		acked = xl_slow_start(tp, acked);
	return acked;
}

/*
 * Additive increase of one segment per w segments acknowledged, counted in snd_cwnd_cnt
 * (segments, not ACKs, so delayed ACKs do not slow it down).
 */
static __always_inline void xl_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked)
{
	__u32 cwnd = tp->snd_cwnd;

	if (w == 0)
		w = 1;
	if (tp->snd_cwnd_cnt >= w) {
		tp->snd_cwnd_cnt = 0;
		cwnd++;
	}
	tp->snd_cwnd_cnt += acked;
	if (tp->snd_cwnd_cnt >= w) {
		__u32 delta = tp->snd_cwnd_cnt / w;

		tp->snd_cwnd_cnt -= delta * w;
		cwnd += delta;
	}
	xl_set_cwnd(tp, cwnd);
}

/*
 * Adds `inc` (XL_ONE units) to the real-valued window cwnd + *frac/XL_ONE, moving whole
 * segments into snd_cwnd (the simulator's Window::grow_fraction).
 */
static __always_inline void xl_grow_fraction(struct tcp_sock *tp, __u32 *frac, __u64 inc)
{
	__u64 f = *frac + inc;

	if (f >= XL_ONE) {
		xl_set_cwnd(tp, tp->snd_cwnd + (__u32)(f / XL_ONE));
		f %= XL_ONE;
	}
	*frac = (__u32)f;
}

/* Undo of a spurious reduction: back to the window before it (as Reno). */
static __always_inline __u32 xl_undo_cwnd(const struct tcp_sock *tp)
{
	return xl_max(tp->snd_cwnd, tp->prior_cwnd);
}

#endif /* XL_CC_H */
