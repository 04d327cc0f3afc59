/*
 * unquant.c: plain floating-point weights (F32, F16, BF16), and the "none"
 * method used when a checkpoint has no quantization config.
 *
 * Linear weights are used in place from the mapping when their alignment
 * allows (zero-copy); the HF expert tensors are stored transposed
 * (gate_up_proj [E, H, 2I], down_proj [E, I, H]) and are repacked once, in
 * their own dtype, into the [out, in] rows the kernels stream.
 *
 * With the backend's dense_int8 (the CPU's default, --dense) the attention
 * projections and lm_head are requantized at load to 8-bit INTQ, a scale
 * per 32 columns of a row (the accuracy class of llama.cpp's Q8_0): on
 * GPT-OSS-20B these bf16 matrices are two thirds of the bytes a decode step
 * reads, and int8 halves them. Not the router (its logits pick the experts:
 * a rounding there changes which experts run, not just how precisely), not
 * the embedding (rows are looked up, not streamed per token).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "intq.h"
#include "pool.h"
#include "quant.h"

static int get_float_tensor(const struct ms_checkpoint *ck, const char *name, int ndim,
			    const int64_t *shape, const struct ms_tensor **t, struct ms_err *err)
{
	int rc = ms_checkpoint_get(ck, name, MS_DTYPE_ANY, ndim, shape, t, err);
	if (!rc && !ms_dtype_is_float((*t)->dtype))
		rc = ms_err_set(err, -EBADMSG,
				"%s: tensor \"%s\" has dtype %s; an unquantized weight must be F32, F16 "
				"or BF16 (is the quantization config missing?)",
				ms_checkpoint_file_of(ck, *t), name, ms_dtype_name((*t)->dtype));
	return rc;
}

/* The modules --dense-int8 requantizes: model.layers.N.self_attn.{q,k,v,o}_proj
 * and lm_head. */
static bool dense_int8_module(const char *prefix)
{
	if (!strcmp(prefix, "lm_head"))
		return true;
	const char *a = strstr(prefix, ".self_attn.");
	if (!a)
		return false;
	a += strlen(".self_attn.");
	return !strcmp(a, "q_proj") || !strcmp(a, "k_proj") || !strcmp(a, "v_proj") ||
	       !strcmp(a, "o_proj");
}

/* Nearest fp16 value of a finite f >= 0 (ties to even), as an fp32; values
 * past the fp16 range saturate to 65504. */
static float round_to_f16(float f)
{
	if (f >= 65504.0f)
		return 65504.0f;
	if (f < 0x1p-14f) /* subnormal fp16: multiples of 2^-24 */
		return rintf(f * 0x1p24f) * 0x1p-24f;
	int e;
	frexpf(f, &e); /* f in [2^(e-1), 2^e): 11 significant bits step 2^(e-11) */
	float ulp = ldexpf(1.0f, e - 11);
	return rintf(f / ulp) * ulp;
}

/* One group of n weights w to codes, symmetric: scale = amax / 127 rounded
 * to fp16 first (the int8 kernels take fp16 scales; the codes are then
 * exact for the scale they will be used with), code = clamp(round(w /
 * scale), -127, 127) + 128, zero point 128. The error per weight is at most
 * scale / 2 ~ amax / 254 (where the fp16 scale rounded down and a code
 * clamps, amax - 127 scale < scale / 2). An all-zero group keeps scale 0
 * (codes 128); a tiny one the smallest fp16 step rather than 0. */
static float int8_group(const float *w, int64_t n, uint8_t *codes)
{
	float amax = 0.0f;
	for (int64_t k = 0; k < n; k++)
		amax = fmaxf(amax, fabsf(w[k]));
	float scale = amax > 0.0f ? fmaxf(round_to_f16(amax / 127.0f), 0x1p-24f) : 0.0f;
	for (int64_t k = 0; k < n; k++)
		codes[k] = scale > 0.0f ? (uint8_t)(128 + (int)fminf(fmaxf(rintf(w[k] / scale), -127.0f),
								     127.0f))
					: 128;
	return scale;
}

/* Replace l's float rows by 8-bit INTQ codes, a group (int8_group) per
 * MS_DENSE_INT8_GROUP columns of a row (the last one may be shorter). */
static int requantize_int8(struct ms_qlinear *l, const char *prefix, struct ms_err *err)
{
	struct ms_wmat src = l->lin.w;
	void *src_copy = l->owned[0]; /* a misaligned tensor's aligned copy, or NULL */
	l->owned[0] = NULL;
	int64_t N = src.rows, K = src.cols, gs = MS_DENSE_INT8_GROUP, G = (K + gs - 1) / gs;
	float *row = malloc((size_t)K * sizeof(float));
	int rc = row ? ms_intq_alloc(l, N, K, 8, gs, G, false, prefix, err)
		     : ms_err_set(err, -ENOMEM, "%s: out of memory", prefix);
	for (int64_t r = 0; !rc && r < N; r++) {
		ms_wmat_row_f32(&src, r, row);
		for (int64_t k = 0; k < K && !rc; k++)
			if (!isfinite(row[k]))
				rc = ms_err_set(err, -EBADMSG, "%s.weight: row %lld holds %g; int8 "
						"dense weights need finite ones (--dense bf16 keeps "
						"them as they are)", prefix, (long long)r,
						(double)row[k]);
		uint8_t *codes = (uint8_t *)l->owned[0] + (size_t)r * l->lin.w.row_bytes;
		for (int64_t g = 0; g < G && !rc; g++) {
			int64_t k0 = g * gs, n = K - k0 < gs ? K - k0 : gs;
			((float *)l->owned[1])[r * G + g] = int8_group(row + k0, n, codes + k0);
			((float *)l->owned[2])[r * G + g] = 128.0f;
		}
	}
	free(row);
	free(src_copy);
	return rc;
}

static int load_linear(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
		       const char *prefix, int64_t out, int64_t in, bool has_bias,
		       struct ms_qload *ld, struct ms_qlinear *l, struct ms_err *err)
{
	(void)qc;
	char name[512];
	const struct ms_tensor *t;
	snprintf(name, sizeof(name), "%s.weight", prefix);
	int rc = get_float_tensor(ck, name, 2, (int64_t[]){out, in}, &t, err);
	if (rc)
		return rc;
	size_t es = ms_dtype_size(t->dtype);
	l->lin.w = (struct ms_wmat){.fmt = ms_wfmt_from_dtype(t->dtype), .rows = out, .cols = in,
				.w = t->data, .row_bytes = (size_t)in * es};
	/* Kernels load whole elements: a misaligned tensor (legal in
	 * safetensors) is copied once instead of read in place. */
	bool released = false;
	if ((uintptr_t)t->data % es) {
		if (posix_memalign(&l->owned[0], 64, t->nbytes ? t->nbytes : 64))
			return ms_err_set(err, -ENOMEM, "%s: out of memory", name);
		memcpy(l->owned[0], t->data, t->nbytes);
		l->lin.w.w = l->owned[0];
		ms_checkpoint_release(ck, t);
		released = true;
	}
	bool int8 = ld->be->dense_int8 && dense_int8_module(prefix);
	enum ms_wfmt from = l->lin.w.fmt;
	if (int8) {
		if ((rc = requantize_int8(l, prefix, err)))
			return rc;
		if (!released)
			ms_checkpoint_release(ck, t);
	}
	/* inspect says where the int8 matrix came from, then why its kernel */
	if (int8)
		snprintf(l->origin, sizeof(l->origin), "requantized from %s to int8 g%d (--dense "
			 "int8); ", ms_wfmt_name(from), MS_DENSE_INT8_GROUP);
	if ((rc = ms_qlinear_set_kernel(l, ld, prefix, err)))
		return rc;
	return ms_qlinear_load_bias(l, ck, prefix, out, has_bias, err);
}

/* Transpose expert e of src [E, K, N] (in HF's [in, out] order) into
 * dst [E, N, K], element size es. Element-wise memcpy: the source may be
 * misaligned. */
struct transpose_job {
	const uint8_t *src;
	uint8_t *dst;
	int64_t K, N;
	size_t es;
};

static void transpose_task(void *ctx, int e, int worker)
{
	(void)worker;
	const struct transpose_job *j = ctx;
	size_t plane = (size_t)j->K * (size_t)j->N * j->es;
	const uint8_t *s = j->src + (size_t)e * plane;
	uint8_t *d = j->dst + (size_t)e * plane;
	for (int64_t k = 0; k < j->K; k++)
		for (int64_t n = 0; n < j->N; n++)
			memcpy(d + ((size_t)n * (size_t)j->K + (size_t)k) * j->es,
			       s + ((size_t)k * (size_t)j->N + (size_t)n) * j->es, j->es);
}

static int load_moe(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
		    const char *prefix, int64_t E, int64_t H, int64_t I, struct ms_qload *ld,
		    struct ms_qmoe *m, struct ms_err *err)
{
	(void)qc;
	char gu_name[512], dn_name[512];
	const struct ms_tensor *gu, *dn;
	snprintf(gu_name, sizeof(gu_name), "%s.gate_up_proj", prefix);
	snprintf(dn_name, sizeof(dn_name), "%s.down_proj", prefix);
	int rc = get_float_tensor(ck, gu_name, 3, (int64_t[]){E, H, 2 * I}, &gu, err);
	if (!rc)
		rc = get_float_tensor(ck, dn_name, 3, (int64_t[]){E, I, H}, &dn, err);
	if (!rc && gu->dtype != dn->dtype)
		rc = ms_err_set(err, -ENOTSUP, "%s: gate_up_proj is %s but down_proj is %s", prefix,
				ms_dtype_name(gu->dtype), ms_dtype_name(dn->dtype));
	if (rc || (rc = ms_qmoe_init_fused(m, ck, prefix, E, H, I, err)))
		return rc;
	size_t es = ms_dtype_size(gu->dtype);
	enum ms_wfmt fmt = ms_wfmt_from_dtype(gu->dtype);
	if (posix_memalign(&m->owned, 64, gu->nbytes + dn->nbytes + 64))
		return ms_err_set(err, -ENOMEM, "%s: out of memory for %zu bytes of experts", prefix,
				  gu->nbytes + dn->nbytes);
	uint8_t *gu_dst = m->owned, *dn_dst = gu_dst + gu->nbytes;
	struct transpose_job j1 = {gu->data, gu_dst, H, 2 * I, es};
	struct transpose_job j2 = {dn->data, dn_dst, I, H, es};
	ms_pool_run(ld->be->pool, (int)E, transpose_task, &j1);
	ms_pool_run(ld->be->pool, (int)E, transpose_task, &j2);
	ms_checkpoint_release(ck, gu);
	ms_checkpoint_release(ck, dn);
	for (int64_t e = 0; e < E; e++) {
		m->gate_up[e].lin.w = (struct ms_wmat){.fmt = fmt, .rows = 2 * I, .cols = H,
			.w = gu_dst + (size_t)e * (size_t)(2 * I * H) * es, .row_bytes = (size_t)H * es};
		m->down[e].lin.w = (struct ms_wmat){.fmt = fmt, .rows = H, .cols = I,
			.w = dn_dst + (size_t)e * (size_t)(H * I) * es, .row_bytes = (size_t)I * es};
		if ((rc = ms_qlinear_set_kernel(&m->gate_up[e], ld, gu_name, err)) ||
		    (rc = ms_qlinear_set_kernel(&m->down[e], ld, dn_name, err)))
			return rc;
	}
	return 0;
}

const struct ms_quant_scheme ms_scheme_unquantized = {
	.name = "unquantized",
	.load_linear = load_linear,
	.load_moe = load_moe,
};

static int none_scheme_for(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			   const char *prefix, enum ms_qkind kind, const struct ms_quant_scheme **out,
			   struct ms_err *err)
{
	(void)qc, (void)ck, (void)prefix, (void)kind, (void)err;
	*out = &ms_scheme_unquantized;
	return 0;
}

const struct ms_quant_method ms_quant_none = {
	.name = "none",
	.scheme_for = none_scheme_for,
};
