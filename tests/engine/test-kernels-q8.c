/*
 * test-kernels-q8.c: the int8-activation ("q8 panel") kernels of
 * engine/cpu/kernels-q8.h, and the fp32 AVX-512 INTQ / FP8 kernels.
 *
 * All on random non-zero data of ragged shapes:
 *  - the AVX-512 VNNI gemmq, its VBMI build and the AVX2 one, and the
 *    AVX-512 prep, equal the portable scalar ones bit for bit (every format
 *    and code width, act-order, both activation rules);
 *  - the scalar gemmq stays within the int8 rounding bound of the fp32
 *    reference kernel, and is exact up to fp32 summation on activations
 *    that were MXFP4-quantized (power-of-two rule);
 *  - the packer declines what the format cannot hold, with a reason;
 *  - a token's result does not depend on the others in its call;
 *  - the backend picks the q8 kernel with auto, the fp32 one with exact, and
 *    its threaded gemm is independent of the thread count;
 *  - the fp32 AVX-512 INTQ and FP8 kernels against double.
 * What needs an ISA runs as `--isa NAME`, a meson test each (exit 77 where
 * the CPU lacks it): avx512vnni, avx512vbmi, avx2 (the gemmq builds),
 * avx512 (the fp32 kernels).
 *
 * `test-kernels-q8 --bench` instead measures GB/s and GOP/s (not a test).
 */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actq.h"
#include "cpu.h"
#include "isagate.h"
#include "kernels-q8.h"
#include "kernels.h"
#include "ms-clock.h"

#define TESTUTIL_SEED 2024u
#include "testutil.h"

#define VNNI_FLAGS (MS_CPU_AVX512F | MS_CPU_AVX512BW | MS_CPU_AVX512VL | MS_CPU_AVX512VNNI | \
		    MS_CPU_FMA | MS_CPU_F16C)
#define AVX512_FLAGS (MS_CPU_AVX512F | MS_CPU_AVX512BW | MS_CPU_AVX512VL | MS_CPU_FMA | MS_CPU_F16C)
#define AVX2_FLAGS (MS_CPU_AVX2 | MS_CPU_FMA | MS_CPU_F16C)

typedef void (*gemmq_fn)(const struct ms_wmat *, int64_t, int64_t, const void *, int64_t, float *,
			 int64_t);
typedef void (*prep_fn)(const struct ms_wmat *, const float *, int64_t, int64_t, void *);

/* The ISA gemmq builds, a test each, with the prep whose activations they
 * read (the backend's pairing): a loop test's _i is a row. */
enum { Q8_VNNI, Q8_VBMI, Q8_AVX2 };
static const struct {
	const char *name;
	gemmq_fn gemmq;
	prep_fn prep;
} q8_isas[] = {
	[Q8_VNNI] = {"avx512vnni", ms_q8_gemmq_avx512vnni, ms_q8_prep_avx512},
	[Q8_VBMI] = {"avx512vbmi", ms_q8_gemmq_avx512vbmi, ms_q8_prep_avx512},
	[Q8_AVX2] = {"avx2", ms_q8_gemmq_avx2, ms_q8_prep},
};

/* ---- test matrices ---- */

struct tmat {
	struct ms_wmat m;
	uint8_t *w, *sc;
	float *fs, *fz;
	int32_t *gidx;
	const int32_t **rows_g;
	void *pack;
};

static void tmat_free(struct tmat *t)
{
	free(t->w), free(t->sc), free(t->fs), free(t->fz), free(t->gidx), free(t->rows_g);
	free(t->pack);
	memset(t, 0, sizeof(*t));
}

/* MXFP4 with random codes and E8M0 scales in [emin, emax]. */
static struct tmat make_mxfp4(int64_t rows, int64_t cols, int emin, int emax)
{
	struct tmat t = {0};
	int64_t g = (cols + 31) / 32;
	t.w = calloc((size_t)(rows * g * 16), 1);
	t.sc = malloc((size_t)(rows * g));
	for (int64_t r = 0; r < rows; r++)
		for (int64_t k = 0; k < cols; k++) {
			uint8_t code = (uint8_t)(rnd() & 15);
			t.w[r * g * 16 + k / 2] |= (k & 1) ? (uint8_t)(code << 4) : code;
		}
	for (int64_t i = 0; i < rows * g; i++)
		t.sc[i] = (uint8_t)(emin + (int)(rnd() % (uint32_t)(emax - emin + 1)));
	t.m = (struct ms_wmat){.fmt = MS_WFMT_MXFP4, .rows = rows, .cols = cols, .w = t.w,
			       .row_bytes = (size_t)g * 16, .scales = t.sc,
			       .scale_row_bytes = (size_t)g};
	return t;
}

/* An fp16-exact scale: normal fp16 in [2^-8, 2^-1), one in eight negative. */
static float f16_scale(void)
{
	uint16_t h = (uint16_t)(((7 + rnd() % 7) << 10) | (rnd() & 0x3FF));
	if (rnd() % 8 == 0)
		h |= 0x8000;
	return ms_f16_to_f32(h);
}

enum zmode { ZSYM, ZASYM };

/* INTQ of `bits` with group gs; act-order: columns assigned to groups in a
 * random order, gs per group, one g_idx shared by every row. */
static struct tmat make_intq(int bits, int64_t rows, int64_t cols, int64_t gs, enum zmode zm,
			     bool actorder)
{
	struct tmat t = {0};
	int sb = ms_intq_storage_bits(bits);
	size_t rb = (size_t)((cols * sb + 7) / 8);
	int64_t G = (cols + gs - 1) / gs;
	t.w = calloc((size_t)rows * rb, 1);
	t.fs = malloc((size_t)(rows * G) * sizeof(float));
	t.fz = malloc((size_t)(rows * G) * sizeof(float));
	for (int64_t r = 0; r < rows; r++)
		for (int64_t k = 0; k < cols; k++) {
			uint32_t q = rnd() & ((1u << bits) - 1);
			int64_t bit = k * sb;
			t.w[(size_t)r * rb + (size_t)(bit / 8)] |= (uint8_t)(q << (bit % 8));
		}
	for (int64_t i = 0; i < rows * G; i++) {
		t.fs[i] = f16_scale();
		t.fz[i] = zm == ZSYM ? (float)(1u << (bits - 1)) : (float)(rnd() % (1u << bits));
	}
	if (actorder) {
		int32_t *order = malloc((size_t)cols * sizeof(int32_t));
		t.gidx = malloc((size_t)cols * sizeof(int32_t));
		for (int64_t k = 0; k < cols; k++)
			order[k] = (int32_t)k;
		for (int64_t k = cols - 1; k > 0; k--) {
			int64_t j = rnd() % (uint32_t)(k + 1);
			int32_t tmp = order[k];
			order[k] = order[j];
			order[j] = tmp;
		}
		for (int64_t p = 0; p < cols; p++)
			t.gidx[order[p]] = (int32_t)(p / gs);
		free(order);
		t.rows_g = malloc((size_t)rows * sizeof(*t.rows_g));
		for (int64_t r = 0; r < rows; r++)
			t.rows_g[r] = t.gidx;
	}
	t.m = (struct ms_wmat){.fmt = MS_WFMT_INTQ, .rows = rows, .cols = cols, .w = t.w,
			       .row_bytes = rb, .bits = bits, .group_size = gs, .n_groups = G,
			       .fscale = t.fs, .fzero = t.fz,
			       .row_g_idx = (const int32_t *const *)t.rows_g};
	return t;
}

/* The matrix kinds the bitwise and bound tests run. */
struct mcfg {
	const char *name;
	enum ms_wfmt fmt;
	int bits;
	int64_t gs;     /* INTQ group (0: >= cols) */
	enum zmode zm;
	bool actorder;
};

static const struct mcfg cfgs[] = {
	{"mxfp4", MS_WFMT_MXFP4, 4, 0, 0, false},
	{"int4-sym-g32", MS_WFMT_INTQ, 4, 32, ZSYM, false},
	{"int4-asym-g128", MS_WFMT_INTQ, 4, 128, ZASYM, false},
	{"int4-asym-gK", MS_WFMT_INTQ, 4, 0, ZASYM, false},
	{"int4-actorder-g32", MS_WFMT_INTQ, 4, 32, ZASYM, true},
	{"int4-actorder-g128", MS_WFMT_INTQ, 4, 128, ZSYM, true},
	{"int3-asym-g64", MS_WFMT_INTQ, 3, 64, ZASYM, false},
	{"int2-asym-g32", MS_WFMT_INTQ, 2, 32, ZASYM, false},
	{"int8-asym-g128", MS_WFMT_INTQ, 8, 128, ZASYM, false},
	{"int8-sym-g32-actorder", MS_WFMT_INTQ, 8, 32, ZSYM, true},
};
#define N_CFGS (sizeof(cfgs) / sizeof(cfgs[0]))

static struct tmat make_cfg(const struct mcfg *c, int64_t rows, int64_t cols)
{
	if (c->fmt == MS_WFMT_MXFP4)
		return make_mxfp4(rows, cols, 118, 136);
	int64_t gs = c->gs ? c->gs : (cols + 31) / 32 * 32 + 64; /* one group, >= cols */
	return make_intq(c->bits, rows, cols, gs, c->zm, c->actorder);
}

static void pack_ok(struct tmat *t)
{
	struct ms_err e = {0};
	int rc = ms_q8_pack(&t->m, &t->pack, &e);
	ck_assert_msg(rc == 0, "pack: %s", e.msg);
	ck_assert_ptr_eq(t->m.pack, t->pack);
}

/* Activations: random, block magnitudes varying over 2^-6 .. 2^5. */
static float *make_x(int64_t n, int64_t cols)
{
	float *x = malloc((size_t)(n * cols) * sizeof(float));
	for (int64_t t = 0; t < n; t++)
		for (int64_t k = 0; k < cols; k += 32) {
			float m = ldexpf(1.0f, (int)(rnd() % 12) - 6);
			for (int64_t j = k; j < k + 32 && j < cols; j++)
				x[t * cols + j] = m * frand();
		}
	return x;
}

static void *prep_ref(const struct ms_wmat *w, const float *x, int64_t n)
{
	void *xq = malloc(ms_q8_prep_size(w, n));
	ms_q8_prep(w, x, w->cols, n, xq);
	return xq;
}

static bool same_bits(float a, float b)
{
	return !memcmp(&a, &b, sizeof(float)) || (isnan(a) && isnan(b));
}

static const int64_t rows_list[] = {1, 15, 17, 33, 100};
static const int64_t cols_list[] = {32, 40, 64, 100, 2880};
static const int64_t n_list[] = {1, 2, 3, 5, 8, 9, 17};

/* ---- (1) the ISA builds == scalar, bit for bit ---- */

/* Activations for build `isa`, from its prep: an AVX-512 one equals the
 * portable prep xr bit for bit. */
static void *prep_isa(int isa, const struct ms_wmat *w, const float *x, int64_t n, const void *xr,
		      const char *what)
{
	size_t ps = ms_q8_prep_size(w, n);
	void *xa = malloc(ps);
	q8_isas[isa].prep(w, x, w->cols, n, xa);
	if (q8_isas[isa].prep != ms_q8_prep)
		ck_assert_msg(!memcmp(xr, xa, ps), "%s: AVX-512 prep differs from the portable one", what);
	return xa;
}

/* gemmq over [0, rows) by the scalar kernel against build `isa` run in two
 * row pieces, into y with ldy = rows + 3 and sentinels around. */
static void check_bitwise(struct tmat *t, int64_t n, const char *what, int isa)
{
	const struct ms_wmat *w = &t->m;
	int64_t rows = w->rows, ldy = rows + 3;
	float *x = make_x(n, w->cols);
	void *xr = prep_ref(w, x, n), *xa = prep_isa(isa, w, x, n, xr, what);
	float *yr = malloc((size_t)(n * ldy) * sizeof(float));
	float *ya = malloc((size_t)(n * ldy) * sizeof(float));
	for (int64_t i = 0; i < n * ldy; i++)
		yr[i] = ya[i] = 1e30f;
	ms_q8_gemmq_ref(w, 0, rows, xr, n, yr, ldy);
	int64_t split = rows > 32 ? (rows / 16 / 2) * 16 : 0;
	gemmq_fn g = q8_isas[isa].gemmq;
	if (split)
		g(w, 0, split, xa, n, ya, ldy);
	g(w, split, rows, xa, n, ya, ldy);
	for (int64_t tt = 0; tt < n; tt++)
		for (int64_t r = 0; r < ldy; r++) {
			float a = yr[tt * ldy + r], b = ya[tt * ldy + r];
			if (r >= rows) {
				ck_assert_msg(a == 1e30f && b == 1e30f, "%s: wrote past the rows", what);
				continue;
			}
			ck_assert_msg(same_bits(a, b),
				      "%s %lldx%lld n=%lld: row %lld tok %lld: scalar %.9g %s %.9g",
				      what, (long long)rows, (long long)w->cols, (long long)n,
				      (long long)r, (long long)tt, a, q8_isas[isa].name, b);
		}
	free(x), free(xr), free(xa), free(yr), free(ya);
}

START_TEST(isa_matches_scalar_bitwise)
{
	int cases = 0;
	for (size_t c = 0; c < N_CFGS; c++)
		for (size_t ri = 0; ri < 5; ri++)
			for (size_t ci = 0; ci < 5; ci++) {
				struct tmat t = make_cfg(&cfgs[c], rows_list[ri], cols_list[ci]);
				pack_ok(&t);
				for (int act = 0; act < 2; act++) {
					ms_q8_set_act(t.pack, act ? MS_Q8_ACT_POW2 : MS_Q8_ACT_INT8);
					/* every n on a few shapes, one n (rotating) on the rest */
					for (size_t ni = 0; ni < 7; ni++) {
						if (!(ri == 4 || ci == 1) && ni != (ri + ci + (size_t)act) % 7)
							continue;
						char what[96];
						snprintf(what, sizeof(what), "%s act=%d", cfgs[c].name, act);
						check_bitwise(&t, n_list[ni], what, _i);
						cases++;
					}
				}
				tmat_free(&t);
			}
	/* larger batches: 31 and 70 tokens (groups of 4 and a remainder of 3
	 * or 2 over the same panels) on three formats */
	const size_t big[] = {0, 3, 8};
	for (size_t i = 0; i < 3; i++) {
		struct tmat t = make_cfg(&cfgs[big[i]], 40, 200);
		pack_ok(&t);
		check_bitwise(&t, 31, cfgs[big[i]].name, _i);
		check_bitwise(&t, 70, cfgs[big[i]].name, _i);
		tmat_free(&t);
	}
	{
		struct tmat t = make_intq(4, 20, 33000, 128, ZASYM, false);
		pack_ok(&t);
		check_bitwise(&t, 11, "int4 33000 columns", _i);
		tmat_free(&t);
	}
	/* extreme E8M0 scales: the subnormal 2^-128, 2^-127 and huge ones */
	for (size_t ni = 0; ni < 7; ni++) {
		struct tmat t = make_mxfp4(33, 100, 0, 3);
		for (int64_t i = 0; i < 33 * 4; i += 5)
			t.sc[i] = (uint8_t)(230 + rnd() % 26);
		pack_ok(&t);
		check_bitwise(&t, n_list[ni], "mxfp4 extreme scales", _i);
		tmat_free(&t);
	}
	/* blocks of zeros, tiny values and a NaN in the activations */
	{
		struct tmat t = make_intq(4, 17, 2880, 128, ZASYM, false);
		pack_ok(&t);
		int64_t K = 2880, n = 3;
		float *x = make_x(n, K);
		for (int64_t k = 0; k < 32; k++)
			x[k] = 0.0f, x[K + 64 + k] = 1e-30f * frand(), x[2 * K + 96 + k] = ldexpf(frand(), -95);
		x[2 * K + 200] = NAN;
		void *xr = prep_ref(&t.m, x, n), *xa = prep_isa(_i, &t.m, x, n, xr, "zeros, tiny, NaN");
		float ya[17 * 3], yr[17 * 3];
		ms_q8_gemmq_ref(&t.m, 0, 17, xr, n, yr, 17);
		q8_isas[_i].gemmq(&t.m, 0, 17, xa, n, ya, 17);
		for (int i = 0; i < 17 * 3; i++)
			ck_assert_msg(same_bits(ya[i], yr[i]), "%s: element %d", q8_isas[_i].name, i);
		for (int i = 0; i < 17; i++) {
			ck_assert(isfinite(ya[i]) && isfinite(ya[17 + i]));
			ck_assert(isnan(ya[34 + i])); /* a NaN input poisons its token */
		}
		free(x), free(xr), free(xa);
		tmat_free(&t);
	}
	printf("%s == scalar: %d cases bitwise equal\n", q8_isas[_i].name, cases);
}
END_TEST

/* ---- (2) scalar gemmq vs the fp32 reference: the int8 rounding bound ---- */

/* Bound on |q8 - ref| for token x and row w (fp32 row, natural order):
 *   sum over packed blocks b of amax_b / 254 (1 + 2^-13) * sum_{j in b} |w_j|
 * (each activation moves by at most half a step, the step is amax / 127 up
 * to fp32 rounding of the scale and of x * 127 / amax), plus fp32 summation
 * of both sides: the reference's 8-way dot over K/8 terms (+ the chunk
 * sums), the q8 kernel's K/32 block terms of 3 roundings each:
 *   (K/8 + K/32 + 16) 2^-24 * sum_j |w_j| (|x_j| + amax_b / 254). */
static double q8_bound(const struct ms_q8_pack *h, const float *wrow, const float *x, double *e_int8)
{
	int64_t K = h->cols;
	double e1 = 0, mag = 0;
	for (int64_t b = 0; b < h->n_blocks; b++) {
		double amax = 0, sw = 0;
		for (int64_t j = b * 32; j < b * 32 + 32 && j < K; j++) {
			int64_t k = h->perm ? h->perm[j] : j;
			amax = fmax(amax, fabs(x[k]));
		}
		double step = amax / 254.0 * (1.0 + ldexp(1, -13));
		for (int64_t j = b * 32; j < b * 32 + 32 && j < K; j++) {
			int64_t k = h->perm ? h->perm[j] : j;
			sw += fabs(wrow[k]);
			mag += fabs(wrow[k]) * (fabs(x[k]) + step);
		}
		e1 += step * sw;
	}
	double gamma = ((double)K / 8 + (double)K / 32 + 16) * ldexp(1, -24);
	*e_int8 = e1;
	return e1 + gamma * mag + 1e-30;
}

START_TEST(scalar_within_int8_bound_of_reference)
{
	double worst = 0;
	int cases = 0;
	for (size_t c = 0; c < N_CFGS; c++)
		for (size_t si = 0; si < 5; si++) {
			int64_t rows = rows_list[si], cols = cols_list[(si + c) % 5];
			int64_t n = n_list[(si + 2 * c) % 7];
			struct tmat t = make_cfg(&cfgs[c], rows, cols);
			float *x = make_x(n, cols);
			float *yf = malloc((size_t)(n * rows) * sizeof(float));
			float *yq = malloc((size_t)(n * rows) * sizeof(float));
			float *wrow = malloc((size_t)cols * sizeof(float));
			/* the reference first: packing does not change the rows */
			ms_kernels_ref[t.m.fmt].gemm(&t.m, 0, rows, x, cols, n, yf, rows);
			pack_ok(&t);
			for (int act = 0; act < 2; act++) {
				ms_q8_set_act(t.pack, act ? MS_Q8_ACT_POW2 : MS_Q8_ACT_INT8);
				void *xq = prep_ref(&t.m, x, n);
				ms_q8_gemmq_ref(&t.m, 0, rows, xq, n, yq, rows);
				for (int64_t r = 0; r < rows; r++) {
					ms_wmat_row_f32(&t.m, r, wrow);
					for (int64_t tt = 0; tt < n; tt++) {
						double e8;
						double bound = q8_bound(t.m.pack, wrow, x + tt * cols, &e8);
						double diff = fabs((double)yq[tt * rows + r] - yf[tt * rows + r]);
						ck_assert_msg(diff <= bound,
							      "%s %lldx%lld: row %lld tok %lld: q8 %.9g fp32 %.9g, |diff| %.3g > bound %.3g",
							      cfgs[c].name, (long long)rows, (long long)cols, (long long)r,
							      (long long)tt, yq[tt * rows + r], yf[tt * rows + r], diff, bound);
						worst = fmax(worst, diff / bound);
					}
				}
				free(xq);
				cases++;
			}
			free(x), free(yf), free(yq), free(wrow);
			tmat_free(&t);
		}
	printf("scalar q8 vs fp32 reference: %d cases, worst |diff| / bound = %.3f\n", cases, worst);
}
END_TEST

/* ---- (3) power-of-two rule on MXFP4-quantized activations: exact ---- */

static const struct mcfg *const pow2_use[] = {&cfgs[0], &cfgs[2], &cfgs[7], &cfgs[8]};
#define POW2_N 5 /* tokens */

/* Case (c, ci) of the pow2 tests: matrix kind pow2_use[c], not packed yet,
 * and its MXFP4-quantized activations x. */
static struct tmat pow2_case(size_t c, size_t ci, float **x)
{
	int64_t rows = rows_list[(ci + c) % 5], cols = cols_list[ci];
	struct tmat t = make_cfg(pow2_use[c], rows, cols);
	*x = make_x(POW2_N, cols);
	for (int64_t tt = 0; tt < POW2_N; tt++)
		for (int64_t k = 0; k < cols; k += 32)
			ms_actq_mxfp4_group(*x + tt * cols + k, cols - k < 32 ? cols - k : 32);
	return t;
}

START_TEST(pow2_exact_on_mxfp4_activations)
{
	double worst = 0;
	for (size_t c = 0; c < 4; c++)
		for (size_t ci = 0; ci < 5; ci++) {
			float *x;
			struct tmat t = pow2_case(c, ci, &x);
			int64_t rows = t.m.rows, cols = t.m.cols, n = POW2_N;
			float *yf = malloc((size_t)(n * rows) * sizeof(float));
			float *yq = malloc((size_t)(n * rows) * sizeof(float));
			float *wrow = malloc((size_t)cols * sizeof(float));
			ms_kernels_ref[t.m.fmt].gemm(&t.m, 0, rows, x, cols, n, yf, rows);
			pack_ok(&t); /* the packer's default rule is MS_Q8_ACT_POW2 */
			void *xq = prep_ref(&t.m, x, n);
			const struct ms_q8_pack *h = t.m.pack;
			for (int64_t tt = 0; tt < n; tt++)
				for (int64_t b = 0; b < h->n_blocks; b++) {
					float d = ms_q8_xq_d(xq, h->kp, tt)[b];
					int ex;
					ck_assert_msg(d == 0.0f || frexpf(d, &ex) == 0.5f,
						      "block %lld: step %g is not a power of two", (long long)b, d);
				}
			ms_q8_gemmq_ref(&t.m, 0, rows, xq, n, yq, rows);
			double gamma = ((double)cols / 8 + (double)cols / 32 + 16) * ldexp(1, -24);
			for (int64_t r = 0; r < rows; r++) {
				ms_wmat_row_f32(&t.m, r, wrow);
				for (int64_t tt = 0; tt < n; tt++) {
					double mag = 0;
					for (int64_t k = 0; k < cols; k++)
						mag += fabs((double)wrow[k] * x[tt * cols + k]);
					double diff = fabs((double)yq[tt * rows + r] - yf[tt * rows + r]);
					ck_assert_msg(diff <= gamma * mag + 1e-30,
						      "%s %lldx%lld: row %lld tok %lld: %.9g vs %.9g (fp32 bound %.3g)",
						      pow2_use[c]->name, (long long)rows, (long long)cols,
						      (long long)r, (long long)tt, yq[tt * rows + r], yf[tt * rows + r],
						      gamma * mag);
					worst = fmax(worst, diff / (gamma * mag + 1e-30));
				}
			}
			free(x), free(yf), free(yq), free(wrow), free(xq);
			tmat_free(&t);
		}
	printf("pow2 rule on MXFP4 activations: worst |diff| / fp32 summation bound = %.3f\n", worst);
}
END_TEST

/* An ISA build on the same cases: the portable gemmq's bits. */
START_TEST(pow2_isa_matches_portable)
{
	for (size_t c = 0; c < 4; c++)
		for (size_t ci = 0; ci < 5; ci++) {
			float *x;
			struct tmat t = pow2_case(c, ci, &x);
			int64_t rows = t.m.rows, n = POW2_N;
			pack_ok(&t);
			void *xq = prep_ref(&t.m, x, n);
			void *xa = prep_isa(_i, &t.m, x, n, xq, pow2_use[c]->name);
			float *yq = malloc((size_t)(n * rows) * sizeof(float));
			float *ya = malloc((size_t)(n * rows) * sizeof(float));
			ms_q8_gemmq_ref(&t.m, 0, rows, xq, n, yq, rows);
			q8_isas[_i].gemmq(&t.m, 0, rows, xa, n, ya, rows);
			ck_assert_msg(!memcmp(ya, yq, (size_t)(n * rows) * sizeof(float)),
				      "%s differs from the portable gemmq", q8_isas[_i].name);
			free(x), free(xq), free(xa), free(yq), free(ya);
			tmat_free(&t);
		}
}
END_TEST

/* ---- (4) what the packer declines ---- */

static void expect_decline(struct tmat *t, const char *needle)
{
	struct ms_err e = {0};
	void *owned = (void *)1;
	int rc = ms_q8_pack(&t->m, &owned, &e);
	ck_assert_int_eq(rc, -ENOTSUP);
	ck_assert_ptr_null(owned);
	ck_assert_ptr_null(t->m.pack);
	ck_assert_msg(strstr(e.msg, needle), "message \"%s\" lacks \"%s\"", e.msg, needle);
}

START_TEST(pack_declines)
{
	struct tmat t = make_intq(4, 20, 96, 32, ZASYM, false);
	t.fs[7] = 0.1f; /* not an fp16 value */
	expect_decline(&t, "fp16");
	tmat_free(&t);
	t = make_intq(4, 20, 96, 32, ZASYM, false);
	t.fz[3] = 2.5f;
	expect_decline(&t, "zero point");
	t.fz[3] = 16.0f; /* beyond a 4-bit code */
	expect_decline(&t, "zero point");
	t.fz[3] = -1.0f;
	expect_decline(&t, "zero point");
	tmat_free(&t);
	t = make_intq(8, 20, 96, 32, ZASYM, false);
	t.fz[5] = 256.0f;
	expect_decline(&t, "zero point");
	tmat_free(&t);
	t = make_intq(4, 20, 96, 48, ZASYM, false);
	expect_decline(&t, "group size 48");
	tmat_free(&t);
	/* two different act orders (a gate_up spliced from two halves) */
	t = make_intq(4, 20, 96, 32, ZASYM, true);
	int32_t *other = malloc(96 * sizeof(int32_t));
	for (int k = 0; k < 96; k++)
		other[k] = (int32_t)(k / 32);
	t.rows_g[11] = other;
	expect_decline(&t, "different g_idx");
	/* groups of the wrong size */
	for (int r = 0; r < 20; r++)
		t.rows_g[r] = other;
	other[0] = 1;
	expect_decline(&t, "act-order group");
	free(other);
	tmat_free(&t);
	/* other formats */
	struct ms_wmat f8 = {.fmt = MS_WFMT_FP8, .rows = 4, .cols = 32};
	struct ms_err e = {0};
	void *owned = NULL;
	ck_assert_int_eq(ms_q8_pack(&f8, &owned, &e), -ENOTSUP);
	ck_assert(strlen(e.msg) > 0);
	/* equal g_idx arrays at different addresses are one order */
	t = make_intq(4, 20, 96, 32, ZASYM, true);
	int32_t *copy = malloc(96 * sizeof(int32_t));
	memcpy(copy, t.gidx, 96 * sizeof(int32_t));
	t.rows_g[5] = copy;
	pack_ok(&t);
	ck_assert_ptr_nonnull(((const struct ms_q8_pack *)t.pack)->perm);
	free(copy);
	tmat_free(&t);
	/* natural-order g_idx needs no permutation */
	t = make_intq(4, 20, 96, 32, ZASYM, true);
	for (int k = 0; k < 96; k++)
		t.gidx[k] = k / 32;
	pack_ok(&t);
	ck_assert_ptr_null(((const struct ms_q8_pack *)t.pack)->perm);
	tmat_free(&t);
}
END_TEST

/* ---- (5) batch invariance ---- */

START_TEST(batch_invariance)
{
	const size_t use[] = {0, 2, 4, 7, 8};
	gemmq_fn g = q8_isas[_i].gemmq;
	prep_fn prep = q8_isas[_i].prep;
	for (size_t u = 0; u < 5; u++) {
		int64_t rows = 100, cols = 2880, n = 17;
		struct tmat t = make_cfg(&cfgs[use[u]], rows, cols);
		pack_ok(&t);
		float *x = make_x(n, cols);
		float *yall = malloc((size_t)(n * rows) * sizeof(float));
		float *ysub = malloc((size_t)(n * rows) * sizeof(float));
		void *xq = malloc(ms_q8_prep_size(&t.m, n));
		prep(&t.m, x, cols, n, xq);
		g(&t.m, 0, rows, xq, n, yall, rows);
		/* every token alone, then windows of 2, 3, 5, 8 and 9 tokens */
		const int64_t widths[] = {1, 2, 3, 5, 8, 9};
		for (size_t wi = 0; wi < 6; wi++) {
			int64_t wd = widths[wi];
			for (int64_t t0 = 0; t0 + wd <= n; t0 += wd > 4 ? 3 : wd) {
				void *xs = malloc(ms_q8_prep_size(&t.m, wd));
				prep(&t.m, x + t0 * cols, cols, wd, xs);
				g(&t.m, 0, rows, xs, wd, ysub, rows);
				ck_assert_msg(!memcmp(ysub, yall + t0 * rows, (size_t)(wd * rows) * sizeof(float)),
					      "%s %s: tokens %lld..%lld differ in a call of %lld and of %lld",
					      q8_isas[_i].name, cfgs[use[u]].name, (long long)t0,
					      (long long)(t0 + wd - 1), (long long)wd, (long long)n);
				free(xs);
			}
		}
		free(x), free(yall), free(ysub), free(xq);
		tmat_free(&t);
	}
}
END_TEST

/* ---- (6) through the backend ---- */

START_TEST(backend_binds_and_threads)
{
	struct ms_err err = {0};
	struct ms_cpu be1, be3, bex;
	ck_assert_int_eq(ms_cpu_init_opts(&be1, &(struct ms_cpu_opts){.threads = 1}, &err), 0);
	ck_assert_int_eq(ms_cpu_init_opts(&be3, &(struct ms_cpu_opts){.threads = 3}, &err), 0);
	ck_assert_int_eq(ms_cpu_init_opts(&bex, &(struct ms_cpu_opts){.threads = 1, .exact = true},
					      &err), 0);
	for (size_t c = 0; c < 3; c++) {
		const struct mcfg *cfg = &cfgs[c == 0 ? 0 : c == 1 ? 4 : 8];
		int64_t rows = 301, cols = 2880, n = 5;
		struct tmat t = make_cfg(cfg, rows, cols);
		struct ms_wmat wx = t.m; /* the same rows, bound with exact */
		const struct ms_kernel *k1, *kx;
		void *ox = NULL;
		char why[512];
		ck_assert_int_eq(ms_cpu_bind(&be1, &t.m, &k1, &t.pack, why, sizeof(why), &err), 0);
		/* AVX-512 VNNI (VBMI for MXFP4 where the CPU has it), or where AMX
		 * runs its tiles (bitwise the same, below) */
		gemmq_fn want = cfg->fmt == MS_WFMT_MXFP4 && (be1.cpu_flags & MS_CPU_AVX512VBMI) ?
					ms_q8_gemmq_avx512vbmi : ms_q8_gemmq_avx512vnni;
		ck_assert_msg((k1->gemmq == want || !strcmp(be1.isa, "amx")) &&
				      !strcmp(k1->isa, be1.isa) && k1->rounds_acts,
			      "%s: auto chose %s (%s)", cfg->name, k1->name, why);
		ck_assert_int_eq(ms_cpu_bind(&bex, &wx, &kx, &ox, why, sizeof(why), &err), 0);
		ck_assert_msg(!kx->rounds_acts && kx->gemm && !ox, "%s: exact chose %s", cfg->name, kx->name);
		if (cfg->fmt == MS_WFMT_MXFP4)
			ck_assert_str_eq(kx->name, "avx512-mxfp4");
		else
			ck_assert_str_eq(kx->name, "avx512-intq");
		/* the packed copy decodes to the very rows it came from */
		float *a = malloc((size_t)cols * sizeof(float)), *b = malloc((size_t)cols * sizeof(float));
		for (int64_t r = 0; r < rows; r += 7) {
			ms_wmat_row_f32(&wx, r, a);
			t.m.pack_row(t.m.pack, r, b);
			ck_assert_msg(!memcmp(a, b, (size_t)cols * sizeof(float)), "%s: pack_row %lld",
				      cfg->name, (long long)r);
		}
		free(a), free(b);
		float *x = make_x(n, cols), *bias = malloc((size_t)rows * sizeof(float));
		for (int64_t r = 0; r < rows; r++)
			bias[r] = frand();
		float *y1 = malloc((size_t)(n * rows) * sizeof(float));
		float *y3 = malloc((size_t)(n * rows) * sizeof(float));
		float *yr = malloc((size_t)(n * rows) * sizeof(float));
		ms_cpu_gemm(&be1, k1, &t.m, x, n, y1, bias);
		ms_cpu_gemm(&be3, k1, &t.m, x, n, y3, bias);
		ck_assert(!memcmp(y1, y3, (size_t)(n * rows) * sizeof(float)));
		void *xq = prep_ref(&t.m, x, n);
		ms_q8_gemmq_ref(&t.m, 0, rows, xq, n, yr, rows);
		for (int64_t i = 0; i < n * rows; i++)
			ck_assert(same_bits(y1[i], yr[i] + bias[i % rows]));
		free(x), free(bias), free(y1), free(y3), free(yr), free(xq);
		tmat_free(&t);
	}
	/* a declined matrix falls back to the fp32 kernel, saying why */
	struct tmat t = make_intq(4, 40, 96, 48, ZASYM, false);
	const struct ms_kernel *k;
	char why[512];
	ck_assert_int_eq(ms_cpu_bind(&be1, &t.m, &k, &t.pack, why, sizeof(why), &err), 0);
	ck_assert_str_eq(k->name, "avx512-intq");
	ck_assert_msg(strstr(why, "declined") && strstr(why, "group size 48"), "why: %s", why);
	tmat_free(&t);
	ms_cpu_free(&be1);
	ms_cpu_free(&be3);
	ms_cpu_free(&bex);
}
END_TEST

/* ---- (7) the fp32 AVX-512 kernels for INTQ and FP8 ---- */

static const struct ms_kernel *avx512_kernel(const char *name)
{
	for (const struct ms_kernel *k = ms_kernels_avx512; k->name; k++)
		if (!strcmp(k->name, name))
			return k;
	return NULL;
}

static struct tmat make_fp8(int64_t rows, int64_t cols, bool nan_codes)
{
	struct tmat t = {0};
	t.w = malloc((size_t)(rows * cols));
	t.fs = malloc((size_t)rows * sizeof(float));
	for (int64_t i = 0; i < rows * cols; i++) {
		uint8_t c = (uint8_t)rnd();
		t.w[i] = !nan_codes && (c & 0x7F) == 0x7F ? 0x11 : c;
	}
	for (int64_t r = 0; r < rows; r++)
		t.fs[r] = 0.001f + 0.01f * frand();
	t.m = (struct ms_wmat){.fmt = MS_WFMT_FP8, .rows = rows, .cols = cols, .w = t.w,
			       .row_bytes = (size_t)cols, .fscale = t.fs};
	return t;
}

static void check_fp32_kernel(const struct ms_kernel *k, struct tmat *t, int64_t n)
{
	int64_t rows = t->m.rows, cols = t->m.cols;
	float *x = make_x(n, cols), *y = malloc((size_t)(n * rows) * sizeof(float));
	float *y1 = malloc((size_t)rows * sizeof(float)), *row = malloc((size_t)cols * sizeof(float));
	k->gemm(&t->m, 0, rows, x, cols, n, y, rows);
	for (int64_t tt = 0; tt < n; tt++) {
		k->gemm(&t->m, 0, rows, x + tt * cols, cols, 1, y1, rows);
		for (int64_t r = 0; r < rows; r++) {
			ms_wmat_row_f32(&t->m, r, row);
			double want = 0, mag = 0;
			for (int64_t c = 0; c < cols; c++) {
				want += (double)row[c] * x[tt * cols + c];
				mag += fabs((double)row[c] * x[tt * cols + c]);
			}
			float got = y[tt * rows + r];
			ck_assert_msg(fabs(got - want) <= 1e-5 * mag + 1e-30, "%s %lldx%lld: %g vs %g", k->name,
				      (long long)rows, (long long)cols, got, want);
			ck_assert_msg(same_bits(got, y1[r]), "%s: token %lld alone differs", k->name,
				      (long long)tt);
		}
	}
	/* weights decode exactly: x = unit vectors give the weights themselves */
	int64_t nk = cols < 100 ? cols : 100;
	float *e = calloc((size_t)(nk * cols), sizeof(float));
	float *ye = malloc((size_t)(nk * rows) * sizeof(float));
	for (int64_t i = 0; i < nk; i++)
		e[i * cols + i * (cols / nk)] = 1.0f;
	k->gemm(&t->m, 0, rows, e, cols, nk, ye, rows);
	for (int64_t r = 0; r < rows; r++) {
		ms_wmat_row_f32(&t->m, r, row);
		for (int64_t i = 0; i < nk; i++)
			ck_assert_msg(same_bits(ye[i * rows + r], row[i * (cols / nk)] + 0.0f),
				      "%s: weight (%lld, %lld) decodes to %g, not %g", k->name, (long long)r,
				      (long long)(i * (cols / nk)), ye[i * rows + r], row[i * (cols / nk)]);
	}
	free(x), free(y), free(y1), free(row), free(e), free(ye);
}

START_TEST(fp32_intq_fp8_kernels)
{
	const struct ms_kernel *ki = avx512_kernel("avx512-intq"), *kf = avx512_kernel("avx512-fp8");
	ck_assert_ptr_nonnull(ki);
	ck_assert_ptr_nonnull(kf);
	ck_assert(!ki->rounds_acts && !kf->rounds_acts);
	const int bits[] = {2, 3, 4, 8};
	for (size_t si = 0; si < 5; si++) {
		int64_t rows = rows_list[si], cols = cols_list[(si + 1) % 5];
		for (int b = 0; b < 4; b++) {
			/* per-row g_idx (every third row natural), odd group sizes */
			struct tmat t = make_intq(bits[b], rows, cols, b == 1 ? 48 : 20 + 12 * b,
						  ZASYM, b == 2);
			if (t.rows_g) {
				int32_t *nat = malloc((size_t)cols * sizeof(int32_t));
				for (int64_t k = 0; k < cols; k++)
					nat[k] = (int32_t)(k / t.m.group_size);
				for (int64_t r = 2; r < rows; r += 3)
					t.rows_g[r] = nat;
				check_fp32_kernel(ki, &t, n_list[(si + (size_t)b) % 7]);
				free(nat);
			} else {
				check_fp32_kernel(ki, &t, n_list[(si + (size_t)b) % 7]);
			}
			tmat_free(&t);
		}
		struct tmat f = make_fp8(rows, cols, false);
		check_fp32_kernel(kf, &f, n_list[si]);
		tmat_free(&f);
	}
	/* NaN codes (0x7F, 0xFF) decode to NaN like the reference */
	struct tmat f = make_fp8(3, 16, false);
	f.w[5] = 0x7F;
	f.w[16 + 9] = 0xFF;
	float x[16] = {0}, y[3];
	x[5] = 1.0f;
	kf->gemm(&f.m, 0, 3, x, 16, 1, y, 3);
	ck_assert(isnan(y[0]) && isnan(y[1]) && !isnan(y[2])); /* NaN * 0 is NaN too */
	tmat_free(&f);
}
END_TEST

/* ---- --bench: GB/s and GOP/s, not a test ---- */

/* Best of `tries` passes: the VM shares its cores, so the best pass is the
 * one that ran alone. Streaming and kernel passes alternate so both see the
 * same conditions. */
static int bench(void)
{
	if ((ms_cpu_detect() & VNNI_FLAGS) != VNNI_FLAGS) {
		printf("bench: this CPU lacks AVX-512 VNNI\n");
		return 0;
	}
	/* K = 2048 (Q8_BENCH_K=2048): the bench model's and gpt-oss's shorter panels */
	/* Q8_BENCH_R rows (4096); Q8_BENCH_HOT=1: one copy, read from cache
	 * (with a small R: the kernel's arithmetic rate, not the memory's) */
	const int64_t R = getenv("Q8_BENCH_R") ? atoi(getenv("Q8_BENCH_R")) : 4096;
	const int64_t K = getenv("Q8_BENCH_K") ? atoi(getenv("Q8_BENCH_K")) : 4096;
	const bool hot = getenv("Q8_BENCH_HOT") && atoi(getenv("Q8_BENCH_HOT"));
	if (R <= 0 || K <= 0) {
		printf("bench: bad Q8_BENCH_R / Q8_BENCH_K\n");
		return 1;
	}
	const size_t total = (size_t)576 << 20; /* cycled copies: larger than L3 */
	const char *names[] = {"intq4-g32", "mxfp4"};
	const int tries = 12;
	for (int f = 0; f < 2; f++) {
		struct tmat t = f ? make_mxfp4(R, K, 120, 130) : make_intq(4, R, K, 32, ZASYM, false);
		struct ms_err err = {0};
		void *pack;
		if (ms_q8_pack(&t.m, &pack, &err)) {
			printf("bench: %s\n", err.msg);
			return 1;
		}
		/* copies packed one by one, allocated as the loader's are */
		int copies = hot ? 1 : (int)(total / t.m.pack_bytes) + 1;
		struct ms_wmat *ws = malloc((size_t)copies * sizeof(*ws));
		void **bufs = malloc((size_t)copies * sizeof(*bufs));
		const uint8_t **pan = malloc((size_t)copies * sizeof(*pan));
		for (int c = 0; c < copies; c++) {
			ws[c] = t.m;
			ws[c].pack = NULL;
			if (ms_q8_pack(&ws[c], &bufs[c], &err)) {
				printf("bench: %s\n", err.msg);
				return 1;
			}
			pan[c] = ((const struct ms_q8_pack *)bufs[c])->panels;
			/* distinct pages: a hypervisor merging equal pages would
			 * otherwise serve every copy from one in cache */
			uint8_t *pp = (uint8_t *)pan[c];
			for (size_t o = 0; o < t.m.pack_bytes; o += 512)
				pp[o] ^= (uint8_t)(c * 131 + (int)(o >> 9));
		}
		/* Q8_BENCH_ISA=avx2: the AVX2 kernel instead; =vbmi: MXFP4's VBMI
		 * build (otherwise the VNNI one, the last in the table) */
		const char *isa = getenv("Q8_BENCH_ISA");
		bool avx2 = isa && !strcmp(isa, "avx2"), vbmi = isa && !strcmp(isa, "vbmi");
		const struct ms_kernel *k = NULL;
		for (const struct ms_kernel *kk = avx2 ? ms_kernels_avx2 : ms_kernels_avx512; kk->name; kk++)
			if (kk->fmt == t.m.fmt && kk->gemmq && (!k || !vbmi))
				k = kk;
		if (vbmi && !(ms_cpu_detect() & MS_CPU_AVX512VBMI)) {
			printf("bench: this CPU lacks AVX512-VBMI\n");
			return 0;
		}
		for (int th = 1; th <= 2; th++) {
			struct ms_cpu be;
			if (ms_cpu_init_opts(&be, &(struct ms_cpu_opts){.threads = th}, &err)) {
				printf("bench: %s\n", err.msg);
				return 1;
			}
			/* 2-4: an expert's share of a batched decode step */
			const int64_t ns[] = {1, 2, 3, 4, 8, 16, 64, 512};
			for (int ni = 0; ni < 8; ni++) {
				int64_t n = ns[ni];
				float *x = make_x(n, K), *y = malloc((size_t)(n * R) * sizeof(float));
				int reps = n <= 16 ? copies : (n <= 64 ? 8 : 2);
				double best = 1e30, sbest = 1e30;
				struct tu_bw_job j = {.bufs = pan, .bytes = t.m.pack_bytes};
				for (int it = 0; it < (n <= 16 ? tries : 3); it++) {
					double t0 = ms_now_s();
					if (n <= 16)
						ms_pool_run(&be.pool, copies, tu_bw_task, &j);
					double t1 = ms_now_s();
					for (int c = 0; c < reps; c++)
						ms_cpu_gemm(&be, k, &ws[c % copies], x, n, y, NULL);
					double t2 = ms_now_s();
					sbest = fmin(sbest, (t1 - t0) / copies);
					best = fmin(best, (t2 - t1) / reps);
				}
				double gbs = (double)t.m.pack_bytes / best / 1e9;
				double gops = 2.0 * (double)R * (double)K * (double)n / best / 1e9;
				if (n <= 16)
					printf("%-10s %d thr n %3lld: %7.3f ms  %5.1f GB/s = %3.0f%% of streaming "
					       "the same bytes (%5.1f GB/s)  %6.1f GOP/s\n",
					       names[f], th, (long long)n, best * 1e3, gbs,
					       100.0 * gbs / ((double)t.m.pack_bytes / sbest / 1e9),
					       (double)t.m.pack_bytes / sbest / 1e9, gops);
				else
					printf("%-10s %d thr n %3lld: %7.3f ms  %6.1f GOP/s\n", names[f], th,
					       (long long)n, best * 1e3, gops);
				fflush(stdout);
				free(x), free(y);
			}
			ms_cpu_free(&be);
		}
		for (int c = 0; c < copies; c++)
			free(bufs[c]);
		free(bufs), free(ws), free(pan), free(pack);
		t.m.pack = NULL;
		tmat_free(&t);
	}
	/* pack speed: source bytes per second, one thread */
	for (int f = 0; f < 2; f++) {
		struct tmat t = f ? make_mxfp4(R, K, 120, 130) : make_intq(4, R, K, 128, ZASYM, false);
		double best = 1e30;
		for (int i = 0; i < 5; i++) {
			t.m.pack = NULL;
			free(t.pack);
			struct ms_err err = {0};
			double t0 = ms_now_s();
			ms_q8_pack(&t.m, &t.pack, &err);
			best = fmin(best, ms_now_s() - t0);
		}
		double src = f ? (double)(R * K / 2 + R * K / 32) : (double)(R * K / 2 + R * K / 128 * 8);
		printf("pack %s %lldx%lld: %.1f ms, %.2f GB/s of source per core\n",
		       f ? "mxfp4" : "intq4-g128", (long long)R, (long long)K, best * 1e3, src / best / 1e9);
		tmat_free(&t);
	}
	return 0;
}

static void add_portable(Suite *s)
{
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, scalar_within_int8_bound_of_reference);
	tcase_add_test(tc, pow2_exact_on_mxfp4_activations);
	tcase_add_test(tc, pack_declines);
	suite_add_tcase(s, tc);
}

/* gemmq build i's cases */
static void add_gemmq(TCase *tc, int i)
{
	tcase_add_loop_test(tc, isa_matches_scalar_bitwise, i, i + 1);
	tcase_add_loop_test(tc, pow2_isa_matches_portable, i, i + 1);
	tcase_add_loop_test(tc, batch_invariance, i, i + 1);
}

/* VNNI's, and the backend's choice (VNNI, or VBMI where the CPU has it) */
static void add_vnni(TCase *tc, int i)
{
	add_gemmq(tc, i);
	tcase_add_test(tc, backend_binds_and_threads);
}

static void add_fp32(TCase *tc, int i)
{
	(void)i;
	tcase_add_test(tc, fp32_intq_fp8_kernels);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--bench"))
		return bench();
	static const struct isa_gate gates[] = {
		{"avx512vnni", VNNI_FLAGS, NULL, add_vnni, Q8_VNNI},
		{"avx512vbmi", VNNI_FLAGS | MS_CPU_AVX512VBMI, NULL, add_gemmq, Q8_VBMI},
		{"avx2", AVX2_FLAGS, NULL, add_gemmq, Q8_AVX2},
		{"avx512", AVX512_FLAGS, NULL, add_fp32, 0},
	};
	return isa_run(argc, argv, "kernels-q8", add_portable, ISA_GATES(gates), 600);
}
