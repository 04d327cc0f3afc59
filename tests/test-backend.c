/*
 * test-backend.c: the backend interface's own parts (engine/backend.c and
 * the CPU's memory operations): the registry by name, the arena's growth
 * and alignment, buffers zero-filled small and large, host vectors
 * adopted, and the KV pool's storage and copy-on-write through a backend.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check-run.h"
#include "kv-cache.h"

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

static float kv_get(const struct ms_kv_pool *p, const void *row, int64_t i)
{
	return p->dtype == MS_KV_BF16 ? ms_bf16_f32(((const uint16_t *)row)[i])
				      : ((const float *)row)[i];
}

static void kv_set(const struct ms_kv_pool *p, void *row, int64_t i, float x)
{
	ms_kv_store(p, (char *)row + i * (int64_t)p->esize, &x, 1);
}

/* Pages of either dtype in the backend's memory; a page copy is a copy. */
START_TEST(kv_pages_in_backend_memory)
{
	const enum ms_kv_dtype dt = _i ? MS_KV_BF16 : MS_KV_F32;
	struct ms_backend *be = open_cpu();
	struct ms_kv_pool pool;
	struct ms_err err = {0};
	const int64_t P = 4, kvd = 24;
	ck_assert_int_eq(ms_kv_pool_init(&pool, be, 8, P, kvd, dt, &err), 0);
	ck_assert_ptr_eq(pool.be, be);
	ck_assert_uint_eq(pool.esize, dt == MS_KV_BF16 ? 2 : 4);
	ck_assert_uint_eq(ms_kv_page_bytes(P, kvd, dt), 2 * P * kvd * pool.esize);
	int32_t a = ms_kv_page_alloc(&pool), b = ms_kv_page_alloc(&pool);
	ck_assert_int_ge(a, 0);
	ck_assert_int_ge(b, 0);
	for (int64_t s = 0; s < P; s++)
		for (int64_t i = 0; i < kvd; i++) {
			kv_set(&pool, ms_kv_k(&pool, a, s), i, (float)(s * 100 + i) + 0.25f);
			kv_set(&pool, ms_kv_v(&pool, a, s), i, -(float)(s * 100 + i) - 0.5f);
		}
	size_t bytes = (size_t)(P * kvd) * pool.esize;
	ms_kv_page_copy(&pool, b, a);
	ck_assert_mem_eq(ms_kv_k(&pool, b, 0), ms_kv_k(&pool, a, 0), bytes);
	ck_assert_mem_eq(ms_kv_v(&pool, b, 0), ms_kv_v(&pool, a, 0), bytes);
	/* the copy is a copy: writing one leaves the other; a value reads back
	 * as stored (bf16: 103.25 rounds to nearest even, 103) */
	kv_set(&pool, ms_kv_k(&pool, b, 1), 3, 7.0f);
	ck_assert_float_eq(kv_get(&pool, ms_kv_k(&pool, b, 1), 3), 7.0f);
	ck_assert_float_eq(kv_get(&pool, ms_kv_k(&pool, a, 1), 3), dt == MS_KV_BF16 ? 103.0f : 103.25f);
	ms_kv_pool_free(&pool);
	ms_backend_close(be);
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
	ck_assert_int_eq(ms_kv_dtype_parse("fp8", &d), -EINVAL);
	/* a backend whose attention reads f32 only refuses a bf16 pool */
	struct ms_backend only32 = {.name = "f32-only", .kv_dtypes = 1u << MS_KV_F32};
	struct ms_err err = {0};
	ck_assert_int_eq(ms_kv_dtype_check(&only32, MS_KV_F32, &err), 0);
	ck_assert_int_eq(ms_kv_dtype_check(&only32, MS_KV_BF16, &err), -ENOTSUP);
	ck_assert(strstr(err.msg, "f32-only") && strstr(err.msg, "bf16"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("backend");
	TCase *tc = tcase_create("interface");
	tcase_add_test(tc, registry_names_backends);
	tcase_add_test(tc, arena_grows_never_shrinks);
	tcase_add_test(tc, buffers_zeroed_small_and_large);
	tcase_add_loop_test(tc, kv_pages_in_backend_memory, 0, 2);
	tcase_add_test(tc, kv_bf16_rounding);
	suite_add_tcase(s, tc);
	return ms_check_run(s);
}
