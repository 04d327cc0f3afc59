/*
 * rowops.h: the small per-row operations of a forward pass (RMSNorm, the
 * rotary embedding, the residual add), vectorized. engine/rowops.c is built
 * three times at -O3 without FMA contraction (generic x86-64, AVX2,
 * AVX-512; engine/meson.build) and every build gives the same bits: each
 * vector lane runs the scalar operations of its element, and the one sum
 * (RMSNorm's) is formed over 8 fixed partial sums, which a vector of any
 * width keeps lane for lane. The backend picks the widest the CPU and the
 * kernel set allow (be->rowops).
 */
#ifndef MS_ROWOPS_H
#define MS_ROWOPS_H

#include <stdint.h>

struct ms_rowops {
	/* y = w * (x * r), r = 1 / sqrt(mean(x^2) + eps): the sum of squares in
	 * double over 8 partial sums (element i into sum i % 8), then
	 * ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)). y may be x. */
	void (*rmsnorm)(float *y, const float *x, const float *w, int64_t H, double eps);
	/* Rotate n_heads vectors of size d in place by a position's table
	 * (cs, sn: d / 2 each), half-split pairing (i, i + d / 2):
	 * (a, b) -> (a cs - b sn, b cs + a sn). */
	void (*rope)(const float *cs, const float *sn, float *x, int64_t n_heads, int64_t d);
	/* y[i] += x[i] */
	void (*add)(float *y, const float *x, int64_t n);
};

extern const struct ms_rowops ms_rowops_generic, ms_rowops_avx2, ms_rowops_avx512;

#endif
