/*
 * linear.h: the weights of one projection, and of one layer's experts, as a
 * backend computes with them:
 *
 *   y = act(x) W^T * row_scale + bias
 *
 * A scheme (quant/) fills these at load (with its own bookkeeping beside
 * them, in struct ms_qlinear); the backend binds each matrix once and then
 * runs it. Nothing here depends on the checkpoint's format.
 */
#ifndef MS_LINEAR_H
#define MS_LINEAR_H

#include <stdint.h>

#include "actq.h"
#include "wmat.h"

struct ms_kernel;

struct ms_linear {
	struct ms_wmat w;
	float *bias;                    /* [rows] fp32, or NULL */
	struct ms_actq act;             /* the input's quantization (NONE for most) */
	/* The CPU backend's binding: the kernel chosen for this matrix (its
	 * packed copy, if any, in w.pack). The backend interface makes this
	 * the backend's own opaque binding (docs/backend-seam.md). */
	const struct ms_kernel *kernel;
};

/* The experts of one MoE layer: per expert, gate_up [2I, H] with gate on
 * even rows and up on odd rows (the original checkpoint's interleaving),
 * and down [H, I]. */
struct ms_moe_w {
	int64_t n_experts, hidden, inter;
	const struct ms_linear **gate_up;  /* [n_experts] */
	const struct ms_linear **down;     /* [n_experts] */
};

#endif
