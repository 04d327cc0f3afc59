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

#include "backend.h"
#include "ms-error.h"

struct ms_qmoe;

/* GPT-OSS expert activation constants. */
struct ms_swiglu {
	float limit;  /* gate clamped above, up clamped to [-limit, limit] */
	float alpha;  /* gate * sigmoid(alpha * gate) */
};

/* One gate/up pair -> activation: gate clamped above only, up on both
 * sides, (up + 1) * gate * sigmoid(alpha * gate). */
static inline float ms_swiglu_eval(struct ms_swiglu a, float gate, float up)
{
	gate = gate > a.limit ? a.limit : gate;
	up = up > a.limit ? a.limit : (up < -a.limit ? -a.limit : up);
	return (up + 1.0f) * (gate / (1.0f + expf(-a.alpha * gate)));
}

/* Top-k of the router logits (largest first; ties to the lower index) and a
 * softmax over the k selected values. logits [n, E]; sel and w [n, k]. */
void ms_moe_route(const float *logits, int64_t n, int64_t n_experts, int64_t k, int32_t *sel,
		  float *w);

/* out[n, H] = sum_j w[t, j] * (down_e(act(gate_up_e(h[t]) + b)) + b),
 * e = sel[t, j]. Returns -ENOMEM when scratch cannot be allocated. */
int ms_moe_forward(struct ms_backend *be, const struct ms_qmoe *m, struct ms_swiglu act,
		   const float *h, int64_t n, const int32_t *sel, const float *w, int64_t k,
		   float *out, struct ms_err *err);

#endif
