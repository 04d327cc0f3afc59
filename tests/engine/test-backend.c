/*
 * test-backend.c: the backend interface's own parts (engine/backend.c and
 * the CPU's memory operations): the registry by name, the arena's growth
 * and alignment, buffers zero-filled small and large, host vectors
 * adopted, and the KV pool's storage and copy-on-write through a backend.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check-run.h"
#include "kv-cache.h"
#include "wmat.h"

static struct ms_backend *open_cpu(void)
{
	struct ms_backend_opts o = {.backend = "cpu", .kernels = "ref", .threads = 1};
	struct ms_backend *be = NULL;
	struct ms_err err = {0};
	ck_assert_msg(ms_backend_open(&o, &be, &err) == 0, "%s", err.msg);
	ck_assert_ptr_nonnull(be);
	return be;
}

START_TEST(registry_names_backends)
{
	ck_assert_ptr_nonnull(strstr(ms_backend_names(), "cpu"));
	struct ms_backend_opts o = {.backend = "rocm-nope", .threads = 1};
	struct ms_backend *be = (struct ms_backend *)1;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_backend_open(&o, &be, &err), -EINVAL);
	ck_assert_ptr_null(be);
	ck_assert_ptr_nonnull(strstr(err.msg, "\"rocm-nope\""));
	ck_assert_ptr_nonnull(strstr(err.msg, "cpu"));
	/* no name: the first in the table, the CPU */
	o.backend = NULL;
	o.kernels = "no-such-set";
	ck_assert_int_eq(ms_backend_open(&o, &be, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "no-such-set"));
	be = open_cpu();
	ck_assert_str_eq(be->name, "cpu");
	ck_assert_str_eq(be->kernels, "ref");
	ck_assert(be->host);
	ck_assert_int_eq(be->threads, 1);
	ck_assert_ptr_nonnull(be->pool);
	/* every operation the forward pass calls is there */
	const struct ms_backend_ops *op = be->ops;
	ck_assert(op->buf_alloc && op->buf_free && op->copy && op->to_host && op->from_host &&
		  op->bind && op->step_begin && op->embed && op->linear && op->rmsnorm &&
		  op->rope_table && op->rope && op->add && op->kv_write && op->attention && op->moe);
	ms_backend_close(be);
}
END_TEST

START_TEST(arena_grows_never_shrinks)
{
	struct ms_backend *be = open_cpu();
	struct ms_err err = {0};
	ck_assert_int_eq(ms_backend_arena_reserve(be, 1000, &err), 0);
	size_t cap = be->arena.cap;
	ck_assert_uint_ge(cap, 1000);
	char *a = ms_backend_arena_take(be, 3), *b = ms_backend_arena_take(be, 65);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq((uintptr_t)a % 64, 0);
	ck_assert_uint_eq((uintptr_t)b % 64, 0);
	ck_assert_int_eq(b - a, 64);
	/* past what was reserved: NULL, not memory of someone else */
	ck_assert_ptr_null(ms_backend_arena_take(be, cap));
	/* a smaller step reuses the same memory from its start */
	char *base = be->arena.base;
	ck_assert_int_eq(ms_backend_arena_reserve(be, 10, &err), 0);
	ck_assert_ptr_eq(be->arena.base, base);
	ck_assert_uint_eq(be->arena.cap, cap);
	ck_assert_ptr_eq(ms_backend_arena_take(be, 10), a);
	/* a larger one grows it (by half again: no regrowth a token at a time) */
	ck_assert_int_eq(ms_backend_arena_reserve(be, 4 << 20, &err), 0);
	ck_assert_uint_ge(be->arena.cap, (4u << 20) + (2u << 20));
	size_t big = be->arena.cap;
	ck_assert_int_eq(ms_backend_arena_reserve(be, (4 << 20) + 1, &err), 0);
	ck_assert_uint_eq(be->arena.cap, big);
	/* more than any machine has: an error with a message, the arena kept */
	ck_assert_int_eq(ms_backend_arena_reserve(be, SIZE_MAX / 4, &err), -ENOMEM);
	ck_assert_ptr_nonnull(strstr(err.msg, "activations"));
	ck_assert_uint_eq(be->arena.cap, big);
	ms_backend_close(be);
}
END_TEST

START_TEST(buffers_zeroed_small_and_large)
{
	struct ms_backend *be = open_cpu();
	const size_t sizes[] = {1, 100, 4095, (1u << 20) - 64, (1u << 20), (3u << 20) + 7};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		unsigned char *p = be->ops->buf_alloc(be, sizes[i]);
		ck_assert_ptr_nonnull(p);
		ck_assert_uint_eq((uintptr_t)p % 64, 0);
		unsigned char any = 0;
		for (size_t k = 0; k < sizes[i]; k++)
			any |= p[k];
		ck_assert_uint_eq(any, 0);
		memset(p, 0xA5, sizes[i]);
		be->ops->buf_free(be, p);
	}
	be->ops->buf_free(be, NULL);
	/* a host backend keeps host vectors as they are */
	float *v = malloc(4 * sizeof(float)), *was = v;
	ck_assert_ptr_nonnull(v);
	struct ms_err err = {0};
	ck_assert_int_eq(ms_backend_adopt(be, &v, 4, &err), 0);
	ck_assert_ptr_eq(v, was);
	ms_backend_release(be, v);
	ms_backend_close(be);
}
END_TEST

/* Position s of a test page: K value i = s * 100 + i + 0.25, V its negative
 * less 0.25 (heads of 8: fp8 scales them apart). */
static void kv_fill(const struct ms_kv_pool *p, int32_t page, int64_t s, float *k, float *v)
{
	for (int64_t i = 0; i < p->kv_dim; i++)
		k[i] = (float)(s * 100 + i) + 0.25f, v[i] = -k[i] - 0.25f;
	ms_kv_put(p, page, s, k, v);
}

/* Pages of every dtype in the backend's memory; a page copy is a copy,
 * fp8's scales included. */
START_TEST(kv_pages_in_backend_memory)
{
	const enum ms_kv_dtype dt = (enum ms_kv_dtype)_i;
	struct ms_backend *be = open_cpu();
	struct ms_kv_pool pool;
	struct ms_err err = {0};
	const int64_t P = 4, kvd = 24, hd = 8;
	ck_assert_int_eq(ms_kv_pool_init(&pool, be, 8, P, kvd, hd, dt, &err), 0);
	ck_assert_ptr_eq(pool.be, be);
	ck_assert_uint_eq(pool.esize, dt == MS_KV_FP8 ? 1 : dt == MS_KV_BF16 ? 2 : 4);
	/* fp8: a scale byte per position and head beside the codes */
	uint64_t row = (uint64_t)kvd * pool.esize + (dt == MS_KV_FP8 ? kvd / hd : 0);
	ck_assert_uint_eq(ms_kv_page_bytes(P, kvd, hd, dt), 2 * P * row);
	int32_t a = ms_kv_page_alloc(&pool), b = ms_kv_page_alloc(&pool);
	ck_assert_int_ge(a, 0);
	ck_assert_int_ge(b, 0);
	float k[24], v[24];
	for (int64_t s = 0; s < P; s++)
		kv_fill(&pool, a, s, k, v);
	size_t bytes = (size_t)(P * row);
	ms_kv_page_copy(&pool, b, a);
	ck_assert_mem_eq(ms_kv_k(&pool, b, 0), ms_kv_k(&pool, a, 0), bytes);
	ck_assert_mem_eq(ms_kv_v(&pool, b, 0), ms_kv_v(&pool, a, 0), bytes);
	for (int64_t i = 0; i < kvd; i++)
		ck_assert_float_eq(ms_kv_get(&pool, true, b, 2, i), ms_kv_get(&pool, true, a, 2, i));
	/* the copy is a copy: writing one leaves the other; a value reads back
	 * as stored: 103.25 is 103 in bf16 (a tie, to even), 104 in fp8 (its
	 * head's largest value 107.25 gives a scale of 1/4: 413 -> 416) */
	kv_fill(&pool, b, 1, k, v);
	k[3] = 7.0f;
	ms_kv_put(&pool, b, 1, k, v);
	ck_assert_float_eq(ms_kv_get(&pool, false, b, 1, 3), 7.0f);
	ck_assert_float_eq(ms_kv_get(&pool, false, a, 1, 3),
			   dt == MS_KV_FP8 ? 104.0f : dt == MS_KV_BF16 ? 103.0f : 103.25f);
	ms_kv_pool_free(&pool);
	ms_backend_close(be);
}
END_TEST

/* fp8.h's codec against wmat.c's (an independent definition): every code
 * decodes alike; floats of every class (zeros, subnormal codes, ties,
 * saturation, NaN) encode alike. */
START_TEST(kv_fp8_codec)
{
	for (int c = 0; c < 256; c++) {
		float a = ms_fp8_e4m3_f32((uint8_t)c), b = ms_fp8_e4m3_to_f32((uint8_t)c);
		ck_assert_msg((isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b)),
			      "code %#x: %g vs %g", c, a, b);
	}
	uint32_t s = 99;
	for (int i = 0; i < 300000; i++) {
		s = s * 1664525u + 1013904223u;
		float x;
		if (i < 254) /* every finite code's value, both signs */
			x = ((i & 1) ? -1.0f : 1.0f) * ms_fp8_e4m3_f32((uint8_t)(i / 2));
		else {
			uint32_t e = 100 + (s >> 24) % 45; /* 2^-27 .. 2^17 */
			uint32_t u = (s & 0x807FFFFFu) | (e << 23);
			memcpy(&x, &u, 4);
		}
		ck_assert_uint_eq(ms_fp8_e4m3_rne(x), ms_f32_to_fp8_e4m3(x));
	}
	for (int c = 0; c < 0x7E; c++) { /* midpoints go to the even code */
		float mid = (ms_fp8_e4m3_f32((uint8_t)c) + ms_fp8_e4m3_f32((uint8_t)(c + 1))) / 2;
		ck_assert_uint_eq(ms_fp8_e4m3_rne(mid), ms_f32_to_fp8_e4m3(mid));
		ck_assert_uint_eq(ms_fp8_e4m3_rne(mid), (uint8_t)(c % 2 ? c + 1 : c));
	}
	const float sp[] = {0.0f, -0.0f, 448.0f, 464.0f, -500.0f, INFINITY, -INFINITY, 1e-30f};
	for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++)
		ck_assert_uint_eq(ms_fp8_e4m3_rne(sp[i]), ms_f32_to_fp8_e4m3(sp[i]));
	ck_assert_uint_eq(ms_fp8_e4m3_rne(NAN), 0x7F);
}
END_TEST

/* A head's scale is the least power of two that fits its largest value
 * in 448; a NaN makes the whole head NaN; zeros and infinities stay
 * finite. */
START_TEST(kv_fp8_head_scale)
{
	uint32_t s = 7;
	for (int i = 0; i < 20000; i++) {
		float x[16];
		float mag = ldexpf(1.0f, (int)((s >> 8) % 60) - 30);
		for (int e = 0; e < 16; e++) {
			s = s * 1664525u + 1013904223u;
			x[e] = mag * ((float)(s >> 8) / 16777216.0f * 2.0f - 1.0f);
		}
		if (i % 7 == 0)
			x[i % 16] = 448.0f * mag; /* a largest value exactly on a boundary */
		uint8_t q[16], b = ms_fp8_kv_head(x, 16, q);
		float amax = 0;
		for (int e = 0; e < 16; e++)
			amax = fmaxf(amax, fabsf(x[e]));
		float sc = ms_e8m0_f32(b);
		ck_assert_msg(amax <= 448.0f * sc && amax > 224.0f * sc, "amax %g scale %g", amax, sc);
		for (int e = 0; e < 16; e++) {
			float got = ms_fp8_e4m3_f32(q[e]) * sc;
			ck_assert_msg(fabsf(got - x[e]) <= fmaxf(fabsf(x[e]) / 16, sc * 0x1p-10f),
				      "%g -> %g", x[e], got);
		}
	}
	float z[4] = {0}, nan4[4] = {1, NAN, 2, 3}, inf4[4] = {1, INFINITY, -2, 3};
	uint8_t q[4];
	ck_assert_uint_eq(ms_fp8_kv_head(z, 4, q), 127);
	ck_assert_float_eq(ms_fp8_e4m3_f32(q[0]), 0.0f);
	ck_assert_uint_eq(ms_fp8_kv_head(nan4, 4, q), MS_E8M0_NAN);
	ck_assert(isnan(ms_e8m0_f32(MS_E8M0_NAN) * ms_fp8_e4m3_f32(q[0])));
	uint8_t bi = ms_fp8_kv_head(inf4, 4, q);
	ck_assert_uint_eq(bi, 127 + MS_FP8_KMAX);
	ck_assert(isfinite(ms_fp8_e4m3_f32(q[1]) * ms_e8m0_f32(bi)));
}
END_TEST

/* bf16 storage rounds to nearest even and keeps specials. */
START_TEST(kv_bf16_rounding)
{
	const struct { float x, want; } t[] = {
		{1.0f, 1.0f}, {1.00390625f, 1.0f} /* a tie: to even */, {1.01171875f, 1.015625f},
		{-3.0e38f, -3.0040553e38f}, {1e-40f, 9.1835496e-41f}, {INFINITY, INFINITY},
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		float got = ms_bf16_f32(ms_bf16_rne(t[i].x));
		ck_assert_msg(got == t[i].want || fabsf(got - t[i].want) <= fabsf(t[i].want) * 1e-4f,
			      "%g -> %g, want %g", t[i].x, got, t[i].want);
	}
	ck_assert(isnan(ms_bf16_f32(ms_bf16_rne(NAN))));
	enum ms_kv_dtype d;
	ck_assert_int_eq(ms_kv_dtype_parse("bf16", &d), 0);
	ck_assert_int_eq(d, MS_KV_BF16);
	ck_assert_int_eq(ms_kv_dtype_parse("f32", &d), 0);
	ck_assert_int_eq(d, MS_KV_F32);
	ck_assert_int_eq(ms_kv_dtype_parse("fp8", &d), 0);
	ck_assert_int_eq(d, MS_KV_FP8);
	ck_assert_int_eq(ms_kv_dtype_parse("fp16", &d), -EINVAL);
	/* a backend whose attention reads f32 only refuses a bf16 pool */
	struct ms_backend only32 = {.name = "f32-only", .kv_dtypes = 1u << MS_KV_F32};
	struct ms_err err = {0};
	ck_assert_int_eq(ms_kv_dtype_check(&only32, MS_KV_F32, &err), 0);
	ck_assert_int_eq(ms_kv_dtype_check(&only32, MS_KV_BF16, &err), -ENOTSUP);
	ck_assert(strstr(err.msg, "f32-only") && strstr(err.msg, "bf16"));
}
END_TEST

/* Issue 24's memory case: gpt-oss-20b's KV geometry (24 layers, every
 * other one sliding over 128 positions, 8 kv heads of 64) holds a context
 * of 131,072 tokens in about 3 GiB of bf16 (the sliding layers keep their
 * windows only): beside the 13.75 GB of weights, within a 24 GiB machine.
 * The pages a sequence reserves add up to the same bytes, give or take a
 * page a layer and the sliding layers' chunk. fp8 takes about half. */
START_TEST(kv_context_20b)
{
	bool sliding[24];
	for (int l = 0; l < 24; l++)
		sliding[l] = l % 2 == 0;
	struct ms_kv_geom g = {.n_layers = 24, .kv_dim = 512, .head_dim = 64, .dtype = MS_KV_BF16,
			       .sliding_window = 128, .layer_sliding = sliding};
	const int64_t ctx = 131072;
	double bytes = ms_kv_geom_bytes(&g, ctx);
	double want = 12.0 * ctx * 2 * 512 * 2 + 12.0 * 128 * 2 * 512 * 2;
	ck_assert_msg(bytes == want, "%.0f vs %.0f", bytes, want);
	ck_assert(bytes < 3.1 * (1 << 30));
	ck_assert(bytes + 13.75e9 < 24.0 * (1 << 30) - 4.0 * (1 << 30)); /* 4 GiB to spare */
	int64_t pages = ms_kv_geom_seq_pages(&g, ctx, 256);
	double paged = (double)pages * (double)ms_kv_page_bytes(MS_KV_PAGE_TOKENS, 512, 64, g.dtype);
	ck_assert_msg(paged >= bytes && paged <= bytes * 1.01, "%.0f vs %.0f", paged, bytes);
	ck_assert_double_eq(ms_kv_geom_bytes_per_position(&g), 12.0 * 2 * 512 * 2);
	g.dtype = MS_KV_FP8;
	ck_assert_double_eq(ms_kv_geom_bytes_per_position(&g), 12.0 * 2 * (512 + 8));
	ck_assert(ms_kv_geom_bytes(&g, ctx) < 0.51 * bytes);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("backend");
	TCase *tc = tcase_create("interface");
	tcase_add_test(tc, registry_names_backends);
	tcase_add_test(tc, arena_grows_never_shrinks);
	tcase_add_test(tc, buffers_zeroed_small_and_large);
	tcase_add_loop_test(tc, kv_pages_in_backend_memory, MS_KV_F32, MS_KV_FP8 + 1);
	tcase_add_test(tc, kv_bf16_rounding);
	tcase_add_test(tc, kv_fp8_codec);
	tcase_add_test(tc, kv_fp8_head_scale);
	tcase_add_test(tc, kv_context_20b);
	suite_add_tcase(s, tc);
	return ms_check_run(s);
}
