/*
 * rocm-ops.c: a forward pass's operations on the device (backend.h), each a
 * launch or two of the kernels (gpu.h). The step's tokens, positions and
 * page tables go up once in step_begin; logits come back in to_host.
 * Operations that cannot return an error record the first one, and the
 * next that can (linear, attention, moe, the next step) returns it.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rocm.h"

static const struct ms_gpu_ctx *ctx(struct ms_rocm *be)
{
	return &be->ctx;
}

/* ---- staging ---- */

/* The page tables of the step's sequences, [n_seq][n_layers][n_blocks],
 * -1 past a table's end. */
static void stage_pages(const struct ms_step *s, int64_t n_seq, int64_t L, int64_t nb,
			int32_t *out)
{
	for (int64_t q = 0; q < n_seq; q++)
		for (int64_t l = 0; l < L; l++) {
			int32_t *o = out + (q * L + l) * nb;
			const struct ms_kv_seq *kv = s->kv[q];
			for (int64_t b = 0; b < nb; b++)
				o[b] = kv && l < kv->n_layers && b < kv->cap_blocks ? kv->pages[l][b] : -1;
		}
}

/* Sequences the step names: seq[t] < n_seq (only those are staged). */
static int64_t step_seqs(const struct ms_step *s)
{
	int64_t n = 0;
	for (int64_t t = 0; t < s->n; t++)
		n = s->seq[t] + 1 > n ? s->seq[t] + 1 : n;
	return n;
}

int ms_rocm_step_begin(struct ms_backend *b, const struct ms_step *s, struct ms_err *err)
{
	struct ms_rocm *be = ms_rocm_of(b);
	if (be->kerr.code)
		return ms_err_set(err, be->kerr.code, "rocm: %s", be->kerr.msg);
	int64_t n = s->n, n_seq = step_seqs(s), P = s->pool ? s->pool->page_tokens : 1, nb = 1;
	int64_t L = 0;
	for (int64_t t = 0; t < n; t++) {
		nb = s->pos[t] / P + 1 > nb ? s->pos[t] / P + 1 : nb;
		L = s->kv[s->seq[t]]->n_layers > L ? s->kv[s->seq[t]]->n_layers : L;
	}
	size_t pg = (size_t)(n_seq * L * nb) * sizeof(int32_t);
	int rc = ms_rocm_reserve(be, RB_TOK, (size_t)n * 4, err);
	rc = rc ? rc : ms_rocm_reserve(be, RB_POS, (size_t)n * 8, err);
	rc = rc ? rc : ms_rocm_reserve(be, RB_SEQ, (size_t)n * 4, err);
	rc = rc ? rc : ms_rocm_reserve(be, RB_PAGES, pg, err);
	int32_t *stage = rc ? NULL : ms_rocm_host_stage(be, pg);
	if (!rc && !stage)
		rc = ms_err_set(err, -ENOMEM, "rocm: out of host memory for page tables");
	if (rc)
		return rc;
	stage_pages(s, n_seq, L, nb, stage);
	struct ms_gpu_ctx c = be->ctx;
	c.err = err;
	const struct ms_gpu_rt *rt = be->rt;
	rc = rt->h2d(&c, be->buf[RB_TOK].p, s->tokens, (size_t)n * 4);
	rc = rc ? rc : rt->h2d(&c, be->buf[RB_POS].p, s->pos, (size_t)n * 8);
	rc = rc ? rc : rt->h2d(&c, be->buf[RB_SEQ].p, s->seq, (size_t)n * 4);
	rc = rc ? rc : rt->h2d(&c, be->buf[RB_PAGES].p, stage, pg);
	if (rc)
		return rc;
	be->step = s;
	be->n_layers = L;
	be->n_blocks = nb;
	return 0;
}

/* ---- row operations ---- */

void ms_rocm_embed(struct ms_backend *b, const struct ms_linear *table, float *x)
{
	struct ms_rocm *be = ms_rocm_of(b);
	const struct ms_rocm_mat *rm = table->bound;
	if (!rm) {
		ms_rocm_fail(be, ms_err_set(&be->kerr, -EINVAL, "embed: the table is not on the device"));
		return;
	}
	ms_rocm_fail(be, be->k->embed(ctx(be), &rm->m, be->buf[RB_TOK].p, be->step->n, x));
}

void ms_rocm_rmsnorm(struct ms_backend *b, float *y, const float *x, const int64_t *rows,
		     int64_t n, const float *w, int64_t H, double eps)
{
	struct ms_rocm *be = ms_rocm_of(b);
	const int64_t *drows = NULL;
	if (rows) {
		/* rows are host memory (the model's list of logit rows) */
		int rc = ms_rocm_reserve(be, RB_ROWS, (size_t)n * 8, &be->kerr);
		rc = rc ? rc : be->rt->h2d(ctx(be), be->buf[RB_ROWS].p, rows, (size_t)n * 8);
		if (rc) {
			ms_rocm_fail(be, rc);
			return;
		}
		drows = be->buf[RB_ROWS].p;
	}
	ms_rocm_fail(be, be->k->rmsnorm(ctx(be), y, x, drows, n, w, H, (float)eps));
}

/* The table in double on the host, as the CPU's (the same bits), then up. */
void ms_rocm_rope_table(struct ms_backend *b, const double *inv_freq, float scale, int64_t d,
			float *table)
{
	struct ms_rocm *be = ms_rocm_of(b);
	const struct ms_step *s = be->step;
	size_t bytes = (size_t)(s->n * d) * sizeof(float);
	float *h = ms_rocm_host_stage(be, bytes);
	if (!h) {
		ms_rocm_fail(be, ms_err_set(&be->kerr, -ENOMEM, "rope: out of host memory"));
		return;
	}
	ms_rope_table_host(s->pos, s->n, inv_freq, scale, d, h);
	ms_rocm_fail(be, be->rt->h2d(ctx(be), table, h, bytes));
}

void ms_rocm_rope(struct ms_backend *b, const float *table, float *x, int64_t n_heads, int64_t d)
{
	struct ms_rocm *be = ms_rocm_of(b);
	ms_rocm_fail(be, be->k->rope(ctx(be), table, x, be->step->n, n_heads, d));
}

void ms_rocm_add(struct ms_backend *b, float *y, const float *x, int64_t count)
{
	struct ms_rocm *be = ms_rocm_of(b);
	ms_rocm_fail(be, be->k->add(ctx(be), y, x, count));
}

/* ---- attention ---- */

_Static_assert(MS_KV_F32 == 0 && MS_KV_BF16 == 1 && MS_KV_FP8 == 2,
	       "kern-attn.cu's KV_F32, KV_BF16, KV_FP8");

static struct ms_gpu_attn attn_base(struct ms_rocm *be, int layer)
{
	const struct ms_step *s = be->step;
	return (struct ms_gpu_attn){
		.n = s->n, .pos = be->buf[RB_POS].p, .tok_seq = be->buf[RB_SEQ].p,
		.pages = be->buf[RB_PAGES].p, .n_layers = be->n_layers, .n_blocks = be->n_blocks,
		.layer = layer, .page_tokens = s->pool->page_tokens, .k = s->pool->k, .v = s->pool->v,
		.kv_dtype = (int)s->pool->dtype, .page_stride = s->pool->page_stride,
	};
}

void ms_rocm_kv_write(struct ms_backend *b, int layer, const float *k, const float *v)
{
	struct ms_rocm *be = ms_rocm_of(b);
	const struct ms_kv_pool *pool = be->step->pool;
	struct ms_gpu_attn a = attn_base(be, layer);
	a.head_dim = pool->head_dim;
	a.n_kv_heads = pool->kv_dim / pool->head_dim;
	ms_rocm_fail(be, be->k->kv_write(ctx(be), &a, pool->k, pool->v, k, v));
}

/* Splits of MS_GPU_ATTN_SPLIT positions the longest range of this layer's
 * staged tokens covers. */
static int64_t max_splits(const struct ms_step *s, int64_t window)
{
	int64_t S = MS_GPU_ATTN_SPLIT, m = 1;
	for (int64_t t = 0; t < s->n; t++) {
		int64_t pos = s->pos[t], lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
		m = pos / S - lo / S + 1 > m ? pos / S - lo / S + 1 : m;
	}
	return m;
}

int ms_rocm_attention(struct ms_backend *b, const struct ms_attn_desc *ad, struct ms_err *err)
{
	struct ms_rocm *be = ms_rocm_of(b);
	if (be->kerr.code)
		return ms_err_set(err, be->kerr.code, "rocm: %s", be->kerr.msg);
	if (ad->head_dim > 256 || ad->n_heads % ad->n_kv_heads)
		return ms_err_set(err, -ENOTSUP, "rocm attention: head_dim %lld (at most 256), "
				  "%lld heads over %lld kv heads", (long long)ad->head_dim,
				  (long long)ad->n_heads, (long long)ad->n_kv_heads);
	struct ms_gpu_attn a = attn_base(be, ad->layer);
	a.n_heads = ad->n_heads;
	a.n_kv_heads = ad->n_kv_heads;
	a.head_dim = ad->head_dim;
	a.window = ad->window;
	a.sinks = ad->sinks;
	a.q = ad->q;
	a.out = ad->out;
	a.max_splits = max_splits(be->step, ad->window);
	size_t part = (size_t)(a.n * a.n_heads * a.max_splits * (a.head_dim + 2)) * sizeof(float);
	int rc = ms_rocm_reserve(be, RB_PART, part, err);
	if (rc)
		return rc;
	a.part = be->buf[RB_PART].p;
	struct ms_gpu_ctx c = be->ctx;
	c.err = err;
	return be->k->attention(&c, &a);
}

/* ---- products ---- */

/* gemm (tiles of 128 rows by 32 inputs, weights through __shared__
 * memory) once a matrix has enough inputs to fill a good part of a tile:
 * it reads the weights once per 32 inputs where gemv reads them once per
 * 8, but spreads a matrix over fewer blocks (a row tile each, not a row
 * per wavefront), which decode's handful of inputs cannot make up for.
 * Both form every output in the same order (gpu-prod.h), so the choice
 * may follow the batch without changing a bit of any token's result.
 * Where the matrix has an MFMA kind (rocm-mat.c; never with --exact) the
 * tiled product is kern-mma.cu's instead, which gives that up for the
 * matrix instructions' speed. Dense: the inputs themselves; MoE: their
 * average per expert. */
#define GEMM_MIN_INPUTS 16
#define GEMM_MIN_PER_EXPERT 8

static int product(struct ms_rocm *be, const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g,
		   bool many, int mma)
{
	enum ms_rocm_product p = be->product;
	bool tiled = p == MS_ROCM_GEMM || p == MS_ROCM_MMA || (p == MS_ROCM_AUTO && many);
	if (tiled && mma != MS_GPU_MM_NONE && p != MS_ROCM_GEMM)
		return be->k->mma(c, g, mma);
	if (tiled)
		return be->k->gemm(c, g);
	return be->k->gemv(c, g);
}

/* One matrix over n inputs: quantize them first if its scheme says so. */
static int linear_one(struct ms_rocm *be, const struct ms_linear *l, const float *x, int64_t n,
		      float *y, struct ms_err *err)
{
	const struct ms_rocm_mat *rm = l->bound;
	if (!rm)
		return ms_err_set(err, -EINVAL, "rocm linear: a %s matrix that is not on the device",
				  ms_wfmt_name(l->w.fmt));
	struct ms_gpu_ctx c = be->ctx;
	c.err = err;
	int64_t K = rm->m.cols;
	struct ms_gpu_gemv g = {
		.mats = rm->dev, .n_mats = 1, .rows = rm->m.rows, .cols = K, .n = n, .x = x,
		.ldx = K, .xdiv = 1, .y = y, .ldy = rm->m.rows,
	};
	if (rm->m.act != MS_GPU_ACT_NONE) {
		int rc = ms_rocm_reserve(be, RB_XQ, (size_t)(n * K) * sizeof(float), err);
		rc = rc ? rc : ms_rocm_reserve(be, RB_XS, (size_t)n * sizeof(float), err);
		rc = rc ? rc : be->k->actq(&c, &g, be->buf[RB_XQ].p, be->buf[RB_XS].p);
		if (rc)
			return rc;
		g.x = be->buf[RB_XQ].p;
		g.xs = be->buf[RB_XS].p;
	}
	return product(be, &c, &g, n >= GEMM_MIN_INPUTS, rm->mma);
}

int ms_rocm_linear(struct ms_backend *b, int m, const struct ms_linear *const *l, const float *x,
		   int64_t n, float *const *y, struct ms_err *err)
{
	struct ms_rocm *be = ms_rocm_of(b);
	if (be->kerr.code)
		return ms_err_set(err, be->kerr.code, "rocm: %s", be->kerr.msg);
	int rc = 0;
	for (int i = 0; i < m && !rc; i++)
		rc = linear_one(be, l[i], x, n, y[i], err);
	return rc;
}

/* ---- experts ---- */

struct moe_bufs {
	int32_t *sel, *off, *list;
	float *w, *xq, *xs, *act, *y;
};

static int moe_reserve(struct ms_rocm *be, int64_t n, int64_t k, int64_t E, int64_t H, int64_t I,
		       struct moe_bufs *mb, struct ms_err *err)
{
	size_t nk = (size_t)(n * k);
	int rc = ms_rocm_reserve(be, RB_SEL, nk * 4, err);
	rc = rc ? rc : ms_rocm_reserve(be, RB_W, nk * 4, err);
	rc = rc ? rc : ms_rocm_reserve(be, RB_OFF, (size_t)(E + 1) * 4, err);
	rc = rc ? rc : ms_rocm_reserve(be, RB_LIST, nk * 4, err);
	rc = rc ? rc : ms_rocm_reserve(be, RB_XQ, nk * (size_t)H * 4, err);
	rc = rc ? rc : ms_rocm_reserve(be, RB_XS, nk * 4, err);
	rc = rc ? rc : ms_rocm_reserve(be, RB_ACT, nk * (size_t)I * 4, err);
	rc = rc ? rc : ms_rocm_reserve(be, RB_Y, nk * (size_t)H * 4, err);
	if (rc)
		return rc;
	*mb = (struct moe_bufs){be->buf[RB_SEL].p, be->buf[RB_OFF].p, be->buf[RB_LIST].p,
				be->buf[RB_W].p,   be->buf[RB_XQ].p,  be->buf[RB_XS].p,
				be->buf[RB_ACT].p, be->buf[RB_Y].p};
	return 0;
}

int ms_rocm_moe(struct ms_backend *b, const struct ms_moe_desc *d, struct ms_err *err)
{
	struct ms_rocm *be = ms_rocm_of(b);
	if (be->kerr.code)
		return ms_err_set(err, be->kerr.code, "rocm: %s", be->kerr.msg);
	const struct ms_moe_w *w = d->w;
	int64_t n = be->step->n, k = d->top_k, E = w->n_experts, H = w->hidden, I = w->inter;
	struct moe_bufs mb;
	const struct ms_rocm_layer *L = ms_rocm_layer(be, w, err);
	int rc = L ? moe_reserve(be, n, k, E, H, I, &mb, err) : -EINVAL;
	if (rc)
		return L ? rc : err->code;
	struct ms_gpu_ctx c = be->ctx;
	c.err = err;
	if ((rc = be->k->route(&c, d->router_logits, n, E, k, mb.sel, mb.w, mb.off, mb.list)))
		return rc;
	/* gate_up: input (t, j) is token t's row; SwiGLU in the epilogue */
	struct ms_gpu_gemv g = {
		.mats = L->gate_up, .n_mats = E, .rows = 2 * I, .cols = H, .off = mb.off,
		.list = mb.list, .n = n * k, .x = d->h, .ldx = H, .xdiv = k, .y = mb.act, .ldy = I,
		.glu = 1, .limit = d->act.limit, .alpha = d->act.alpha,
	};
	if (L->act_gu) {
		if ((rc = be->k->actq(&c, &g, mb.xq, mb.xs)))
			return rc;
		g.x = mb.xq, g.xdiv = 1, g.xs = mb.xs;
	}
	bool many = n * k >= GEMM_MIN_PER_EXPERT * E;
	if ((rc = product(be, &c, &g, many, L->mma_gu)))
		return rc;
	/* down: input (t, j) is its activation row; bias in the epilogue */
	g = (struct ms_gpu_gemv){
		.mats = L->down, .n_mats = E, .rows = H, .cols = I, .off = mb.off, .list = mb.list,
		.n = n * k, .x = mb.act, .ldx = I, .xdiv = 1, .y = mb.y, .ldy = H,
	};
	if (L->act_dn) {
		if ((rc = be->k->actq(&c, &g, mb.act, mb.xs)))
			return rc;
		g.xs = mb.xs;
	}
	if ((rc = product(be, &c, &g, many, L->mma_dn)))
		return rc;
	return be->k->combine(&c, d->x, mb.y, mb.w, n, k, H);
}
