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
#include "fastexp.h"
#include "linear.h"
#include "ms-error.h"


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
