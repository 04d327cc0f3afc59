/*
 * gptq.c: GPTQ checkpoints (quant_method "gptq"), as AutoGPTQ and GPTQModel
 * write them (../shared/docs/quant-formats.md §1).
 *
 * Per quantized linear: qweight I32 [K*bits/32, N] (a little-endian
 * bitstream along K), qzeros I32 [G, N*bits/32] (along N), scales [G, N]
 * (F16), g_idx I32 [K], bias. G = ceil(K / group_size), so K need not be a
 * multiple of the group size. W[n, k] = scale[g, n] * (q[k, n] - z[g, n]) with
 * g = g_idx[k] and z = stored + 1 for checkpoint_format "gptq" (v1), stored
 * for "gptq_v2". A module is GPTQ when the checkpoint has its qweight (what
 * a producer leaves unquantized keeps its .weight); g_idx is always
 * honoured, whatever desc_act and static_groups say.
 *
 * Supported: bits 2, 3, 4, 8; any group size or -1; sym and asym; desc_act
 * with or without static_groups; v1 and v2; GPTQModel's `dynamic` rules
 * ("-:" skips a module, other keys override bits/group_size/sym/desc_act).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "intq.h"
#include "pool.h"

struct gptq_params {
	int bits;
	int64_t group_size;  /* -1: one group over K */
	bool sym, desc_act;
};

struct gptq_rule {
	struct ms_qregex *re;
	bool skip;             /* "-:" */
	struct gptq_params p;  /* overrides, for the other rules */
};

struct gptq_cfg {
	struct gptq_params p;
	bool v2, static_groups, true_sequential, lm_head;
	struct gptq_rule *rules;
	int n_rules;
};

/* ---- shared INTQ helpers (declared in intq.h) ---- */

int ms_intq_alloc(struct ms_qlinear *l, int64_t N, int64_t K, int bits, int64_t group_size,
		  int64_t G, bool zero_codes, const char *prefix, struct ms_err *err)
{
	size_t rb = (size_t)((K * ms_intq_storage_bits(bits) + 7) / 8);
	l->owned[0] = ms_quant_buf_alloc((size_t)N * rb + 1, zero_codes);
	l->owned[1] = ms_quant_buf_alloc((size_t)(N * G) * sizeof(float), false);
	l->owned[2] = ms_quant_buf_alloc((size_t)(N * G) * sizeof(float), false);
	l->owned_bufs |= 0x7;
	if (!l->owned[0] || !l->owned[1] || !l->owned[2])
		return ms_err_set(err, -ENOMEM, "%s: out of memory", prefix);
	l->lin.w = (struct ms_wmat){.fmt = MS_WFMT_INTQ, .rows = N, .cols = K, .w = l->owned[0],
				.row_bytes = rb, .bits = bits, .group_size = group_size,
				.n_groups = G, .fscale = l->owned[1], .fzero = l->owned[2]};
	return 0;
}

int ms_intq_read_scales(struct ms_qlinear *l, const struct ms_checkpoint *ck, const char *name,
			int64_t G, int64_t N, struct ms_err *err)
{
	float *s;
	int rc = ms_checkpoint_get_f32(ck, name, 2, (int64_t[]){G, N}, &s, err);
	if (rc)
		return rc;
	float *dst = l->owned[1];
	for (int64_t g = 0; g < G; g++)
		for (int64_t n = 0; n < N; n++) {
			float v = s[g * N + n];
			if (!isfinite(v)) {
				free(s);
				return ms_err_set(err, -EBADMSG, "%s: tensor \"%s\" holds %g at [%lld, %lld]",
						  ms_checkpoint_file_of(ck, ms_checkpoint_find(ck, name)),
						  name, (double)v, (long long)g, (long long)n);
			}
			dst[n * G + g] = v;
		}
	free(s);
	return 0;
}

/* ---- config ---- */

static int check_params(const struct gptq_params *p, const char *where, struct ms_err *err)
{
	if (p->bits != 2 && p->bits != 3 && p->bits != 4 && p->bits != 8)
		return ms_err_set(err, -ENOTSUP, "%s: \"bits\" %d is not supported (supported: 2, 3, 4, 8)",
				  where, p->bits);
	if (p->group_size != -1 && p->group_size <= 0)
		return ms_err_set(err, -EINVAL, "%s: \"group_size\" %lld must be positive or -1", where,
				  (long long)p->group_size);
	return 0;
}

static int parse_params(const cJSON *o, const char *where, const struct gptq_params *dflt,
			struct gptq_params *p, struct ms_err *err)
{
	int64_t bits, gs;
	int rc;
	if ((rc = ms_qjson_int(o, where, "bits", NULL, !dflt, dflt ? dflt->bits : 0, &bits, err)) ||
	    (rc = ms_qjson_int(o, where, "group_size", NULL, !dflt, dflt ? dflt->group_size : 0, &gs,
			       err)) ||
	    (rc = ms_qjson_bool(o, where, "sym", dflt ? dflt->sym : true, &p->sym, err)) ||
	    (rc = ms_qjson_bool(o, where, "desc_act", dflt ? dflt->desc_act : false, &p->desc_act, err)))
		return rc;
	p->bits = (int)bits;
	p->group_size = gs;
	return check_params(p, where, err);
}

static void gptq_free(struct ms_quant_config *qc)
{
	struct gptq_cfg *c = qc->priv;
	if (!c)
		return;
	for (int i = 0; i < c->n_rules; i++)
		ms_qregex_free(c->rules[i].re);
	free(c->rules);
	free(c);
	qc->priv = NULL;
}

static int parse_dynamic(struct gptq_cfg *c, const cJSON *dyn, const char *where,
			 struct ms_err *err)
{
	if (!dyn || cJSON_IsNull(dyn))
		return 0;
	if (!cJSON_IsObject(dyn))
		return ms_err_set(err, -EINVAL, "%s: \"dynamic\" must be an object", where);
	int n = cJSON_GetArraySize(dyn);
	c->rules = calloc((size_t)n + 1, sizeof(*c->rules));
	if (!c->rules)
		return ms_err_set(err, -ENOMEM, "out of memory");
	const cJSON *it;
	cJSON_ArrayForEach(it, dyn) {
		const char *key = it->string, *pat = key;
		struct gptq_rule *r = &c->rules[c->n_rules];
		r->skip = strncmp(key, "-:", 2) == 0;
		if (r->skip || strncmp(key, "+:", 2) == 0)
			pat = key + 2;
		char w2[320];
		int rc;
		const char *more = strlen(key) > 120 ? "..." : "";
		snprintf(w2, sizeof(w2), "%s: \"dynamic\" key \"%.120s%s\"", where, key, more);
		if ((rc = ms_qregex_init(&r->re, pat, w2, err)))
			return rc;
		c->n_rules++;
		snprintf(w2, sizeof(w2), "%s: \"dynamic[%.120s%s]\"", where, key, more);
		if (!r->skip) {
			if (!cJSON_IsObject(it))
				return ms_err_set(err, -EINVAL, "%s must be an object", w2);
			const cJSON *k;
			cJSON_ArrayForEach(k, it) {
				if (strcmp(k->string, "bits") && strcmp(k->string, "group_size") &&
				    strcmp(k->string, "sym") && strcmp(k->string, "desc_act"))
					return ms_err_set(err, -ENOTSUP,
							  "%s: override \"%s\" is not supported (supported: bits, "
							  "group_size, sym, desc_act)", w2, k->string);
			}
			if ((rc = parse_params(it, w2, &c->p, &r->p, err)))
				return rc;
		}
	}
	return 0;
}

static int gptq_parse(struct ms_quant_config *qc, const cJSON *q, struct ms_err *err)
{
	char where[96];
	snprintf(where, sizeof(where), "%s%s", qc->source,
		 strcmp(qc->source, "config.json") ? "" : ": \"quantization_config\"");
	struct gptq_cfg *c = calloc(1, sizeof(*c));
	if (!c)
		return ms_err_set(err, -ENOMEM, "out of memory");
	qc->priv = c;
	int rc;
	if ((rc = parse_params(q, where, NULL, &c->p, err)))
		return rc;
	/* GPTQModel moves static_groups and true_sequential into "meta". */
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(q, "meta");
	const cJSON *src = q;
	if (cJSON_IsObject(meta) && !cJSON_GetObjectItemCaseSensitive(q, "static_groups"))
		src = meta;
	if ((rc = ms_qjson_bool(src, where, "static_groups", false, &c->static_groups, err)) ||
	    (rc = ms_qjson_bool(cJSON_IsObject(meta) &&
					    !cJSON_GetObjectItemCaseSensitive(q, "true_sequential")
				    ? meta : q,
				    where, "true_sequential", true, &c->true_sequential, err)) ||
	    (rc = ms_qjson_bool(q, where, "lm_head", false, &c->lm_head, err)))
		return rc;
	const char *fmt, *fmt2, *pack;
	bool marlin;
	if ((rc = ms_qjson_str(q, where, "checkpoint_format", false, &fmt, err)) ||
	    (rc = ms_qjson_str(q, where, "format", false, &fmt2, err)) ||
	    (rc = ms_qjson_str(q, where, "pack_dtype", false, &pack, err)) ||
	    (rc = ms_qjson_bool(q, where, "is_marlin_format", false, &marlin, err)))
		return rc;
	const char *field = fmt ? "checkpoint_format" : "format";
	fmt = fmt ? fmt : (fmt2 ? fmt2 : "gptq");
	if (marlin)
		return ms_err_set(err, -ENOTSUP,
				  "%s: \"is_marlin_format\" true: a Marlin-repacked checkpoint is not "
				  "supported (supported layouts: gptq, gptq_v2)", where);
	if (strcmp(fmt, "gptq") && strcmp(fmt, "gptq_v2"))
		return ms_err_set(err, -ENOTSUP,
				  "%s: \"%s\" \"%s\" is not supported (supported: gptq, gptq_v2)", where,
				  field, fmt);
	c->v2 = !strcmp(fmt, "gptq_v2");
	if (pack && strcmp(pack, "int32"))
		return ms_err_set(err, -ENOTSUP, "%s: \"pack_dtype\" \"%s\" is not supported (supported: int32)",
				  where, pack);
	return parse_dynamic(c, cJSON_GetObjectItemCaseSensitive(q, "dynamic"), where, err);
}

/* The rule that applies to module (NULL: none), first match wins
 * (GPTQModel's order). */
static int rule_for(const struct gptq_cfg *c, const char *module, const struct gptq_rule **out,
		    struct ms_err *err)
{
	*out = NULL;
	for (int i = 0; i < c->n_rules; i++) {
		bool hit;
		int rc = ms_qregex_match(c->rules[i].re, module, &hit, err);
		if (rc || hit) {
			*out = rc ? NULL : &c->rules[i];
			return rc;
		}
	}
	return 0;
}

/* ---- loading ---- */

struct unpack_job {
	struct ms_qlinear *l;
	const void *qweight, *qzeros;
	int bits;
	int64_t N, K, G, rows_per_task;
	bool v2;
};

static void unpack_task(void *ctx, int task, int worker)
{
	(void)worker;
	const struct unpack_job *j = ctx;
	int64_t n0 = task * j->rows_per_task, n1 = n0 + j->rows_per_task;
	n1 = n1 < j->N ? n1 : j->N;
	size_t zw = (size_t)(j->N * j->bits / 32); /* qzeros words per group row */
	float *fz = j->l->owned[2];
	if (j->bits == 2 || j->bits == 4 || j->bits == 8) {
		/* Codes that tile 32-bit words: word [w, n] is, little-endian,
		 * bytes 4w..4w+3 of row n as is, so the unpack is a transpose of
		 * words (read row w across n: sequential; the n1 - n0 rows being
		 * written stay in cache). */
		int64_t W = j->K * j->bits / 32;
		const uint8_t *src = j->qweight;
		uint8_t *dst = j->l->owned[0];
		size_t rb = j->l->lin.w.row_bytes, N = (size_t)j->N;
		/* 16 words at a time: a row's line gets 64 bytes per pass instead
		 * of 4, the 16 source rows are read side by side (one word at a
		 * time, the rows written in between left L1 every pass: ~17% of
		 * a GPTQ load's CPU time) */
		for (int64_t w0 = 0; w0 < W; w0 += 16) {
			int64_t wn = W - w0 < 16 ? W - w0 : 16;
			for (int64_t n = n0; n < n1; n++) {
				uint8_t *d = dst + (size_t)n * rb + 4 * (size_t)w0;
				const uint8_t *s = src + 4 * ((size_t)w0 * N + (size_t)n);
				for (int64_t i = 0; i < wn; i++)
					memcpy(d + 4 * i, s + 4 * (size_t)i * N, 4);
			}
		}
	}
	for (int64_t n = n0; n < n1; n++) {
		/* qweight column n is a bitstream along K: word w at [w, n] */
		for (int64_t k = 0; j->bits == 3 && k < j->K; k++)
			ms_intq_put(j->l, n, k, ms_bitstream_get(j->qweight, (size_t)n, (size_t)j->N,
								 j->bits, k));
		/* qzeros row g is a bitstream along N */
		for (int64_t g = 0; g < j->G; g++) {
			uint32_t z = ms_bitstream_get(j->qzeros, (size_t)g * zw, 1, j->bits, n);
			/* v1 stores zero - 1, per element after masking */
			fz[n * j->G + g] = (float)z + (j->v2 ? 0.0f : 1.0f);
		}
	}
}

static int gptq_load_linear(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			    const char *prefix, int64_t N, int64_t K, bool has_bias,
			    struct ms_qload *ld, struct ms_qlinear *l, struct ms_err *err)
{
	const struct gptq_cfg *c = qc->priv;
	const struct gptq_rule *r;
	int rc = rule_for(c, prefix, &r, err);
	if (rc)
		return rc;
	const struct gptq_params *p = r ? &r->p : &c->p;
	int bits = p->bits;
	int64_t gs = p->group_size == -1 ? K : p->group_size;
	int64_t G = (K + gs - 1) / gs;
	char name[512];
	if ((K * bits) % 32 || (N * bits) % 32)
		return ms_err_set(err, -ENOTSUP,
				  "%s: %d-bit GPTQ needs in_features (%lld) and out_features (%lld) whose "
				  "bit counts fill whole 32-bit words", prefix, bits, (long long)K,
				  (long long)N);
	const struct ms_tensor *qw, *qz, *gi = NULL;
	snprintf(name, sizeof(name), "%s.qweight", prefix);
	if ((rc = ms_checkpoint_get(ck, name, MS_DTYPE_I32, 2, (int64_t[]){K * bits / 32, N}, &qw, err)))
		return rc;
	snprintf(name, sizeof(name), "%s.qzeros", prefix);
	if ((rc = ms_checkpoint_get(ck, name, MS_DTYPE_I32, 2, (int64_t[]){G, N * bits / 32}, &qz, err)))
		return rc;
	/* 2, 4 and 8-bit codes are copied whole words at a time; 3-bit ones
	 * are ORed in (ms_intq_put) */
	if ((rc = ms_intq_alloc(l, N, K, bits, gs, G, bits == 3, prefix, err)))
		return rc;
	snprintf(name, sizeof(name), "%s.scales", prefix);
	if ((rc = ms_intq_read_scales(l, ck, name, G, N, err)))
		return rc;
	snprintf(name, sizeof(name), "%s.g_idx", prefix);
	if (ms_checkpoint_find(ck, name)) {
		if ((rc = ms_checkpoint_get(ck, name, MS_DTYPE_I32, 1, (int64_t[]){K}, &gi, err)))
			return rc;
	} else if (p->desc_act) {
		return ms_err_set(err, -ENOENT, "%s: desc_act is true but tensor \"%s\" is missing",
				  ck->dir ? ck->dir : "checkpoint", name);
	}
	if (gi) {
		/* Honour g_idx unless it is the natural k / gs, then drop it so
		 * kernels take the simple path. */
		bool natural = true;
		int32_t *map = malloc((size_t)K * sizeof(int32_t));
		if (!map)
			return ms_err_set(err, -ENOMEM, "%s: out of memory", prefix);
		l->owned[3] = map;
		for (int64_t k = 0; k < K; k++) {
			int32_t g = (int32_t)ms_rd_u32(gi->data, (size_t)k);
			if (g < 0 || g >= G)
				return ms_err_set(err, -EBADMSG,
						  "%s: tensor \"%s\": g_idx[%lld] = %d is outside [0, %lld)",
						  ms_checkpoint_file_of(ck, gi), name, (long long)k, g,
						  (long long)G);
			map[k] = g;
			natural &= g == k / gs;
		}
		if (!natural) {
			const int32_t **rows = malloc((size_t)N * sizeof(*rows));
			if (!rows)
				return ms_err_set(err, -ENOMEM, "%s: out of memory", prefix);
			l->owned[4] = (void *)rows;
			for (int64_t n = 0; n < N; n++)
				rows[n] = map;
			l->lin.w.row_g_idx = (const int32_t *const *)rows;
		}
	}
	/* Repack column by column (a row of our layout), in parallel. */
	int64_t per = ms_split_per(N, 4 * (int64_t)ld->be->threads, 8);
	struct unpack_job j = {l, qw->data, qz->data, bits, N, K, G, per, c->v2};
	ms_pool_run(ld->be->pool, (int)((N + per - 1) / per), unpack_task, &j);
	ms_checkpoint_release(ck, qw);
	if ((rc = ms_qlinear_set_kernel(l, ld, prefix, err)))
		return rc;
	return ms_qlinear_load_bias(l, ck, prefix, N, has_bias, err);
}

static const struct ms_quant_scheme gptq_scheme = {
	.name = "gptq",
	.load_linear = gptq_load_linear,
};

static int gptq_scheme_for(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			   const char *prefix, enum ms_qkind kind, const struct ms_quant_scheme **out,
			   struct ms_err *err)
{
	const struct gptq_cfg *c = qc->priv;
	const struct gptq_rule *r;
	bool keep;
	char name[512];
	snprintf(name, sizeof(name), "%s.qweight", prefix);
	*out = &ms_scheme_unquantized;
	int rc = rule_for(c, prefix, &r, err);
	if (rc || kind != MS_QKIND_LINEAR || (r && r->skip) ||
	    (rc = ms_quant_not_converted(qc, prefix, &keep, err)) || keep)
		return rc;
	if (ms_checkpoint_find(ck, name))
		*out = &gptq_scheme;
	return 0;
}

const struct ms_quant_method ms_quant_gptq = {
	.name = "gptq",
	.parse = gptq_parse,
	.scheme_for = gptq_scheme_for,
	.free = gptq_free,
};
