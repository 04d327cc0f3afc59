/*
 * test-hip-sim.c: the host model of the HIP execution model
 * (engine/rocm/sim): a block reduction through shuffles and shared memory
 * at both wavefront widths and ragged block sizes, shuffle segments,
 * ballot masks, divergence at a barrier reported as an error, and
 * wavefront operations (the matrix instructions' hook): one call over
 * every lane's record in lane order, refused in a partial wavefront or
 * when lanes wait at different ones.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hip-sim.h"

/* out[block] = sum of x over the block's threads: wave shuffles, then
 * shared memory across waves, the way a real reduction kernel is written. */
struct red { const float *x; float *out; int n; };
static void reduce_kernel(void *p)
{
	struct red *a = p;
	struct ms_sim_dim t = ms_sim_thread_idx(), b = ms_sim_block_idx(), d = ms_sim_block_dim();
	int W = ms_sim_wave_size(), i = (int)(b.x * d.x + t.x);
	float v = i < a->n ? a->x[i] : 0.0f;
	for (int off = W / 2; off > 0; off /= 2)
		v += ms_sim_shfl_xor_f(v, off, W);
	float *sh = ms_sim_shared();
	if (t.x % (unsigned)W == 0)
		sh[t.x / (unsigned)W] = v;
	ms_sim_syncthreads();
	if (t.x == 0) {
		float s = 0;
		for (unsigned w = 0; w < (d.x + (unsigned)W - 1) / (unsigned)W; w++)
			s += sh[w];
		a->out[b.x] = s;
	}
}

START_TEST(block_reduce_both_widths)
{
	const int sizes[] = {64, 256, 128};
	for (int wi = 0; wi < 2; wi++) {
		int W = wi ? 32 : 64;
		for (int si = 0; si < 3; si++) {
			int bs = sizes[si], n = 1000, nb = (n + bs - 1) / bs;
			float *x = malloc(n * sizeof(float)), *out = calloc(nb, sizeof(float));
			for (int i = 0; i < n; i++)
				x[i] = (float)((i * 37) % 101) - 50.0f;
			struct red a = {x, out, n};
			struct ms_err err = {0};
			ck_assert_msg(ms_sim_launch((struct ms_sim_dim){nb, 1, 1}, (struct ms_sim_dim){bs, 1, 1},
						    64 * sizeof(float), W, reduce_kernel, &a, &err) == 0, "%s", err.msg);
			for (int b = 0; b < nb; b++) {
				double want = 0;
				for (int i = b * bs; i < (b + 1) * bs && i < n; i++)
					want += x[i];
				ck_assert_msg(fabs(out[b] - want) < 1e-3, "W %d bs %d block %d: %g vs %g", W, bs, b, out[b], want);
			}
			free(x), free(out);
		}
	}
}
END_TEST

/* Shuffles of width 32 inside a 64-lane wavefront stay in their segment. */
static void reduce32_kernel(void *p)
{
	struct red *a = p;
	int i = (int)ms_sim_thread_idx().x;
	float v = a->x[i];
	for (int off = 16; off > 0; off /= 2)
		v += ms_sim_shfl_xor_f(v, off, 32);
	if (i == 0)
		a->out[0] = v;
}

START_TEST(width_32_segments_in_a_64_wave)
{
	float x[64], out[1];
	for (int i = 0; i < 64; i++) x[i] = 1.0f;
	struct red a = {x, out, 64};
	struct ms_err err = {0};
	ck_assert_int_eq(ms_sim_launch((struct ms_sim_dim){1,1,1}, (struct ms_sim_dim){64,1,1}, 0, 32, reduce32_kernel, &a, &err), 0);
	ck_assert_float_eq(out[0], 32.0f); /* lane 0's wave of 32 */
	ck_assert_int_eq(ms_sim_launch((struct ms_sim_dim){1,1,1}, (struct ms_sim_dim){64,1,1}, 0, 64, reduce32_kernel, &a, &err), 0);
	ck_assert_float_eq(out[0], 32.0f); /* lane 0 sums its own segment only */
}
END_TEST

static void diverge_kernel(void *p)
{
	(void)p;
	if (ms_sim_thread_idx().x % 2)
		return;
	ms_sim_syncthreads();
}

static void ballot_kernel(void *p)
{
	uint64_t *out = p;
	unsigned t = ms_sim_thread_idx().x;
	uint64_t m = ms_sim_ballot(t % 3 == 0);
	if (t % (unsigned)ms_sim_wave_size() == 0)
		out[t / (unsigned)ms_sim_wave_size()] = m;
}

START_TEST(divergence_and_ballot)
{
	struct ms_err err = {0};
	ck_assert_int_eq(ms_sim_launch((struct ms_sim_dim){1,1,1}, (struct ms_sim_dim){64,1,1}, 0, 64, diverge_kernel, NULL, &err), -EDEADLK);
	ck_assert_ptr_nonnull(strstr(err.msg, "divergence"));
	uint64_t out[4] = {0};
	ck_assert_int_eq(ms_sim_launch((struct ms_sim_dim){1,1,1}, (struct ms_sim_dim){96,1,1}, 0, 32, ballot_kernel, out, &err), 0);
	for (int w = 0; w < 3; w++) {
		uint64_t want = 0;
		for (int l = 0; l < 32; l++) if ((w * 32 + l) % 3 == 0) want |= 1ull << l;
		ck_assert_uint_eq(out[w], want);
	}
}
END_TEST

/* A wavefront operation: each lane's record gets the sum of all lanes'
 * values times its lane index, and the lane count. */
struct wrec { int v, out, n; };
static void wave_sum(void *const *lanes, int n)
{
	int s = 0;
	for (int l = 0; l < n; l++)
		s += ((struct wrec *)lanes[l])->v;
	for (int l = 0; l < n; l++)
		((struct wrec *)lanes[l])->out = s * l, ((struct wrec *)lanes[l])->n = n;
}

static void wave_other(void *const *lanes, int n)
{
	(void)lanes, (void)n;
}

static void wave_kernel(void *p)
{
	int *out = p, t = (int)ms_sim_thread_idx().x;
	struct wrec r = {t + 1, 0, 0};
	ms_sim_wave_op(wave_sum, &r);
	out[t] = r.out * 1000 + r.n;
}

static void wave_diverge(void *p)
{
	struct wrec r = {0, 0, 0};
	(void)p;
	ms_sim_wave_op(ms_sim_thread_idx().x == 5 ? wave_other : wave_sum, &r);
}

START_TEST(wave_operations)
{
	struct ms_err err = {0};
	int out[128];
	ck_assert_int_eq(ms_sim_launch((struct ms_sim_dim){1,1,1}, (struct ms_sim_dim){128,1,1}, 0, 64, wave_kernel, out, &err), 0);
	for (int t = 0; t < 128; t++) {
		int w0 = t / 64 * 64, s = 0;
		for (int l = 0; l < 64; l++)
			s += w0 + l + 1;
		ck_assert_int_eq(out[t], s * (t % 64) * 1000 + 64);
	}
	/* 96 threads at 64 lanes: the second wavefront is partial */
	ck_assert_int_eq(ms_sim_launch((struct ms_sim_dim){1,1,1}, (struct ms_sim_dim){96,1,1}, 0, 64, wave_kernel, out, &err), -EDEADLK);
	ck_assert_ptr_nonnull(strstr(err.msg, "partial wavefront"));
	ck_assert_int_eq(ms_sim_launch((struct ms_sim_dim){1,1,1}, (struct ms_sim_dim){64,1,1}, 0, 64, wave_diverge, NULL, &err), -EDEADLK);
	ck_assert_ptr_nonnull(strstr(err.msg, "different"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("hip-sim");
	TCase *tc = tcase_create("model");
	tcase_add_test(tc, block_reduce_both_widths);
	tcase_add_test(tc, width_32_segments_in_a_64_wave);
	tcase_add_test(tc, divergence_and_ballot);
	tcase_add_test(tc, wave_operations);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int f = srunner_ntests_failed(sr);
	srunner_free(sr);
	return f ? 1 : 0;
}
