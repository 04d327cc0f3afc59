/*
 * quark.c: AMD Quark checkpoints (quant_method "quark"), real_quantized
 * exports (../shared/docs/quant-formats.md §3, ../shared/seeds/004_*).
 *
 * Each module's spec is resolved in Quark's order: `exclude` (exact name,
 * parent, glob or "re:" regex) -> unquantized; else the first
 * `layer_quant_config` pattern (a glob, as Python's fnmatch) that matches the name; else
 * `layer_type_quant_config` by module type ("FusedMoE" then "Linear" for an
 * expert's projections, "Linear" for the others); else
 * `global_quant_config`. Every spec in the file is validated when the config
 * is read, each violation named.
 *
 * Schemes (weight / input):
 *   fp4 per_group 32 e8m0 static / none          -> W4A16 (MXFP4 weights)
 *   fp4 ...                      / fp8_e4m3 per_tensor static  -> W4A8
 *   fp4 ...                      / fp4 per_group 32 e8m0 dynamic -> W4A4
 *   fp8_e4m3 per_tensor|per_channel static / none | fp8 static | fp8 dynamic
 * Tensors: .weight (U8 [N, K/2] fp4, low nibble first; or F8_E4M3 [N, K]),
 * .weight_scale (U8 E8M0 [N, K/32]; or float [] / [N]), .input_scale (float,
 * one per module: each expert keeps its own), .bias.
 * Static FP8 activations are really quantized: x / input_scale, rounded to
 * nearest even in e4m3, saturated at +-448, times the weights, times the
 * scale. Dynamic FP8 takes the scale per token row (amax / 448) so that a
 * request's result never depends on what else is in its batch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

enum qk_wkind { QK_W_NONE, QK_W_FP4, QK_W_FP8_TENSOR, QK_W_FP8_CHANNEL };

struct qk_spec {
	enum qk_wkind w;
	enum ms_actq_kind act;
	const struct ms_quant_scheme *scheme;
};

struct qk_named {
	char *key;
	struct qk_spec spec;
};

struct quark_cfg {
	struct qk_spec global;
	struct qk_named *layer, *type;
	int n_layer, n_type;
	struct ms_qname *exclude;
	int n_exclude;
};

/* ---- schemes: one loader, named by what it computes ---- */

static int quark_load_linear(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			     const char *prefix, int64_t N, int64_t K, bool has_bias,
			     struct ms_qload *ld, struct ms_qlinear *l, struct ms_err *err);

#define QK_SCHEME(var, nm) \
	static const struct ms_quant_scheme var = {.name = nm, .load_linear = quark_load_linear}
QK_SCHEME(qk_w4a16, "quark-w4a16");
QK_SCHEME(qk_w4a8, "quark-w4a8");
QK_SCHEME(qk_w4a4, "quark-w4a4");
QK_SCHEME(qk_w8a16, "quark-w8a16");
QK_SCHEME(qk_w8a8s, "quark-w8a8-static");
QK_SCHEME(qk_w8a8d, "quark-w8a8-dynamic");

/* ---- parsing one tensor spec ---- */

struct tspec {
	const char *dtype, *qscheme, *scale_format;
	int64_t group_size;
	bool dynamic;
};

static int parse_tspec(const cJSON *o, const char *where, struct tspec *t, struct ms_err *err)
{
	int rc;
	memset(t, 0, sizeof(*t));
	if (cJSON_IsArray(o))
		return ms_err_set(err, -ENOTSUP,
				  "%s is a list (two-stage quantization): not supported", where);
	if (!cJSON_IsObject(o))
		return ms_err_set(err, -EINVAL, "%s must be an object or null", where);
	if ((rc = ms_qjson_str(o, where, "dtype", true, &t->dtype, err)) ||
	    (rc = ms_qjson_str(o, where, "qscheme", false, &t->qscheme, err)) ||
	    (rc = ms_qjson_str(o, where, "scale_format", false, &t->scale_format, err)) ||
	    (rc = ms_qjson_int(o, where, "group_size", NULL, false, 0, &t->group_size, err)) ||
	    (rc = ms_qjson_bool(o, where, "is_dynamic", false, &t->dynamic, err)))
		return rc;
	if (!t->qscheme)
		t->qscheme = "";
	return 0;
}

static bool is_fp8(const char *d)
{
	return !strcmp(d, "fp8_e4m3") || !strcmp(d, "fp8_e4m3fn");
}

/* The MXFP4 block spec the seed checks: fp4, per_group, 32, e8m0. */
static int check_mx(const struct tspec *t, const char *where, struct ms_err *err)
{
	if (strcmp(t->qscheme, "per_group"))
		return ms_err_set(err, -ENOTSUP, "%s.qscheme \"%s\" is not supported for fp4 (supported: "
				  "per_group)", where, t->qscheme);
	if (t->group_size != 32)
		return ms_err_set(err, -ENOTSUP, "%s.group_size %lld is not supported for fp4 "
				  "(supported: 32)", where, (long long)t->group_size);
	if (!t->scale_format || strcmp(t->scale_format, "e8m0"))
		return ms_err_set(err, -ENOTSUP, "%s.scale_format \"%s\" is not supported for fp4 "
				  "(supported: e8m0)", where, t->scale_format ? t->scale_format : "null");
	return 0;
}

/* A whole `*_quant_config` entry -> spec, every unsupported value named. */
static int parse_spec(const cJSON *o, const char *where, bool kv_allowed, struct qk_spec *s,
		      struct ms_err *err)
{
	char w[256];
	int rc;
	memset(s, 0, sizeof(*s));
	if (!cJSON_IsObject(o))
		return ms_err_set(err, -EINVAL, "%s must be an object", where);
	const cJSON *out = cJSON_GetObjectItemCaseSensitive(o, "output_tensors");
	const cJSON *bias = cJSON_GetObjectItemCaseSensitive(o, "bias");
	if (out && !cJSON_IsNull(out) && !kv_allowed)
		return ms_err_set(err, -ENOTSUP, "%s.output_tensors: output quantization is not "
				  "supported (only as a KV-cache spec named in export.kv_cache_group)",
				  where);
	if (bias && !cJSON_IsNull(bias))
		return ms_err_set(err, -ENOTSUP, "%s.bias: bias quantization is not supported", where);
	const cJSON *wt = cJSON_GetObjectItemCaseSensitive(o, "weight");
	const cJSON *in = cJSON_GetObjectItemCaseSensitive(o, "input_tensors");
	struct tspec tw, ti;
	if (!wt || cJSON_IsNull(wt)) {
		if (in && !cJSON_IsNull(in))
			return ms_err_set(err, -ENOTSUP, "%s: input_tensors without weight quantization "
					  "is not supported", where);
		s->w = QK_W_NONE;
		s->scheme = &ms_scheme_unquantized;
		return 0;
	}
	snprintf(w, sizeof(w), "%s.weight", where);
	if ((rc = parse_tspec(wt, w, &tw, err)))
		return rc;
	if (tw.dynamic)
		return ms_err_set(err, -ENOTSUP, "%s.is_dynamic true: weights must be static", w);
	if (!strcmp(tw.dtype, "fp4")) {
		if ((rc = check_mx(&tw, w, err)))
			return rc;
		s->w = QK_W_FP4;
	} else if (is_fp8(tw.dtype)) {
		if (!strcmp(tw.qscheme, "per_tensor"))
			s->w = QK_W_FP8_TENSOR;
		else if (!strcmp(tw.qscheme, "per_channel"))
			s->w = QK_W_FP8_CHANNEL;
		else
			return ms_err_set(err, -ENOTSUP, "%s.qscheme \"%s\" is not supported for fp8 "
					  "(supported: per_tensor, per_channel)", w, tw.qscheme);
	} else {
		return ms_err_set(err, -ENOTSUP, "%s.dtype \"%s\" is not supported (supported: fp4, "
				  "fp8_e4m3, fp8_e4m3fn)", w, tw.dtype);
	}
	s->act = MS_ACTQ_NONE;
	if (in && !cJSON_IsNull(in)) {
		snprintf(w, sizeof(w), "%s.input_tensors", where);
		if ((rc = parse_tspec(in, w, &ti, err)))
			return rc;
		if (is_fp8(ti.dtype)) {
			if (strcmp(ti.qscheme, "per_tensor"))
				return ms_err_set(err, -ENOTSUP, "%s.qscheme \"%s\" is not supported for "
						  "fp8 activations (supported: per_tensor)", w, ti.qscheme);
			s->act = ti.dynamic ? MS_ACTQ_FP8_DYNAMIC : MS_ACTQ_FP8_STATIC;
		} else if (!strcmp(ti.dtype, "fp4")) {
			if ((rc = check_mx(&ti, w, err)))
				return rc;
			if (!ti.dynamic)
				return ms_err_set(err, -ENOTSUP, "%s.is_dynamic false: static fp4 "
						  "activations are not supported (MXFP4 activations are "
						  "quantized per token at run time)", w);
			s->act = MS_ACTQ_MXFP4_DYNAMIC;
		} else {
			return ms_err_set(err, -ENOTSUP, "%s.dtype \"%s\" is not supported (supported: "
					  "fp8_e4m3, fp8_e4m3fn, fp4)", w, ti.dtype);
		}
	}
	bool fp4 = s->w == QK_W_FP4;
	switch (s->act) {
	case MS_ACTQ_NONE: s->scheme = fp4 ? &qk_w4a16 : &qk_w8a16; break;
	case MS_ACTQ_FP8_STATIC: s->scheme = fp4 ? &qk_w4a8 : &qk_w8a8s; break;
	case MS_ACTQ_FP8_DYNAMIC:
		if (fp4)
			return ms_err_set(err, -ENOTSUP, "%s: fp4 weights with dynamic fp8 activations are "
					  "not supported (W4A8 uses a static input_scale)", where);
		s->scheme = &qk_w8a8d;
		break;
	case MS_ACTQ_MXFP4_DYNAMIC:
		if (!fp4)
			return ms_err_set(err, -ENOTSUP, "%s: fp8 weights with fp4 activations are not "
					  "supported", where);
		s->scheme = &qk_w4a4;
		break;
	}
	return 0;
}

static void quark_free(struct ms_quant_config *qc)
{
	struct quark_cfg *c = qc->priv;
	if (!c)
		return;
	for (int i = 0; i < c->n_layer; i++)
		free(c->layer[i].key);
	for (int i = 0; i < c->n_type; i++)
		free(c->type[i].key);
	for (int i = 0; i < c->n_exclude; i++)
		ms_qname_free(&c->exclude[i]);
	free(c->layer), free(c->type), free(c->exclude);
	free(c);
	qc->priv = NULL;
}

static bool in_kv_group(const cJSON *kvg, const char *key)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, kvg)
		if (cJSON_IsString(it) && (!strcmp(it->valuestring, key) ||
					   ms_qglob_match(it->valuestring, key) ||
					   ms_qglob_match(key, it->valuestring)))
			return true;
	return false;
}

static int parse_map(const cJSON *o, const char *where, const cJSON *kvg, struct qk_named **out,
		     int *n_out, struct ms_err *err)
{
	*out = NULL;
	*n_out = 0;
	if (!o || cJSON_IsNull(o))
		return 0;
	if (!cJSON_IsObject(o))
		return ms_err_set(err, -EINVAL, "%s must be an object", where);
	*out = calloc((size_t)cJSON_GetArraySize(o) + 1, sizeof(**out));
	if (!*out)
		return ms_err_set(err, -ENOMEM, "out of memory");
	const cJSON *it;
	cJSON_ArrayForEach(it, o) {
		char w[256];
		snprintf(w, sizeof(w), "%s[\"%s\"]", where, it->string);
		struct qk_named *e = &(*out)[*n_out];
		int rc = parse_spec(it, w, in_kv_group(kvg, it->string), &e->spec, err);
		if (rc)
			return rc;
		if (!(e->key = strdup(it->string)))
			return ms_err_set(err, -ENOMEM, "out of memory");
		(*n_out)++;
	}
	return 0;
}

static int quark_parse(struct ms_quant_config *qc, const cJSON *q, struct ms_err *err)
{
	const char *where = "config.json: \"quantization_config\"";
	char w[128];
	struct quark_cfg *c = calloc(1, sizeof(*c));
	if (!c)
		return ms_err_set(err, -ENOMEM, "out of memory");
	qc->priv = c;
	int rc;
	const cJSON *exp = cJSON_GetObjectItemCaseSensitive(q, "export");
	const cJSON *kvg = cJSON_IsObject(exp) ? cJSON_GetObjectItemCaseSensitive(exp, "kv_cache_group")
					       : NULL;
	if (cJSON_IsObject(exp)) {
		const char *wf;
		snprintf(w, sizeof(w), "%s.export", where);
		if ((rc = ms_qjson_str(exp, w, "weight_format", false, &wf, err)))
			return rc;
		if (wf && strcmp(wf, "real_quantized"))
			return ms_err_set(err, -ENOTSUP, "%s.weight_format \"%s\" is not supported "
					  "(supported: real_quantized)", w, wf);
	}
	const cJSON *g = cJSON_GetObjectItemCaseSensitive(q, "global_quant_config");
	snprintf(w, sizeof(w), "%s.global_quant_config", where);
	if (!g || cJSON_IsNull(g)) {
		c->global.scheme = &ms_scheme_unquantized;
	} else if ((rc = parse_spec(g, w, false, &c->global, err))) {
		return rc;
	}
	snprintf(w, sizeof(w), "%s.layer_quant_config", where);
	if ((rc = parse_map(cJSON_GetObjectItemCaseSensitive(q, "layer_quant_config"), w, kvg,
			    &c->layer, &c->n_layer, err)))
		return rc;
	snprintf(w, sizeof(w), "%s.layer_type_quant_config", where);
	if ((rc = parse_map(cJSON_GetObjectItemCaseSensitive(q, "layer_type_quant_config"), w, kvg,
			    &c->type, &c->n_type, err)))
		return rc;
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(q, "exclude");
	if (ex && !cJSON_IsNull(ex)) {
		if (!cJSON_IsArray(ex))
			return ms_err_set(err, -EINVAL, "%s.exclude must be a list", where);
		c->exclude = calloc((size_t)cJSON_GetArraySize(ex) + 1, sizeof(*c->exclude));
		if (!c->exclude)
			return ms_err_set(err, -ENOMEM, "out of memory");
		const cJSON *it;
		cJSON_ArrayForEach(it, ex) {
			if (!cJSON_IsString(it))
				return ms_err_set(err, -EINVAL, "%s.exclude[%d] is not a string", where,
						  c->n_exclude);
			snprintf(w, sizeof(w), "%s.exclude[%d]", where, c->n_exclude);
			if ((rc = ms_qname_init(&c->exclude[c->n_exclude++], it->valuestring, w, err)))
				return rc;
		}
	}
	return 0;
}

/* ---- resolution ---- */

static int resolve(const struct quark_cfg *c, const char *module, const struct qk_spec **out,
		   struct ms_err *err)
{
	static const struct qk_spec none = {QK_W_NONE, MS_ACTQ_NONE, &ms_scheme_unquantized};
	*out = &none;
	for (int i = 0; i < c->n_exclude; i++) {
		bool hit;
		int rc = ms_qname_match(&c->exclude[i], module, &hit, err);
		if (rc || hit)
			return rc;
	}
	for (int i = 0; i < c->n_layer; i++)
		if (ms_qglob_match(c->layer[i].key, module)) {
			*out = &c->layer[i].spec;
			return 0;
		}
	bool expert = strstr(module, ".mlp.experts.") != NULL;
	const char *types[] = {expert ? "FusedMoE" : "Linear", "Linear"};
	for (int t = 0; t < 2; t++)
		for (int i = 0; i < c->n_type; i++)
			if (!strcmp(c->type[i].key, types[t])) {
				*out = &c->type[i].spec;
				return 0;
			}
	*out = &c->global;
	return 0;
}

static int quark_scheme_for(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			    const char *prefix, enum ms_qkind kind, const struct ms_quant_scheme **out,
			    struct ms_err *err)
{
	(void)ck;
	/* Quark stores experts per expert; 3-D expert tensors in a Quark
	 * checkpoint are experts it left alone. */
	*out = &ms_scheme_unquantized;
	const struct qk_spec *s;
	int rc = kind == MS_QKIND_LINEAR ? resolve(qc->priv, prefix, &s, err) : 0;
	if (!rc && kind == MS_QKIND_LINEAR)
		*out = s->scheme;
	return rc;
}

/* ---- loading ---- */

static int quark_load_linear(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			     const char *prefix, int64_t N, int64_t K, bool has_bias,
			     struct ms_qload *ld, struct ms_qlinear *l, struct ms_err *err)
{
	const struct qk_spec *s;
	char name[512];
	const struct ms_tensor *w, *ws;
	int rc = resolve(qc->priv, prefix, &s, err);
	if (rc)
		return rc;
	snprintf(name, sizeof(name), "%s.weight", prefix);
	if (s->w == QK_W_FP4) {
		int64_t kb = (K + 1) / 2, kg = (K + 31) / 32;
		if ((rc = ms_checkpoint_get(ck, name, MS_DTYPE_U8, 2, (int64_t[]){N, kb}, &w, err)))
			return rc;
		snprintf(name, sizeof(name), "%s.weight_scale", prefix);
		if ((rc = ms_checkpoint_get(ck, name, MS_DTYPE_U8, 2, (int64_t[]){N, kg}, &ws, err)))
			return rc;
		if (memchr(ws->data, 0xFF, ws->nbytes))
			return ms_err_set(err, -EBADMSG, "%s: tensor \"%s\" holds the E8M0 byte 0xFF (NaN "
					  "scale)", ms_checkpoint_file_of(ck, ws), name);
		l->lin.w = (struct ms_wmat){.fmt = MS_WFMT_MXFP4, .rows = N, .cols = K,
					    .w = w->data, .row_bytes = (size_t)kb,
					    .scales = ws->data, .scale_row_bytes = (size_t)kg};
	} else {
		if ((rc = ms_checkpoint_get(ck, name, MS_DTYPE_F8_E4M3, 2, (int64_t[]){N, K}, &w, err)))
			return rc;
		const uint8_t *b = w->data;
		for (size_t i = 0; i < w->nbytes; i++)
			if ((b[i] & 0x7F) == 0x7F)
				return ms_err_set(err, -EBADMSG, "%s: tensor \"%s\" holds a NaN (byte 0x%02X "
						  "at %zu)", ms_checkpoint_file_of(ck, w), name, b[i], i);
		float *fs = malloc((size_t)N * sizeof(float));
		if (!(l->owned[0] = fs))
			return ms_err_set(err, -ENOMEM, "%s: out of memory", prefix);
		snprintf(name, sizeof(name), "%s.weight_scale", prefix);
		if (s->w == QK_W_FP8_TENSOR) {
			float v;
			if ((rc = ms_quant_read_scale(ck, name, &v, err)))
				return rc;
			for (int64_t n = 0; n < N; n++)
				fs[n] = v;
		} else {
			const struct ms_tensor *t = ms_checkpoint_find(ck, name);
			float *v;
			/* per channel: [N] or [N, 1] */
			int nd = t && t->ndim == 2 ? 2 : 1;
			if ((rc = ms_checkpoint_get_f32(ck, name, nd, (int64_t[]){N, 1}, &v, err)))
				return rc;
			for (int64_t n = 0; n < N && !rc; n++) {
				if (!isfinite(v[n]) || v[n] <= 0)
					rc = ms_err_set(err, -EBADMSG, "%s: tensor \"%s\" holds %g at %lld, not "
							"a positive finite scale", ck->dir ? ck->dir : "",
							name, (double)v[n], (long long)n);
				fs[n] = v[n];
			}
			free(v);
			if (rc)
				return rc;
		}
		l->lin.w = (struct ms_wmat){.fmt = MS_WFMT_FP8, .rows = N, .cols = K, .w = w->data,
					.row_bytes = (size_t)K, .fscale = fs};
	}
	l->lin.act.kind = s->act;
	if (s->act == MS_ACTQ_FP8_STATIC) {
		snprintf(name, sizeof(name), "%s.input_scale", prefix);
		if ((rc = ms_quant_read_scale(ck, name, &l->lin.act.scale, err)))
			return rc;
	}
	if ((rc = ms_qlinear_set_kernel(l, ld, prefix, err)))
		return rc;
	return ms_qlinear_load_bias(l, ck, prefix, N, has_bias, err);
}

const struct ms_quant_method ms_quant_quark = {
	.name = "quark",
	.parse = quark_parse,
	.scheme_for = quark_scheme_for,
	.free = quark_free,
};
