/*
 * model-config.c: config.json -> struct ms_model_config.
 *
 * Field names, aliases and defaults follow transformers' GptOssConfig and
 * _compute_yarn_parameters (see docs/ and ../shared/docs/gpt-oss.md §1).
 * Everything the math uses is required unless transformers itself defines a
 * default that real checkpoints rely on (head_dim, layer_types, the YaRN
 * betas); each error names the field and the offending value.
 */
#include "model-config.h"
#include "ms-json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- typed field access; each names the field on error ---- */

static const cJSON *field(const cJSON *obj, const char *name)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
	return (it && !cJSON_IsNull(it)) ? it : NULL;
}

/* Integer field: must be a JSON number with an integral value. */
static int get_int(const cJSON *obj, const char *name, const char *alias, bool required,
		   int64_t dflt, int64_t *out, struct ms_err *err)
{
	const cJSON *it = field(obj, name);
	if (!it && alias)
		it = field(obj, alias);
	if (!it) {
		if (required)
			return ms_err_set(err, -EINVAL, "config.json: missing field \"%s\"", name);
		*out = dflt;
		return 0;
	}
	const char *nm = it->string ? it->string : name;
	if (!cJSON_IsNumber(it))
		return ms_err_set(err, -EINVAL, "config.json: field \"%s\" must be an integer", nm);
	if (fabs(it->valuedouble) > 9.0e15) /* beyond exact doubles, and any real size */
		return ms_err_set(err, -EINVAL, "config.json: field \"%s\" is out of range: %g", nm,
				  it->valuedouble);
	if (it->valuedouble != floor(it->valuedouble))
		return ms_err_set(err, -EINVAL, "config.json: field \"%s\" must be an integer, got %.17g",
				  nm, it->valuedouble);
	*out = (int64_t)it->valuedouble;
	return 0;
}

static int get_num(const cJSON *obj, const char *where, const char *name, bool required,
		   double dflt, double *out, struct ms_err *err)
{
	const cJSON *it = field(obj, name);
	if (!it) {
		if (required)
			return ms_err_set(err, -EINVAL, "config.json: missing field \"%s%s\"", where, name);
		*out = dflt;
		return 0;
	}
	if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
		return ms_err_set(err, -EINVAL, "config.json: field \"%s%s\" must be a finite number",
				  where, name);
	*out = it->valuedouble;
	return 0;
}

/* A size in [1, max]. The upper bounds are far past any real model and
 * keep every size, and the products the loader forms from them, from
 * allocating or overflowing on a config that lies. */
static int in_range(const char *name, int64_t v, int64_t max, struct ms_err *err)
{
	if (v <= 0)
		return ms_err_set(err, -EINVAL, "config.json: \"%s\" must be positive, got %lld", name,
				  (long long)v);
	if (v > max)
		return ms_err_set(err, -EINVAL, "config.json: \"%s\" is %lld, past the limit of %lld",
				  name, (long long)v, (long long)max);
	return 0;
}

static int positive(const char *name, int64_t v, struct ms_err *err)
{
	return in_range(name, v, INT32_MAX, err);
}

/* YaRN's mscale (transformers get_mscale). */
static double yarn_mscale(double scale, double m)
{
	return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

/* rope_scaling (transformers v4) or rope_parameters (v5, which also carries
 * rope_theta). A null or absent object means plain RoPE. */
static int parse_rope(struct ms_model_config *c, const cJSON *root, struct ms_err *err)
{
	const cJSON *rp = field(root, "rope_parameters");
	const char *where = "rope_parameters.";
	if (!rp) {
		rp = field(root, "rope_scaling");
		where = "rope_scaling.";
	}
	if (rp && !cJSON_IsObject(rp))
		return ms_err_set(err, -EINVAL, "config.json: \"%.*s\" must be an object",
				  (int)strlen(where) - 1, where);
	struct ms_rope_config *r = &c->rope;
	int rc;
	/* v5 moves rope_theta into rope_parameters; accept it in either place. */
	const cJSON *theta = rp ? field(rp, "rope_theta") : NULL;
	if (theta)
		rc = get_num(rp, where, "rope_theta", true, 0, &r->theta, err);
	else
		rc = get_num(root, "", "rope_theta", true, 0, &r->theta, err);
	if (rc)
		return rc;
	if (!(r->theta > 1.0))
		return ms_err_set(err, -EINVAL, "config.json: \"rope_theta\" must be > 1, got %g", r->theta);
	r->type = MS_ROPE_DEFAULT;
	r->factor = 1.0;
	r->attention_factor = 1.0;
	if (!rp)
		return 0;
	const cJSON *ty = field(rp, "rope_type");
	if (!ty)
		ty = field(rp, "type"); /* older transformers spelling */
	if (!ty || !cJSON_IsString(ty))
		return ms_err_set(err, -EINVAL, "config.json: missing field \"%srope_type\"", where);
	if (strcmp(ty->valuestring, "default") == 0)
		return 0;
	if (strcmp(ty->valuestring, "yarn") != 0)
		return ms_err_set(err, -ENOTSUP,
				  "config.json: unknown \"%srope_type\" \"%s\" (supported: yarn, default)",
				  where, ty->valuestring);
	r->type = MS_ROPE_YARN;
	int64_t l0 = 0;
	const cJSON *ol = field(rp, "original_max_position_embeddings");
	if (ol) {
		if ((rc = get_int(rp, "original_max_position_embeddings", NULL, true, 0, &l0, err)))
			return rc;
	} else if ((rc = get_int(root, "original_max_position_embeddings", "initial_context_length",
				 true, 0, &l0, err))) {
		return ms_err_prefix(err, "YaRN needs %soriginal_max_position_embeddings: ", where);
	}
	if ((rc = positive("original_max_position_embeddings", l0, err)))
		return rc;
	r->original_max_pos = l0;
	/* Newer transformers: factor, falling back to the context ratio. */
	double fallback = (double)c->max_pos / (double)l0;
	if ((rc = get_num(rp, where, "factor", false, fallback, &r->factor, err)))
		return rc;
	if (!(r->factor >= 1.0))
		return ms_err_set(err, -EINVAL, "config.json: \"%sfactor\" must be >= 1, got %g", where,
				  r->factor);
	if ((rc = get_num(rp, where, "beta_fast", false, 32.0, &r->beta_fast, err)) ||
	    (rc = get_num(rp, where, "beta_slow", false, 1.0, &r->beta_slow, err)))
		return rc;
	if (!(r->beta_fast > 0) || !(r->beta_slow > 0))
		return ms_err_set(err, -EINVAL, "config.json: \"%sbeta_fast\"/\"beta_slow\" must be > 0",
				  where);
	const cJSON *tr = field(rp, "truncate");
	if (tr && !cJSON_IsBool(tr))
		return ms_err_set(err, -EINVAL, "config.json: \"%struncate\" must be true or false", where);
	r->truncate = tr ? cJSON_IsTrue(tr) : true; /* transformers' default */
	double af = -1, ms = 0, msad = 0;
	if ((rc = get_num(rp, where, "attention_factor", false, -1, &af, err)) ||
	    (rc = get_num(rp, where, "mscale", false, 0, &ms, err)) ||
	    (rc = get_num(rp, where, "mscale_all_dim", false, 0, &msad, err)))
		return rc;
	if (field(rp, "attention_factor") && !(af > 0))
		return ms_err_set(err, -EINVAL, "config.json: \"%sattention_factor\" must be > 0, got %g",
				  where, af);
	if (af > 0)
		r->attention_factor = af;
	else if (ms != 0 && msad != 0)
		r->attention_factor = yarn_mscale(r->factor, ms) / yarn_mscale(r->factor, msad);
	else
		r->attention_factor = yarn_mscale(r->factor, 1.0);
	return 0;
}

static int parse_layer_types(struct ms_model_config *c, const cJSON *root, struct ms_err *err)
{
	const cJSON *lt = field(root, "layer_types");
	if (lt && !cJSON_IsArray(lt))
		return ms_err_set(err, -EINVAL, "config.json: \"layer_types\" must be an array");
	int n = lt ? cJSON_GetArraySize(lt) : 0;
	if (lt && n != c->n_layers)
		return ms_err_set(err, -EINVAL,
				  "config.json: \"layer_types\" has %d entries but num_hidden_layers is %lld",
				  n, (long long)c->n_layers);
	c->layer_sliding = calloc((size_t)c->n_layers, sizeof(bool));
	if (!c->layer_sliding)
		return ms_err_set(err, -ENOMEM, "config.json: out of memory");
	if (!lt) {
		/* transformers' default: layers 0, 2, 4, ... slide. */
		for (int64_t i = 0; i < c->n_layers; i++)
			c->layer_sliding[i] = (i % 2) == 0;
		return 0;
	}
	int i = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, lt) {
		const char *s = cJSON_IsString(it) ? it->valuestring : NULL;
		if (s && strcmp(s, "sliding_attention") == 0)
			c->layer_sliding[i] = true;
		else if (s && strcmp(s, "full_attention") == 0)
			c->layer_sliding[i] = false;
		else
			return ms_err_set(err, -EINVAL,
					  "config.json: \"layer_types[%d]\" is %s%s%s (expected "
					  "\"sliding_attention\" or \"full_attention\")",
					  i, s ? "\"" : "", s ? s : "not a string", s ? "\"" : "");
		i++;
	}
	return 0;
}

/* eos_token_id: one id or a list; each an integer id inside the vocabulary. */
static int parse_eos(struct ms_model_config *c, const cJSON *root, struct ms_err *err)
{
	const cJSON *e = field(root, "eos_token_id");
	c->n_eos = 0;
	if (!e)
		return 0;
	if (!cJSON_IsNumber(e) && !cJSON_IsArray(e))
		return ms_err_set(err, -EINVAL, "config.json: \"eos_token_id\" must be an integer or a list");
	int n = cJSON_IsArray(e) ? cJSON_GetArraySize(e) : 1;
	int max = (int)(sizeof(c->eos_ids) / sizeof(c->eos_ids[0]));
	if (n > max)
		return ms_err_set(err, -EINVAL, "config.json: \"eos_token_id\" lists %d ids (at most %d)",
				  n, max);
	for (int i = 0; i < n; i++) {
		const cJSON *it = cJSON_IsArray(e) ? cJSON_GetArrayItem(e, i) : e;
		double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
		if (!cJSON_IsNumber(it) || v != floor(v) || v < 0 || v >= (double)c->vocab)
			return ms_err_set(err, -EINVAL,
					  "config.json: \"eos_token_id\" entry %d is not an id in [0, %lld)",
					  i, (long long)c->vocab);
		c->eos_ids[c->n_eos++] = (int64_t)v;
	}
	return 0;
}

static int parse_root(struct ms_model_config *c, const cJSON *root, struct ms_err *err)
{
	int rc;
	if (!cJSON_IsObject(root))
		return ms_err_set(err, -EINVAL, "config.json: top level is not an object");
	const cJSON *arch = field(root, "architectures");
	const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
	if (!a0 || !cJSON_IsString(a0))
		return ms_err_set(err, -EINVAL,
				  "config.json: \"architectures\" must be a non-empty list of strings");
	snprintf(c->arch, sizeof(c->arch), "%s", a0->valuestring);

	struct {
		const char *name, *alias;
		int64_t *dst, max;
	} ints[] = {
		/* gpt-oss-120b: 2880, 36, 64, 8, 2880, 128, 4, 201088, 131072 */
		{"hidden_size", NULL, &c->hidden, 1 << 20},
		{"num_hidden_layers", NULL, &c->n_layers, 1 << 12},
		{"num_attention_heads", NULL, &c->n_heads, 1 << 12},
		{"num_key_value_heads", NULL, &c->n_kv_heads, 1 << 12},
		{"intermediate_size", NULL, &c->intermediate, 1 << 20},
		{"num_local_experts", "num_experts", &c->n_experts, 1 << 16},
		{"num_experts_per_tok", "experts_per_token", &c->top_k, 1 << 16},
		{"vocab_size", NULL, &c->vocab, 1 << 24},
		{"max_position_embeddings", NULL, &c->max_pos, INT32_MAX},
	};
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		if ((rc = get_int(root, ints[i].name, ints[i].alias, true, 0, ints[i].dst, err)) ||
		    (rc = in_range(ints[i].name, *ints[i].dst, ints[i].max, err)))
			return rc;
	}
	/* head_dim defaults to H / nH only when absent (transformers). */
	if ((rc = get_int(root, "head_dim", NULL, false, c->hidden / c->n_heads, &c->head_dim, err)) ||
	    (rc = in_range("head_dim", c->head_dim, 1 << 16, err)))
		return rc;
	if (c->head_dim % 2)
		return ms_err_set(err, -EINVAL,
				  "config.json: \"head_dim\" must be even for the half-split RoPE, got %lld",
				  (long long)c->head_dim);
	if (c->n_heads % c->n_kv_heads)
		return ms_err_set(err, -EINVAL,
				  "config.json: \"num_attention_heads\" (%lld) is not a multiple of "
				  "\"num_key_value_heads\" (%lld)",
				  (long long)c->n_heads, (long long)c->n_kv_heads);
	if (c->top_k > c->n_experts)
		return ms_err_set(err, -EINVAL,
				  "config.json: \"num_experts_per_tok\" (%lld) exceeds \"num_local_experts\" (%lld)",
				  (long long)c->top_k, (long long)c->n_experts);
	if ((rc = get_num(root, "", "rms_norm_eps", true, 0, &c->rms_eps, err)))
		return rc;
	if (!(c->rms_eps > 0))
		return ms_err_set(err, -EINVAL, "config.json: \"rms_norm_eps\" must be > 0, got %g", c->rms_eps);
	if ((rc = get_num(root, "", "swiglu_limit", true, 0, &c->swiglu_limit, err)))
		return rc;
	if (!(c->swiglu_limit > 0))
		return ms_err_set(err, -EINVAL, "config.json: \"swiglu_limit\" must be > 0, got %g",
				  c->swiglu_limit);
	/* The modeling code hard-codes 1.702; only the newest config names it. */
	if ((rc = get_num(root, "", "swiglu_alpha", false, 1.702, &c->swiglu_alpha, err)))
		return rc;
	const cJSON *tie = field(root, "tie_word_embeddings");
	if (tie && !cJSON_IsBool(tie))
		return ms_err_set(err, -EINVAL, "config.json: \"tie_word_embeddings\" must be true or false");
	c->tie_embeddings = tie ? cJSON_IsTrue(tie) : false;
	const cJSON *ab = field(root, "attention_bias");
	if (ab && !cJSON_IsBool(ab))
		return ms_err_set(err, -EINVAL, "config.json: \"attention_bias\" must be true or false");
	if (ab && !cJSON_IsTrue(ab))
		return ms_err_set(err, -ENOTSUP,
				  "config.json: \"attention_bias\" false is not GPT-OSS (its q/k/v/o have biases)");
	if ((rc = parse_layer_types(c, root, err)))
		return rc;
	bool any_sliding = false;
	for (int64_t i = 0; i < c->n_layers; i++)
		any_sliding |= c->layer_sliding[i];
	if ((rc = get_int(root, "sliding_window", NULL, any_sliding, 0, &c->sliding_window, err)))
		return rc;
	if (any_sliding && (rc = positive("sliding_window", c->sliding_window, err)))
		return rc;
	if ((rc = parse_rope(c, root, err)) || (rc = parse_eos(c, root, err)))
		return rc;
	return 0;
}

int ms_model_config_from_json(struct ms_model_config *cfg, const cJSON *root,
			      struct ms_err *err)
{
	memset(cfg, 0, sizeof(*cfg));
	int rc = parse_root(cfg, root, err);
	if (rc)
		ms_model_config_free(cfg);
	return rc;
}

int ms_model_config_parse(struct ms_model_config *cfg, const char *json_text, struct ms_err *err)
{
	memset(cfg, 0, sizeof(*cfg));
	cJSON *root;
	char msg[sizeof(err->msg)];
	int rc = ms_json_parse_rfc(json_text, strlen(json_text), 0, &root, msg, sizeof(msg));
	if (rc)
		return ms_err_set(err, rc, "config.json: %s", msg);
	rc = ms_model_config_from_json(cfg, root, err);
	cJSON_Delete(root);
	return rc;
}

int ms_model_config_load(struct ms_model_config *cfg, const char *dir, struct ms_err *err)
{
	char path[4096];
	cJSON *root;
	memset(cfg, 0, sizeof(*cfg));
	snprintf(path, sizeof(path), "%s/config.json", dir);
	int rc = ms_json_read_file(path, &root, err);
	if (rc)
		return rc;
	rc = ms_model_config_from_json(cfg, root, err);
	cJSON_Delete(root);
	if (rc)
		ms_err_prefix(err, "%s: ", dir);
	return rc;
}

void ms_model_config_free(struct ms_model_config *cfg)
{
	if (!cfg)
		return;
	free(cfg->layer_sliding);
	memset(cfg, 0, sizeof(*cfg));
}
