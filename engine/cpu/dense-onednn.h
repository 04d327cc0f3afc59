/*
 * dense-onednn.h: dense bf16 matrices (attention projections, lm_head,
 * router) through oneDNN's matmul where it is faster than our AVX-512 row
 * kernel, chosen by measurement when each matrix shape is first packed.
 *
 * The matrix is packed once into oneDNN's blocked layout, in panels of
 * MS_ONEDNN_PANEL output rows, each panel its own small [K, 64] weights
 * tensor. A row task of the backend (or of moe.c) runs its panels one
 * after another through single-threaded oneDNN primitives: rows are still
 * split over our pool, so every output element is computed by one fixed
 * primitive whatever the number of threads or the task split (results are
 * bit-identical across thread counts), and no OpenMP thread is ever started
 * to compete with the pinned pool.
 *
 * Which path computes a matrix is decided once per shape, by timing oneDNN
 * against our AVX-512 bf16 kernel when the first matrix of that shape is
 * packed (a shape where oneDNN is not faster is declined, and the backend
 * binds avx512-bf16). The choice is per shape and never per batch size:
 * a token's result must be the same bits whatever batch it comes in
 * (the engine's batch invariance), and with rounded activations it would
 * not be: a last-bit difference of summation order between two paths
 * flips the bf16 rounding of some input of the next layer, a 2^-9 jump
 * (measured on the test fixtures: logits 0.01 apart between a prompt
 * computed whole and token by token when the path switched at n = 4).
 * oneDNN itself gives a row the same bits for every M (tested).
 *
 * Error: activations are rounded to bf16 (round to nearest even; relative
 * error at most 2^-9 per element); products of bf16 values are exact in
 * fp32 and sums are fp32 (VDPBF16PS or AMX: inputs and outputs denormals
 * flushed to zero). --exact skips this kernel.
 */
#ifndef MS_DENSE_ONEDNN_H
#define MS_DENSE_ONEDNN_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"

#define MS_ONEDNN_PANEL 64        /* output rows per packed panel (row_align) */

/* Packed kernel for MS_WFMT_BF16 (isa "avx512"): the choice table
 * (kernel-table.c) lists it right behind avx512bf16-vnni2 where
 * ms_dense_onednn_usable says so (MS_CPU_ONEDNN_BF16). */
extern const struct ms_kernel ms_kernel_onednn_bf16;

/* True when this CPU (ms_cpu_detect flags) runs our AVX-512 bf16 kernel and
 * libdnnl reports an ISA with native bf16 products (AVX512-BF16 or AMX;
 * ONEDNN_MAX_CPU_ISA caps it): without them oneDNN's bf16 matmul is a slow
 * fallback and never worth packing for. */
bool ms_dense_onednn_usable(unsigned cpu_flags);

/* Skip the measurement for matrices packed from now on and always take
 * them (tests); false restores measuring. Process-wide. */
void ms_dense_onednn_force(bool always);

/* Run chunks shorter than m tokens zero-padded to m rows in matrices packed
 * from now on, as on a CPU where the batch-invariance check finds M0 = m
 * (tests: the padded path on any CPU); 0 or 1 restores the check's own
 * M0. Process-wide. */
void ms_dense_onednn_pad_to(int64_t m);

/* The chunk length a matrix packed by this kernel pads shorter chunks to
 * (1: none), the larger of its two panel kinds'. */
int64_t ms_dense_onednn_pads_to(const struct ms_wmat *w);

/* One measured shape: seconds per call on `rows_timed` rows, single thread,
 * ours vs oneDNN, at n = MS_ONEDNN_MEASURE_N[i]. */
#define MS_ONEDNN_N_MEASURED 4
extern const int64_t MS_ONEDNN_MEASURE_N[MS_ONEDNN_N_MEASURED];
struct ms_dense_measure {
	int64_t rows, cols;          /* the matrix shape measured */
	int64_t rows_timed;          /* leading rows actually timed */
	double ours[MS_ONEDNN_N_MEASURED], onednn[MS_ONEDNN_N_MEASURED];
	bool chosen;                 /* oneDNN: sum of its times < 0.95 x ours */
};
/* Copy up to max measured shapes (in measurement order); returns how many
 * there are in all. */
int ms_dense_onednn_measurements(struct ms_dense_measure *out, int max);

/* oneDNN's own bf16 matmul at its best, the ceiling bench sets prefill
 * against: y[M, N] (f32) = x[M, K] (bf16) W^T, W [N, K] bf16 rows as
 * moeserve keeps them, random. It runs the way the kernel runs oneDNN: the
 * N columns split over pool's threads, each slice a single-threaded
 * primitive (no OpenMP team spinning against the pool). r: the best of
 * several runs, or gflops 0 and why. */
struct ms_pool;
struct ms_onednn_rate {
	double gflops;    /* 0 when it could not run; why says why */
	char why[160];
};
void ms_dense_onednn_ceiling(struct ms_pool *pool, int64_t M, int64_t K, int64_t N,
			     struct ms_onednn_rate *r);

#endif
