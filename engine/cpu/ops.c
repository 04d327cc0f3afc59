/*
 * ops.c: the CPU backend's instance of the backend interface (backend.h).
 *
 * Each operation is a thin layer over the CPU's own code: the gemm kernels
 * chosen at start (cpu.c), the row operations (rowops.h), attention over
 * the paged KV (attention.c) and the experts (moe.c). Memory is host
 * memory, so the model may read and write it directly (be->host).
 *
 * A backend for another device writes the same members: read this file
 * beside backend.h.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "backend.h"
#include "cpu.h"
#include "moe.h"
#include "ms-map.h"
#include "pool.h"
#include "rowops.h"
#include "scratch.h"

static struct ms_cpu *cpu_of(struct ms_backend *b)
{
	return (struct ms_cpu *)((char *)b - offsetof(struct ms_cpu, base));
}

/* ---- memory ---- */

/* Host memory as mappings of their own (ms-map.h): zero pages until
 * touched, so a KV pool sized for the worst case costs only what is used,
 * and given back to the OS on free. The backend allocates few buffers (the
 * KV pool, the arena as it grows), so a page each is no waste. */
static void *cpu_buf_alloc(struct ms_backend *b, size_t bytes)
{
	(void)b;
	return ms_map_alloc(bytes);
}

static void cpu_buf_free(struct ms_backend *b, void *ptr)
{
	(void)b;
	ms_map_free(ptr);
}

static void cpu_copy(struct ms_backend *b, void *dst, const void *src, size_t bytes)
{
	(void)b;
	memcpy(dst, src, bytes);
}

/* ---- weights ---- */

static void pack_free_default(void *p)
{
	free(p);
}

/* MS_BIND_IN_PLACE: the first candidate that reads rows as they are. */
static int bind_in_place(struct ms_cpu *be, struct ms_linear *l, char *why, size_t len,
			 struct ms_err *err)
{
	const struct ms_kernel *plain = NULL;
	for (int i = 0; i < be->n_kernels[l->w.fmt] && !plain; i++)
		if (!be->kernels[l->w.fmt][i]->pack)
			plain = be->kernels[l->w.fmt][i];
	if (!plain)
		return ms_err_set(err, -ENOTSUP, "no kernel computes %s weights",
				  ms_wfmt_name(l->w.fmt));
	l->kernel = plain;
	l->kernel_name = plain->name;
	snprintf(why, len, "%s (rows read in place, not packed)", be->reasons[l->w.fmt]);
	return 0;
}

static int cpu_bind(struct ms_backend *b, struct ms_linear *l, enum ms_bind_mode mode, char *why,
		    size_t len, struct ms_err *err)
{
	struct ms_cpu *be = cpu_of(b);
	ms_linear_unbind(l);
	if (l->w.fmt < 0 || l->w.fmt >= MS_WFMT_COUNT)
		return ms_err_set(err, -ENOTSUP, "no kernel computes format %d", (int)l->w.fmt);
	if (mode != MS_BIND_FULL) /* IN_PLACE, TABLE */
		return bind_in_place(be, l, why, len, err);
	void *owned = NULL;
	int rc = ms_cpu_bind(be, &l->w, &l->kernel, &owned, why, len, err);
	if (rc)
		return rc;
	l->kernel_name = l->kernel->name;
	l->owned = owned;
	l->owned_free = l->kernel->pack_free ? l->kernel->pack_free : pack_free_default;
	l->rows_free = l->w.pack && !l->kernel->keeps_rows && l->w.pack_row;
	return 0;
}

static void cpu_weights_begin(struct ms_backend *b)
{
	ms_cpu_weights_begin(cpu_of(b));
}

static void cpu_weights_end(struct ms_backend *b, void *const *maps, const size_t *sizes, int n)
{
	ms_cpu_weights_end(cpu_of(b), maps, sizes, n);
}

/* ---- a step ---- */

static int cpu_step_begin(struct ms_backend *b, const struct ms_step *s, struct ms_err *err)
{
	struct ms_cpu *be = cpu_of(b);
	be->step = s;
	return ms_scratch_reserve(&be->scratch, MS_SCRATCH_STEP, (size_t)s->n * sizeof(int32_t *),
				  err);
}

static void cpu_embed(struct ms_backend *b, const struct ms_linear *table, float *x)
{
	const struct ms_step *s = cpu_of(b)->step;
	int64_t H = table->w.cols;
	for (int64_t t = 0; t < s->n; t++)
		ms_wmat_row_f32(&table->w, s->tokens[t], x + t * H);
}

static int cpu_linear(struct ms_backend *b, int m, const struct ms_linear *const *l,
		      const float *x, int64_t n, float *const *y, struct ms_err *err)
{
	return ms_cpu_linear(cpu_of(b), m, l, x, n, y, err);
}

static void cpu_rmsnorm(struct ms_backend *b, float *y, const float *x, const int64_t *rows,
			int64_t n, const float *w, int64_t H, double eps)
{
	const struct ms_rowops *ro = cpu_of(b)->rowops;
	for (int64_t r = 0; r < n; r++)
		ro->rmsnorm(y + r * H, x + (rows ? rows[r] : r) * H, w, H, eps);
}

/* In double: 32 sin/cos pairs per token, once per step for every layer. */
static void cpu_rope_table(struct ms_backend *b, const double *inv_freq, float scale, int64_t d,
			   float *table)
{
	const struct ms_step *s = cpu_of(b)->step;
	ms_rope_table_host(s->pos, s->n, inv_freq, scale, d, table);
}

static void cpu_rope(struct ms_backend *b, const float *table, float *x, int64_t n_heads,
		     int64_t d)
{
	struct ms_cpu *be = cpu_of(b);
	for (int64_t t = 0; t < be->step->n; t++) {
		const float *cs = table + t * d;
		be->rowops->rope(cs, cs + d / 2, x + t * n_heads * d, n_heads, d);
	}
}

static void cpu_add(struct ms_backend *b, float *y, const float *x, int64_t count)
{
	cpu_of(b)->rowops->add(y, x, count);
}

static void cpu_kv_write(struct ms_backend *b, int layer, const float *k, const float *v)
{
	const struct ms_step *s = cpu_of(b)->step;
	const struct ms_kv_pool *pool = s->pool;
	int64_t P = pool->page_tokens, kvd = pool->kv_dim;
	for (int64_t t = 0; t < s->n; t++) {
		int64_t pos = s->pos[t];
		int32_t page = s->kv[s->seq[t]]->pages[layer][pos / P];
		ms_kv_put(pool, page, pos % P, k + t * kvd, v + t * kvd);
	}
}

static int cpu_attention(struct ms_backend *b, const struct ms_attn_desc *a, struct ms_err *err)
{
	struct ms_cpu *be = cpu_of(b);
	const struct ms_step *s = be->step;
	const int32_t **pages = ms_scratch_at(&be->scratch, MS_SCRATCH_STEP, 0);
	for (int64_t t = 0; t < s->n; t++)
		pages[t] = s->kv[s->seq[t]]->pages[a->layer];
	struct ms_attn_args aa = {
		.n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads, .head_dim = a->head_dim,
		.window = a->window, .sinks = a->sinks, .pool = s->pool, .n = s->n, .pos = s->pos,
		.pages = pages, .q = a->q, .out = a->out, .bf16_products = be->attn_bf16_products,
	};
	return ms_attn_run(be->attn, &be->pool, &aa, &be->attn_ws, err);
}

static int cpu_moe(struct ms_backend *b, const struct ms_moe_desc *d, struct ms_err *err)
{
	struct ms_cpu *be = cpu_of(b);
	int64_t n = be->step->n, k = d->top_k;
	struct ms_scratch_plan plan = {0};
	size_t at_sel = ms_scratch_plan_add(&plan, (size_t)(n * k) * sizeof(int32_t));
	size_t at_w = ms_scratch_plan_add(&plan, (size_t)(n * k) * sizeof(float));
	int rc = ms_scratch_reserve(&be->scratch, MS_SCRATCH_ROUTE, plan.bytes, err);
	if (rc)
		return rc;
	int32_t *sel = ms_scratch_at(&be->scratch, MS_SCRATCH_ROUTE, at_sel);
	float *w = ms_scratch_at(&be->scratch, MS_SCRATCH_ROUTE, at_w);
	ms_moe_route(d->router_logits, n, d->w->n_experts, k, sel, w);
	return ms_moe_forward(be, d->w, d->act, d->h, n, sel, w, k, d->x, err);
}

/* ---- the instance ---- */

static void cpu_free(struct ms_backend *b)
{
	struct ms_cpu *be = cpu_of(b);
	ms_cpu_free(be);
	free(be);
}

static const struct ms_backend_ops cpu_ops = {
	.name = "cpu",
	.free = cpu_free,
	.buf_alloc = cpu_buf_alloc,
	.buf_free = cpu_buf_free,
	.copy = cpu_copy,
	.to_host = cpu_copy,
	.from_host = cpu_copy,
	.bind = cpu_bind,
	.weights_begin = cpu_weights_begin,
	.weights_end = cpu_weights_end,
	.step_begin = cpu_step_begin,
	.embed = cpu_embed,
	.linear = cpu_linear,
	.rmsnorm = cpu_rmsnorm,
	.rope_table = cpu_rope_table,
	.rope = cpu_rope,
	.add = cpu_add,
	.kv_write = cpu_kv_write,
	.attention = cpu_attention,
	.moe = cpu_moe,
};

struct ms_backend *ms_cpu_backend(struct ms_cpu *be)
{
	struct ms_backend *b = &be->base;
	if (b->ops)
		return b;
	b->ops = &cpu_ops;
	b->name = cpu_ops.name;
	b->kernels = be->isa;
	b->host = true;
	b->exact = be->exact;
	b->dense_int8 = be->dense_int8;
	b->attn_bf16_products = be->attn_bf16_products;
	b->kv_dtypes = 1u << MS_KV_F32 | 1u << MS_KV_BF16 | 1u << MS_KV_FP8;
	b->threads = be->pool.n_threads;
	b->pool = &be->pool;
	b->mask_words = be->mask_words;
	return b;
}

void ms_cpu_ops_free(struct ms_cpu *be)
{
	if (be->base.ops)
		ms_backend_arena_free(&be->base);
	ms_attn_ws_free(&be->attn_ws);
	memset(&be->base, 0, sizeof(be->base));
}

static int cpu_open(const struct ms_backend_opts *o, struct ms_backend **out, struct ms_err *err)
{
	struct ms_cpu *be = calloc(1, sizeof(*be));
	if (!be)
		return ms_err_set(err, -ENOMEM, "cpu backend: out of memory");
	/* int8 dense weights by default: on GPT-OSS-20B the attention
	 * projections and lm_head are two thirds of a decode step's bytes, and
	 * a scale per 32 columns keeps the logits within the bound
	 * (tests/e2e/dense_int8.py); --exact keeps the checkpoint's weights. */
	struct ms_cpu_opts co = {.kernels = o->kernels, .threads = o->threads, .exact = o->exact,
				 .dense_int8 = o->dense == MS_DENSE_INT8 ||
					       (o->dense == MS_DENSE_AUTO && !o->exact),
				 .attn_products = o->attn_products};
	int rc = ms_cpu_init_opts(be, &co, err);
	if (rc) {
		ms_cpu_free(be);
		free(be);
		return rc;
	}
	ms_cpu_set_numa(be, o->numa);
	*out = ms_cpu_backend(be);
	return 0;
}

const struct ms_backend_reg ms_backend_reg_cpu = {
	.name = "cpu",
	.about = "the host's cores: AMX, AVX-512, AVX2 or portable kernels",
	.open = cpu_open,
};

struct ms_cpu *ms_cpu_from(struct ms_backend *b)
{
	return b && b->ops == &cpu_ops ? cpu_of(b) : NULL;
}
