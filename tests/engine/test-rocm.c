/*
 * test-rocm.c: the ROCm backend's kernels, run on the host model of the
 * HIP execution model (rocm-sim), at wavefront widths 64 and 32, against
 * the CPU: the formats' decoders bit for bit on every code; every weight
 * format and activation quantization through `linear` against a double
 * product of the CPU's own decode and quantizer (1e-5 of the sum's
 * magnitude); the experts (W4A8 with per-expert scales, MXFP4, INTQ;
 * experts left without tokens, tied router logits) and paged attention
 * (GQA, sinks, windows, several splits) against the CPU backend's
 * reference kernels (1e-4 of the output's scale: different summation
 * order and exp); the two product kernels (gemv, gemm) launched straight
 * on the model over ragged shapes in every format: the same bits as each
 * other, and the CPU's double product; and batch invariance: a token's
 * outputs are the same bits alone (gemv) and in a batch (gemm for 16
 * projection inputs, 8 per expert). The MFMA products (kern-mma.cu) on the
 * model's matrix instructions of gfx90a, gfx942 and gfx950: each target's
 * kind per format and input, held to a double product of the operands the
 * kind takes (bf16-rounded for mfma-bf16) within 1e-5 of the sum's
 * magnitude; refused without the instruction, at 32 lanes, with --exact
 * and for the router.
 *
 * MOESERVE_TEST_BACKEND=rocm runs the same comparisons against a real GPU
 * (the `rocm` backend, HIP or CUDA build; tests/device/run.sh on a lent
 * machine): once, at the device's own wavefront width instead of the
 * model's 64 and 32, with the device required to open, and its copy
 * bandwidth checked to be a GPU's.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check-run.h"
#include "kv-cache.h"

#define TESTUTIL_SEED 20261202u
#include "testutil.h"
#include "testmats.h"

#define MS_GPU_SIM 1
#include "gpu-compat.h"
#include "gpu-formats.h"
#include "gpu-prod.h"
#include "rocm.h"

/* The device side of every comparison: rocm-sim, or what
 * MOESERVE_TEST_BACKEND names ("rocm": the GPU). Read from the environment
 * only: the parent process must not open a GPU before Check forks. */
static const char *dev_name(void)
{
	const char *e = getenv("MOESERVE_TEST_BACKEND");
	return e && *e ? e : "rocm-sim";
}

static bool on_gpu(void)
{
	return strcmp(dev_name(), "rocm-sim") != 0;
}

/* Open rocm-sim without --exact (so that matrices get MFMA kinds). */
static bool open_inexact;

static struct ms_backend *open_be(const char *name, int wave)
{
	/* the model's width; a GPU has its own */
	if (wave)
		ms_gpu_sim_set_wave(wave);
	struct ms_backend_opts o = {.backend = name, .kernels = !strcmp(name, "cpu") ? "ref" : NULL,
				    .threads = 1, .exact = !open_inexact};
	struct ms_backend *be = NULL;
	struct ms_err err = {0};
	ck_assert_msg(ms_backend_open(&o, &be, &err) == 0, "%s: %s", name, err.msg);
	return be;
}

/* Loop i's wavefront width on the model; 0 on a GPU (its own). */
static int wave_of(int i)
{
	return on_gpu() ? 0 : i ? 32 : 64;
}

/* Host floats into a new buffer of be. */
static float *up(struct ms_backend *be, const float *h, int64_t n)
{
	float *d = be->ops->buf_alloc(be, (size_t)n * sizeof(float));
	ck_assert_ptr_nonnull(d);
	be->ops->from_host(be, d, h, (size_t)n * sizeof(float));
	return d;
}

static float *down(struct ms_backend *be, const float *d, int64_t n)
{
	float *h = malloc((size_t)n * sizeof(float));
	be->ops->to_host(be, h, d, (size_t)n * sizeof(float));
	return h;
}

static float *rand_vec(int64_t n, float scale)
{
	float *v = malloc((size_t)n * sizeof(float));
	for (int64_t i = 0; i < n; i++)
		v[i] = scale * frand();
	return v;
}

static uint32_t bits_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

/* ---- formats ---- */

START_TEST(formats_bit_exact)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float a = gpu_f16((uint16_t)h), b = ms_f16_to_f32((uint16_t)h);
		ck_assert_msg(bits_of(a) == bits_of(b) || (isnan(a) && isnan(b)), "f16 %04x", h);
		ck_assert_uint_eq(bits_of(gpu_bf16((uint16_t)h)), bits_of(ms_bf16_to_f32((uint16_t)h)));
	}
	for (uint32_t e = 0; e < 256; e++) {
		ck_assert_uint_eq(bits_of(gpu_e8m0((uint8_t)e)), bits_of(ms_e8m0_to_f32((uint8_t)e)));
		float a = gpu_fp8((uint8_t)e), b = ms_fp8_e4m3_to_f32((uint8_t)e);
		ck_assert_msg(bits_of(a) == bits_of(b) || (isnan(a) && isnan(b)), "fp8 %02x", e);
	}
	for (unsigned c = 0; c < 16; c++)
		ck_assert_uint_eq(bits_of(gpu_e2m1(c)), bits_of(ms_e2m1_lut[c]));
	/* rounding to e4m3: every exponent, ties, saturation, subnormals */
	for (int i = 0; i < 200000; i++) {
		float v = ldexpf(frand(), (int)(rnd() % 40) - 20);
		if (i % 7 == 0)
			v = (float)(int)(rnd() % 1024) / 64.0f; /* many exact ties */
		if (i % 11 == 0)
			v = 440.0f + (float)(rnd() % 100);
		float want = ms_fp8_e4m3_to_f32(ms_f32_to_fp8_e4m3(v));
		ck_assert_msg(bits_of(gpu_fp8_round(v)) == bits_of(want), "fp8 round %.9g", v);
	}
}
END_TEST

/* ---- linear ---- */

struct lin_case {
	struct mat_buf mb;
	struct ms_linear l;
	float *bias;
};

static void lin_init(struct lin_case *c, struct mat_buf mb, enum ms_actq_kind act, float scale)
{
	c->mb = mb;
	c->bias = rand_vec(mb.m.rows, 0.5f);
	c->l = (struct ms_linear){.w = mb.m, .bias = c->bias, .act = {act, scale}};
}

static void lin_free(struct lin_case *c)
{
	free_mat(&c->mb);
	free(c->bias);
}

/* y = act(x) W^T * row_scale + bias in double, from the CPU's decode and
 * quantizer; mag gets the sum of |terms| per output. */
static void lin_ref(const struct ms_linear *l, const float *x, int64_t n, double *y, double *mag)
{
	int64_t R = l->w.rows, K = l->w.cols;
	float *xq = malloc((size_t)(n * K) * sizeof(float)), *rs = malloc((size_t)n * sizeof(float));
	float *row = malloc((size_t)K * sizeof(float));
	ms_actq_apply(&l->act, x, K, n, K, xq, rs);
	for (int64_t r = 0; r < R; r++) {
		ms_wmat_row_f32(&l->w, r, row);
		for (int64_t t = 0; t < n; t++) {
			double s = 0, m = 0;
			for (int64_t k = 0; k < K; k++) {
				s += (double)row[k] * xq[t * K + k];
				m += fabs((double)row[k] * xq[t * K + k]);
			}
			y[t * R + r] = s * rs[t] + (l->bias ? l->bias[r] : 0);
			mag[t * R + r] = m * rs[t] + 1.0;
		}
	}
	free(xq), free(rs), free(row);
}

/* linear on be over x [n][K]: the result on the host. */
static float *lin_run(struct ms_backend *be, const struct ms_linear *l, const float *x, int64_t n)
{
	int64_t R = l->w.rows, K = l->w.cols;
	struct ms_err err = {0};
	float *dx = up(be, x, n * K), *dy = be->ops->buf_alloc(be, (size_t)(n * R) * sizeof(float));
	float *ys[1] = {dy};
	ck_assert_msg(be->ops->linear(be, 1, &l, dx, n, ys, &err) == 0, "%s", err.msg);
	float *y = down(be, dy, n * R);
	be->ops->buf_free(be, dx);
	be->ops->buf_free(be, dy);
	return y;
}

static void check_linear(struct ms_backend *be, struct lin_case *c, int64_t n)
{
	struct ms_err err = {0};
	char why[256];
	ck_assert_msg(be->ops->bind(be, &c->l, MS_BIND_FULL, why, sizeof(why), &err) == 0, "%s",
		      err.msg);
	int64_t R = c->l.w.rows, K = c->l.w.cols;
	float *x = rand_vec(16 * K, 1.0f);
	double *want = malloc((size_t)(n * R) * sizeof(double)), *mag = malloc((size_t)(n * R) * 8);
	lin_ref(&c->l, x, n, want, mag);
	float *y = lin_run(be, &c->l, x, n);
	for (int64_t i = 0; i < n * R; i++)
		ck_assert_msg(fabs(y[i] - want[i]) <= 1e-5 * mag[i],
			      "%s act %s %lldx%lld n=%lld: [%lld][%lld] got %.9g want %.9g",
			      ms_wfmt_name(c->l.w.fmt), ms_actq_name(c->l.act.kind), (long long)R,
			      (long long)K, (long long)n, (long long)(i / R), (long long)(i % R),
			      y[i], want[i]);
	/* batch invariance: row 3 of a batch of 16 is row 0 of a batch of 1 */
	float *y16 = lin_run(be, &c->l, x, 16), *y1 = lin_run(be, &c->l, x + 3 * K, 1);
	ck_assert_mem_eq(y16 + 3 * R, y1, (size_t)R * sizeof(float));
	free(y16), free(y1), free(x), free(want), free(mag), free(y);
	ms_linear_unbind(&c->l);
}

START_TEST(linear_every_format)
{
	struct ms_backend *be = open_be(dev_name(), wave_of(_i));
	static const struct {
		enum ms_wfmt fmt;
		int bits;
		int64_t rows, cols, n;
		enum ms_actq_kind act;
	} cases[] = {
		{MS_WFMT_F32, 0, 37, 80, 3, MS_ACTQ_NONE},
		{MS_WFMT_F16, 0, 5, 100, 9, MS_ACTQ_NONE},
		{MS_WFMT_BF16, 0, 37, 2880, 2, MS_ACTQ_NONE},
		{MS_WFMT_BF16, 0, 64, 48, 1, MS_ACTQ_FP8_DYNAMIC},
		{MS_WFMT_MXFP4, 0, 29, 2880, 4, MS_ACTQ_NONE},
		{MS_WFMT_MXFP4, 0, 37, 96, 7, MS_ACTQ_FP8_STATIC},
		{MS_WFMT_MXFP4, 0, 33, 80, 5, MS_ACTQ_MXFP4_DYNAMIC},
		{MS_WFMT_FP8, 0, 41, 72, 6, MS_ACTQ_FP8_DYNAMIC},
		{MS_WFMT_FP8, 0, 17, 64, 8, MS_ACTQ_FP8_STATIC},
		{MS_WFMT_INTQ, 4, 37, 80, 9, MS_ACTQ_NONE},
		{MS_WFMT_INTQ, 8, 19, 96, 2, MS_ACTQ_NONE},
		{MS_WFMT_INTQ, 3, 23, 64, 3, MS_ACTQ_NONE},
		{MS_WFMT_INTQ, 2, 11, 48, 4, MS_ACTQ_NONE},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct lin_case c;
		struct mat_buf mb = cases[i].fmt == MS_WFMT_INTQ
			? make_intq(cases[i].bits, cases[i].rows, cases[i].cols, 32, i % 2 == 1)
			: make_mat(cases[i].fmt, cases[i].rows, cases[i].cols);
		lin_init(&c, mb, cases[i].act, 0.004f);
		check_linear(be, &c, cases[i].n);
		lin_free(&c);
	}
	ms_backend_close(be);
}
END_TEST

/* ---- the two product kernels, straight on the model ---- */

/* One launch's worth: n_mats matrices of one format, matrix e over
 * counts[e] inputs (0: an expert without any), at ids scattered over the
 * batch (a random list), input id reading row id / xdiv of x; dense: one
 * matrix, no off / list (a projection). */
struct prod_case {
	enum ms_wfmt fmt;
	int bits;                    /* INTQ */
	int64_t rows, cols;
	int n_mats;
	int32_t counts[4];
	int xdiv;
	bool xs, glu, dense;
	enum ms_actq_kind act;       /* the matrices' input scheme (mma cases) */
};

struct prod_run {
	struct ms_backend *be;
	struct ms_gpu_ctx c;
	struct ms_err err;
	struct lin_case lc[4];
	struct ms_gpu_mat mats[4];
	int32_t off[5], *list;
	float *x, *xs;
	struct ms_gpu_gemv g;
};

/* The matrices on the model (bound through the backend: its upload), the
 * inputs, and the launch's description; y left for the caller. */
static void prod_init(struct prod_run *p, const struct prod_case *pc, int wave)
{
	memset(p, 0, sizeof(*p));
	p->be = open_be("rocm-sim", wave);
	p->c = (struct ms_gpu_ctx){.wave = wave, .n_cu = 1, .err = &p->err};
	int64_t n = 0, K = pc->cols;
	for (int e = 0; e < pc->n_mats; e++) {
		struct mat_buf mb = pc->fmt == MS_WFMT_INTQ
			? make_intq(pc->bits, pc->rows, K, 32, pc->bits == 4)
			: make_mat(pc->fmt, pc->rows, K);
		char why[256];
		lin_init(&p->lc[e], mb, pc->act, 0.004f);
		ck_assert_msg(p->be->ops->bind(p->be, &p->lc[e].l, MS_BIND_FULL, why, 256, &p->err) == 0,
			      "%s", p->err.msg);
		p->mats[e] = ((const struct ms_rocm_mat *)p->lc[e].l.bound)->m;
		p->off[e] = (int32_t)n;
		n += pc->counts[e];
		p->off[e + 1] = (int32_t)n;
	}
	p->list = malloc((size_t)(n + 1) * sizeof(int32_t));
	for (int64_t i = 0; i < n; i++)
		p->list[i] = (int32_t)i;
	for (int64_t i = n - 1; i > 0; i--) { /* scattered, as the router's order */
		int64_t j = rnd() % (uint32_t)(i + 1);
		int32_t t = p->list[i];
		p->list[i] = p->list[j], p->list[j] = t;
	}
	p->x = rand_vec((n / pc->xdiv + 1) * K, 1.0f);
	p->xs = pc->xs ? rand_vec(n, 0.5f) : NULL;
	for (int64_t i = 0; p->xs && i < n; i++)
		p->xs[i] += 1.0f;
	/* the model's device memory is the host's: host arrays serve */
	p->g = (struct ms_gpu_gemv){
		.mats = p->mats, .n_mats = pc->n_mats, .rows = pc->rows, .cols = K,
		.off = pc->dense ? NULL : p->off, .list = pc->dense ? NULL : p->list, .n = n,
		.x = p->x, .ldx = K, .xdiv = pc->xdiv, .xs = p->xs,
		.ldy = pc->glu ? pc->rows / 2 : pc->rows, .glu = pc->glu, .limit = 7.0f,
		.alpha = 1.702f,
	};
}

static void prod_free(struct prod_run *p, const struct prod_case *pc)
{
	for (int e = 0; e < pc->n_mats; e++) {
		ms_linear_unbind(&p->lc[e].l);
		lin_free(&p->lc[e]);
	}
	free(p->list), free(p->x), free(p->xs);
	ms_backend_close(p->be);
}

/* g's outputs by gemv or gemm: [n][ldy], NaN where nothing was written. */
static float *prod_launch(struct prod_run *p, const struct ms_gpu_gemv *g, bool gemm)
{
	size_t bytes = (size_t)(g->n * g->ldy) * sizeof(float);
	struct ms_gpu_gemv a = *g;
	a.y = malloc(bytes ? bytes : 4);
	memset(a.y, 0xFF, bytes);
	const struct ms_gpu_kern *k = ms_gsim_kern();
	ck_assert_msg((gemm ? k->gemm : k->gemv)(&p->c, &a) == 0, "%s", p->err.msg);
	return a.y;
}

/* Position q's matrix and id. */
static int prod_at(const struct prod_run *p, const struct prod_case *pc, int64_t q, int64_t *id)
{
	int e = 0;
	while (!pc->dense && q >= p->off[e + 1])
		e++;
	*id = pc->dense ? q : p->list[q];
	return e;
}

/* f to bf16, nearest even, by way of double (not the kernels' bit trick). */
static float bf16_round(float f)
{
	int e;
	double m = frexp((double)f, &e);
	return (float)ldexp(rint(ldexp(m, 8)), e - 8);
}

/* y (no glu) against a double product of the CPU's decode and the inputs,
 * both rounded to bf16 first with bf16 (what MFMA's bf16 kind takes):
 * within 1e-5 of the sum's magnitude. what names the run. */
static void prod_check_ref(const struct prod_run *p, const struct prod_case *pc, const float *y,
			   const char *what, bool bf16)
{
	int64_t K = pc->cols, R = pc->rows;
	float *row = malloc((size_t)K * sizeof(float));
	for (int e = 0; e < pc->n_mats; e++)
		for (int64_t r = 0; r < R; r++) {
			ms_wmat_row_f32(&p->lc[e].l.w, r, row);
			for (int64_t q = p->off[e]; q < p->off[e + 1]; q++) {
				int64_t id;
				prod_at(p, pc, q, &id);
				const float *x = p->x + id / pc->xdiv * K;
				double s = 0, mag = 0, xs = p->xs ? p->xs[id] : 1.0;
				for (int64_t k = 0; k < K; k++) {
					float w = row[k], v = x[k];
					if (bf16)
						w = bf16_round(w), v = bf16_round(v);
					s += (double)w * v, mag += fabs((double)w * v);
				}
				double want = s * xs + p->lc[e].bias[r], got = y[id * R + r];
				ck_assert_msg(fabs(got - want) <= 1e-5 * (mag * fabs(xs) + 1.0),
					      "%s x %s %lldx%lld %s: matrix %d row %lld input %lld: %.9g "
					      "want %.9g", ms_wfmt_name(pc->fmt), ms_actq_name(pc->act),
					      (long long)R, (long long)K, what, e, (long long)r,
					      (long long)id, got, want);
			}
		}
	free(row);
}

/* The first input of the fullest matrix alone (gemm over one input, no
 * list) gives the bits it has in the batch. */
static void prod_check_alone(struct prod_run *p, const struct prod_case *pc, const float *y)
{
	int best = 0;
	for (int e = 1; e < pc->n_mats; e++)
		best = pc->counts[e] > pc->counts[best] ? e : best;
	int64_t id;
	prod_at(p, pc, p->off[best], &id);
	struct ms_gpu_gemv one = p->g;
	one.mats = &p->mats[best], one.n_mats = 1, one.off = NULL, one.list = NULL, one.n = 1;
	one.x = p->x + id / pc->xdiv * pc->cols, one.xdiv = 1;
	one.xs = p->xs ? p->xs + id : NULL;
	float *y1 = prod_launch(p, &one, true);
	ck_assert_mem_eq(y1, y + id * p->g.ldy, (size_t)p->g.ldy * sizeof(float));
	free(y1);
}

static void check_products(const struct prod_case *pc, int wave)
{
	struct prod_run p;
	prod_init(&p, pc, wave);
	float *yv = prod_launch(&p, &p.g, false), *ym = prod_launch(&p, &p.g, true);
	size_t bytes = (size_t)(p.g.n * p.g.ldy) * sizeof(float);
	ck_assert_msg(!memcmp(yv, ym, bytes), "%s %lldx%lld wave %d: gemm != gemv",
		      ms_wfmt_name(pc->fmt), (long long)pc->rows, (long long)pc->cols, wave);
	if (!pc->glu) {
		prod_check_ref(&p, pc, ym, wave == 64 ? "gemm wave 64" : "gemm wave 32", false);
	} else {
		/* the pairs' SwiGLU of the rows as they are without glu */
		struct ms_gpu_gemv flat = p.g;
		flat.glu = 0, flat.ldy = pc->rows;
		float *yf = prod_launch(&p, &flat, true);
		prod_check_ref(&p, pc, yf, wave == 64 ? "gemm wave 64" : "gemm wave 32", false);
		for (int64_t id = 0; id < p.g.n; id++)
			for (int64_t u = 0; u < pc->rows / 2; u++) {
				const float *f = yf + id * pc->rows + 2 * u;
				float want = gpu_swiglu(f[0], f[1], 7.0f, 1.702f);
				ck_assert_uint_eq(bits_of(ym[id * p.g.ldy + u]), bits_of(want));
			}
		free(yf);
	}
	prod_check_alone(&p, pc, ym);
	free(yv), free(ym);
	prod_free(&p, pc);
}

START_TEST(gemm_matches_gemv_and_cpu)
{
	static const struct prod_case cases[] = {
		/* K = 2880 (90 chunks), rows over two tiles, 52 inputs, one empty matrix */
		{MS_WFMT_BF16, 0, 200, 2880, 3, {45, 0, 7}, 1, false, false, false, MS_ACTQ_NONE},
		/* gate/up pairs of GPT-OSS's width, two inputs per token row, 1 to 40 inputs */
		{MS_WFMT_MXFP4, 0, 130, 2880, 4, {1, 40, 0, 9}, 2, false, true, false, MS_ACTQ_NONE},
		{MS_WFMT_INTQ, 4, 37, 100, 2, {33, 5}, 1, true, false, false, MS_ACTQ_NONE},   /* g_idx, ragged K */
		{MS_WFMT_FP8, 0, 64, 80, 4, {2, 0, 0, 41}, 1, true, false, false, MS_ACTQ_NONE},
		{MS_WFMT_F32, 0, 5, 48, 1, {9}, 1, false, false, true, MS_ACTQ_NONE},
		{MS_WFMT_F16, 0, 129, 64, 1, {40}, 1, false, false, true, MS_ACTQ_NONE},
		{MS_WFMT_INTQ, 8, 19, 96, 2, {3, 44}, 1, false, false, false, MS_ACTQ_NONE},
		{MS_WFMT_INTQ, 3, 23, 64, 1, {6}, 1, true, false, false, MS_ACTQ_NONE},
		{MS_WFMT_INTQ, 2, 11, 48, 2, {0, 8}, 1, false, false, false, MS_ACTQ_NONE},
		/* whole tiles: 256 rows by 64 inputs, one chunk */
		{MS_WFMT_MXFP4, 0, 256, 32, 1, {64}, 1, false, false, true, MS_ACTQ_NONE},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_products(&cases[i], wave_of(_i));
}
END_TEST

/* ---- the MFMA products, on the model's matrix instructions ---- */

/* The gfx targets the model has instructions of, and the kind each gives
 * a matrix of (format, input): the ordered table's first that applies. */
static const char *const mma_archs[] = {"gfx90a", "gfx942", "gfx950"};

static int mma_want(int arch, enum ms_wfmt fmt, enum ms_actq_kind act)
{
	bool q = act != MS_ACTQ_NONE;
	if (arch == 2 && fmt == MS_WFMT_MXFP4 && q)
		return MS_GPU_MM_F4F8;
	if (arch >= 1 && (fmt == MS_WFMT_MXFP4 || fmt == MS_WFMT_FP8) && q)
		return MS_GPU_MM_FP8;
	return MS_GPU_MM_BF16;
}

/* The inputs as the device's actq leaves them: x's rows quantized in
 * place, xs[id] the row scale of input id's row (times the case's own). */
static void mma_quantize(struct prod_run *p, const struct prod_case *pc)
{
	int64_t rows = p->g.n / pc->xdiv + 1, K = pc->cols;
	float *rs = malloc((size_t)rows * sizeof(float));
	ms_actq_apply(&p->lc[0].l.act, p->x, K, rows, K, p->x, rs);
	float *xs = malloc((size_t)(p->g.n + 1) * sizeof(float));
	for (int64_t id = 0; id < p->g.n; id++)
		xs[id] = rs[id / pc->xdiv] * (p->xs ? p->xs[id] : 1.0f);
	free(p->xs), free(rs);
	p->xs = xs;
	p->g.xs = xs;
}

static float *mma_launch(struct prod_run *p, const struct ms_gpu_gemv *g, int kind)
{
	size_t bytes = (size_t)(g->n * g->ldy) * sizeof(float);
	struct ms_gpu_gemv a = *g;
	a.y = malloc(bytes ? bytes : 4);
	memset(a.y, 0xFF, bytes);
	ck_assert_msg(ms_gsim_kern()->mma(&p->c, &a, kind) == 0, "%s", p->err.msg);
	return a.y;
}

static void check_mma(const struct prod_case *pc, int arch)
{
	struct prod_run p;
	ms_gpu_sim_set_arch(mma_archs[arch]);
	open_inexact = true;
	prod_init(&p, pc, 64);
	open_inexact = false;
	p.c.mma = ms_gpu_mma_of_arch(mma_archs[arch]);
	int kind = ((const struct ms_rocm_mat *)p.lc[0].l.bound)->mma;
	ck_assert_msg(kind == mma_want(arch, pc->fmt, pc->act), "%s %s x %s: kind %d",
		      mma_archs[arch], ms_wfmt_name(pc->fmt), ms_actq_name(pc->act), kind);
	if (pc->act != MS_ACTQ_NONE)
		mma_quantize(&p, pc);
	struct ms_gpu_gemv flat = p.g;
	flat.glu = 0, flat.ldy = pc->rows;
	float *yf = mma_launch(&p, &flat, kind);
	char what[64];
	snprintf(what, sizeof(what), "%s mma kind %d", mma_archs[arch], kind);
	prod_check_ref(&p, pc, yf, what, kind == MS_GPU_MM_BF16);
	if (pc->glu) {
		float *yg = mma_launch(&p, &p.g, kind);
		for (int64_t id = 0; id < p.g.n; id++)
			for (int64_t u = 0; u < pc->rows / 2; u++) {
				const float *f = yf + id * pc->rows + 2 * u;
				ck_assert_uint_eq(bits_of(yg[id * p.g.ldy + u]),
						  bits_of(gpu_swiglu(f[0], f[1], 7.0f, 1.702f)));
			}
		free(yg);
	}
	free(yf);
	prod_free(&p, pc);
	ms_gpu_sim_set_arch(NULL);
}

START_TEST(mma_matches_cpu)
{
	static const struct prod_case cases[] = {
		/* W4A8: GPT-OSS's gate/up width over K = 2880, 1 to 40 inputs, an empty expert */
		{MS_WFMT_MXFP4, 0, 130, 2880, 4, {1, 40, 0, 9}, 2, false, true, false,
		 MS_ACTQ_FP8_STATIC},
		/* W4A4, ragged K (a partial last block), rows off the tile */
		{MS_WFMT_MXFP4, 0, 37, 80, 2, {33, 5}, 1, true, false, false, MS_ACTQ_MXFP4_DYNAMIC},
		{MS_WFMT_FP8, 0, 64, 80, 4, {2, 0, 0, 41}, 1, true, false, false, MS_ACTQ_FP8_DYNAMIC},
		/* W4A16, weights bf16-exact, inputs rounded */
		{MS_WFMT_MXFP4, 0, 129, 64, 1, {40}, 1, false, false, true, MS_ACTQ_NONE},
		{MS_WFMT_BF16, 0, 200, 2880, 3, {45, 0, 7}, 1, false, false, false, MS_ACTQ_NONE},
		{MS_WFMT_INTQ, 4, 37, 100, 2, {33, 5}, 1, true, false, false, MS_ACTQ_NONE},
		{MS_WFMT_F16, 0, 5, 48, 1, {9}, 1, false, false, true, MS_ACTQ_NONE},
		/* whole tiles: 256 rows by 64 inputs */
		{MS_WFMT_MXFP4, 0, 256, 64, 1, {64}, 1, false, false, true, MS_ACTQ_FP8_DYNAMIC},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_mma(&cases[i], _i);
}
END_TEST

/* Where the device lacks an instruction, or the wavefront is not 64
 * lanes, the launcher refuses; --exact and the router get no kind. */
START_TEST(mma_refused_where_absent)
{
	const struct ms_gpu_kern *k = ms_gsim_kern();
	struct ms_err err = {0};
	struct ms_gpu_gemv g = {.n = 0};
	struct ms_gpu_ctx c = {.wave = 64, .mma = MS_GPU_MMA_BF16, .err = &err};
	ck_assert_int_eq(k->mma(&c, &g, MS_GPU_MM_FP8), -ENOTSUP);
	ck_assert_int_eq(k->mma(&c, &g, MS_GPU_MM_F4F8), -ENOTSUP);
	c.wave = 32;
	ck_assert_int_eq(k->mma(&c, &g, MS_GPU_MM_BF16), -ENOTSUP);
	ck_assert_uint_eq(ms_gpu_mma_of_arch("gfx942:sramecc+:xnack-"),
			  MS_GPU_MMA_BF16 | MS_GPU_MMA_FP8_FNUZ);
	ck_assert_uint_eq(ms_gpu_mma_of_arch("gfx9420"), 0);
	ck_assert_uint_eq(ms_gpu_mma_of_arch("sm_90"), 0);
	ms_gpu_sim_set_arch("gfx950");
	struct ms_backend *be = open_be("rocm-sim", 64); /* exact */
	struct mat_buf mb = make_mat(MS_WFMT_MXFP4, 32, 64);
	struct lin_case lc;
	lin_init(&lc, mb, MS_ACTQ_FP8_DYNAMIC, 0);
	char why[256];
	ck_assert_int_eq(be->ops->bind(be, &lc.l, MS_BIND_FULL, why, sizeof(why), &err), 0);
	ck_assert_int_eq(((const struct ms_rocm_mat *)lc.l.bound)->mma, MS_GPU_MM_NONE);
	ms_linear_unbind(&lc.l);
	ms_backend_close(be);
	open_inexact = true;
	be = open_be("rocm-sim", 64);
	open_inexact = false;
	lc.l.w.exact_acts = true;
	ck_assert_int_eq(be->ops->bind(be, &lc.l, MS_BIND_FULL, why, sizeof(why), &err), 0);
	ck_assert_int_eq(((const struct ms_rocm_mat *)lc.l.bound)->mma, MS_GPU_MM_NONE);
	ms_linear_unbind(&lc.l);
	lc.l.w.exact_acts = false;
	ck_assert_int_eq(be->ops->bind(be, &lc.l, MS_BIND_FULL, why, sizeof(why), &err), 0);
	ck_assert_int_eq(((const struct ms_rocm_mat *)lc.l.bound)->mma, MS_GPU_MM_F4F8);
	ck_assert_msg(strstr(why, "mfma-f8f6f4"), "%s", why);
	ms_linear_unbind(&lc.l);
	lin_free(&lc);
	ms_backend_close(be);
	ms_gpu_sim_set_arch(NULL);
}
END_TEST

/* ---- a step: KV pools and sequences on two backends ---- */

#define N_SEQ 2
struct kv_world {
	struct ms_backend *be;
	struct ms_kv_pool pool;
	struct ms_kv_seq seq[N_SEQ];
	struct ms_kv_seq *seqs[N_SEQ];
};

static void world_init_kv(struct kv_world *w, struct ms_backend *be, int layers, int64_t kvd,
			  int64_t head_dim, enum ms_kv_dtype dt, const int64_t *lens)
{
	struct ms_err err = {0};
	w->be = be;
	ck_assert_int_eq(ms_kv_pool_init(&w->pool, be, 256, MS_KV_PAGE_TOKENS, kvd, head_dim, dt,
					 &err), 0);
	for (int s = 0; s < N_SEQ; s++) {
		ck_assert_int_eq(ms_kv_seq_init(&w->seq[s], layers, 4096, MS_KV_PAGE_TOKENS, &err), 0);
		ck_assert_int_eq(ms_kv_seq_reserve(&w->seq[s], &w->pool, lens[s]), 0);
		w->seq[s].len = lens[s];
		w->seqs[s] = &w->seq[s];
	}
}

static void world_init(struct kv_world *w, struct ms_backend *be, int layers, int64_t kvd,
		       const int64_t *lens)
{
	world_init_kv(w, be, layers, kvd, kvd, MS_KV_F32, lens);
}

static void world_free(struct kv_world *w)
{
	for (int s = 0; s < N_SEQ; s++)
		ms_kv_seq_free(&w->seq[s], &w->pool);
	ms_kv_pool_free(&w->pool);
}

static void world_step(struct kv_world *w, struct ms_step *st, int64_t n, const int32_t *tok,
		       const int64_t *pos, const int32_t *seq)
{
	struct ms_err err = {0};
	*st = (struct ms_step){.n = n, .tokens = tok, .pos = pos, .seq = seq, .kv = w->seqs,
			       .pool = &w->pool};
	ck_assert_msg(w->be->ops->step_begin(w->be, st, &err) == 0, "%s", err.msg);
}

/* ---- experts ---- */

struct moe_case {
	int64_t E, H, I, k;
	struct lin_case *gu, *dn;
	const struct ms_linear **gup, **dnp;
	struct ms_moe_w w;
};

static void moe_init(struct moe_case *m, enum ms_wfmt fmt, enum ms_actq_kind act)
{
	int64_t E = m->E;
	m->gu = calloc((size_t)E, sizeof(*m->gu));
	m->dn = calloc((size_t)E, sizeof(*m->dn));
	m->gup = calloc((size_t)E, sizeof(*m->gup));
	m->dnp = calloc((size_t)E, sizeof(*m->dnp));
	for (int64_t e = 0; e < E; e++) {
		struct mat_buf a = fmt == MS_WFMT_INTQ ? make_intq(4, 2 * m->I, m->H, 32, e % 2)
						       : make_mat(fmt, 2 * m->I, m->H);
		struct mat_buf b = fmt == MS_WFMT_INTQ ? make_intq(4, m->H, m->I, 16, false)
						       : make_mat(fmt, m->H, m->I);
		/* each expert its own input scale, as Quark's W4A8 */
		lin_init(&m->gu[e], a, act, 0.003f * (float)(e + 1));
		lin_init(&m->dn[e], b, act, 0.01f / (float)(e + 1));
		m->gup[e] = &m->gu[e].l;
		m->dnp[e] = &m->dn[e].l;
	}
	m->w = (struct ms_moe_w){E, m->H, m->I, m->gup, m->dnp};
}

static void moe_bind(struct ms_backend *be, struct moe_case *m)
{
	struct ms_err err = {0};
	char why[256];
	for (int64_t e = 0; e < m->E; e++) {
		ck_assert_msg(be->ops->bind(be, &m->gu[e].l, MS_BIND_FULL, why, 256, &err) == 0, "%s",
			      err.msg);
		ck_assert_msg(be->ops->bind(be, &m->dn[e].l, MS_BIND_FULL, why, 256, &err) == 0, "%s",
			      err.msg);
	}
}

static void moe_unbind(struct moe_case *m)
{
	for (int64_t e = 0; e < m->E; e++) {
		ms_linear_unbind(&m->gu[e].l);
		ms_linear_unbind(&m->dn[e].l);
	}
}

static void moe_free(struct moe_case *m)
{
	for (int64_t e = 0; e < m->E; e++) {
		lin_free(&m->gu[e]);
		lin_free(&m->dn[e]);
	}
	free(m->gu), free(m->dn), free(m->gup), free(m->dnp);
}

/* x + moe(h) for the n tokens on be: the result on the host. */
static float *moe_run(struct kv_world *w, struct moe_case *m, const float *logits, const float *h,
		      const float *x, int64_t n)
{
	struct ms_backend *be = w->be;
	int32_t tok[32] = {0}, seq[32] = {0};
	int64_t pos[32];
	ck_assert_int_le(n, 32);
	for (int64_t t = 0; t < n; t++)
		pos[t] = t;
	struct ms_step st;
	world_step(w, &st, n, tok, pos, seq);
	float *dl = up(be, logits, n * m->E), *dh = up(be, h, n * m->H), *dx = up(be, x, n * m->H);
	struct ms_moe_desc d = {.w = &m->w, .act = {7.0f, 1.702f}, .top_k = m->k,
				.router_logits = dl, .h = dh, .x = dx};
	struct ms_err err = {0};
	ck_assert_msg(be->ops->moe(be, &d, &err) == 0, "%s", err.msg);
	float *out = down(be, dx, n * m->H);
	be->ops->buf_free(be, dl), be->ops->buf_free(be, dh), be->ops->buf_free(be, dx);
	return out;
}

static void check_moe(int wave, enum ms_wfmt fmt, enum ms_actq_kind act)
{
	struct moe_case m = {.E = 6, .H = 80, .I = 48, .k = 2};
	moe_init(&m, fmt, act);
	/* 24 tokens: 8 inputs per expert, the batch that takes gemm (rocm-ops.c) */
	const int64_t n = 24, lens[N_SEQ] = {24, 1};
	float *logits = rand_vec(n * m.E, 2.0f), *h = rand_vec(n * m.H, 1.0f);
	float *x = rand_vec(n * m.H, 1.0f);
	for (int64_t t = 0; t < n; t++) {
		logits[t * m.E + 5] = -50.0f;  /* expert 5: no tokens at all */
		if (t % 4 == 1)                /* ties go to the lower index */
			logits[t * m.E + 2] = logits[t * m.E + 3] = 9.0f;
	}
	struct kv_world wc, wr;
	world_init(&wc, open_be("cpu", 64), 1, 8, lens);
	world_init(&wr, open_be(dev_name(), wave), 1, 8, lens);
	moe_bind(wc.be, &m);
	struct moe_case mr = m; /* the same matrices, bound to the device */
	float *want[3];
	int64_t ns[3] = {1, 4, 9};
	for (int i = 0; i < 3; i++)
		want[i] = moe_run(&wc, &m, logits, h, x, ns[i]);
	float *wantn = moe_run(&wc, &m, logits, h, x, n);
	moe_unbind(&m);
	moe_bind(wr.be, &mr);
	for (int i = 0; i < 3; i++) {
		float *got = moe_run(&wr, &mr, logits, h, x, ns[i]);
		for (int64_t j = 0; j < ns[i] * m.H; j++)
			ck_assert_msg(fabsf(got[j] - want[i][j]) <= 1e-4f * (1.0f + fabsf(want[i][j])),
				      "%s/%s wave %d n=%lld [%lld]: %.9g vs cpu %.9g", ms_wfmt_name(fmt),
				      ms_actq_name(act), wave, (long long)ns[i], (long long)j, got[j],
				      want[i][j]);
		free(got), free(want[i]);
	}
	/* batch invariance: token 3 of 24 (gemm) is token 0 of 1 (gemv) */
	float *gn = moe_run(&wr, &mr, logits, h, x, n);
	float *g1 = moe_run(&wr, &mr, logits + 3 * m.E, h + 3 * m.H, x + 3 * m.H, 1);
	ck_assert_mem_eq(gn + 3 * m.H, g1, (size_t)m.H * sizeof(float));
	for (int64_t j = 0; j < n * m.H; j++)
		ck_assert(fabsf(gn[j] - wantn[j]) <= 1e-4f * (1.0f + fabsf(wantn[j])));
	free(gn), free(g1), free(wantn);
	moe_unbind(&mr);
	world_free(&wc), world_free(&wr);
	ms_backend_close(wc.be), ms_backend_close(wr.be);
	free(logits), free(h), free(x);
	moe_free(&m);
}

START_TEST(moe_matches_cpu)
{
	check_moe(wave_of(_i), MS_WFMT_MXFP4, MS_ACTQ_FP8_STATIC);  /* Quark W4A8 */
	check_moe(wave_of(_i), MS_WFMT_MXFP4, MS_ACTQ_NONE);        /* native MXFP4 */
	check_moe(wave_of(_i), MS_WFMT_INTQ, MS_ACTQ_NONE);         /* GPTQ / AWQ */
	check_moe(wave_of(_i), MS_WFMT_BF16, MS_ACTQ_MXFP4_DYNAMIC); /* W4A4-style input */
}
END_TEST

/* ---- attention ---- */

struct attn_shape {
	int64_t heads, kv_heads, d, window;
	bool sinks;
};

/* Fill both worlds' KV for every position of both sequences (one step per
 * sequence), then attend for the query tokens; the results on the host. */
static float *attn_run(struct kv_world *w, const struct attn_shape *a, const float *kv_k,
		       const float *kv_v, const int64_t *lens, const float *q, int64_t nq,
		       const int64_t *qpos, const int32_t *qseq, const float *sinks)
{
	struct ms_backend *be = w->be;
	int64_t kvd = a->kv_heads * a->d, qd = a->heads * a->d;
	struct ms_step st;
	const float *kk = kv_k, *vv = kv_v;
	for (int s = 0; s < N_SEQ; s++) {
		int64_t L = lens[s];
		int32_t *tok = calloc((size_t)L, 4), *sq = malloc((size_t)L * 4);
		int64_t *pos = malloc((size_t)L * 8);
		for (int64_t t = 0; t < L; t++)
			pos[t] = t, sq[t] = s;
		world_step(w, &st, L, tok, pos, sq);
		float *dk = up(be, kk, L * kvd), *dv = up(be, vv, L * kvd);
		be->ops->kv_write(be, 0, dk, dv);
		be->ops->buf_free(be, dk), be->ops->buf_free(be, dv);
		kk += L * kvd, vv += L * kvd;
		free(tok), free(sq), free(pos);
	}
	int32_t tok[16] = {0};
	world_step(w, &st, nq, tok, qpos, qseq);
	float *dq = up(be, q, nq * qd), *dout = be->ops->buf_alloc(be, (size_t)(nq * qd) * 4);
	float *dsink = sinks ? up(be, sinks, a->heads) : NULL;
	struct ms_attn_desc ad = {.layer = 0, .n_heads = a->heads, .n_kv_heads = a->kv_heads,
				  .head_dim = a->d, .window = a->window, .sinks = dsink, .q = dq,
				  .out = dout};
	struct ms_err err = {0};
	ck_assert_msg(be->ops->attention(be, &ad, &err) == 0, "%s", err.msg);
	float *out = down(be, dout, nq * qd);
	be->ops->buf_free(be, dq), be->ops->buf_free(be, dout);
	if (dsink)
		be->ops->buf_free(be, dsink);
	return out;
}

/* The device's pages hold the bytes the host's ms_kv_put stores (fp8: codes
 * and scales), page for page: both pools hand out pages in one order. */
static void check_kv_bytes(const struct kv_world *wc, const struct kv_world *wr,
			   const int64_t *lens)
{
	const struct ms_kv_pool *pc = &wc->pool, *pr = &wr->pool;
	int64_t words = pc->page_stride / 4;
	for (int s = 0; s < N_SEQ; s++)
		for (int64_t b = 0; b * pc->page_tokens < lens[s]; b++) {
			int32_t page = wc->seq[s].pages[0][b];
			ck_assert_int_eq(page, wr->seq[s].pages[0][b]);
			int64_t used = (lens[s] - b * pc->page_tokens < pc->page_tokens
						? lens[s] - b * pc->page_tokens : pc->page_tokens);
			float *gk = down(wr->be, ms_kv_k(pr, page, 0), words);
			float *gv = down(wr->be, ms_kv_v(pr, page, 0), words);
			for (int64_t slot = 0; slot < used; slot++) {
				ck_assert_mem_eq((char *)gk + slot * pc->kv_dim * (int64_t)pc->esize,
						 ms_kv_k(pc, page, slot), (size_t)pc->kv_dim * pc->esize);
				ck_assert_mem_eq((char *)gv + slot * pc->kv_dim * (int64_t)pc->esize,
						 ms_kv_v(pc, page, slot), (size_t)pc->kv_dim * pc->esize);
				if (pc->dtype == MS_KV_FP8) {
					int64_t nkv = pc->kv_dim / pc->head_dim;
					ck_assert_mem_eq((uint8_t *)gk + (ms_kv_ks(pc, page, slot) -
									  (uint8_t *)ms_kv_k(pc, page, 0)),
							 ms_kv_ks(pc, page, slot), (size_t)nkv);
					ck_assert_mem_eq((uint8_t *)gv + (ms_kv_vs(pc, page, slot) -
									  (uint8_t *)ms_kv_v(pc, page, 0)),
							 ms_kv_vs(pc, page, slot), (size_t)nkv);
				}
			}
			free(gk), free(gv);
		}
}

static void check_attention(int wave, const struct attn_shape *a, enum ms_kv_dtype dt)
{
	const int64_t lens[N_SEQ] = {600, 40};
	int64_t kvd = a->kv_heads * a->d, qd = a->heads * a->d, nq = 6;
	float *kk = rand_vec((lens[0] + lens[1]) * kvd, 1.0f);
	float *vv = rand_vec((lens[0] + lens[1]) * kvd, 1.0f);
	for (int64_t i = 0; i < (lens[0] + lens[1]) * kvd; i += 7) /* heads of other scales */
		kk[i] *= 8.0f, vv[i] *= 0.01f;
	float *q = rand_vec(16 * qd, 1.0f), *sinks = rand_vec(a->heads, 2.0f);
	const int64_t qpos[6] = {0, 255, 256, 599, 17, 39};
	const int32_t qseq[6] = {0, 0, 0, 0, 1, 1};
	struct kv_world wc, wr;
	world_init_kv(&wc, open_be("cpu", 64), 1, kvd, a->d, dt, lens);
	world_init_kv(&wr, open_be(dev_name(), wave), 1, kvd, a->d, dt, lens);
	float *want = attn_run(&wc, a, kk, vv, lens, q, nq, qpos, qseq, a->sinks ? sinks : NULL);
	float *got = attn_run(&wr, a, kk, vv, lens, q, nq, qpos, qseq, a->sinks ? sinks : NULL);
	check_kv_bytes(&wc, &wr, lens);
	for (int64_t i = 0; i < nq * qd; i++)
		ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-4f * (1.0f + fabsf(want[i])),
			      "wave %d kv %s heads %lld/%lld d %lld window %lld: [%lld] %.9g vs cpu "
			      "%.9g", wave, ms_kv_dtype_name(dt), (long long)a->heads,
			      (long long)a->kv_heads, (long long)a->d, (long long)a->window,
			      (long long)i, got[i], want[i]);
	/* batch invariance: the query at 599 alone */
	float *one = attn_run(&wr, a, kk, vv, lens, q + 3 * qd, 1, qpos + 3, qseq + 3,
			      a->sinks ? sinks : NULL);
	ck_assert_mem_eq(one, got + 3 * qd, (size_t)qd * sizeof(float));
	free(one), free(want), free(got), free(kk), free(vv), free(q), free(sinks);
	world_free(&wc), world_free(&wr);
	ms_backend_close(wc.be), ms_backend_close(wr.be);
}

START_TEST(attention_matches_cpu)
{
	static const struct attn_shape shapes[] = {
		{6, 2, 20, 0, true},    /* GQA, ragged head_dim, three splits */
		{4, 4, 64, 128, true},  /* sliding window */
		{3, 1, 10, 0, false},   /* no sinks */
	};
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		for (int dt = MS_KV_F32; dt <= MS_KV_FP8; dt++)
			check_attention(wave_of(_i), &shapes[i], (enum ms_kv_dtype)dt);
}
END_TEST

/* ---- the device itself ---- */

/* The copy kernel's bandwidth (bench's ceiling): a figure, and a refusal
 * of a size the 16-byte kernel cannot copy. */
START_TEST(copy_bandwidth_measures)
{
	struct ms_backend *be = open_be(dev_name(), 64);
	struct ms_err err = {0};
	ck_assert_ptr_nonnull(be->ops->copy_bandwidth);
	double bw = be->ops->copy_bandwidth(be, on_gpu() ? (size_t)256 << 20 : (size_t)1 << 20, &err);
	ck_assert_msg(bw > 0, "%s", err.msg);
	/* a GPU's HBM moves hundreds of GB/s at least; the model, memcpy's rate */
	ck_assert_msg(!on_gpu() || bw > 1e11, "%s: copy bandwidth %.3g B/s", be->device, bw);
	printf("test-rocm: %s (%s): copy bandwidth %.2f GB/s\n", be->device, be->kernels, bw / 1e9);
	ck_assert_double_eq(be->ops->copy_bandwidth(be, 8, &err), 0);
	ck_assert_int_eq(err.code, -EINVAL);
	ms_backend_close(be);
}
END_TEST

/* On a lent machine the GPU must be there: a run that silently fell back
 * to skipping would pass for a device test. */
START_TEST(rocm_device_opens)
{
	struct ms_backend_opts o = {.backend = dev_name(), .threads = 1, .exact = true};
	struct ms_backend *be = NULL;
	struct ms_err err = {0};
	ck_assert_msg(ms_backend_open(&o, &be, &err) == 0, "%s: %s", dev_name(), err.msg);
	ck_assert_ptr_nonnull(be->device);
	printf("test-rocm: device \"%s\", kernels %s\n", be->device, be->kernels);
	ms_backend_close(be);
}
END_TEST

START_TEST(rocm_without_device_says_so)
{
	struct ms_backend_opts o = {.backend = "rocm", .threads = 1};
	struct ms_backend *be = NULL;
	struct ms_err err = {0};
	int rc = ms_backend_open(&o, &be, &err);
	if (rc == 0) { /* a machine with a GPU (the lent one): nothing to check here */
		ms_backend_close(be);
		return;
	}
	ck_assert_int_eq(rc, -ENODEV);
	ck_assert_ptr_nonnull(strstr(err.msg, "no ROCm/HIP device"));
	ck_assert_ptr_null(be);
	o.backend = "rocm-sim";
	o.dense = MS_DENSE_INT8;
	ck_assert_int_eq(ms_backend_open(&o, &be, &err), -ENOTSUP);
	ck_assert_ptr_nonnull(strstr(err.msg, "--dense int8"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rocm");
	TCase *tc = tcase_create(dev_name());
	tcase_set_timeout(tc, 600);
	/* the model at both widths; a GPU once, at its own */
	int widths = on_gpu() ? 1 : 2;
	if (on_gpu() && strcmp(dev_name(), "rocm")) {
		fprintf(stderr, "test-rocm: MOESERVE_TEST_BACKEND=%s: rocm or rocm-sim\n", dev_name());
		return 1;
	}
	tcase_add_test(tc, formats_bit_exact);
	tcase_add_test(tc, on_gpu() ? rocm_device_opens : rocm_without_device_says_so);
	tcase_add_test(tc, copy_bandwidth_measures);
	tcase_add_loop_test(tc, linear_every_format, 0, widths);
	/* the two kernels side by side on the model, whatever the device */
	tcase_add_loop_test(tc, gemm_matches_gemv_and_cpu, 0, 2);
	if (!on_gpu()) {
		tcase_add_loop_test(tc, mma_matches_cpu, 0, 3);
		tcase_add_test(tc, mma_refused_where_absent);
	}
	tcase_add_loop_test(tc, moe_matches_cpu, 0, widths);
	tcase_add_loop_test(tc, attention_matches_cpu, 0, widths);
	suite_add_tcase(s, tc);
	return ms_check_run(s);
}
