/*
 * dense-onednn.c: see dense-onednn.h.
 *
 * Why panels of 64 rows, each its own oneDNN tensor, instead of one matmul
 * over the whole matrix threaded by oneDNN's OpenMP:
 * - moe.c (bf16 experts) calls a kernel on row blocks of its own choosing
 *   and never asks for whole-matrix calls; a panel is the unit both callers
 *   can split on.
 * - oneDNN's brgemm matmul may split K over threads when M and N are small
 *   (its partial sums then depend on the thread count); one thread per
 *   primitive keeps every output element on one fixed code path, so results
 *   do not depend on --threads (tested bit for bit).
 * - No OpenMP team is ever started: libgomp's workers spin after each
 *   parallel region and would compete with our pinned pool for the cores.
 * Measured on the 2-core Zen 4 dev VM (a probe of oneDNN alone, K = 2880):
 * a 64-row panel costs a few microseconds of call overhead, and 4 panels
 * of 64 take the same time as one of 256 at n = 1 and 16 (17.6 vs 17.9 us,
 * 105 vs 104 us). Timings of both paths: README.md, or
 * MS_DENSE_BENCH=1 tests/test-dense.
 *
 * Activation rows go in chunks of at most 64 (MCHUNK): primitives are
 * created for a fixed M (a runtime M makes oneDNN 2.6 fall back from brgemm
 * to gemm:jit, 1.1-2.5x slower), so at most 64 primitives per panel width
 * and K, created on first use and shared by every matrix of that shape for
 * the life of the process (like oneDNN's own primitive cache).
 *
 * Batch invariance (a token's output bits never depend on how many tokens
 * share its call): oneDNN picks its implementation per M, and on a CPU with
 * AMX its brgemm runs small M on AVX-512 and larger M on tiles, which round
 * sums differently (seen on a Xeon with AMX: a token alone differed from the
 * same token in a batch of 17). So per panel shape, once, on random data
 * (check_invariance): the smallest M0 from which every M up to 64 gives each
 * row the bits M = 64 gives it, at any position in the chunk; shorter chunks
 * then run zero-padded to M0 rows (on AMX, tile rows cost the same used or
 * not). Where no such M0 exists, oneDNN is declined for the shape.
 */
#include "dense-onednn.h"

#include <errno.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bf16.h"
#include "ms-error.h"
#include "ms-clock.h"
#include "pool.h"

#define PANEL MS_ONEDNN_PANEL
#define MCHUNK 64          /* activation rows per primitive call */
#define MEASURE_ROWS 1024  /* leading rows timed at pack (hot in L2/L3) */
#define MEASURE_REPS 3     /* best of */
#define MAX_SHAPES 64      /* measured shapes remembered */

const int64_t MS_ONEDNN_MEASURE_N[MS_ONEDNN_N_MEASURED] = {1, 4, 16, 64};

/* ---- process-wide state: the engine, primitives, measurements ---- */

/* One matmul primitive: src bf16 [M, K] x packed weights [K, N] -> f32
 * [M, N], single-threaded, user-managed scratchpad (so concurrent calls
 * from pool threads share nothing). */
struct prim {
	struct prim *next;
	int64_t M, N, K;
	dnnl_memory_desc_t wmd, src_md, dst_md, scratch_md;
	size_t scratch_bytes;
	dnnl_primitive_t p;
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_engine;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* g_prims, g_shapes */
/* One measurement at a time: the loader packs on every pool thread at once,
 * and a second matrix of a shape being measured waits for the result
 * rather than timing against the first. */
static pthread_mutex_t g_measure_mu = PTHREAD_MUTEX_INITIALIZER;
static struct prim *g_prims;
static struct ms_dense_measure g_shapes[MAX_SHAPES];
static int g_n_shapes;
static atomic_bool g_force;
static _Atomic int64_t g_pad_to;

static void engine_init(void)
{
	if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success)
		g_engine = NULL;
}

bool ms_dense_onednn_usable(unsigned cpu_flags)
{
	unsigned need = ms_kernel_onednn_bf16.cpu_flags;
	if ((cpu_flags & need) != need)
		return false;
	/* The ISA values are bit sets: AMX includes the AVX512-BF16 bits. */
	unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
	return (isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
	       (unsigned)dnnl_cpu_isa_avx512_core_bf16;
}

void ms_dense_onednn_force(bool always)
{
	atomic_store(&g_force, always);
}

void ms_dense_onednn_pad_to(int64_t m)
{
	atomic_store(&g_pad_to, m < 1 ? 1 : m > MCHUNK ? MCHUNK : m);
}

int ms_dense_onednn_measurements(struct ms_dense_measure *out, int max)
{
	pthread_mutex_lock(&g_mu);
	int n = g_n_shapes;
	for (int i = 0; i < n && i < max; i++)
		out[i] = g_shapes[i];
	pthread_mutex_unlock(&g_mu);
	return n;
}

/* oneDNN sizes its work by the calling thread's OpenMP thread count, both
 * when a primitive is created and when it runs: hold it at 1 around every
 * call and give the thread its old value back. */
static int omp_one_begin(void)
{
	int was = omp_get_max_threads();
	if (was != 1)
		omp_set_num_threads(1);
	return was;
}

static void omp_one_end(int was)
{
	if (was != 1)
		omp_set_num_threads(was);
}

static int md_2d(dnnl_memory_desc_t *md, int64_t a, int64_t b, dnnl_data_type_t dt,
		 dnnl_format_tag_t tag)
{
	dnnl_dims_t dims = {a, b};
	return dnnl_memory_desc_init_by_tag(md, 2, dims, dt, tag) == dnnl_success ? 0 : -EINVAL;
}

/* A matmul primitive descriptor for M x K x N; wmd NULL lets oneDNN choose
 * the weights layout. */
static int matmul_pd(int64_t M, int64_t N, int64_t K, const dnnl_memory_desc_t *wmd,
		     dnnl_primitive_desc_t *pd, struct ms_err *err)
{
	dnnl_memory_desc_t s, w, d;
	if (md_2d(&s, M, K, dnnl_bf16, dnnl_ab) || md_2d(&d, M, N, dnnl_f32, dnnl_ab) ||
	    (!wmd && md_2d(&w, K, N, dnnl_bf16, dnnl_format_tag_any)))
		return ms_err_set(err, -ENOTSUP, "oneDNN rejects a %lld x %lld x %lld matmul",
				  (long long)M, (long long)K, (long long)N);
	dnnl_matmul_desc_t desc;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_status_t st = dnnl_matmul_desc_init(&desc, &s, wmd ? wmd : &w, NULL, &d);
	if (st == dnnl_success)
		st = dnnl_primitive_attr_create(&attr);
	if (st == dnnl_success)
		st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
	if (st == dnnl_success)
		st = dnnl_primitive_desc_create(pd, &desc, attr, g_engine, NULL);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (st != dnnl_success)
		return ms_err_set(err, -ENOTSUP, "oneDNN has no bf16 matmul for %lld x %lld x %lld "
				  "(status %d)", (long long)M, (long long)K, (long long)N, (int)st);
	return 0;
}

static const char *impl_name(const_dnnl_primitive_desc_t pd)
{
	const char *s = NULL;
	if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s)
		return "?";
	return s;
}

/* The shared primitive for (M, N, K, weights layout), created on first
 * use. The caller holds the OpenMP thread count at 1. */
static struct prim *prim_get(int64_t M, int64_t N, int64_t K, const dnnl_memory_desc_t *wmd)
{
	pthread_mutex_lock(&g_mu);
	struct prim *p;
	for (p = g_prims; p; p = p->next)
		if (p->M == M && p->N == N && p->K == K && dnnl_memory_desc_equal(&p->wmd, wmd))
			break;
	if (!p && (p = calloc(1, sizeof(*p)))) {
		struct ms_err e = {0};
		dnnl_primitive_desc_t pd = NULL;
		bool ok = !matmul_pd(M, N, K, wmd, &pd, &e) &&
			  dnnl_primitive_create(&p->p, pd) == dnnl_success;
		if (ok) {
			p->M = M, p->N = N, p->K = K, p->wmd = *wmd;
			p->src_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
			p->dst_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
			const dnnl_memory_desc_t *sm =
				dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
			if (sm) {
				p->scratch_md = *sm;
				p->scratch_bytes = dnnl_memory_desc_get_size(sm);
			}
			p->next = g_prims;
			g_prims = p;
		} else {
			free(p);
			p = NULL;
		}
		if (pd)
			dnnl_primitive_desc_destroy(pd);
	}
	pthread_mutex_unlock(&g_mu);
	return p;
}

/* ---- the packed matrix ---- */

struct onednn_pack {
	int64_t rows, K, n_panels;    /* panels of PANEL rows; the last may be narrower */
	int64_t tail;                 /* rows of the last panel */
	size_t panel_bytes;           /* packed bytes of a full panel */
	ms_gemm_fn ours;              /* the AVX-512 bf16 row kernel (to measure against) */
	dnnl_memory_desc_t wmd[2];    /* [0] full panel, [1] a narrower last one */
	bool vnni2[2];                /* wmd[i] is BA16a64b2a, which pack_row decodes */
	int64_t mmin[2];              /* chunks shorter than this run padded to it */
	/* Primitives by (panel kind, M), looked up once and kept: gemmq runs
	 * concurrently on pool threads, so the slots are atomic. */
	_Atomic(struct prim *) prim[2][MCHUNK + 1];
	uint8_t *panels;              /* panel i at i * panel_bytes */
};

int64_t ms_dense_onednn_pads_to(const struct ms_wmat *w)
{
	const struct onednn_pack *pk = w->pack;
	if (!pk)
		return 1;
	return pk->mmin[0] > pk->mmin[1] ? pk->mmin[0] : pk->mmin[1];
}

static int panel_kind(const struct onednn_pack *pk, int64_t p)
{
	return p == pk->n_panels - 1 && pk->tail != PANEL;
}

static struct prim *pack_prim(struct onednn_pack *pk, int kind, int64_t M)
{
	struct prim *p = atomic_load_explicit(&pk->prim[kind][M], memory_order_acquire);
	if (!p) {
		p = prim_get(M, kind ? pk->tail : PANEL, pk->K, &pk->wmd[kind]);
		if (p)
			atomic_store_explicit(&pk->prim[kind][M], p, memory_order_release);
	}
	return p;
}

/* Element (k, n) of a panel in BA16a64b2a, oneDNN's layout for bf16
 * weights on AVX512-BF16: blocks of 32 K x 64 N in K order, inside a block
 * pairs of K rows interleaved per column (VNNI-2): [k / 2][n][k % 2]. */
static inline size_t vnni2_index(int64_t k, int64_t n)
{
	return (size_t)(k / 32) * 32 * 64 + (size_t)((k % 32) / 2) * 128 + (size_t)n * 2 +
	       (size_t)(k % 2);
}

/* Row r of the packed matrix as fp32 (ms_wmat.pack_row: the loader may
 * then drop the unpacked rows). */
static void pack_row(const void *pack, int64_t r, float *out)
{
	const struct onednn_pack *pk = pack;
	int64_t p = r / PANEL, n = r % PANEL;
	const uint16_t *panel = (const uint16_t *)(pk->panels + (size_t)p * pk->panel_bytes);
	for (int64_t k = 0; k < pk->K; k++)
		out[k] = ms_bf16_to_f32(panel[vnni2_index(k, n)]);
}

/* W[r, k] from the packed copy when it decodes (the unpacked rows may be
 * gone), else from the rows. */
static float weight_at(const struct onednn_pack *pk, const struct ms_wmat *w, int64_t r,
		       int64_t k)
{
	if (w->pack_row) {
		const uint8_t *panel = pk->panels + (size_t)(r / PANEL) * pk->panel_bytes;
		return ms_bf16_to_f32(((const uint16_t *)panel)[vnni2_index(k, r % PANEL)]);
	}
	return ms_bf16_to_f32(((const uint16_t *)(w->w + (size_t)r * w->row_bytes))[k]);
}

/* Rows [c0, c1) for M tokens without oneDNN: only where it could not run
 * (out of memory), so plain and slow; the same products, summed in another
 * order. */
static void fallback_rows(const struct onednn_pack *pk, const struct ms_wmat *w, int64_t c0,
			  int64_t c1, const uint16_t *xb, int64_t M, float *y, int64_t ldy)
{
	for (int64_t r = c0; r < c1; r++)
		for (int64_t t = 0; t < M; t++) {
			float acc = 0.0f;
			for (int64_t k = 0; k < pk->K; k++)
				acc += weight_at(pk, w, r, k) * ms_bf16_to_f32(xb[t * pk->K + k]);
			y[t * ldy + r] = acc;
		}
}

/* Run one primitive: dst[M, N] from xb[M, K] and one packed panel. */
static int run_prim(const struct prim *p, dnnl_stream_t st, const uint16_t *xb,
		    const void *panel, float *dst, void *scratch)
{
	dnnl_memory_t m[4] = {0};
	int n_args = p->scratch_bytes ? 4 : 3;
	dnnl_status_t s = dnnl_memory_create(&m[0], &p->src_md, g_engine, (void *)xb);
	if (s == dnnl_success)
		s = dnnl_memory_create(&m[1], &p->wmd, g_engine, (void *)panel);
	if (s == dnnl_success)
		s = dnnl_memory_create(&m[2], &p->dst_md, g_engine, dst);
	if (s == dnnl_success && n_args == 4)
		s = dnnl_memory_create(&m[3], &p->scratch_md, g_engine, scratch);
	if (s == dnnl_success) {
		dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]},
					   {DNNL_ARG_DST, m[2]}, {DNNL_ARG_SCRATCHPAD, m[3]}};
		s = dnnl_primitive_execute(p->p, st, n_args, args);
	}
	for (int i = 0; i < 4; i++)
		if (m[i])
			dnnl_memory_destroy(m[i]);
	return s == dnnl_success ? 0 : -EIO;
}

/* The oneDNN path over the panels holding rows [r0, r1): bf16 activations
 * xb [n][K]. Each (panel, chunk of 64 tokens) goes through one primitive
 * whatever r0 and r1 are, so the task split never changes a result. */
static void onednn_rows(struct onednn_pack *pk, const struct ms_wmat *w, int64_t r0, int64_t r1,
			const uint16_t *xb, int64_t n, float *y, int64_t ldy)
{
	int was = omp_one_begin();
	_Alignas(64) float dst[MCHUNK * PANEL];
	void *scratch = NULL;
	size_t scratch_cap = 0;
	dnnl_stream_t st = NULL;
	if (dnnl_stream_create(&st, g_engine, dnnl_stream_default_flags) != dnnl_success)
		st = NULL;
	/* the last chunk, zero-padded, where it is shorter than a panel kind's
	 * mmin (the same for every panel: made once) */
	int64_t last = (n - 1) / MCHUNK * MCHUNK, pad_rows = 0;
	uint16_t *pad = NULL;
	for (int k = 0; k < 2; k++)
		if (pk->mmin[k] > n - last && pk->mmin[k] > pad_rows)
			pad_rows = pk->mmin[k];
	if (pad_rows && (pad = calloc((size_t)(pad_rows * pk->K), sizeof(uint16_t))))
		memcpy(pad, xb + last * pk->K, (size_t)((n - last) * pk->K) * sizeof(uint16_t));
	for (int64_t p = r0 / PANEL; p * PANEL < r1; p++) {
		int kind = panel_kind(pk, p);
		int64_t N = kind ? pk->tail : PANEL, pr0 = p * PANEL;
		int64_t c0 = pr0 > r0 ? pr0 : r0, c1 = pr0 + N < r1 ? pr0 + N : r1;
		const uint8_t *panel = pk->panels + (size_t)p * pk->panel_bytes;
		for (int64_t m0 = 0; m0 < n; m0 += MCHUNK) {
			int64_t M = n - m0 < MCHUNK ? n - m0 : MCHUNK, Mp = M;
			const uint16_t *xm = xb + m0 * pk->K, *xp = xm;
			if (M < pk->mmin[kind]) {
				Mp = pk->mmin[kind];
				xp = pad;
			}
			struct prim *pr = st && xp ? pack_prim(pk, kind, Mp) : NULL;
			if (pr && pr->scratch_bytes > scratch_cap) {
				free(scratch);
				scratch_cap = pr->scratch_bytes;
				if (posix_memalign(&scratch, 64, scratch_cap))
					scratch = NULL, scratch_cap = 0;
			}
			if (!pr || (pr->scratch_bytes && !scratch) ||
			    run_prim(pr, st, xp, panel, dst, scratch)) {
				/* oneDNN could not run (out of memory) */
				fallback_rows(pk, w, c0, c1, xm, M, y + m0 * ldy, ldy);
				continue;
			}
			for (int64_t t = 0; t < M; t++)
				memcpy(y + (m0 + t) * ldy + c0, dst + t * N + (c0 - pr0),
				       (size_t)(c1 - c0) * sizeof(float));
		}
	}
	if (st)
		dnnl_stream_destroy(st);
	free(scratch);
	free(pad);
	omp_one_end(was);
}

/* ---- kernel entry points ---- */

/* A matrix this kernel never packed (a caller that took the kernel without
 * ms_cpu_bind, as unit tests do) is computed by the AVX-512 kernel on
 * the unrounded activations. */
static ms_gemm_fn avx512_bf16_gemm(void);

static void plain_gemm(const struct ms_wmat *w, int64_t r0, int64_t r1, const float *x,
		       int64_t ldx, int64_t n, float *y, int64_t ldy)
{
	avx512_bf16_gemm()(w, r0, r1, x, ldx, n, y, ldy);
}

static size_t prep_size(const struct ms_wmat *w, int64_t n)
{
	size_t es = w->pack ? sizeof(uint16_t) : sizeof(float);
	return (size_t)(n * w->cols) * es + 64;
}

/* Activations to bf16 (fp32 copies for a matrix never packed). */
static void prep(const struct ms_wmat *w, const float *x, int64_t ldx, int64_t n, void *xq)
{
	int64_t K = w->cols;
	if (!w->pack) {
		for (int64_t t = 0; t < n; t++)
			memcpy((float *)xq + t * K, x + t * ldx, (size_t)K * sizeof(float));
		return;
	}
	uint16_t *xb = xq;
	for (int64_t t = 0; t < n; t++)
		for (int64_t k = 0; k < K; k++)
			xb[t * K + k] = ms_bf16_rne(x[t * ldx + k]);
}

static void gemmq(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq, int64_t n,
		  float *y, int64_t ldy)
{
	/* The pack is const to callers; its primitive slots are a cache that
	 * fills on first use. */
	struct onednn_pack *pk = (struct onednn_pack *)w->pack;
	if (n <= 0 || r1 <= r0)
		return;
	if (!pk)
		plain_gemm(w, r0, r1, xq, w->cols, n, y, ldy);
	else
		onednn_rows(pk, w, r0, r1, xq, n, y, ldy);
}

/* ---- packing and measuring ---- */

/* count activations uniform in [-1, 1), as bf16, from an LCG seeded with
 * seed: the data of the load-time measurement and invariance check. */
static void random_bf16(uint16_t *xb, int64_t count, uint32_t seed)
{
	for (int64_t i = 0; i < count; i++) {
		seed = seed * 1664525u + 1013904223u;
		xb[i] = ms_bf16_rne((float)(seed >> 8) / 8388608.0f - 1.0f);
	}
}

/* Time both paths single-threaded on the same leading rows (at most
 * MEASURE_ROWS, whole panels), best of MEASURE_REPS after a warm-up that
 * also creates the primitives: each runs on one thread per row task in
 * production, so one thread each is the fair comparison. The weights are
 * hot in cache here, as they are not at decode; at n = 1 both paths stream
 * the matrix and the choice matters least. */
static int measure(struct onednn_pack *pk, const struct ms_wmat *w, struct ms_dense_measure *m)
{
	int64_t K = pk->K, R = pk->rows < MEASURE_ROWS ? pk->rows : MEASURE_ROWS;
	int64_t nmax = MS_ONEDNN_MEASURE_N[MS_ONEDNN_N_MEASURED - 1];
	float *x = malloc((size_t)(nmax * K) * sizeof(float));
	uint16_t *xb = malloc((size_t)(nmax * K) * sizeof(uint16_t));
	float *y = malloc((size_t)(nmax * R) * sizeof(float));
	if (!x || !xb || !y) {
		free(x), free(xb), free(y);
		return -ENOMEM;
	}
	random_bf16(xb, nmax * K, 12345);
	for (int64_t i = 0; i < nmax * K; i++)
		x[i] = ms_bf16_to_f32(xb[i]);
	*m = (struct ms_dense_measure){.rows = pk->rows, .cols = K, .rows_timed = R};
	for (int i = 0; i < MS_ONEDNN_N_MEASURED; i++) {
		int64_t n = MS_ONEDNN_MEASURE_N[i];
		double bo = 1e30, bd = 1e30;
		for (int r = 0; r <= MEASURE_REPS; r++) {
			double t0 = ms_now_s();
			pk->ours(w, 0, R, x, K, n, y, R);
			double t1 = ms_now_s();
			onednn_rows(pk, w, 0, R, xb, n, y, R);
			double t2 = ms_now_s();
			if (r) { /* r = 0 warms caches and creates primitives */
				bo = t1 - t0 < bo ? t1 - t0 : bo;
				bd = t2 - t1 < bd ? t2 - t1 : bd;
			}
		}
		m->ours[i] = bo;
		m->onednn[i] = bd;
	}
	/* One path for every n (dense-onednn.h), so weigh a decode step and
	 * batches of 4, 16 and 64 alike; oneDNN must win by 5%, a margin
	 * against timing noise (and it costs a packed copy). */
	double so = 0, sd = 0;
	for (int i = 0; i < MS_ONEDNN_N_MEASURED; i++)
		so += m->ours[i], sd += m->onednn[i];
	m->chosen = sd < 0.95 * so;
	free(x), free(xb), free(y);
	return 0;
}

/* ---- batch invariance (see the top of the file) ---- */

struct inv_shape {
	int64_t N, K;
	dnnl_memory_desc_t wmd;
	int64_t mmin; /* 0: no M0 (oneDNN declined for the shape) */
};
static struct inv_shape g_inv[MAX_SHAPES];
static int g_n_inv;

/* dst [M][N] = xm [M][K] x panel through the (M, N, K) primitive. */
static int run_m(struct onednn_pack *pk, int kind, int64_t M, const uint16_t *xm,
		 const uint8_t *panel, float *dst, dnnl_stream_t st)
{
	struct prim *pr = pack_prim(pk, kind, M);
	if (!pr)
		return -ENOMEM;
	void *scratch = NULL;
	if (pr->scratch_bytes && posix_memalign(&scratch, 64, pr->scratch_bytes))
		return -ENOMEM;
	int rc = run_prim(pr, st, xm, panel, dst, scratch);
	free(scratch);
	return rc;
}

/* mmin for one panel kind, found on random activations against the kind's
 * first panel: 0 when none exists, -errno when oneDNN could not run. */
static int64_t find_mmin(struct onednn_pack *pk, int kind, dnnl_stream_t st)
{
	int64_t K = pk->K, N = kind ? pk->tail : PANEL;
	const uint8_t *panel = pk->panels + (size_t)(kind ? pk->n_panels - 1 : 0) * pk->panel_bytes;
	/* 2 x 64 rows, the second 64 a copy of the first: a window of 64 at
	 * offset s is the rows rotated by s */
	uint16_t *x = malloc((size_t)(2 * MCHUNK * K) * sizeof(uint16_t));
	float *ref = malloc((size_t)(MCHUNK * N) * sizeof(float));
	float *got = malloc((size_t)(MCHUNK * N) * sizeof(float));
	int64_t rc = -ENOMEM;
	if (!x || !ref || !got)
		goto out;
	random_bf16(x, MCHUNK * K, 271828);
	memcpy(x + MCHUNK * K, x, (size_t)(MCHUNK * K) * sizeof(uint16_t));
	size_t row = (size_t)N * sizeof(float);
	if ((rc = run_m(pk, kind, MCHUNK, x, panel, ref, st)))
		goto out;
	/* a row's bits at any position and beside any rows */
	static const int64_t shifts[] = {1, 7, 16, 33};
	for (size_t i = 0; i < sizeof(shifts) / sizeof(shifts[0]); i++) {
		int64_t sh = shifts[i];
		if ((rc = run_m(pk, kind, MCHUNK, x + sh * K, panel, got, st)))
			goto out;
		for (int64_t j = 0; j < MCHUNK; j++)
			if (memcmp(got + j * N, ref + ((j + sh) % MCHUNK) * N, row)) {
				rc = 0;
				goto out;
			}
	}
	/* every M from M0 up gives its rows the M = 64 bits */
	int64_t m0 = 1;
	for (int64_t M = MCHUNK - 1; M >= 1 && m0 == 1; M--) {
		if ((rc = run_m(pk, kind, M, x, panel, got, st)))
			goto out;
		if (memcmp(got, ref, (size_t)M * row))
			m0 = M + 1;
	}
	/* and a padded chunk: one row beside zeros */
	if (m0 > 1) {
		uint16_t *z = calloc((size_t)(m0 * K), sizeof(uint16_t));
		if (!z) {
			rc = -ENOMEM;
			goto out;
		}
		memcpy(z, x, (size_t)K * sizeof(uint16_t));
		rc = run_m(pk, kind, m0, z, panel, got, st);
		free(z);
		if (rc)
			goto out;
		if (memcmp(got, ref, row)) {
			rc = 0;
			goto out;
		}
	}
	rc = m0;
out:
	free(x), free(ref), free(got);
	return rc;
}

/* pk->mmin for both panel kinds, from the cache or found; -ENOTSUP with a
 * message where oneDNN's results would depend on the batch. */
static int check_invariance(struct onednn_pack *pk, struct ms_err *err)
{
	dnnl_stream_t st = NULL;
	int rc = 0;
	for (int kind = 0; kind < 2 && !rc; kind++) {
		int64_t N = kind ? pk->tail : PANEL, mmin = -1;
		if (kind ? pk->tail == PANEL : pk->n_panels == 1 && pk->tail != PANEL) {
			pk->mmin[kind] = 1; /* no panel of this kind */
			continue;
		}
		pthread_mutex_lock(&g_mu);
		for (int i = 0; i < g_n_inv; i++)
			if (g_inv[i].N == N && g_inv[i].K == pk->K &&
			    dnnl_memory_desc_equal(&g_inv[i].wmd, &pk->wmd[kind]))
				mmin = g_inv[i].mmin;
		pthread_mutex_unlock(&g_mu);
		if (mmin < 0) {
			if (!st && dnnl_stream_create(&st, g_engine, dnnl_stream_default_flags) != dnnl_success)
				return ms_err_set(err, -ENOMEM, "oneDNN: cannot create a stream");
			int was = omp_one_begin();
			mmin = find_mmin(pk, kind, st);
			omp_one_end(was);
			if (mmin < 0) {
				rc = ms_err_set(err, (int)mmin, "oneDNN could not run a %lld x %lld panel",
						(long long)N, (long long)pk->K);
				break;
			}
			pthread_mutex_lock(&g_mu);
			if (g_n_inv < MAX_SHAPES)
				g_inv[g_n_inv++] = (struct inv_shape){.N = N, .K = pk->K,
								      .wmd = pk->wmd[kind], .mmin = mmin};
			pthread_mutex_unlock(&g_mu);
		}
		if (!mmin)
			rc = ms_err_set(err, -ENOTSUP, "oneDNN's results for a %lld x %lld panel depend "
					"on the batch size here (declined: a token's output must not "
					"depend on the tokens beside it)", (long long)N, (long long)pk->K);
		int64_t pad_to = atomic_load(&g_pad_to);
		pk->mmin[kind] = mmin && pad_to > mmin ? pad_to : mmin;
	}
	if (st)
		dnnl_stream_destroy(st);
	return rc;
}

static bool shape_lookup(int64_t rows, int64_t cols, struct ms_dense_measure *out)
{
	bool found = false;
	pthread_mutex_lock(&g_mu);
	for (int i = 0; i < g_n_shapes && !found; i++)
		if (g_shapes[i].rows == rows && g_shapes[i].cols == cols) {
			*out = g_shapes[i];
			found = true;
		}
	pthread_mutex_unlock(&g_mu);
	return found;
}

static void shape_store(const struct ms_dense_measure *m)
{
	pthread_mutex_lock(&g_mu);
	bool have = false;
	for (int i = 0; i < g_n_shapes; i++)
		have |= g_shapes[i].rows == m->rows && g_shapes[i].cols == m->cols;
	if (!have && g_n_shapes < MAX_SHAPES)
		g_shapes[g_n_shapes++] = *m;
	pthread_mutex_unlock(&g_mu);
}

/* The weights layout oneDNN wants for a panel of N rows; brgemm only (any
 * other implementation is a slow fallback not worth a packed copy). */
static int panel_layout(int64_t N, int64_t K, dnnl_memory_desc_t *wmd, bool *vnni2,
			struct ms_err *err)
{
	dnnl_primitive_desc_t pd;
	int rc = matmul_pd(MCHUNK, N, K, NULL, &pd, err);
	if (rc)
		return rc;
	const char *impl = impl_name(pd);
	if (strncmp(impl, "brg", 3)) {
		rc = ms_err_set(err, -ENOTSUP, "oneDNN offers only %s for a bf16 matmul here",
				impl);
	} else {
		*wmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
		dnnl_memory_desc_t v;
		*vnni2 = !md_2d(&v, K, N, dnnl_bf16, dnnl_BA16a64b2a) &&
			 dnnl_memory_desc_equal(&v, wmd);
	}
	dnnl_primitive_desc_destroy(pd);
	return rc;
}

/* Reorder rows [r0, r0 + N) of w ([N][K] bf16, row_bytes apart) into the
 * panel layout wmd at dst. */
static int reorder_panel(const struct ms_wmat *w, int64_t r0, int64_t N,
			 const dnnl_memory_desc_t *wmd, void *dst, dnnl_stream_t st)
{
	dnnl_memory_desc_t src_md;
	dnnl_dims_t dims = {w->cols, N}, strides = {1, (int64_t)(w->row_bytes / 2)};
	if (dnnl_memory_desc_init_by_strides(&src_md, 2, dims, dnnl_bf16, strides) != dnnl_success)
		return -EINVAL;
	dnnl_primitive_desc_t pd = NULL;
	dnnl_primitive_t p = NULL;
	dnnl_memory_t ms = NULL, md = NULL;
	void *src = (void *)(w->w + (size_t)r0 * w->row_bytes); /* read only */
	dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, &src_md, g_engine, wmd, g_engine,
							    NULL);
	if (s == dnnl_success)
		s = dnnl_primitive_create(&p, pd);
	if (s == dnnl_success)
		s = dnnl_memory_create(&ms, &src_md, g_engine, src);
	if (s == dnnl_success)
		s = dnnl_memory_create(&md, wmd, g_engine, dst);
	if (s == dnnl_success) {
		dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
		s = dnnl_primitive_execute(p, st, 2, args);
	}
	if (ms)
		dnnl_memory_destroy(ms);
	if (md)
		dnnl_memory_destroy(md);
	if (p)
		dnnl_primitive_destroy(p);
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	return s == dnnl_success ? 0 : -EIO;
}

static ms_gemm_fn avx512_bf16_gemm(void)
{
	for (const struct ms_kernel *k = ms_kernels_avx512; k->name; k++)
		if (k->fmt == MS_WFMT_BF16 && k->gemm)
			return k->gemm;
	return NULL;
}

static int pack_locked(struct ms_wmat *w, void **owned, struct ms_err *err)
{
	int64_t rows = w->rows, K = w->cols;
	struct onednn_pack h = {.rows = rows, .K = K, .ours = avx512_bf16_gemm()};
	if (!h.ours)
		return ms_err_set(err, -ENOTSUP, "no AVX-512 bf16 kernel to pair with");
	/* a shape already measured slower is declined before any packing */
	bool forced = atomic_load(&g_force);
	struct ms_dense_measure m = {.chosen = true};
	if (!forced && shape_lookup(rows, K, &m) && !m.chosen)
		return ms_err_set(err, -ENOTSUP, "measured slower than avx512-bf16 for %lld x %lld",
				  (long long)rows, (long long)K);
	h.n_panels = (rows + PANEL - 1) / PANEL;
	h.tail = rows - (h.n_panels - 1) * PANEL;
	int rc = 0;
	bool full = h.n_panels > 1 || h.tail == PANEL, narrow = h.tail != PANEL;
	if (full)
		rc = panel_layout(PANEL, K, &h.wmd[0], &h.vnni2[0], err);
	if (!rc && narrow)
		rc = panel_layout(h.tail, K, &h.wmd[1], &h.vnni2[1], err);
	if (rc)
		return rc;
	h.panel_bytes = full ? (dnnl_memory_desc_get_size(&h.wmd[0]) + 63) / 64 * 64 : 0;
	size_t tail_bytes = dnnl_memory_desc_get_size(&h.wmd[narrow]);
	size_t head = (sizeof(h) + 63) / 64 * 64;
	size_t data = (size_t)(h.n_panels - 1) * h.panel_bytes + tail_bytes;
	uint8_t *buf;
	if (posix_memalign((void **)&buf, 64, head + data))
		return ms_err_set(err, -ENOMEM, "out of memory for %zu bytes of packed bf16", data);
	struct onednn_pack *pk = (struct onednn_pack *)buf;
	*pk = h;
	for (int k = 0; k < 2; k++)
		for (int m = 0; m <= MCHUNK; m++)
			atomic_init(&pk->prim[k][m], NULL);
	pk->panels = buf + head;
	dnnl_stream_t st;
	if (dnnl_stream_create(&st, g_engine, dnnl_stream_default_flags) != dnnl_success) {
		free(buf);
		return ms_err_set(err, -ENOMEM, "oneDNN: cannot create a stream");
	}
	for (int64_t p = 0; p < h.n_panels && !rc; p++) {
		int kind = panel_kind(pk, p);
		rc = reorder_panel(w, p * PANEL, kind ? h.tail : PANEL, &pk->wmd[kind],
				   pk->panels + (size_t)p * h.panel_bytes, st);
	}
	dnnl_stream_destroy(st);
	if (rc) {
		free(buf);
		return ms_err_set(err, -ENOTSUP, "oneDNN could not reorder the weights");
	}
	if ((rc = check_invariance(pk, err))) {
		free(buf);
		return rc;
	}
	if (!forced) {
		pthread_mutex_lock(&g_measure_mu);
		if (!shape_lookup(rows, K, &m)) {
			rc = measure(pk, w, &m);
			if (!rc)
				shape_store(&m);
		}
		pthread_mutex_unlock(&g_measure_mu);
		if (rc) {
			free(buf);
			return ms_err_set(err, rc, "out of memory measuring a %lld x %lld matrix",
					  (long long)rows, (long long)K);
		}
	}
	if (!m.chosen) {
		free(buf);
		return ms_err_set(err, -ENOTSUP, "measured slower than avx512-bf16 for %lld x %lld",
				  (long long)rows, (long long)K);
	}
	w->pack = pk;
	w->pack_bytes = data;
	/* rows decodable from the pack (oneDNN's AVX512-BF16 layout): the
	 * loader may release the unpacked ones */
	if ((!full || pk->vnni2[0]) && (!narrow || pk->vnni2[1]))
		w->pack_row = pack_row;
	*owned = buf;
	return 0;
}

static int pack(struct ms_wmat *w, void **owned, struct ms_err *err)
{
	if (w->fmt != MS_WFMT_BF16 || w->rows < 1 || w->cols < 1 || w->row_bytes % 2 ||
	    w->row_bytes < (size_t)w->cols * 2)
		return ms_err_set(err, -ENOTSUP, "not a plain bf16 matrix");
	pthread_once(&g_once, engine_init);
	if (!g_engine)
		return ms_err_set(err, -ENOTSUP, "oneDNN: no CPU engine");
	int was = omp_one_begin();
	int rc = pack_locked(w, owned, err);
	omp_one_end(was);
	return rc;
}

const struct ms_kernel ms_kernel_onednn_bf16 = {
	.name = "onednn-bf16",
	.isa = "avx512",
	.fmt = MS_WFMT_BF16,
	/* the AVX-512 bf16 kernel's flags (measured against, and computing
	 * matrices never packed) plus native bf16 products, without which
	 * oneDNN never wins */
	.cpu_flags = MS_CPU_AVX512F | MS_CPU_AVX512BW | MS_CPU_AVX512VL | MS_CPU_FMA |
		     MS_CPU_F16C | MS_CPU_AVX512BF16,
	.gemm = plain_gemm,
	.pack = pack,
	.prep_size = prep_size,
	.prep = prep,
	.gemmq = gemmq,
	.row_align = PANEL,
	.rounds_acts = true,
};

/* ---- oneDNN's own matmul at its best: bench's prefill ceiling ---- */

#if DNNL_VERSION_MAJOR == 2
#define CEIL_TRY(call)                                                                         \
	do {                                                                                   \
		dnnl_status_t st_ = (call);                                                    \
		if (st_ != dnnl_success) {                                                     \
			snprintf(r->why, sizeof(r->why), "oneDNN: %s: %s", #call,              \
				 dnnl_status2str(st_));                                        \
			goto out;                                                              \
		}                                                                              \
	} while (0)

#define CEIL_MAX_SLICES 64

/* One thread's part: its columns' primitive, stream and memory. */
struct ceil_slice {
	dnnl_primitive_t mm;
	dnnl_stream_t st;
	dnnl_memory_t w, dst;
	dnnl_exec_arg_t args[3];
	dnnl_status_t status;
};

static void ceil_task(void *ctx, int task, int worker)
{
	(void)worker;
	struct ceil_slice *s = &((struct ceil_slice *)ctx)[task];
	int was = omp_one_begin();
	s->status = dnnl_primitive_execute(s->mm, s->st, 3, s->args);
	if (s->status == dnnl_success)
		s->status = dnnl_stream_wait(s->st);
	omp_one_end(was);
}

/* Slice i of N: its K x n weights reordered once into the layout its
 * primitive prefers (format_tag any), its primitive made. */
static int ceil_slice_init(struct ceil_slice *s, const dnnl_memory_desc_t *src_md, int64_t M,
			   int64_t K, int64_t n, uint32_t seed, struct ms_onednn_rate *r)
{
	dnnl_primitive_desc_t pd = NULL, rpd = NULL;
	dnnl_primitive_t ro = NULL;
	dnnl_memory_t wuser = NULL;
	dnnl_memory_desc_t wany_md, wuser_md, dst_md;
	dnnl_dims_t wd = {K, n}, dd = {M, n};
	dnnl_matmul_desc_t desc;
	void *h;
	int rc = -EIO;
	CEIL_TRY(dnnl_memory_desc_init_by_tag(&wany_md, 2, wd, dnnl_bf16, dnnl_format_tag_any));
	/* [n, K] rows are the K x n weights in column-major order: tag ba */
	CEIL_TRY(dnnl_memory_desc_init_by_tag(&wuser_md, 2, wd, dnnl_bf16, dnnl_ba));
	CEIL_TRY(dnnl_memory_desc_init_by_tag(&dst_md, 2, dd, dnnl_f32, dnnl_ab));
	CEIL_TRY(dnnl_matmul_desc_init(&desc, src_md, &wany_md, NULL, &dst_md));
	CEIL_TRY(dnnl_primitive_desc_create(&pd, &desc, NULL, g_engine, NULL));
	const dnnl_memory_desc_t *wpk_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
	CEIL_TRY(dnnl_memory_create(&wuser, &wuser_md, g_engine, DNNL_MEMORY_ALLOCATE));
	CEIL_TRY(dnnl_memory_create(&s->w, wpk_md, g_engine, DNNL_MEMORY_ALLOCATE));
	CEIL_TRY(dnnl_memory_create(&s->dst, &dst_md, g_engine, DNNL_MEMORY_ALLOCATE));
	CEIL_TRY(dnnl_memory_get_data_handle(wuser, &h));
	random_bf16(h, K * n, seed);
	CEIL_TRY(dnnl_stream_create(&s->st, g_engine, dnnl_stream_default_flags));
	CEIL_TRY(dnnl_reorder_primitive_desc_create(&rpd, &wuser_md, g_engine, wpk_md, g_engine, NULL));
	CEIL_TRY(dnnl_primitive_create(&ro, rpd));
	dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, wuser}, {DNNL_ARG_TO, s->w}};
	CEIL_TRY(dnnl_primitive_execute(ro, s->st, 2, rargs));
	CEIL_TRY(dnnl_stream_wait(s->st));
	CEIL_TRY(dnnl_primitive_create(&s->mm, pd));
	rc = 0;
out:
	if (ro)
		dnnl_primitive_destroy(ro);
	if (rpd)
		dnnl_primitive_desc_destroy(rpd);
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	if (wuser)
		dnnl_memory_destroy(wuser);
	return rc;
}

static void ceil_slice_free(struct ceil_slice *s)
{
	if (s->mm)
		dnnl_primitive_destroy(s->mm);
	if (s->st)
		dnnl_stream_destroy(s->st);
	if (s->w)
		dnnl_memory_destroy(s->w);
	if (s->dst)
		dnnl_memory_destroy(s->dst);
}

/* Best of several runs of the whole split, the first a warm-up. */
static void ceil_time(struct ms_pool *pool, struct ceil_slice *sl, int ns, int64_t M, int64_t K,
		      int64_t N, struct ms_onednn_rate *r)
{
	double best = 1e300, spent = 0;
	for (int rep = 0; rep < 50 && (rep < 4 || spent < 1.0); rep++) {
		double t0 = ms_now_s();
		ms_pool_run(pool, ns, ceil_task, sl);
		double t = ms_now_s() - t0;
		for (int i = 0; i < ns; i++)
			if (sl[i].status != dnnl_success) {
				snprintf(r->why, sizeof(r->why), "oneDNN: execute: %s",
					 dnnl_status2str(sl[i].status));
				return;
			}
		spent += t;
		if (rep > 0 && t < best)
			best = t;
	}
	r->gflops = 2.0 * (double)M * (double)K * (double)N / best / 1e9;
	snprintf(r->why, sizeof(r->why), "oneDNN %d.%d, %s, %d x 1 thread", DNNL_VERSION_MAJOR,
		 DNNL_VERSION_MINOR, dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()), ns);
}

void ms_dense_onednn_ceiling(struct ms_pool *pool, int64_t M, int64_t K, int64_t N,
			     struct ms_onednn_rate *r)
{
	int ns = pool->n_threads;
	ns = ns > CEIL_MAX_SLICES ? CEIL_MAX_SLICES : ns;
	ns = (int64_t)ns > N / 16 ? (int)(N / 16 > 0 ? N / 16 : 1) : ns;
	struct ceil_slice sl[CEIL_MAX_SLICES];
	memset(sl, 0, sizeof(sl));
	memset(r, 0, sizeof(*r));
	dnnl_memory_t src = NULL;
	dnnl_memory_desc_t src_md;
	dnnl_dims_t sd = {M, K};
	void *h;
	pthread_once(&g_once, engine_init);
	/* primitives are created for the one thread that will run each */
	int was = omp_one_begin();
	if (!g_engine) {
		snprintf(r->why, sizeof(r->why), "oneDNN: no CPU engine");
		goto out;
	}
	CEIL_TRY(dnnl_memory_desc_init_by_tag(&src_md, 2, sd, dnnl_bf16, dnnl_ab));
	CEIL_TRY(dnnl_memory_create(&src, &src_md, g_engine, DNNL_MEMORY_ALLOCATE));
	CEIL_TRY(dnnl_memory_get_data_handle(src, &h));
	random_bf16(h, M * K, 12345);
	for (int i = 0; i < ns; i++) {
		int64_t n0 = N * i / ns, n = N * (i + 1) / ns - n0;
		if (ceil_slice_init(&sl[i], &src_md, M, K, n, 777 + (uint32_t)i, r))
			goto out;
		sl[i].args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, src};
		sl[i].args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, sl[i].w};
		sl[i].args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, sl[i].dst};
	}
	ceil_time(pool, sl, ns, M, K, N, r);
out:
	for (int i = 0; i < ns; i++)
		ceil_slice_free(&sl[i]);
	if (src)
		dnnl_memory_destroy(src);
	omp_one_end(was);
}
#else
void ms_dense_onednn_ceiling(struct ms_pool *pool, int64_t M, int64_t K, int64_t N,
			     struct ms_onednn_rate *r)
{
	(void)pool, (void)M, (void)K, (void)N;
	r->gflops = 0;
	snprintf(r->why, sizeof(r->why), "oneDNN %d.x: the ceiling's matmul is written for 2.x",
		 DNNL_VERSION_MAJOR);
}
#endif
