/*
 * gpt-oss.c: the GPT-OSS forward pass (GptOssForCausalLM), exactly as
 * ../shared/docs/gpt-oss.md §2 specifies it, in fp32 activations.
 *
 *   x = embed[ids]
 *   per layer: x += o_proj(attn(rope(q), rope(k), v, sinks, window))   on RMSNorm(x)
 *              x += sum_k w_k * expert_k(RMSNorm(x))                   top-k router
 *   logits = lm_head(RMSNorm(x))
 *
 * Weights arrive through the quant registry (quant/), which has already
 * repacked them for the backend's kernels; this file never looks at a
 * weight's format. Activations are fp32; weights are never converted per
 * token.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpt-oss.h"

struct gptoss_layer {
	bool sliding;
	float *attn_norm;          /* [H] input_layernorm */
	float *mlp_norm;           /* [H] post_attention_layernorm */
	struct ms_qlinear q, k, v, o;
	float *sinks;              /* [nH] per-head sink logits */
	struct ms_qlinear router;  /* [E, H] + [E] */
	struct ms_qmoe moe;
};

struct gptoss {
	struct gptoss_layer *layers;
	struct ms_qlinear embed;    /* [V, H]: rows are looked up, never multiplied */
	struct ms_qlinear lm_head;  /* [V, H]; aliases embed when tied */
	bool tied;
	float *final_norm;          /* [H] */
	double *inv_freq;           /* [d/2] RoPE frequencies, kept in double (host) */
	float rope_scale;           /* YaRN attention factor, applied to cos and sin */
	struct ms_qload ld;         /* quant's state while loading */
};

/* ---- RoPE ---- */

/* inv_freq per transformers' _compute_yarn_parameters (truncate honoured),
 * in double. */
void ms_gptoss_rope_freqs(const struct ms_model_config *c, double *inv_freq, float *scale)
{
	int64_t d = c->head_dim, half = d / 2;
	const struct ms_rope_config *r = &c->rope;
	double base = r->theta;
	if (r->type == MS_ROPE_DEFAULT) {
		for (int64_t i = 0; i < half; i++)
			inv_freq[i] = 1.0 / pow(base, (double)(2 * i) / (double)d);
		*scale = 1.0f;
		return;
	}
	double L0 = (double)r->original_max_pos;
	double lo = (double)d * log(L0 / (r->beta_fast * 2.0 * M_PI)) / (2.0 * log(base));
	double hi = (double)d * log(L0 / (r->beta_slow * 2.0 * M_PI)) / (2.0 * log(base));
	if (r->truncate) {
		lo = floor(lo);
		hi = ceil(hi);
	}
	lo = lo > 0 ? lo : 0;
	hi = hi < (double)(d - 1) ? hi : (double)(d - 1);
	if (lo == hi)
		hi += 0.001; /* avoid a zero-width ramp */
	for (int64_t i = 0; i < half; i++) {
		double pos_freq = pow(base, (double)(2 * i) / (double)d);
		double extrap = 1.0 / pos_freq, interp = 1.0 / (r->factor * pos_freq);
		double ramp = ((double)i - lo) / (hi - lo);
		ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
		/* ramp 0 = high frequency (kept), 1 = low frequency (interpolated) */
		inv_freq[i] = interp * ramp + extrap * (1.0 - ramp);
	}
	*scale = (float)r->attention_factor;
}

/* ---- loading ---- */

/* A vector (norm weights, sinks) into the backend's memory. */
static int load_vec(struct ms_model *m, const char *name, int64_t n, float **out,
		    struct ms_err *err)
{
	int rc = ms_checkpoint_get_f32(&m->ck, name, 1, (int64_t[]){n}, out, err);
	if (!rc && (rc = ms_backend_adopt(m->be, out, (size_t)n, err)))
		ms_err_prefix(err, "%s: ", name);
	return rc;
}

static void add_group(struct ms_model *m, const char *group, const struct ms_qlinear *l)
{
	const struct ms_linear *w = &l->lin;
	ms_model_add_group(m, group, l->scheme, ms_wfmt_name(w->w.fmt), ms_actq_name(w->act.kind),
			   w->kernel_name, l->why, ms_wmat_bytes(&w->w));
}

static int load_linear(struct ms_model *m, const char *group, const char *prefix,
		       enum ms_qkind kind, int64_t out, int64_t in, bool bias, struct ms_qlinear *l,
		       struct ms_err *err)
{
	(void)group; /* groups are added once kernels are bound (add_groups) */
	struct gptoss *g = m->impl;
	return ms_quant_load_linear(&m->qcfg, &m->ck, prefix, kind, out, in, bias, &g->ld, l, err);
}

static void gptoss_unload(struct ms_model *m)
{
	struct gptoss *g = m->impl;
	if (!g)
		return;
	for (int64_t i = 0; g->layers && i < m->cfg.n_layers; i++) {
		struct gptoss_layer *L = &g->layers[i];
		ms_backend_release(m->be, L->attn_norm);
		ms_backend_release(m->be, L->mlp_norm);
		ms_backend_release(m->be, L->sinks);
		ms_qlinear_free(&L->q);
		ms_qlinear_free(&L->k);
		ms_qlinear_free(&L->v);
		ms_qlinear_free(&L->o);
		ms_qlinear_free(&L->router);
		ms_qmoe_free(&L->moe);
	}
	free(g->layers);
	ms_qlinear_free(&g->embed);
	if (!g->tied)
		ms_qlinear_free(&g->lm_head);
	ms_backend_release(m->be, g->final_norm);
	free(g->inv_freq);
	free(g);
	m->impl = NULL;
}

static int load_layer(struct ms_model *m, int64_t i, struct gptoss_layer *L, struct ms_err *err)
{
	const struct ms_model_config *c = &m->cfg;
	int64_t H = c->hidden, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
	char p[256], name[320];
	int rc;
	L->sliding = c->layer_sliding[i];
	snprintf(p, sizeof(p), "model.layers.%lld", (long long)i);
	snprintf(name, sizeof(name), "%s.input_layernorm.weight", p);
	if ((rc = load_vec(m, name, H, &L->attn_norm, err)))
		return rc;
	snprintf(name, sizeof(name), "%s.post_attention_layernorm.weight", p);
	if ((rc = load_vec(m, name, H, &L->mlp_norm, err)))
		return rc;
	snprintf(name, sizeof(name), "%s.self_attn.sinks", p);
	if ((rc = load_vec(m, name, c->n_heads, &L->sinks, err)))
		return rc;
	const struct {
		const char *sub;
		int64_t out, in;
		struct ms_qlinear *l;
	} lin[] = {
		{"self_attn.q_proj", qd, H, &L->q}, {"self_attn.k_proj", kvd, H, &L->k},
		{"self_attn.v_proj", kvd, H, &L->v}, {"self_attn.o_proj", H, qd, &L->o},
	};
	for (size_t j = 0; j < sizeof(lin) / sizeof(lin[0]); j++) {
		snprintf(name, sizeof(name), "%s.%s", p, lin[j].sub);
		if ((rc = load_linear(m, "attention q/k/v/o", name, MS_QKIND_LINEAR, lin[j].out,
				      lin[j].in, true, lin[j].l, err)))
			return rc;
	}
	snprintf(name, sizeof(name), "%s.mlp.router", p);
	if ((rc = load_linear(m, "router", name, MS_QKIND_LINEAR, c->n_experts, H, true, &L->router,
			      err)))
		return rc;
	/* Its outputs choose experts: rounding its input (int8, bf16) flips
	 * near-ties, and a flipped expert is a different function. It is tiny:
	 * keep fp32 activations (binding happens in the layer's flush). */
	L->router.lin.w.exact_acts = true;
	snprintf(name, sizeof(name), "%s.mlp.experts", p);
	struct gptoss *g = m->impl;
	if ((rc = ms_quant_load_moe(&m->qcfg, &m->ck, name, c->n_experts, H, c->intermediate, &g->ld,
				    &L->moe, err)))
		return rc;
	m->moe_layout = L->moe.layout;
	return 0;
}

/* Inspect groups, in load order. */
static void add_groups(struct ms_model *m, const struct gptoss *g)
{
	const struct ms_model_config *c = &m->cfg;
	add_group(m, "embedding", &g->embed);
	for (int64_t i = 0; i < c->n_layers; i++) {
		const struct gptoss_layer *L = &g->layers[i];
		const struct ms_qlinear *att[] = {&L->q, &L->k, &L->v, &L->o};
		for (int j = 0; j < 4; j++)
			add_group(m, "attention q/k/v/o", att[j]);
		add_group(m, "router", &L->router);
		for (int64_t e = 0; e < c->n_experts; e++) {
			add_group(m, "experts gate_up", &L->moe.gate_up[e]);
			add_group(m, "experts down", &L->moe.down[e]);
		}
	}
	if (!g->tied)
		add_group(m, "lm_head", &g->lm_head);
}

static int gptoss_load(struct ms_model *m, struct ms_err *err)
{
	const struct ms_model_config *c = &m->cfg;
	if (c->head_dim > 1024)
		return ms_err_set(err, -ENOTSUP, "config.json: \"head_dim\" %lld exceeds 1024",
				  (long long)c->head_dim);
	struct gptoss *g = calloc(1, sizeof(*g));
	if (!g)
		return ms_err_set(err, -ENOMEM, "out of memory");
	m->impl = g;
	g->layers = calloc((size_t)c->n_layers, sizeof(*g->layers));
	g->inv_freq = calloc((size_t)c->head_dim / 2, sizeof(double));
	if (!g->layers || !g->inv_freq)
		return ms_err_set(err, -ENOMEM, "out of memory");
	ms_gptoss_rope_freqs(c, g->inv_freq, &g->rope_scale);
	g->ld.be = m->be;
	/* Schemes check and map every tensor first; the kernels' repacking then
	 * runs as one parallel pass over all matrices (ms_quant_bind_end). */
	int rc = ms_quant_bind_begin(&g->ld, err);
	if (rc)
		return rc;
	rc = load_linear(m, "embedding", "model.embed_tokens", MS_QKIND_EMBEDDING, c->vocab,
			 c->hidden, false, &g->embed, err);
	for (int64_t i = 0; !rc && i < c->n_layers; i++) {
		rc = load_layer(m, i, &g->layers[i], err);
		/* pack layer by layer: peak memory stays near the final size */
		if (!rc)
			rc = ms_quant_bind_flush(&g->ld, &m->pack_stats, i + 1 < c->n_layers, err);
	}
	if (!rc)
		rc = load_vec(m, "model.norm.weight", c->hidden, &g->final_norm, err);
	if (!rc) {
		g->tied = c->tie_embeddings && !ms_checkpoint_find(&m->ck, "lm_head.weight");
		if (g->tied)
			g->lm_head = g->embed;
		else
			rc = load_linear(m, "lm_head", "lm_head", MS_QKIND_LINEAR, c->vocab,
					 c->hidden, false, &g->lm_head, err);
	}
	/* end the deferred pass even after a failure: it owns the list */
	struct ms_err e2 = {0};
	int rc2 = ms_quant_bind_end(&g->ld, &m->pack_stats, &e2);
	if (!rc && rc2)
		rc = ms_err_set(err, rc2, "%s", e2.msg);
	if (!rc)
		add_groups(m, g);
	return rc; /* on failure the caller's ms_model_free() unloads */
}

/* ---- forward ---- */

/* A step's activations, from the backend's arena. */
struct acts {
	float *x, *h, *q, *k, *v, *att, *o, *rl, *logits;
	float *rope;               /* [n][d] each token's cosines, then sines */
};

/* Reserve the arena for n tokens (nl of them through the head) and carve
 * it: one reservation, so a step allocates nothing once the arena has
 * grown to the largest batch. Logits go straight to the caller's buffer
 * on a host backend. */
static int acts_take(struct ms_model *m, int64_t n, int64_t nl, float *logits, struct acts *a,
		     struct ms_err *err)
{
	const struct ms_model_config *c = &m->cfg;
	struct ms_backend *be = m->be;
	int64_t H = c->hidden, d = c->head_dim, qd = c->n_heads * d, kvd = c->n_kv_heads * d;
	struct {
		float **p;
		int64_t floats;
	} parts[] = {
		{&a->x, n * H}, {&a->h, (n > nl ? n : nl) * H}, {&a->q, n * qd}, {&a->k, n * kvd},
		{&a->v, n * kvd}, {&a->att, n * qd}, {&a->o, n * H}, {&a->rl, n * c->n_experts},
		{&a->rope, n * d}, {&a->logits, be->host ? 0 : nl * c->vocab},
	};
	size_t total = 0, np = sizeof(parts) / sizeof(parts[0]);
	for (size_t i = 0; i < np; i++)
		total += ms_arena_size((size_t)parts[i].floats * sizeof(float));
	int rc = ms_backend_arena_reserve(be, total, err);
	if (rc)
		return rc;
	for (size_t i = 0; i < np; i++)
		*parts[i].p = ms_backend_arena_take(be, (size_t)parts[i].floats * sizeof(float));
	if (be->host)
		a->logits = logits;
	return 0;
}

/* One layer: attention, then the experts, each added into x. */
static int layer_forward(struct ms_model *m, int li, int64_t n, const struct acts *a,
			 struct ms_err *err)
{
	const struct ms_model_config *c = &m->cfg;
	const struct gptoss_layer *L = &((struct gptoss *)m->impl)->layers[li];
	struct ms_backend *be = m->be;
	const struct ms_backend_ops *op = be->ops;
	int64_t H = c->hidden, d = c->head_dim;
	int rc;
	op->rmsnorm(be, a->h, a->x, NULL, n, L->attn_norm, H, c->rms_eps);
	/* q, k and v in one call (k and v alone are too small to keep every
	 * thread busy) */
	if ((rc = ms_qlinear_apply_multi(be, 3, (const struct ms_qlinear *[]){&L->q, &L->k, &L->v},
					 a->h, n, (float *[]){a->q, a->k, a->v}, err)))
		return rc;
	op->rope(be, a->rope, a->q, c->n_heads, d);
	op->rope(be, a->rope, a->k, c->n_kv_heads, d);
	op->kv_write(be, li, a->k, a->v);
	struct ms_attn_desc ad = {
		.layer = li, .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = d,
		.window = L->sliding ? c->sliding_window : 0, .sinks = L->sinks, .q = a->q,
		.out = a->att,
	};
	if ((rc = op->attention(be, &ad, err)) ||
	    (rc = ms_qlinear_apply(be, &L->o, a->att, n, a->o, err)))
		return rc;
	op->add(be, a->x, a->o, n * H);

	op->rmsnorm(be, a->h, a->x, NULL, n, L->mlp_norm, H, c->rms_eps);
	if ((rc = ms_qlinear_apply(be, &L->router, a->h, n, a->rl, err)))
		return rc;
	struct ms_moe_desc md = {
		.w = &L->moe.w, .top_k = c->top_k, .router_logits = a->rl, .h = a->h, .x = a->x,
		.act = {(float)c->swiglu_limit, (float)c->swiglu_alpha},
	};
	return op->moe(be, &md, err);
}

/* Tokens of any number of sequences at their own positions, in one pass:
 * every matrix (and each active expert) is streamed once for the whole
 * batch; attention reads each token's own sequence. The pages for every
 * (token, layer) must exist (the caller reserves them). */
static int gptoss_forward_batch(struct ms_model *m, const struct ms_batch *bt, float *logits,
				struct ms_err *err)
{
	const struct ms_model_config *c = &m->cfg;
	struct gptoss *g = m->impl;
	struct ms_backend *be = m->be;
	const struct ms_backend_ops *op = be->ops;
	int64_t n = bt->n, nl = bt->n_logits, H = c->hidden;
	int64_t kvd = c->n_kv_heads * c->head_dim;
	if (kvd != bt->pool->kv_dim)
		return ms_err_set(err, -EINVAL, "forward: the KV pool holds %lld floats per position, "
				  "the model needs %lld", (long long)bt->pool->kv_dim, (long long)kvd);
	struct ms_step st = {.n = n, .tokens = bt->tokens, .pos = bt->pos, .seq = bt->seq,
			     .kv = bt->kv, .pool = bt->pool};
	struct acts a;
	int rc = acts_take(m, n, nl, logits, &a, err);
	if (!rc)
		rc = op->step_begin(be, &st, err);
	if (rc)
		return rc;
	op->embed(be, &g->embed.lin, a.x);
	op->rope_table(be, g->inv_freq, g->rope_scale, c->head_dim, a.rope);
	for (int li = 0; li < c->n_layers && !rc; li++)
		rc = layer_forward(m, li, n, &a, err);
	if (rc || !nl)
		return rc;
	/* Only the rows whose logits are wanted go through the head. */
	op->rmsnorm(be, a.h, a.x, bt->logit_rows, nl, g->final_norm, H, c->rms_eps);
	if ((rc = ms_qlinear_apply(be, &g->lm_head, a.h, nl, a.logits, err)))
		return rc;
	if (!be->host)
		op->to_host(be, logits, a.logits, (size_t)(nl * c->vocab) * sizeof(float));
	return 0;
}

/* Modules by name, for `moeserve dequant`: the checkpoint's linear names,
 * plus model.layers.L.mlp.experts.E.gate_up (interleaved [2I, H]) and
 * .down for the experts, whatever their layout on disk. */
static const struct ms_qlinear *gptoss_find_linear(const struct ms_model *m, const char *name)
{
	const struct gptoss *g = m->impl;
	long long l, e;
	int n = 0;
	char what[32];
	if (!strcmp(name, "model.embed_tokens"))
		return &g->embed;
	if (!strcmp(name, "lm_head"))
		return &g->lm_head;
	if (sscanf(name, "model.layers.%lld.%n", &l, &n) != 1 || l < 0 || l >= m->cfg.n_layers)
		return NULL;
	const struct gptoss_layer *L = &g->layers[l];
	const char *rest = name + n;
	if (!strcmp(rest, "self_attn.q_proj"))
		return &L->q;
	if (!strcmp(rest, "self_attn.k_proj"))
		return &L->k;
	if (!strcmp(rest, "self_attn.v_proj"))
		return &L->v;
	if (!strcmp(rest, "self_attn.o_proj"))
		return &L->o;
	if (!strcmp(rest, "mlp.router"))
		return &L->router;
	if (sscanf(rest, "mlp.experts.%lld.%31s", &e, what) == 2 && e >= 0 && e < m->cfg.n_experts) {
		if (!strcmp(what, "gate_up"))
			return &L->moe.gate_up[e];
		if (!strcmp(what, "down"))
			return &L->moe.down[e];
	}
	return NULL;
}

const struct ms_model_ops ms_model_gpt_oss = {
	.find_linear = gptoss_find_linear,
	.arch = "GptOssForCausalLM",
	.load = gptoss_load,
	.unload = gptoss_unload,
	.forward_batch = gptoss_forward_batch,
};
