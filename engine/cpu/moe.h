/*
 * moe.h: the GPT-OSS mixture-of-experts block on top of the gemm kernels.
 *
 * Tokens are grouped by expert so each active expert's weights are streamed
 * once per call, whatever the number of tokens routed to it. Work items are
 * (expert, block of output rows), spread over the pool. Each token's k expert
 * outputs are summed in routing order, so results do not depend on threads.
 */
#ifndef MS_MOE_H
#define MS_MOE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"
#include "linear.h"
#include "ms-error.h"


/* Float bits as a signed integer and back (the clamps below compare and
 * select on these: a floating-point compare would be kept as a branch and
 * stop the compiler from vectorizing the loops that use them). */
static inline int32_t ms_f2i(float f)
{
	int32_t i;
	memcpy(&i, &f, 4);
	return i;
}

static inline float ms_i2f(int32_t i)
{
	float f;
	memcpy(&f, &i, 4);
	return f;
}

/* min(x, c) for c >= 0 by the bits (int order = float order for x >= 0;
 * a negative x is a negative int; above 0x7F800000 are the NaNs, which
 * stay NaN as with a float compare). */
static inline float ms_min_pos(float x, float c)
{
	int32_t b = ms_f2i(x);
	int32_t m = 0 - (int32_t)((b > ms_f2i(c)) & (b <= 0x7F800000));
	return ms_i2f((ms_f2i(c) & m) | (b & ~m));
}

/* max(x, -c) for c >= 0, likewise. */
static inline float ms_max_neg(float x, float c)
{
	int32_t b = ms_f2i(x), a = b & INT32_MAX, nc = ms_f2i(c) | INT32_MIN;
	int32_t m = 0 - (int32_t)((b < 0) & (a > ms_f2i(c)) & (a <= 0x7F800000));
	return ms_i2f((nc & m) | (b & ~m));
}

/* e^x within 3.1 ulp of the exact value on [-87, 88] (checked over every
 * float there in tests/test-model.c): x = n ln2 + r with |r| <= ln2/2
 * (Cody-Waite split of ln2), a degree-6 polynomial for e^r, 2^n built in
 * the exponent bits, n rounded by adding and subtracting 1.5 * 2^23.
 * Branch-free, so a loop that calls it vectorizes (glibc's expf is a
 * call). x is clamped to [-87, 88]: in gate / (1 + e^x) that changes
 * nothing above e^-87 and, past e^88, leaves |gate| / e^88 (below 1e-30
 * for any |gate| < 1e8) where the exact value underflows to 0. NaN gives 1
 * (the caller's gate carries the NaN on). */
static inline float ms_exp_clamped(float x)
{
	x = ms_max_neg(ms_min_pos(x, 88.0f), 87.0f);
	int32_t nan = 0 - (int32_t)((ms_f2i(x) & INT32_MAX) > 0x7F800000);
	x = ms_i2f(ms_f2i(x) & ~nan); /* NaN -> 0: the conversion below needs a number */
	float n = (x * 1.44269504089f + 12582912.0f) - 12582912.0f;
	float r = x - n * 0.693145751953125f;
	r = r - n * 1.428606765330187e-06f;
	float p = 1.0f / 720.0f;
	p = p * r + 1.0f / 120.0f;
	p = p * r + 1.0f / 24.0f;
	p = p * r + 1.0f / 6.0f;
	p = p * r + 0.5f;
	p = p * r + 1.0f;
	p = p * r + 1.0f;
	return p * ms_i2f(((int32_t)n + 127) << 23);
}

/* One gate/up pair -> activation: gate clamped above only, up on both
 * sides, (up + 1) * gate * sigmoid(alpha * gate). */
static inline float ms_swiglu_eval(struct ms_swiglu a, float gate, float up)
{
	gate = ms_min_pos(gate, a.limit);
	up = ms_max_neg(ms_min_pos(up, a.limit), a.limit);
	return (up + 1.0f) * (gate / (1.0f + ms_exp_clamped(-a.alpha * gate)));
}

/* a[i] = ms_swiglu_eval(act, g[2i] + b[2i], g[2i+1] + b[2i+1]) for i < n
 * (engine/swiglu.c, vectorized): built for generic x86-64 (SSE2), AVX2 and
 * AVX-512, all without FMA contraction, so all three give the scalar
 * function's bits; the backend picks one at start (be->swiglu_row). */
void ms_swiglu_row(struct ms_swiglu act, const float *restrict g, const float *restrict b,
		   int64_t n, float *restrict a);
void ms_swiglu_row_avx2(struct ms_swiglu act, const float *restrict g, const float *restrict b,
			int64_t n, float *restrict a);
void ms_swiglu_row_avx512(struct ms_swiglu act, const float *restrict g, const float *restrict b,
			  int64_t n, float *restrict a);

/* Top-k of the router logits (largest first; ties to the lower index) and a
 * softmax over the k selected values. logits [n, E]; sel and w [n, k]. */
void ms_moe_route(const float *logits, int64_t n, int64_t n_experts, int64_t k, int32_t *sel,
		  float *w);

/* out[n, H] += sum_j w[t, j] * (down_e(act(gate_up_e(h[t]) + b)) + b),
 * e = sel[t, j], the sum formed first in j order, then added (so adding
 * into the residual stream is the same as adding a separate result).
 * Its arrays and the experts' prepared inputs are the backend's scratch;
 * -ENOMEM with a message when that cannot grow (out untouched). */
int ms_moe_forward(struct ms_cpu *be, const struct ms_moe_w *m, struct ms_swiglu act,
		   const float *h, int64_t n, const int32_t *sel, const float *w, int64_t k,
		   float *out, struct ms_err *err);

#endif
