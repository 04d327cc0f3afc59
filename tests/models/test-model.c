/*
 * test-model.c: the pieces of the GPT-OSS forward pass, and properties of
 * the whole forward on small generated checkpoints (paths in the
 * MS_FIXTURE_BF16 and MS_FIXTURE_MXFP4 environment variables; meson
 * generates them with tools/gptoss_ckpt.py). Agreement with the independent
 * numpy reference is tests/e2e/golden.py's job; this file checks what only the
 * C side has: incremental decoding, chunking, threads, refusals; and the
 * backend's scratch under the experts and projections (reused across batch
 * sizes, it gives a fresh backend's bits). The
 * activation's ISA builds run as `--isa avx2`, `--isa avx512`, a meson test
 * each (exit 77 where the CPU lacks it).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpt-oss.h"
#include "isagate.h"
#include "model.h"
#include "moe.h"
#include "scratch.h"

#define TESTUTIL_SEED 4242u
#include "testutil.h"

static struct ms_model_config yarn_20b(bool truncate)
{
	struct ms_model_config c = {0};
	c.head_dim = 64;
	c.max_pos = 131072;
	c.rope = (struct ms_rope_config){MS_ROPE_YARN, 150000.0, 32.0, 32.0, 1.0, 4096, truncate,
					 0.1 * log(32.0) + 1.0};
	return c;
}

/* Values from gpt-oss.md §2.3 (float32 printouts of the reference). */
START_TEST(yarn_frequencies)
{
	struct ms_model_config c = yarn_20b(false);
	double f[32];
	float scale;
	ms_gptoss_rope_freqs(&c, f, &scale);
	const struct {
		int i;
		double v;
	} want[] = {{0, 1.0},           {1, 0.68904430},     {8, 0.050813280},
		    {9, 0.031705696},   {12, 0.0067949593},  {17, 1.2931869e-4},
		    {18, 3.8308812e-5}, {31, 3.0235114e-7}};
	for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++)
		ck_assert_msg(fabs(f[want[k].i] - want[k].v) <= 2e-7 * want[k].v,
			      "inv_freq[%d] = %.9g, want %.9g", want[k].i, f[want[k].i], want[k].v);
	ck_assert(fabs(scale - 1.3465735902799727) < 1e-6);
	/* truncate=true floors/ceils the ramp to [8, 18]: dim 12 then sits at
	 * ramp 0.4 instead of (12 - 8.0928) / (17.398 - 8.0928). */
	struct ms_model_config t = yarn_20b(true);
	double g[32];
	ms_gptoss_rope_freqs(&t, g, &scale);
	double pf = pow(150000.0, 24.0 / 64.0), r = (12.0 - 8.0) / 10.0;
	double exp12 = (1.0 / (32.0 * pf)) * r + (1.0 / pf) * (1.0 - r);
	ck_assert(fabs(g[12] - exp12) <= 1e-12 * exp12);
	ck_assert(fabs(g[12] - f[12]) > 1e-4 * f[12]);
}
END_TEST

START_TEST(default_rope_frequencies)
{
	struct ms_model_config c = {0};
	c.head_dim = 16;
	c.rope.type = MS_ROPE_DEFAULT;
	c.rope.theta = 10000.0;
	double f[8];
	float scale;
	ms_gptoss_rope_freqs(&c, f, &scale);
	for (int i = 0; i < 8; i++)
		ck_assert(fabs(f[i] - pow(10000.0, -2.0 * i / 16.0)) < 1e-15);
	ck_assert_float_eq(scale, 1.0f);
}
END_TEST

START_TEST(sink_softmax)
{
	float s[3] = {1.0f, 2.0f, 3.0f};
	ms_sink_softmax(s, 3, 0.5f);
	double den = exp(1) + exp(2) + exp(3) + exp(0.5);
	for (int i = 0; i < 3; i++)
		ck_assert(fabs(s[i] - exp(i + 1) / den) < 1e-6);
	ck_assert(s[0] + s[1] + s[2] < 1.0f); /* the sink keeps its share */
	/* Large scores stay finite (max subtraction includes the sink). */
	float big[2] = {1000.0f, 1001.0f};
	ms_sink_softmax(big, 2, 1002.0f);
	double d2 = exp(-2) + exp(-1) + 1;
	ck_assert(fabs(big[0] - exp(-2) / d2) < 1e-6 && fabs(big[1] - exp(-1) / d2) < 1e-6);
	/* A sink far below the scores vanishes: plain softmax. */
	float p[2] = {0.0f, 0.0f};
	ms_sink_softmax(p, 2, -100.0f);
	ck_assert(fabs(p[0] - 0.5f) < 1e-6);
	/* A dominant sink takes almost everything. */
	float q[1] = {0.0f};
	ms_sink_softmax(q, 1, 20.0f);
	ck_assert(q[0] < 1e-8);
}
END_TEST

START_TEST(router_topk_softmax)
{
	/* 2 tokens, 5 experts, k = 3; ties go to the lower index. */
	const float logits[10] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, /* */ -3, -2, -1, 0, 7};
	int32_t sel[6];
	float w[6];
	ms_moe_route(logits, 2, 5, 3, sel, w);
	ck_assert_int_eq(sel[0], 1);
	ck_assert_int_eq(sel[1], 3);
	ck_assert_int_eq(sel[2], 4);
	double den = 2 * exp(2.0) + exp(1.0);
	ck_assert(fabs(w[0] - exp(2.0) / den) < 1e-6 && fabs(w[2] - exp(1.0) / den) < 1e-6);
	ck_assert(fabs(w[0] + w[1] + w[2] - 1.0f) < 1e-6);
	ck_assert_int_eq(sel[3], 4);
	ck_assert_int_eq(sel[4], 3);
	ck_assert_int_eq(sel[5], 2);
	/* softmax over the selected k only, not over all experts */
	den = exp(7.0) + exp(0.0) + exp(-1.0);
	ck_assert(fabs(w[3] - exp(7.0) / den) < 1e-6);
}
END_TEST

START_TEST(expert_activation)
{
	struct ms_swiglu a = {7.0f, 1.702f};
	double sig;
	/* gate above the limit is clamped to 7; up too; +1 on up */
	sig = 1.0 / (1.0 + exp(-1.702 * 7.0));
	ck_assert(fabs(ms_swiglu_eval(a, 10.0f, 9.0f) - (7.0 + 1.0) * 7.0 * sig) < 1e-4);
	/* gate is NOT clamped below: -10 stays -10; up clamps to -7 */
	sig = 1.0 / (1.0 + exp(1.702 * 10.0));
	ck_assert(fabs(ms_swiglu_eval(a, -10.0f, -9.0f) - (-7.0 + 1.0) * (-10.0) * sig) < 1e-9);
	/* in range: gate * sigmoid(1.702 gate) * (up + 1) */
	sig = 1.0 / (1.0 + exp(-1.702 * 0.5));
	ck_assert(fabs(ms_swiglu_eval(a, 0.5f, -0.25f) - 0.75 * 0.5 * sig) < 1e-6);
	ck_assert_float_eq(ms_swiglu_eval(a, 0.3f, -1.0f), 0.0f);
	/* NaN in, NaN out (the gate carries it); huge gates of either sign */
	ck_assert(isnan(ms_swiglu_eval(a, NAN, 1.0f)));
	ck_assert(isnan(ms_swiglu_eval(a, -NAN, 1.0f)));
	ck_assert(fabsf(ms_swiglu_eval(a, -1e6f, 0.0f)) < 1e-30f); /* exactly ~1e6 e^-1.7e6: 0 */
	ck_assert_float_eq(ms_swiglu_eval(a, INFINITY, -INFINITY),
			   (1.0f - 7.0f) * (7.0f / (1.0f + ms_exp_clamped(-1.702f * 7.0f))));
}
END_TEST

/* The activation's exp against double over every 61st float of [-87, 88]
 * (1.5 ulp: fastexp.h's approximation is within 1.28 over every float
 * there); the backend picks the widest row
 * build the kernel set allows. */
START_TEST(expert_activation_exp)
{
	double worst = 0;
	for (uint64_t v = 0; v < 2 * (uint64_t)0x42B00000u; v += 61) {
		uint32_t u = (uint32_t)(v >> 1) | (uint32_t)(v & 1) << 31;
		float x;
		memcpy(&x, &u, 4);
		if (!(x >= -87.0f && x <= 88.0f))
			continue;
		float got = ms_exp_clamped(x), want = (float)exp((double)x);
		double ulp = fabs((double)got - exp((double)x)) /
			     ((double)nextafterf(want, INFINITY) - (double)want);
		worst = ulp > worst ? ulp : worst;
	}
	ck_assert_msg(worst <= 1.5, "exp: %.3f ulp", worst);
	struct ms_err err = {0};
	struct ms_cpu be;
	ck_assert_int_eq(ms_cpu_init_opts(&be, &(struct ms_cpu_opts){.threads = 1}, &err), 0);
	ck_assert_msg(be.swiglu_row == (!strcmp(be.isa, "avx2") ? ms_swiglu_row_avx2 :
					strcmp(be.isa, "ref") ? ms_swiglu_row_avx512 : ms_swiglu_row),
		      "set %s", be.isa);
	ms_cpu_free(&be);
	ck_assert_int_eq(ms_cpu_init_opts(&be, &(struct ms_cpu_opts){.kernels = "ref",
									   .threads = 1}, &err), 0);
	ck_assert(be.swiglu_row == ms_swiglu_row);
	ms_cpu_free(&be);
}
END_TEST

/* The vectorized rows (swiglu.c: the generic build, and the AVX2 and
 * AVX-512 ones, a test each) equal the scalar function bit for bit on
 * random pairs, ragged lengths, with clamped, huge, infinite and NaN values
 * among them. _i: a row of swiglu_rows. The gates: the builds' flags. */
#define SWIGLU_AVX512 (MS_CPU_AVX512F | MS_CPU_AVX512BW | MS_CPU_AVX512VL)
enum { ROW_GENERIC, ROW_AVX2, ROW_AVX512 };
static const struct {
	const char *name;
	ms_swiglu_row_fn f;
} swiglu_rows[] = {
	[ROW_GENERIC] = {"generic", ms_swiglu_row},
	[ROW_AVX2] = {"avx2", ms_swiglu_row_avx2},
	[ROW_AVX512] = {"avx512", ms_swiglu_row_avx512},
};

START_TEST(swiglu_row_matches_scalar)
{
	struct ms_swiglu a = {7.0f, 1.702f};
	const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 7.0f, -7.0f,
				 0.0f, -0.0f, 1e-40f, 60.0f, -60.0f};
	uint32_t seed = 12345;
	for (int64_t n = 1; n < 300; n += 37) {
		float g[600], b[600], y[300];
		for (int64_t i = 0; i < 2 * n; i++) {
			seed = seed * 1664525u + 1013904223u;
			g[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 24.0f;
			b[i] = ((float)(seed & 255) / 256.0f - 0.5f);
			if (seed % 11 == 0)
				g[i] = special[(seed >> 4) % (sizeof(special) / sizeof(special[0]))];
		}
		swiglu_rows[_i].f(a, g, b, n, y);
		for (int64_t i = 0; i < n; i++) {
			float want = ms_swiglu_eval(a, g[2 * i] + b[2 * i], g[2 * i + 1] + b[2 * i + 1]);
			ck_assert_msg(memcmp(&want, &y[i], 4) == 0, "%s n %lld i %lld: %a vs %a",
				      swiglu_rows[_i].name, (long long)n, (long long)i, (double)y[i],
				      (double)want);
		}
	}
}
END_TEST

/* ---- the experts on the backend's scratch ---- */

/* The scratch's contract: grown to the largest request, 64-byte aligned,
 * never shrunk, and a failed growth leaves the slot as it was. */
START_TEST(scratch_grows_once)
{
	struct ms_scratch s = {0};
	struct ms_err err = {0};
	struct ms_scratch_plan p = {0};
	ck_assert_uint_eq(ms_scratch_plan_add(&p, 1), 0);
	ck_assert_uint_eq(ms_scratch_plan_add(&p, 100), 64);
	ck_assert_uint_eq(ms_scratch_plan_add(&p, 0), 192);
	ck_assert_uint_eq(p.bytes, 192);
	ms_scratch_plan_add(&p, SIZE_MAX - 10);
	ck_assert_uint_eq(p.bytes, SIZE_MAX);
	ck_assert_int_eq(ms_scratch_reserve(&s, MS_SCRATCH_MOE, 1000, &err), 0);
	void *base = s.base[MS_SCRATCH_MOE];
	size_t size = s.size[MS_SCRATCH_MOE];
	ck_assert(base && size >= 1000 && (uintptr_t)base % MS_SCRATCH_ALIGN == 0);
	ck_assert_int_eq(ms_scratch_reserve(&s, MS_SCRATCH_MOE, 10, &err), 0);
	ck_assert(s.base[MS_SCRATCH_MOE] == base && s.size[MS_SCRATCH_MOE] == size);
	ck_assert_int_eq(ms_scratch_reserve(&s, MS_SCRATCH_MOE, SIZE_MAX, &err), -ENOMEM);
	ck_assert_msg(strstr(err.msg, "out of memory") && strstr(err.msg, "MoE rows"), "%s",
		      err.msg);
	ck_assert(s.base[MS_SCRATCH_MOE] == base && s.size[MS_SCRATCH_MOE] == size);
	ck_assert_ptr_null(s.base[MS_SCRATCH_GEMM]);
	ms_scratch_free(&s);
	ck_assert(!s.base[MS_SCRATCH_MOE] && !s.size[MS_SCRATCH_MOE]);
}
END_TEST

/* A small MoE layer of mixed experts: MXFP4 (the q8 kernels, which prepare
 * their inputs, where the CPU has them), one bf16, and inputs quantized
 * (MXFP4, FP8) ahead of some. H and I are not multiples of 32. */
#define TM_E 5
#define TM_H 72
#define TM_I 56
#define TM_K 2

struct test_moe {
	struct ms_linear gu[TM_E], dn[TM_E];
	const struct ms_linear *gup[TM_E], *dnp[TM_E];
	void *data[TM_E][2][2], *pack[TM_E][2];
	struct ms_moe_w w;
};

static void test_linear_make(struct ms_cpu *be, struct ms_linear *l, void **data, void **pack,
			     int64_t e, int64_t rows, int64_t cols)
{
	int64_t g = (cols + 31) / 32;
	if (e == 3) { /* bf16 */
		uint16_t *w = malloc((size_t)(rows * cols) * sizeof(*w));
		for (int64_t i = 0; i < rows * cols; i++)
			w[i] = (uint16_t)(0x3C00u + (rnd() & 0x3FF) + (rnd() & 1) * 0x8000u);
		data[0] = w;
		l->w = (struct ms_wmat){.fmt = MS_WFMT_BF16, .rows = rows, .cols = cols,
					.w = (const uint8_t *)w, .row_bytes = (size_t)cols * 2};
	} else {
		uint8_t *w = calloc((size_t)(rows * g * 16), 1), *sc = malloc((size_t)(rows * g));
		for (int64_t r = 0; r < rows; r++)
			for (int64_t k = 0; k < cols; k++)
				w[r * g * 16 + k / 2] |= (uint8_t)((rnd() & 15) << (4 * (k & 1)));
		for (int64_t i = 0; i < rows * g; i++)
			sc[i] = (uint8_t)(120 + rnd() % 8);
		data[0] = w, data[1] = sc;
		l->w = (struct ms_wmat){.fmt = MS_WFMT_MXFP4, .rows = rows, .cols = cols, .w = w,
					.row_bytes = (size_t)g * 16, .scales = sc,
					.scale_row_bytes = (size_t)g};
	}
	l->bias = malloc((size_t)rows * sizeof(float));
	for (int64_t r = 0; r < rows; r++)
		l->bias[r] = 0.1f * frand();
	l->act = (struct ms_actq){e == 1 ? MS_ACTQ_MXFP4_DYNAMIC : e == 2 ? MS_ACTQ_FP8_DYNAMIC
								   : MS_ACTQ_NONE, 0};
	struct ms_err err = {0};
	char why[512];
	int rc = ms_cpu_bind(be, &l->w, &l->kernel, pack, why, sizeof(why), &err);
	ck_assert_msg(rc == 0, "bind: %s", err.msg);
}

static void test_moe_init(struct test_moe *t, struct ms_cpu *be)
{
	memset(t, 0, sizeof(*t));
	for (int64_t e = 0; e < TM_E; e++) {
		test_linear_make(be, &t->gu[e], t->data[e][0], &t->pack[e][0], e, 2 * TM_I, TM_H);
		test_linear_make(be, &t->dn[e], t->data[e][1], &t->pack[e][1], e, TM_H, TM_I);
		t->gup[e] = &t->gu[e], t->dnp[e] = &t->dn[e];
	}
	t->w = (struct ms_moe_w){TM_E, TM_H, TM_I, t->gup, t->dnp};
}

static void test_moe_free(struct test_moe *t)
{
	for (int64_t e = 0; e < TM_E; e++)
		for (int s = 0; s < 2; s++) {
			struct ms_linear *l = s ? &t->dn[e] : &t->gu[e];
			if (l->kernel->pack_free)
				l->kernel->pack_free(t->pack[e][s]);
			else
				free(t->pack[e][s]);
			free(l->bias), free(t->data[e][s][0]), free(t->data[e][s][1]);
		}
}

/* One call's inputs: hidden rows, routing, and the residual it adds to. */
struct moe_call {
	int64_t n;
	float *h, *w, *res;
	int32_t *sel;
};

static struct moe_call moe_call_make(int64_t n)
{
	struct moe_call c = {n, malloc((size_t)(n * TM_H) * sizeof(float)),
			     malloc((size_t)(n * TM_K) * sizeof(float)),
			     malloc((size_t)(n * TM_H) * sizeof(float)),
			     malloc((size_t)(n * TM_K) * sizeof(int32_t))};
	float logits[TM_E];
	for (int64_t t = 0; t < n; t++) {
		for (int64_t i = 0; i < TM_H; i++)
			c.h[t * TM_H + i] = 2.0f * frand(), c.res[t * TM_H + i] = frand();
		for (int64_t e = 0; e < TM_E; e++)
			logits[e] = frand();
		ms_moe_route(logits, 1, TM_E, TM_K, c.sel + t * TM_K, c.w + t * TM_K);
	}
	return c;
}

/* out = the residual plus the layer's experts, on be. */
static float *moe_run(struct ms_cpu *be, const struct test_moe *t, const struct moe_call *c,
		      int64_t t0, int64_t n)
{
	struct ms_err err = {0};
	float *out = malloc((size_t)(n * TM_H) * sizeof(float));
	memcpy(out, c->res + t0 * TM_H, (size_t)(n * TM_H) * sizeof(float));
	int rc = ms_moe_forward(be, &t->w, (struct ms_swiglu){7.0f, 1.702f}, c->h + t0 * TM_H, n,
				c->sel + t0 * TM_K, c->w + t0 * TM_K, TM_K, out, &err);
	ck_assert_msg(rc == 0, "moe: %s", err.msg);
	return out;
}

/* Kernel sets the reuse test runs on: the CPU's best, the AVX2 one, the
 * AMX tiles on the software model, the reference (nothing prepared). */
static const char *const moe_sets[] = {"auto", "avx2", "amx-sim", "ref"};

/* One backend reused for a larger, a smaller, a larger again (its scratch
 * as the first left it) and a largest batch gives what a fresh backend
 * gives for each, bit for bit, and what it gives token by token (each
 * expert then has one row, its regions laid out anew); the scratch
 * grows only for the largest. _i: a row of moe_sets. */
START_TEST(moe_reused_scratch_matches_fresh)
{
	struct ms_err err = {0};
	struct ms_cpu be, fresh, single;
	if (ms_cpu_init(&be, moe_sets[_i], 2, &err) == -ENOTSUP)
		return; /* this CPU lacks the set */
	ck_assert_int_eq(ms_cpu_init(&single, moe_sets[_i], 2, &err), 0);
	struct test_moe t;
	test_moe_init(&t, &be);
	const int64_t sizes[] = {48, 3, 40, 64};
	void *base = NULL;
	for (int c = 0; c < 4; c++) {
		struct moe_call call = moe_call_make(sizes[c]);
		int64_t n = call.n;
		size_t bytes = (size_t)(n * TM_H) * sizeof(float);
		float *got = moe_run(&be, &t, &call, 0, n);
		if (c == 1 || c == 2)
			ck_assert_msg(be.scratch.base[MS_SCRATCH_MOE] == base, "%s: call %d reallocated",
				      moe_sets[_i], c);
		base = be.scratch.base[MS_SCRATCH_MOE];
		ck_assert_int_eq(ms_cpu_init(&fresh, moe_sets[_i], 2, &err), 0);
		float *want = moe_run(&fresh, &t, &call, 0, n);
		ms_cpu_free(&fresh);
		ck_assert_msg(!memcmp(got, want, bytes), "%s: %lld tokens after a reuse differ from a "
			      "fresh backend", moe_sets[_i], (long long)n);
		for (int64_t tk = 0; tk < n; tk++) {
			float *one = moe_run(&single, &t, &call, tk, 1);
			ck_assert_msg(!memcmp(one, got + tk * TM_H, TM_H * sizeof(float)),
				      "%s: token %lld of %lld differs alone", moe_sets[_i], (long long)tk,
				      (long long)n);
			free(one);
		}
		free(got), free(want);
		free(call.h), free(call.w), free(call.res), free(call.sel);
	}
	test_moe_free(&t);
	ms_cpu_free(&single);
	ms_cpu_free(&be);
}
END_TEST

/* The same for projections (ms_cpu_linear): two that share one pool run,
 * and three one by one, two of them quantizing their input first. */
START_TEST(linear_reused_scratch_matches_fresh)
{
	struct ms_err err = {0};
	struct ms_cpu be, fresh;
	if (ms_cpu_init(&be, moe_sets[_i], 2, &err) == -ENOTSUP)
		return;
	struct test_moe t;
	test_moe_init(&t, &be);
	const struct ms_linear *together[] = {&t.gu[0], &t.gu[4]}, *apart[] = {&t.gu[0], &t.gu[1],
										&t.gu[2]};
	const int64_t sizes[] = {48, 3, 40}, N = 2 * TM_I;
	for (int c = 0; c < 3; c++) {
		struct moe_call call = moe_call_make(sizes[c]);
		size_t bytes = (size_t)(call.n * N) * sizeof(float);
		float *y[2][5];
		for (int r = 0; r < 2; r++) {
			struct ms_cpu *b = r ? &fresh : &be;
			if (r)
				ck_assert_int_eq(ms_cpu_init(&fresh, moe_sets[_i], 2, &err), 0);
			for (int i = 0; i < 5; i++)
				y[r][i] = malloc(bytes);
			ck_assert_int_eq(ms_cpu_linear(b, 3, apart, call.h, call.n, y[r], &err), 0);
			ck_assert_int_eq(ms_cpu_linear(b, 2, together, call.h, call.n, y[r] + 3, &err), 0);
			if (r)
				ms_cpu_free(&fresh);
		}
		for (int i = 0; i < 5; i++) {
			ck_assert_msg(!memcmp(y[0][i], y[1][i], bytes), "%s: %lld tokens, projection %d",
				      moe_sets[_i], (long long)call.n, i);
			free(y[0][i]), free(y[1][i]);
		}
		free(call.h), free(call.w), free(call.res), free(call.sel);
	}
	test_moe_free(&t);
	ms_cpu_free(&be);
}
END_TEST

/* ---- whole-model properties ---- */

struct loaded {
	struct ms_cpu be;
	struct ms_model m;
};

static void load_fixture(struct loaded *l, const char *env, int threads)
{
	const char *dir = getenv(env);
	ck_assert_msg(dir != NULL, "%s is not set (run through meson test)", env);
	struct ms_err err = {0};
	ck_assert_int_eq(ms_cpu_init(&l->be, "auto", threads, &err), 0);
	int rc = ms_model_load(&l->m, dir, ms_cpu_backend(&l->be), &err);
	ck_assert_msg(rc == 0, "load %s: %s", dir, err.msg);
}

static void unload(struct loaded *l)
{
	ms_model_free(&l->m);
	ms_cpu_free(&l->be);
}

static int32_t *random_tokens(int64_t n, int64_t vocab, uint32_t seed)
{
	int32_t *t = malloc((size_t)n * sizeof(*t));
	for (int64_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		t[i] = (int32_t)((seed >> 8) % (uint32_t)vocab);
	}
	return t;
}

/* Prefill of n tokens with all logits, versus the same tokens fed in pieces
 * (first a block, then one at a time): every row within 1e-4. The prompt is
 * longer than the sliding window and than one internal chunk, so the ring
 * buffer of the sliding layers wraps during both runs. */
static void check_incremental(const char *env, int64_t n, int64_t first_block)
{
	struct loaded l;
	load_fixture(&l, env, 2);
	struct ms_err err = {0};
	int64_t V = l.m.cfg.vocab;
	int32_t *tok = random_tokens(n, V, 7);
	float *full = malloc((size_t)(n * V) * sizeof(float));
	float *inc = malloc((size_t)(n * V) * sizeof(float));
	struct ms_seq s;
	ck_assert_int_eq(ms_seq_init(&s, &l.m, n, &err), 0);
	ck_assert_int_eq(ms_seq_forward(&s, tok, n, full, true, &err), 0);
	ms_seq_free(&s);
	ck_assert_int_eq(ms_seq_init(&s, &l.m, n, &err), 0);
	ck_assert_int_eq(ms_seq_forward(&s, tok, first_block, inc, true, &err), 0);
	for (int64_t i = first_block; i < n; i++)
		ck_assert_int_eq(ms_seq_forward(&s, tok + i, 1, inc + i * V, false, &err), 0);
	ck_assert_int_eq(s.n_past, n);
	double worst = 0;
	for (int64_t i = 0; i < n * V; i++)
		worst = fmax(worst, fabs((double)full[i] - inc[i]));
	ck_assert_msg(worst <= 1e-4, "%s: incremental vs full max |dlogit| %g", env, worst);
	ms_seq_free(&s);
	free(tok), free(full), free(inc);
	unload(&l);
}

START_TEST(incremental_matches_full_bf16)
{
	check_incremental("MS_FIXTURE_BF16", 300, 170);
}
END_TEST

START_TEST(incremental_matches_full_mxfp4)
{
	check_incremental("MS_FIXTURE_MXFP4", 90, 33);
}
END_TEST

/* Results do not depend on the number of threads: every output element is
 * computed by one task in a fixed order. */
START_TEST(threads_do_not_change_logits)
{
	const char *envs[] = {"MS_FIXTURE_BF16", "MS_FIXTURE_MXFP4"};
	for (int e = 0; e < 2; e++) {
		float *out[2] = {0};
		int64_t n = 57, V = 0;
		const int threads[2] = {1, 3};
		for (int r = 0; r < 2; r++) {
			struct loaded l;
			struct ms_err err = {0};
			load_fixture(&l, envs[e], threads[r]);
			V = l.m.cfg.vocab;
			int32_t *tok = random_tokens(n, V, 99);
			out[r] = malloc((size_t)(n * V) * sizeof(float));
			struct ms_seq s;
			ck_assert_int_eq(ms_seq_init(&s, &l.m, n, &err), 0);
			ck_assert_int_eq(ms_seq_forward(&s, tok, n, out[r], true, &err), 0);
			ms_seq_free(&s);
			free(tok);
			unload(&l);
		}
		ck_assert_int_eq(memcmp(out[0], out[1], (size_t)(n * V) * sizeof(float)), 0);
		free(out[0]), free(out[1]);
	}
}
END_TEST

/* A refused call changes nothing: bad ids and overflowing the context are
 * errors, and the sequence continues as if they never happened. */
START_TEST(refusals_leave_sequence_intact)
{
	struct loaded l;
	load_fixture(&l, "MS_FIXTURE_BF16", 2);
	struct ms_err err = {0};
	int64_t V = l.m.cfg.vocab;
	int32_t *tok = random_tokens(12, V, 3);
	float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
	struct ms_seq s, ref;
	ck_assert_int_eq(ms_seq_init(&s, &l.m, 12, &err), 0);
	ck_assert_int_eq(ms_seq_init(&ref, &l.m, 12, &err), 0);
	ck_assert_int_eq(ms_seq_forward(&s, tok, 10, a, false, &err), 0);
	ck_assert_int_eq(ms_seq_forward(&ref, tok, 10, b, false, &err), 0);
	int32_t bad[2] = {1, (int32_t)V};
	ck_assert_int_eq(ms_seq_forward(&s, bad, 2, a, false, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "token id"));
	int32_t neg = -5;
	ck_assert_int_eq(ms_seq_forward(&s, &neg, 1, a, false, &err), -EINVAL);
	ck_assert_int_eq(ms_seq_forward(&s, tok, 3, a, false, &err), -ENOSPC);
	ck_assert_int_eq(s.n_past, 10);
	ck_assert_int_eq(ms_seq_forward(&s, tok + 10, 2, a, false, &err), 0);
	ck_assert_int_eq(ms_seq_forward(&ref, tok + 10, 2, b, false, &err), 0);
	ck_assert_int_eq(memcmp(a, b, (size_t)V * sizeof(float)), 0);
	/* capacity beyond max_position_embeddings is refused at init */
	struct ms_seq big;
	ck_assert_int_lt(ms_seq_init(&big, &l.m, l.m.cfg.max_pos + 1, &err), 0);
	ms_seq_free(&big);
	ms_seq_free(&s);
	ms_seq_free(&ref);
	free(tok), free(a), free(b);
	unload(&l);
}
END_TEST

START_TEST(inspect_groups_name_schemes_and_kernels)
{
	struct loaded l;
	load_fixture(&l, "MS_FIXTURE_MXFP4", 1);
	bool experts_mxfp4 = false, attn_unquant = false;
	for (int i = 0; i < l.m.n_groups; i++) {
		const struct ms_tensor_group *g = &l.m.groups[i];
		if (!strncmp(g->name, "experts", 7))
			experts_mxfp4 |= !strcmp(g->scheme, "mxfp4") && strstr(g->kernel, "-mxfp4");
		if (!strcmp(g->name, "attention q/k/v/o"))
			attn_unquant |= !strcmp(g->scheme, "unquantized") && g->count == 4 * (int)l.m.cfg.n_layers;
		ck_assert(g->bytes > 0);
	}
	ck_assert(experts_mxfp4);
	ck_assert(attn_unquant);
	unload(&l);
}
END_TEST

static void add_portable(Suite *s)
{
	TCase *parts = tcase_create("parts");
	tcase_add_test(parts, yarn_frequencies);
	tcase_add_test(parts, default_rope_frequencies);
	tcase_add_test(parts, sink_softmax);
	tcase_add_test(parts, router_topk_softmax);
	tcase_add_test(parts, expert_activation);
	suite_add_tcase(s, parts);
	TCase *moe = tcase_create("moe-scratch");
	tcase_set_timeout(moe, 300);
	tcase_add_test(moe, scratch_grows_once);
	tcase_add_loop_test(moe, moe_reused_scratch_matches_fresh, 0,
			    (int)(sizeof(moe_sets) / sizeof(moe_sets[0])));
	tcase_add_loop_test(moe, linear_reused_scratch_matches_fresh, 0,
			    (int)(sizeof(moe_sets) / sizeof(moe_sets[0])));
	suite_add_tcase(s, moe);
	/* ~37M exp evaluations: a second, tens under the sanitizers */
	TCase *ex = tcase_create("activation-exp");
	tcase_set_timeout(ex, 300);
	tcase_add_test(ex, expert_activation_exp);
	tcase_add_loop_test(ex, swiglu_row_matches_scalar, ROW_GENERIC, ROW_GENERIC + 1);
	suite_add_tcase(s, ex);
	TCase *fw = tcase_create("forward");
	tcase_set_timeout(fw, 300);
	tcase_add_test(fw, incremental_matches_full_bf16);
	tcase_add_test(fw, incremental_matches_full_mxfp4);
	tcase_add_test(fw, threads_do_not_change_logits);
	tcase_add_test(fw, refusals_leave_sequence_intact);
	tcase_add_test(fw, inspect_groups_name_schemes_and_kernels);
	suite_add_tcase(s, fw);
}

static void add_row(TCase *tc, int row)
{
	tcase_add_loop_test(tc, swiglu_row_matches_scalar, row, row + 1);
}

int main(int argc, char **argv)
{
	static const struct isa_gate gates[] = {
		{"avx2", MS_CPU_AVX2, NULL, add_row, ROW_AVX2},
		{"avx512", SWIGLU_AVX512, NULL, add_row, ROW_AVX512},
	};
	return isa_run(argc, argv, "model", add_portable, ISA_GATES(gates), 300);
}
