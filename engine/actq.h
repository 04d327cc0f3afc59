/*
 * actq.h: activation quantization, applied to a layer's input right before
 * its product, so that a W4A8 / W4A4 / W8A8 layer computes what the
 * hardware path computes (the quantized input times the weights, rescaled).
 *
 * Chosen by the scheme at load (quant/), applied per call by the layer.
 */
#ifndef MS_ACTQ_H
#define MS_ACTQ_H

#include <stdint.h>

enum ms_actq_kind {
	MS_ACTQ_NONE,
	MS_ACTQ_FP8_STATIC,    /* e4m3(clamp(x / s, +-448)), s = the checkpoint's input_scale */
	MS_ACTQ_FP8_DYNAMIC,   /* the same with s = amax(|x_t|) / 448 per token row */
	MS_ACTQ_MXFP4_DYNAMIC, /* per 32-column group: e2m1 with an E8M0 scale */
};

struct ms_actq {
	enum ms_actq_kind kind;
	float scale;  /* FP8_STATIC: the input scale */
};

const char *ms_actq_name(enum ms_actq_kind k);

/* Quantize rows x[t * ldx + k] (t < n, k < K) into xq[t * K + k], in the
 * weights' units, and set row_scale[t], the factor the product of that row
 * must be multiplied by (1 when the scale is already inside xq). For FP8,
 * xq holds the e4m3 values themselves and row_scale the scale: the product
 * is scale * sum(e4m3(x / scale) * W), as an FP8 matrix unit computes it.
 * xq may be x itself (ldx == K) to quantize in place. */
void ms_actq_apply(const struct ms_actq *q, const float *x, int64_t ldx, int64_t n, int64_t K,
		   float *xq, float *row_scale);

/* One MXFP4 group of 32 (or fewer, at a ragged end) values, quantized in
 * place: scale 2^e from the group's amax (Quark's "even" rule: amax rounded at
 * mantissa 1.75 to a power of two 2^E, e = E - 2, clamped to [-127, 127]),
 * elements rounded to nearest even on the e2m1 grid, saturating at +-6. */
void ms_actq_mxfp4_group(float *v, int64_t n);

#endif
