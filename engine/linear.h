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

#include <stdbool.h>
#include <stdint.h>

#include "actq.h"
#include "wmat.h"

struct ms_kernel;

struct ms_linear {
	struct ms_wmat w;
	float *bias;                    /* [rows] fp32, or NULL */
	struct ms_actq act;             /* the input's quantization (NONE for most) */
	/* Set by the backend's bind (backend.h): */
	const char *kernel_name;        /* what computes it, for inspect */
	const struct ms_kernel *kernel; /* the CPU backend's kernel (its packed copy, if
					 * any, in w.pack); NULL on other backends */
	void *bound;                    /* another backend's own binding (device copy) */
	void *owned;                    /* memory the binding owns, freed by owned_free */
	void (*owned_free)(void *owned);
	bool rows_free;                 /* the binding no longer reads w's rows: the
					 * loader may release them */
};

/* Release what bind made (ms_backend_ops.bind): the packed or uploaded
 * copy. The matrix's rows stay as they are. */
static inline void ms_linear_unbind(struct ms_linear *l)
{
	if (l->owned && l->owned_free)
		l->owned_free(l->owned);
	l->owned = NULL;
	l->owned_free = NULL;
	l->bound = NULL;
	l->kernel = NULL;
	l->kernel_name = NULL;
	l->rows_free = false;
	l->w.pack = NULL;
	l->w.pack_bytes = 0;
	l->w.pack_row = NULL;
}

/* GPT-OSS's expert activation constants (the clamped SwiGLU). */
struct ms_swiglu {
	float limit;  /* gate clamped above, up clamped to [-limit, limit] */
	float alpha;  /* gate * sigmoid(alpha * gate) */
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
