/* moe.c: see moe.h. */
#include "moe.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>


void ms_moe_route(const float *logits, int64_t n, int64_t E, int64_t k, int32_t *sel, float *w)
{
	for (int64_t t = 0; t < n; t++) {
		const float *l = logits + t * E;
		int32_t *s = sel + t * k;
		float *wt = w + t * k;
		/* k is small (4 for gpt-oss): repeated selection, first index
		 * wins ties as in a stable descending sort. */
		for (int64_t j = 0; j < k; j++) {
			int32_t best = -1;
			for (int64_t e = 0; e < E; e++) {
				bool taken = false;
				for (int64_t i = 0; i < j; i++)
					taken |= s[i] == e;
				if (!taken && (best < 0 || l[e] > l[best]))
					best = (int32_t)e;
			}
			s[j] = best;
		}
		float mx = l[s[0]], sum = 0.0f;
		for (int64_t j = 0; j < k; j++)
			sum += (wt[j] = expf(l[s[j]] - mx));
		for (int64_t j = 0; j < k; j++)
			wt[j] /= sum;
	}
}

struct moe_item {
	int32_t e;
	int64_t r0, r1;
};

struct moe_job {
	const struct ms_moe_w *m;
	const float *h;        /* [n, H] the layer's inputs */
	int64_t n, k;          /* tokens, experts per token */
	struct ms_swiglu act;
	ms_swiglu_row_fn swiglu_row;
	const struct moe_item *items; /* gate_up's, then down's */
	int64_t n_gu;                 /* gate_up items */
	const int64_t *off;    /* [E+1] start of each expert's rows in the grouped buffers */
	const int32_t *slot;   /* [n*k] grouped row -> token*k + j */
	const float *w;        /* [n*k] routing weights */
	float *xg;             /* [n*k, H] gathered inputs (quantized in place when asked) */
	float *g;              /* [n*k, 2I] gate_up outputs */
	float *yd;             /* [n*k, H] down outputs */
	float *a;              /* [n*k, I] activations (quantized in place when asked) */
	float *rs;             /* [n*k] per-row output scale of the current stage */
	float *ys;             /* [n*k, H] weighted expert outputs by slot */
	void *const *xq;       /* [E] prepared inputs of the current stage, or NULL */
	atomic_int *left;      /* [E] gate_up items of each expert still to finish */
	atomic_int *ready;     /* [E] 1: gate_up's inputs prepared, 2: down's */
	float *out;            /* [n, H] the sum over each token's experts is added here */
	int64_t cols_per_task; /* of the final reduction */
};

/* Quantize the inputs of expert e for its projection of stage 0 (gate_up)
 * or 1 (down): each expert has its own activation scale. */
static void quant(struct moe_job *j, int stage, int64_t e)
{
	const struct ms_linear *L = stage ? j->m->down[e] : j->m->gate_up[e];
	int64_t o = j->off[e], ne = j->off[e + 1] - o, K = L->w.cols;
	float *x = (stage ? j->a : j->xg) + o * K;
	if (L->act.kind != MS_ACTQ_NONE)
		ms_actq_apply(&L->act, x, K, ne, K, x, j->rs + o);
	/* Kernels that read activations in their own form get them converted
	 * once per expert here, not once per row block, into the expert's own
	 * region (moe_prep_regions): stage 1 overwrites stage 0's, which every
	 * gate_up block of e has finished reading by then. */
	if (L->kernel->prep)
		L->kernel->prep(&L->w, x, K, ne, j->xq[e]);
}

/* Expert e's inputs: its tokens' rows gathered, then prepared for gate_up. */
static void in_task(struct moe_job *j, int64_t e)
{
	int64_t o = j->off[e], ne = j->off[e + 1] - o, H = j->m->hidden;
	if (ne) {
		for (int64_t r = o; r < o + ne; r++)
			memcpy(j->xg + r * H, j->h + (j->slot[r] / j->k) * H,
			       (size_t)H * sizeof(float));
		quant(j, 0, e);
	}
	atomic_store_explicit(&j->ready[e], 1, memory_order_release);
}

static void gate_up_task(struct moe_job *j, const struct moe_item *item)
{
	const struct ms_moe_w *m = j->m;
	const struct ms_linear *L = m->gate_up[item->e];
	int64_t e = item->e, I2 = 2 * m->inter, r0 = item->r0, r1 = item->r1;
	int64_t o = j->off[e], ne = j->off[e + 1] - o;
	float *g = j->g + o * I2;
	ms_pool_wait_ge(&j->ready[e], 1);
	ms_kernel_run(L->kernel, &L->w, r0, r1, j->xq[e], j->xg + o * m->hidden, m->hidden, ne, g,
		      I2);
	const float *b = L->bias;
	bool scaled = L->act.kind != MS_ACTQ_NONE;
	/* Blocks start and end on even rows: each holds whole (gate, up) pairs,
	 * so the activation is finished here. */
	for (int64_t t = 0; t < ne; t++) {
		float *gt = g + t * I2, s = scaled ? j->rs[o + t] : 1.0f;
		float *at = j->a + (o + t) * m->inter;
		if (scaled)
			for (int64_t r = r0; r < r1; r++)
				gt[r] *= s;
		j->swiglu_row(j->act, gt + r0, b + r0, (r1 - r0) / 2, at + r0 / 2);
	}
	/* The expert's last block to finish prepares its down inputs (the
	 * activations are then complete): no pool run and barrier of its own,
	 * and the work lands where a core has just become free. acq_rel: the
	 * other blocks' activations are visible to it. */
	if (atomic_fetch_sub_explicit(&j->left[e], 1, memory_order_acq_rel) == 1) {
		quant(j, 1, e);
		atomic_store_explicit(&j->ready[e], 2, memory_order_release);
	}
}

static void down_task(struct moe_job *j, const struct moe_item *item)
{
	const struct ms_moe_w *m = j->m;
	const struct ms_linear *L = m->down[item->e];
	int64_t e = item->e, H = m->hidden, r0 = item->r0, r1 = item->r1;
	int64_t o = j->off[e], ne = j->off[e + 1] - o;
	float *y = j->yd + o * H;
	ms_pool_wait_ge(&j->ready[e], 2);
	ms_kernel_run(L->kernel, &L->w, r0, r1, j->xq[e], j->a + o * m->inter, m->inter, ne, y, H);
	const float *b = L->bias;
	bool scaled = L->act.kind != MS_ACTQ_NONE;
	for (int64_t t = 0; t < ne; t++) {
		int32_t s = j->slot[o + t];
		float wt = j->w[s], rs = scaled ? j->rs[o + t] : 1.0f;
		for (int64_t r = r0; r < r1; r++)
			j->ys[(int64_t)s * H + r] = wt * (y[t * H + r] * rs + b[r]);
	}
}

/* One pool run, one barrier: the E experts' input tasks, then the gate_up
 * items, then the down items, each waiting (rarely, and briefly) for the
 * expert's previous stage, which an earlier task holds (ms_pool_run claims
 * in index order). Separate runs left a core idle at each run's end while
 * the other finished its last item (3-5% of each run at 16 tokens on 2
 * Zen 4 cores); now the next stage's items fill that gap. Each down item's
 * expert had its gate_up items claimed ahead of every down item, in the
 * same expert order, so the first down items find their inputs long
 * ready. */
static void stage_task(void *ctx, int i, int worker)
{
	(void)worker;
	struct moe_job *j = ctx;
	int64_t E = j->m->n_experts;
	if (i < E)
		in_task(j, i);
	else if (i < E + j->n_gu)
		gate_up_task(j, &j->items[i - E]);
	else
		down_task(j, &j->items[i - E]);
}

/* Column block c of every token: out += the sum over the token's k experts
 * in slot order (fixed: deterministic whatever ran where). */
static void out_task(void *ctx, int c, int worker)
{
	(void)worker;
	const struct moe_job *j = ctx;
	int64_t H = j->m->hidden, k = j->k, n = j->n;
	int64_t c0 = (int64_t)c * j->cols_per_task;
	int64_t c1 = c0 + j->cols_per_task < H ? c0 + j->cols_per_task : H;
	for (int64_t t = 0; t < n; t++) {
		float *o = j->out + t * H;
		const float *y0 = j->ys + (t * k) * H;
		for (int64_t r = c0; r < c1; r++) {
			float s = y0[r];
			for (int64_t q = 1; q < k; q++)
				s += y0[q * H + r];
			o[r] += s;
		}
	}
}

/* Split every active expert's rows into blocks (a multiple of 16 rows and
 * of every kernel's panel: even, so gate/up pairs stay together); about
 * four blocks per thread overall. left[e]: expert e's block count. */
static int64_t make_items(struct moe_item *items, atomic_int *left, const int64_t *off, int64_t E,
			  int64_t rows, int threads, int64_t align)
{
	int64_t active = 0;
	for (int64_t e = 0; e < E; e++)
		active += off[e + 1] > off[e];
	if (!active)
		return 0;
	int64_t per = ms_split_per(active * rows, 4 * (int64_t)threads, align);
	int64_t n = 0;
	for (int64_t e = 0; e < E; e++) {
		int blocks = 0;
		for (int64_t r = 0; off[e + 1] > off[e] && r < rows; r += per, blocks++)
			items[n++] = (struct moe_item){(int32_t)e, r, r + per < rows ? r + per : rows};
		if (left)
			atomic_init(&left[e], blocks);
	}
	return n;
}

/* One call's arrays, carved out of the backend's MoE slot. */
struct moe_bufs {
	int64_t *off, *fill;
	int32_t *slot;
	struct moe_item *items;
	atomic_int *left, *ready;
	float *xg, *g, *yd, *a, *ys, *rs;
	void **xq;
};

/* The next region of a layout: where it lies once base (the reserved
 * slot) is known, NULL while only sizing. */
static void *region(struct ms_scratch_plan *p, char *base, size_t bytes)
{
	size_t at = ms_scratch_plan_add(p, bytes);
	return base ? base + at : NULL;
}

/* Lay out the arrays of a call of nk rows: only sizing them while base is
 * NULL, then, with base the reserved slot, pointing b at them. One layout
 * for both, so the reservation is exactly what the carving takes. */
static size_t moe_layout(const struct ms_moe_w *m, int64_t nk, char *base, struct moe_bufs *b)
{
	int64_t E = m->n_experts, H = m->hidden, I = m->inter;
	int64_t maxrows = (2 * I > H ? 2 * I : H);
	int64_t max_items = E * ((maxrows + 15) / 16 + 1); /* a stage's; blocks are >= 16 rows */
	struct ms_scratch_plan p = {0};
	const size_t f = sizeof(float);
	b->off = region(&p, base, (size_t)(E + 1) * sizeof(*b->off));
	b->fill = region(&p, base, (size_t)E * sizeof(*b->fill));
	b->slot = region(&p, base, (size_t)nk * sizeof(*b->slot));
	b->items = region(&p, base, (size_t)(2 * max_items) * sizeof(*b->items));
	b->left = region(&p, base, (size_t)E * sizeof(*b->left));
	b->ready = region(&p, base, (size_t)E * sizeof(*b->ready));
	b->xg = region(&p, base, (size_t)(nk * H) * f);
	b->g = region(&p, base, (size_t)(nk * 2 * I) * f);
	b->yd = region(&p, base, (size_t)(nk * H) * f);
	b->a = region(&p, base, (size_t)(nk * I) * f);
	b->ys = region(&p, base, (size_t)(nk * H) * f);
	b->rs = region(&p, base, (size_t)nk * f);
	b->xq = region(&p, base, (size_t)E * sizeof(*b->xq));
	return p.bytes;
}

static int moe_bufs_get(struct ms_cpu *be, const struct ms_moe_w *m, int64_t nk,
			struct moe_bufs *b, struct ms_err *err)
{
	int rc = ms_scratch_reserve(&be->scratch, MS_SCRATCH_MOE, moe_layout(m, nk, NULL, b), err);
	if (!rc)
		moe_layout(m, nk, ms_scratch_at(&be->scratch, MS_SCRATCH_MOE, 0), b);
	return rc;
}

/* Counting sort of the (token, j) slots by expert: expert e's rows are
 * [off[e], off[e + 1]) of the grouped buffers, in slot order. */
static void moe_group(const int32_t *sel, int64_t nk, int64_t E, const struct moe_bufs *b)
{
	memset(b->off, 0, (size_t)(E + 1) * sizeof(*b->off));
	memset(b->fill, 0, (size_t)E * sizeof(*b->fill));
	for (int64_t s = 0; s < nk; s++)
		b->off[sel[s] + 1]++;
	for (int64_t e = 0; e < E; e++)
		b->off[e + 1] += b->off[e];
	for (int64_t s = 0; s < nk; s++) {
		int64_t e = sel[s];
		b->slot[b->off[e] + b->fill[e]++] = (int32_t)s;
	}
}

/* Expert e's prepared inputs for ne rows: one region for gate_up's and
 * then down's (quant), so the larger of the two. */
static size_t expert_prep_bytes(const struct ms_moe_w *m, int64_t e, int64_t ne)
{
	const struct ms_linear *gu = m->gate_up[e], *dn = m->down[e];
	if (!ne)
		return 0;
	size_t a = gu->kernel->prep ? gu->kernel->prep_size(&gu->w, ne) : 0;
	size_t d = dn->kernel->prep ? dn->kernel->prep_size(&dn->w, ne) : 0;
	return a > d ? a : d;
}

/* Every active expert's region, disjoint, sized from the routing counts
 * and reserved in one piece before the pool runs: the tasks that fill them
 * run in parallel and allocate nothing. xq[e] NULL: nothing to prepare. */
static int moe_prep_regions(struct ms_cpu *be, const struct ms_moe_w *m, const int64_t *off,
			    void **xq, struct ms_err *err)
{
	int64_t E = m->n_experts;
	struct ms_scratch_plan p = {0};
	for (int64_t e = 0; e < E; e++)
		ms_scratch_plan_add(&p, expert_prep_bytes(m, e, off[e + 1] - off[e]));
	int rc = ms_scratch_reserve(&be->scratch, MS_SCRATCH_MOE_PREP, p.bytes, err);
	p = (struct ms_scratch_plan){0};
	for (int64_t e = 0; !rc && e < E; e++) {
		size_t bytes = expert_prep_bytes(m, e, off[e + 1] - off[e]);
		size_t at = ms_scratch_plan_add(&p, bytes);
		xq[e] = bytes ? ms_scratch_at(&be->scratch, MS_SCRATCH_MOE_PREP, at) : NULL;
	}
	return rc;
}

/* The row alignment every block keeps: every kernel's panel, and 16. */
static int64_t moe_row_align(const struct ms_moe_w *m)
{
	int64_t align = 16;
	for (int64_t e = 0; e < m->n_experts; e++) {
		const struct ms_linear *gu = m->gate_up[e], *dn = m->down[e];
		align = gu->kernel->row_align > align ? gu->kernel->row_align : align;
		align = dn->kernel->row_align > align ? dn->kernel->row_align : align;
	}
	return align;
}

/* The weights the call streams: each active expert's two matrices. */
static void moe_count_bytes(struct ms_cpu *be, const struct ms_moe_w *m, const int64_t *off)
{
	uint64_t bytes = 0;
	for (int64_t e = 0; e < m->n_experts; e++)
		if (off[e + 1] > off[e])
			bytes += ms_wmat_bytes(&m->gate_up[e]->w) + ms_wmat_bytes(&m->down[e]->w);
	ms_cpu_count_bytes(be, bytes);
}

int ms_moe_forward(struct ms_cpu *be, const struct ms_moe_w *m, struct ms_swiglu act,
		   const float *h, int64_t n, const int32_t *sel, const float *w, int64_t k,
		   float *out, struct ms_err *err)
{
	int64_t E = m->n_experts, H = m->hidden, I = m->inter, nk = n * k;
	struct moe_bufs b;
	struct ms_err e2 = {0};
	int rc = moe_bufs_get(be, m, nk, &b, &e2);
	if (!rc) {
		moe_group(sel, nk, E, &b);
		rc = moe_prep_regions(be, m, b.off, b.xq, &e2);
	}
	if (rc)
		return ms_err_set(err, rc, "MoE, %lld tokens: %s", (long long)n, e2.msg);
	struct moe_job job = {.m = m, .h = h, .n = n, .k = k, .act = act, .swiglu_row = be->swiglu_row,
			      .items = b.items, .off = b.off, .slot = b.slot, .w = w, .xg = b.xg,
			      .g = b.g, .yd = b.yd, .a = b.a, .rs = b.rs, .ys = b.ys, .xq = b.xq,
			      .left = b.left, .ready = b.ready, .out = out};
	for (int64_t e = 0; e < E; e++)
		atomic_init(&b.ready[e], 0);
	moe_count_bytes(be, m, b.off);
	int64_t align = moe_row_align(m);
	/* gather and prepare gate_up's inputs; gate_up, whose last block of
	 * each expert prepares its down inputs; down: one pool run */
	job.n_gu = make_items(b.items, b.left, b.off, E, 2 * I, be->pool.n_threads, align);
	int64_t n_dn = make_items(b.items + job.n_gu, NULL, b.off, E, H, be->pool.n_threads, align);
	ms_pool_run(&be->pool, (int)(E + job.n_gu + n_dn), stage_task, &job);
	/* out += each token's experts, over column blocks of the pool; a few
	 * tokens' worth (decode of one or two) costs less than a pool run */
	if (nk * H <= 16384) {
		job.cols_per_task = H;
		out_task(&job, 0, 0);
	} else {
		job.cols_per_task = ms_split_per(H, 4 * (int64_t)be->pool.n_threads, 16);
		ms_pool_run(&be->pool, (int)((H + job.cols_per_task - 1) / job.cols_per_task),
			    out_task, &job);
	}
	return 0;
}
