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

#include "attention.h"
#include "gpt-oss.h"
#include "moe.h"

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
	double *inv_freq;           /* [d/2] RoPE frequencies, kept in double */
	float rope_scale;           /* YaRN attention factor, applied to cos and sin */
	const struct ms_attn_kernel *attn; /* chosen once at load, for the backend's set */
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

/* The rotation of position pos: d/2 cosines and sines, scaled. They depend
 * on the position only, so a forward pass computes them once per token for
 * every layer and both q and k (in double: 32 sin/cos pairs per token and
 * call cost ~1 ms a step at 16 tokens x 12 layers). */
static void rope_table(const struct gptoss *g, int64_t d, int64_t pos, float *cs, float *sn)
{
	for (int64_t i = 0; i < d / 2; i++) {
		double ang = (double)pos * g->inv_freq[i];
		cs[i] = (float)cos(ang) * g->rope_scale;
		sn[i] = (float)sin(ang) * g->rope_scale;
	}
}

/* ---- loading ---- */

static int load_vec(struct ms_model *m, const char *name, int64_t n, float **out,
		    struct ms_err *err)
{
	return ms_checkpoint_get_f32(&m->ck, name, 1, (int64_t[]){n}, out, err);
}

static void add_group(struct ms_model *m, const char *group, const struct ms_qlinear *l)
{
	const struct ms_linear *w = &l->lin;
	ms_model_add_group(m, group, l->scheme, ms_wfmt_name(w->w.fmt), ms_actq_name(w->act.kind),
			   w->kernel->name, l->why, ms_wmat_bytes(&w->w));
}

static int load_linear(struct ms_model *m, const char *group, const char *prefix,
		       enum ms_qkind kind, int64_t out, int64_t in, bool bias, struct ms_qlinear *l,
		       struct ms_err *err)
{
	(void)group; /* groups are added once kernels are bound (add_groups) */
	return ms_quant_load_linear(&m->qcfg, &m->ck, prefix, kind, out, in, bias, m->be, l, err);
}

static void gptoss_unload(struct ms_model *m)
{
	struct gptoss *g = m->impl;
	if (!g)
		return;
	for (int64_t i = 0; g->layers && i < m->cfg.n_layers; i++) {
		struct gptoss_layer *L = &g->layers[i];
		free(L->attn_norm);
		free(L->mlp_norm);
		free(L->sinks);
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
	free(g->final_norm);
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
	if ((rc = ms_quant_load_moe(&m->qcfg, &m->ck, name, c->n_experts, H, c->intermediate, m->be,
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
	g->attn = ms_attn_select(m->be->isa, m->be->cpu_flags);
	/* Schemes check and map every tensor first; the kernels' repacking then
	 * runs as one parallel pass over all matrices (ms_quant_bind_end). */
	int rc = ms_quant_bind_begin(m->be, err);
	if (rc)
		return rc;
	rc = load_linear(m, "embedding", "model.embed_tokens", MS_QKIND_EMBEDDING, c->vocab,
			 c->hidden, false, &g->embed, err);
	for (int64_t i = 0; !rc && i < c->n_layers; i++) {
		rc = load_layer(m, i, &g->layers[i], err);
		/* pack layer by layer: peak memory stays near the final size */
		if (!rc)
			rc = ms_quant_bind_flush(m->be, &m->pack_stats, i + 1 < c->n_layers, err);
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
	int rc2 = ms_quant_bind_end(m->be, &m->pack_stats, &e2);
	if (!rc && rc2)
		rc = ms_err_set(err, rc2, "%s", e2.msg);
	if (!rc)
		add_groups(m, g);
	return rc; /* on failure the caller's ms_model_free() unloads */
}

/* ---- attention ---- */

/* engine/cpu/attention.c: per (block of tokens, kv head), every query head of
 * the group over the token's own pages, the sink in the softmax. */

/* ---- forward ---- */

struct bufs {
	float *x, *h, *q, *k, *v, *att, *o, *rl, *rw;
	float *rope;               /* [n][d] each token's cosines, then sines */
	int32_t *sel;
	const int32_t **pages;     /* [n] each token's page table, per layer */
	struct ms_attn_ws ws;
};

static void bufs_free(struct bufs *b)
{
	free(b->x), free(b->h), free(b->q), free(b->k), free(b->v), free(b->att);
	free(b->o), free(b->rl), free(b->rw), free(b->sel), free(b->pages);
	free(b->rope);
	ms_attn_ws_free(&b->ws);
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
	struct ms_cpu *be = m->be;
	const struct ms_rowops *ro = be->rowops; /* RMSNorm, rope, residual add */
	const struct ms_kv_pool *pool = bt->pool;
	int64_t n = bt->n, H = c->hidden, d = c->head_dim, nH = c->n_heads, nKV = c->n_kv_heads;
	int64_t qd = nH * d, kvd = nKV * d, E = c->n_experts, k = c->top_k, P = pool->page_tokens;
	struct ms_swiglu act = {(float)c->swiglu_limit, (float)c->swiglu_alpha};
	if (kvd != pool->kv_dim)
		return ms_err_set(err, -EINVAL, "forward: the KV pool holds %lld floats per position, "
				  "the model needs %lld", (long long)pool->kv_dim, (long long)kvd);
	struct bufs b = {0};
	size_t fs = sizeof(float);
	int64_t nl = bt->n_logits;
	b.x = malloc((size_t)(n * H) * fs);
	b.h = malloc((size_t)((n > nl ? n : nl) * H) * fs);
	b.q = malloc((size_t)(n * qd) * fs);
	b.k = malloc((size_t)(n * kvd) * fs);
	b.v = malloc((size_t)(n * kvd) * fs);
	b.att = malloc((size_t)(n * qd) * fs);
	b.o = malloc((size_t)(n * H) * fs);
	b.rl = malloc((size_t)(n * E) * fs);
	b.rw = malloc((size_t)(n * k) * fs);
	b.sel = malloc((size_t)(n * k) * sizeof(int32_t));
	b.pages = malloc((size_t)n * sizeof(*b.pages));
	b.rope = malloc((size_t)(n * d) * fs);
	int rc = 0;
	if (!b.x || !b.h || !b.q || !b.k || !b.v || !b.att || !b.o || !b.rl || !b.rw ||
	    !b.sel || !b.pages || !b.rope) {
		rc = ms_err_set(err, -ENOMEM, "forward: out of memory for %lld tokens", (long long)n);
		goto out;
	}
	for (int64_t t = 0; t < n; t++) {
		ms_wmat_row_f32(&g->embed.lin.w, bt->tokens[t], b.x + t * H);
		rope_table(g, d, bt->pos[t], b.rope + t * d, b.rope + t * d + d / 2);
	}
	for (int64_t li = 0; li < c->n_layers; li++) {
		const struct gptoss_layer *L = &g->layers[li];
		for (int64_t t = 0; t < n; t++)
			ro->rmsnorm(b.h + t * H, b.x + t * H, L->attn_norm, H, c->rms_eps);
		/* q, k and v in one pass over the pool (k and v alone are too
		 * small to keep two threads busy) */
		if (ms_qlinear_apply_multi(be, 3, (const struct ms_qlinear *[]){&L->q, &L->k, &L->v},
					   b.h, n, (float *[]){b.q, b.k, b.v}))
			goto oom;
		for (int64_t t = 0; t < n; t++) {
			int64_t pos = bt->pos[t];
			const float *cs = b.rope + t * d, *sn = cs + d / 2;
			ro->rope(cs, sn, b.q + t * qd, nH, d);
			ro->rope(cs, sn, b.k + t * kvd, nKV, d);
			int32_t page = bt->kv[bt->seq[t]]->pages[li][pos / P];
			memcpy(ms_kv_k(pool, page, pos % P), b.k + t * kvd, (size_t)kvd * fs);
			memcpy(ms_kv_v(pool, page, pos % P), b.v + t * kvd, (size_t)kvd * fs);
		}
		for (int64_t t = 0; t < n; t++)
			b.pages[t] = bt->kv[bt->seq[t]]->pages[li];
		struct ms_attn_args aa = {
			.n_heads = nH, .n_kv_heads = nKV, .head_dim = d,
			.window = L->sliding ? c->sliding_window : 0, .sinks = L->sinks,
			.pool = pool, .n = n, .pos = bt->pos, .pages = b.pages, .q = b.q, .out = b.att,
		};
		if ((rc = ms_attn_run(g->attn, &be->pool, &aa, &b.ws, err)))
			goto out;
		if (ms_qlinear_apply(be, &L->o, b.att, n, b.o))
			goto oom;
		ro->add(b.x, b.o, n * H);

		for (int64_t t = 0; t < n; t++)
			ro->rmsnorm(b.h + t * H, b.x + t * H, L->mlp_norm, H, c->rms_eps);
		if (ms_qlinear_apply(be, &L->router, b.h, n, b.rl))
			goto oom;
		ms_moe_route(b.rl, n, E, k, b.sel, b.rw);
		/* the experts' sum is added into the residual stream */
		if ((rc = ms_moe_forward(be, &L->moe.w, act, b.h, n, b.sel, b.rw, k, b.x, err)))
			goto out;
	}
	/* Only the rows whose logits are wanted go through the head. */
	for (int64_t r = 0; r < nl; r++)
		ro->rmsnorm(b.h + r * H, b.x + bt->logit_rows[r] * H, g->final_norm, H, c->rms_eps);
	if (nl && ms_qlinear_apply(be, &g->lm_head, b.h, nl, logits))
		goto oom;
	goto out;
oom:
	rc = ms_err_set(err, -ENOMEM, "forward: out of memory for %lld tokens' activations",
			(long long)n);
out:
	bufs_free(&b);
	return rc;
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
