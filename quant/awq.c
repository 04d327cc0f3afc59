/*
 * awq.c: AWQ checkpoints in the GEMM layout (quant_method "awq", version
 * "gemm"), as AutoAWQ and GPTQModel write them
 * (../shared/docs/quant-formats.md §2).
 *
 * Per quantized linear: qweight I32 [K, N/8] packed along N, qzeros I32
 * [K/gs, N/8] packed the same way, scales [K/gs, N] (F16), bias; no g_idx.
 * Nibble i of a word holds column 8c + order[i], order = [0,2,4,6,1,3,5,7]:
 * column 8c + j sits in nibble [0,4,1,5,2,6,3,7][j]. W = scale * (q - z), no
 * +1. zero_point false: codes are symmetric around 8 (qzeros, when present,
 * hold 8). 4 bits only (AutoAWQ's GEMM layout has no other width); the GEMV
 * layouts ([N, K/8]) are refused.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "intq.h"
#include "pool.h"

struct awq_cfg {
	int64_t group_size;
	bool zero_point;
};

static int awq_parse(struct ms_quant_config *qc, const cJSON *q, struct ms_err *err)
{
	char where[96];
	snprintf(where, sizeof(where), "%s%s", qc->source,
		 strcmp(qc->source, "config.json") ? "" : ": \"quantization_config\"");
	struct awq_cfg *c = calloc(1, sizeof(*c));
	if (!c)
		return ms_err_set(err, -ENOMEM, "out of memory");
	qc->priv = c;
	/* AutoAWQ matches modules_to_not_convert as substrings. */
	qc->not_convert_substring = true;
	int64_t bits;
	const char *ver;
	int rc;
	if ((rc = ms_qjson_int(q, where, "bits", "w_bit", true, 0, &bits, err)) ||
	    (rc = ms_qjson_int(q, where, "group_size", "q_group_size", true, 0, &c->group_size, err)) ||
	    (rc = ms_qjson_bool(q, where, "zero_point", true, &c->zero_point, err)) ||
	    (rc = ms_qjson_str(q, where, "version", false, &ver, err)))
		return rc;
	if (bits != 4)
		return ms_err_set(err, -ENOTSUP, "%s: \"bits\" %lld is not supported (AWQ GEMM: 4)", where,
				  (long long)bits);
	if (c->group_size <= 0)
		return ms_err_set(err, -ENOTSUP, "%s: \"group_size\" %lld is not supported (a positive "
				  "group size is required)", where, (long long)c->group_size);
	char v[32] = "gemm";
	if (ver) {
		snprintf(v, sizeof(v), "%s", ver);
		for (char *s = v; *s; s++)
			*s = (char)tolower((unsigned char)*s); /* AutoAWQ lower-cases it too */
	}
	if (strcmp(v, "gemm"))
		return ms_err_set(err, -ENOTSUP,
				  "%s: \"version\" \"%s\" is not supported (supported: gemm; the GEMV "
				  "layouts pack qweight as [N, K/8])", where, ver);
	return 0;
}

static void awq_free(struct ms_quant_config *qc)
{
	free(qc->priv);
	qc->priv = NULL;
}

/* Nibble holding column 8c + j of a word. */
static const int awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

struct unpack_job {
	struct ms_qlinear *l;
	const void *qweight, *qzeros;
	int64_t N, K, G, rows_per_task;
};

static void unpack_task(void *ctx, int task, int worker)
{
	(void)worker;
	const struct unpack_job *j = ctx;
	int64_t n0 = task * j->rows_per_task, n1 = n0 + j->rows_per_task;
	n1 = n1 < j->N ? n1 : j->N;
	size_t words = (size_t)(j->N / 8);
	float *fz = j->l->owned[2];
	for (int64_t n = n0; n < n1; n++) {
		size_t c = (size_t)(n / 8);
		int sh = 4 * awq_nibble[n % 8];
		for (int64_t k = 0; k < j->K; k++)
			ms_intq_put(j->l, n, k, (ms_rd_u32(j->qweight, (size_t)k * words + c) >> sh) & 15);
		for (int64_t g = 0; g < j->G; g++)
			fz[n * j->G + g] = j->qzeros
				? (float)((ms_rd_u32(j->qzeros, (size_t)g * words + c) >> sh) & 15)
				: 8.0f;
	}
}

static int awq_load_linear(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			   const char *prefix, int64_t N, int64_t K, bool has_bias,
			   struct ms_qload *ld, struct ms_qlinear *l, struct ms_err *err)
{
	const struct awq_cfg *c = qc->priv;
	int64_t gs = c->group_size, G = K / gs;
	char name[512];
	int rc;
	if (K % gs)
		return ms_err_set(err, -ENOTSUP,
				  "%s: in_features %lld is not a multiple of AWQ group_size %lld", prefix,
				  (long long)K, (long long)gs);
	if (N % 8)
		return ms_err_set(err, -ENOTSUP, "%s: out_features %lld is not a multiple of 8", prefix,
				  (long long)N);
	const struct ms_tensor *qw, *qz = NULL;
	snprintf(name, sizeof(name), "%s.qweight", prefix);
	if ((rc = ms_checkpoint_get(ck, name, MS_DTYPE_I32, 2, (int64_t[]){K, N / 8}, &qw, err)))
		return rc;
	snprintf(name, sizeof(name), "%s.qzeros", prefix);
	if (c->zero_point || ms_checkpoint_find(ck, name))
		if ((rc = ms_checkpoint_get(ck, name, MS_DTYPE_I32, 2, (int64_t[]){G, N / 8}, &qz, err)))
			return rc;
	if ((rc = ms_intq_alloc(l, N, K, 4, gs, G, true, prefix, err)))
		return rc;
	snprintf(name, sizeof(name), "%s.scales", prefix);
	if ((rc = ms_intq_read_scales(l, ck, name, G, N, err)))
		return rc;
	/* rows of 8: the 8 columns of one packed word go to one task */
	int64_t per = ms_split_per(N, 4 * (int64_t)ld->be->threads, 8);
	struct unpack_job j = {l, qw->data, qz ? qz->data : NULL, N, K, G, per};
	ms_pool_run(ld->be->pool, (int)((N + per - 1) / per), unpack_task, &j);
	ms_checkpoint_release(ck, qw);
	if ((rc = ms_qlinear_set_kernel(l, ld, prefix, err)))
		return rc;
	return ms_qlinear_load_bias(l, ck, prefix, N, has_bias, err);
}

static const struct ms_quant_scheme awq_scheme = {
	.name = "awq",
	.load_linear = awq_load_linear,
};

static int awq_scheme_for(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			  const char *prefix, enum ms_qkind kind, const struct ms_quant_scheme **out,
			  struct ms_err *err)
{
	char name[512];
	bool keep;
	snprintf(name, sizeof(name), "%s.qweight", prefix);
	*out = &ms_scheme_unquantized;
	int rc = kind == MS_QKIND_LINEAR ? ms_quant_not_converted(qc, prefix, &keep, err) : 0;
	if (!rc && kind == MS_QKIND_LINEAR && !keep && ms_checkpoint_find(ck, name))
		*out = &awq_scheme;
	return rc;
}

const struct ms_quant_method ms_quant_awq = {
	.name = "awq",
	.parse = awq_parse,
	.scheme_for = awq_scheme_for,
	.free = awq_free,
};
