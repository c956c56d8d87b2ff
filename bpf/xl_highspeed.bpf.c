// SPDX-License-Identifier: GPL-2.0
/*
 * xl_highspeed: xferlab's BPF implementation of HighSpeed TCP (S. Floyd, RFC 3649,
 * "HighSpeed TCP for Large Congestion Windows", 2003), with the same laws and constants as
 * the simulator's crates/sim/src/cc/highspeed.rs.
 *
 * Above Low_Window = 38 segments the AIMD parameters depend on the current window w: each
 * round-trip time the window grows by a(w) segments (a(w)/w per acknowledged segment), and
 * a congestion event reduces it to (1 - b(w)) * w.  a(w) and b(w) come from RFC 3649 §5's
 * response function (Low_Window 38, High_Window 83000, High_P 1e-7, High_Decrease 0.1); at
 * or below Low_Window a = 1 and b = 0.5 (standard TCP).  They are tabulated by
 * bpf/gen_highspeed_table.py from the RFC's formulas (the ones behind its Appendix B table)
 * and interpolated linearly in w here.  Slow start is standard (RFC 3649 leaves it unchanged).
 */
#include "xl_cc.h"
#include "xl_highspeed_table.h"

char _license[] SEC("license") = "GPL";

struct highspeed {
	__u32 frac;		/* fraction of a segment accumulated towards the next increase, XL_ONE units */
	__u32 in_reduction;	/* a congestion event happened and the window is being reduced */
};

static __always_inline struct highspeed *hs_of(struct sock *sk)
{
	return (struct highspeed *)xl_priv(sk);
}

/* The last table row whose window is <= w16 (binary search; the caller checks row 0). */
static __always_inline __u32 find_row(__u32 w16)
{
	__u32 lo = 0, hi = HS_ROWS - 1;
	int i;

	for (i = 0; i < 8; i++) {	/* 2^8 > HS_ROWS */
		__u32 mid = (lo + hi + 1) / 2;

		if (mid >= HS_ROWS || lo >= hi)
			break;
		if (hs_table[mid].w16 <= w16)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* Linear interpolation of column `col` (0: a, 1: b) at window w16 (XL_ONE units). */
static __always_inline __u64 lookup(__u32 w16, int col)
{
	__u32 r, lo, hi, w0, w1;

	if (w16 < hs_table[0].w16)
		return col ? XL_ONE / 2 : XL_ONE;
	r = find_row(w16);
	if (r >= HS_ROWS - 1)
		return col ? hs_table[HS_ROWS - 1].b : hs_table[HS_ROWS - 1].a;
	lo = col ? hs_table[r].b : hs_table[r].a;
	hi = col ? hs_table[r + 1].b : hs_table[r + 1].a;
	w0 = hs_table[r].w16;
	w1 = hs_table[r + 1].w16;
	if (hi >= lo)
		return lo + (__u64)(hi - lo) * (w16 - w0) / (w1 - w0);
	return lo - (__u64)(lo - hi) * (w16 - w0) / (w1 - w0);
}

SEC("struct_ops/xl_highspeed_init")
void BPF_PROG(xl_highspeed_init, struct sock *sk)
{
	struct highspeed *ca = hs_of(sk);

	ca->frac = 0;
	ca->in_reduction = 0;
}

SEC("struct_ops/xl_highspeed_cong_avoid")
void BPF_PROG(xl_highspeed_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = xl_tcp(sk);
	struct highspeed *ca = hs_of(sk);
	__u32 cwnd;

	acked = xl_slow_start_then_avoid(tp, acked);
	if (!acked)
		return;
	/* w <- w + a(w)/w per acknowledged segment (RFC 3649 §5). */
	cwnd = xl_max(tp->snd_cwnd, 1);
	xl_grow_fraction(tp, &ca->frac, (__u64)acked * lookup(cwnd * 16, 0) / cwnd);
}

/* (1 - b(w)) * w, at least two segments (RFC 3649 §5). */
SEC("struct_ops/xl_highspeed_ssthresh")
__u32 BPF_PROG(xl_highspeed_ssthresh, struct sock *sk)
{
	const struct tcp_sock *tp = xl_tcp(sk);
	struct highspeed *ca = hs_of(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u64 b = lookup(cwnd * 16, 1);

	ca->frac = 0;
	ca->in_reduction = 1;
	return xl_max((__u32)((__u64)cwnd * (XL_ONE - b) / XL_ONE), 2);
}

SEC("struct_ops/xl_highspeed_set_state")
void BPF_PROG(xl_highspeed_set_state, struct sock *sk, __u8 new_state)
{
	struct highspeed *ca = hs_of(sk);

	/* After a timeout or at the end of a recovery, growth restarts from a whole window. */
	if (new_state == TCP_CA_Loss || (new_state == TCP_CA_Open && ca->in_reduction)) {
		ca->frac = 0;
		ca->in_reduction = 0;
	}
}

SEC("struct_ops/xl_highspeed_undo_cwnd")
__u32 BPF_PROG(xl_highspeed_undo_cwnd, struct sock *sk)
{
	return xl_undo_cwnd(xl_tcp(sk));
}

SEC(".struct_ops")
struct tcp_congestion_ops xl_highspeed = {
	.init = (void *)xl_highspeed_init,
	.cong_avoid = (void *)xl_highspeed_cong_avoid,
	.ssthresh = (void *)xl_highspeed_ssthresh,
	.set_state = (void *)xl_highspeed_set_state,
	.undo_cwnd = (void *)xl_highspeed_undo_cwnd,
	.name = "xl_highspeed",
};
