/*
 * kernels.h: the CPU backend's kernel table.
 *
 * A kernel computes y = x W^T over a range of output rows for one weight
 * format (engine/wmat.h). The backend picks the candidates per format when
 * it starts, from the one ordered table of kernel-table.c; nothing in the
 * hot path branches on the CPU.
 */
#ifndef MS_KERNELS_H
#define MS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "linear.h"
#include "wmat.h"

/* The row kernel that applies the experts' activation (struct ms_swiglu,
 * linear.h) to interleaved gate/up outputs (moe.h). */
typedef void (*ms_swiglu_row_fn)(struct ms_swiglu act, const float *restrict g,
				 const float *restrict b, int64_t n, float *restrict a);

/* Structured outputs' logit writers (backend.h's ms_mask_words_fn) for
 * x86-64 (mask-words.c); the table picks one, ms_mask_words_ref last. */
void ms_mask_words_avx512(const uint64_t *bits, int64_t words, float *z);
void ms_mask_words_avx2(const uint64_t *bits, int64_t words, float *z);

/* y[t * ldy + r] = sum_k W[r, k] * x[t * ldx + k], for r in [r0, r1) and
 * t in [0, n). Accumulates in fp32 or better; never writes outside
 * [r0, r1) of each row of y. */
typedef void (*ms_gemm_fn)(const struct ms_wmat *w, int64_t r0, int64_t r1, const float *x,
			   int64_t ldx, int64_t n, float *y, int64_t ldy);

/* Kernels that read their own packed layout also read activations in their
 * own form (int8 blocks, bf16, ...): prep converts x once per call into a
 * buffer of prep_size bytes that every row task then shares. */
typedef size_t (*ms_prep_size_fn)(const struct ms_wmat *w, int64_t n);
typedef void (*ms_prep_fn)(const struct ms_wmat *w, const float *x, int64_t ldx, int64_t n,
			   void *xq);
/* y[t * ldy + r] for r in [r0, r1), t < n, from prepared activations; r0
 * is a multiple of the kernel's row_align, r1 too unless it is w->rows. */
typedef void (*ms_gemmq_fn)(const struct ms_wmat *w, int64_t r0, int64_t r1, const void *xq,
			    int64_t n, float *y, int64_t ldy);

struct ms_err;
/* Build w->pack from w's rows; the buffer is the caller's to free() (one
 * allocation). -ENOTSUP with a reason when this kernel cannot take the
 * matrix (the backend then tries the next kernel for the format). */
typedef int (*ms_pack_fn)(struct ms_wmat *w, void **owned, struct ms_err *err);

/* CPU feature bits (cpu.c detects them; a kernel lists what it needs: every
 * -m option of the static library its code is built in, meson.build). */
enum ms_cpu_flag {
	MS_CPU_AVX2 = 1u << 0,
	MS_CPU_FMA = 1u << 1,
	MS_CPU_F16C = 1u << 2,
	MS_CPU_AVX512F = 1u << 3,
	MS_CPU_AVX512BW = 1u << 4,
	MS_CPU_AVX512VL = 1u << 5,
	MS_CPU_AVX512VNNI = 1u << 6,
	MS_CPU_AVX512BF16 = 1u << 7,
	MS_CPU_AMX_TILE = 1u << 8,
	MS_CPU_AMX_INT8 = 1u << 9,
	MS_CPU_AMX_BF16 = 1u << 10,
	MS_CPU_AVX512VBMI = 1u << 11,
	/* Not a CPUID bit, never in ms_cpu_detect's flags: libdnnl multiplies
	 * bf16 natively on this machine (ms_dense_onednn_usable). The backend
	 * adds it for the choice table only, so that oneDNN's entry states
	 * this condition as a flag like any other (and tests can set it). */
	MS_CPU_ONEDNN_BF16 = 1u << 12,
};

/* A kernel is either a plain one (gemm on fp32 activations and the rows of
 * the matrix) or a packed one (pack at load, prep per call, gemmq per row
 * task). */
struct ms_kernel {
	const char *name;      /* "ref-bf16", ... shown by inspect */
	const char *isa;       /* "ref", "avx2", "avx512", "amx": the --kernels set */
	enum ms_wfmt fmt;
	unsigned cpu_flags;    /* all must be present */
	ms_gemm_fn gemm;
	ms_pack_fn pack;
	ms_prep_size_fn prep_size;
	ms_prep_fn prep;
	ms_gemmq_fn gemmq;
	int row_align;         /* packed kernels: rows per panel (0: any) */
	/* Packed copies that are not one malloc'd buffer (a library's objects)
	 * are released with this; NULL: free(). */
	void (*pack_free)(void *owned);
	/* When it returns true for this matrix and n, the backend calls gemmq
	 * once for all rows from the calling thread instead of splitting rows
	 * over its pool (a library kernel with its own threading, such as
	 * oneDNN above a batch size it measured at pack time). */
	bool (*whole)(const struct ms_wmat *w, int64_t n);
	/* A packed kernel whose gemmq still reads the rows of the matrix (for
	 * some n): the loader must keep them resident. */
	bool keeps_rows;
	/* Rounds activations (to int8, bf16, ...) before the product: results
	 * differ from the reference by more than fp32 summation order (each
	 * such kernel states its error in engine/README.md). --exact skips it. */
	bool rounds_acts;
};

/* The kernels of each ISA build, ended by an entry without a name. Their
 * order is not a preference: the choice table (kernel-table.c) orders
 * them. It names each kernel by its row here, and the lists are
 * initialised by these indices, so a row cannot move under the table. */
enum ms_kernels_avx512_row {
	MS_K_AVX512VBMI_Q8_MXFP4,
	MS_K_AVX512VNNI_Q8_MXFP4,
	MS_K_AVX512VNNI_Q8_INTQ,
	MS_K_AVX512BF16_VNNI2,
	MS_K_AVX512_F32,
	MS_K_AVX512_F16,
	MS_K_AVX512_BF16,
	MS_K_AVX512_MXFP4,
	MS_K_AVX512_INTQ,
	MS_K_AVX512_FP8,
	MS_K_AVX512_COUNT,
};
enum ms_kernels_avx2_row {
	MS_K_AVX2_Q8_MXFP4,
	MS_K_AVX2_Q8_INTQ,
	MS_K_AVX2_F32,
	MS_K_AVX2_F16,
	MS_K_AVX2_BF16,
	MS_K_AVX2_COUNT,
};
/* kernels-amx.c's two builds: real tiles, and the software tile model. */
enum ms_kernels_amx_row {
	MS_K_AMX_BF16,
	MS_K_AMX_MXFP4,
	MS_K_AMX_INTQ,
	MS_K_AMX_COUNT,
};
/* Portable reference kernels, one per format, indexed by format: the
 * definition of correctness. */
extern const struct ms_kernel ms_kernels_ref[MS_WFMT_COUNT + 1];
extern const struct ms_kernel ms_kernels_avx512[MS_K_AVX512_COUNT + 1];
extern const struct ms_kernel ms_kernels_avx2[MS_K_AVX2_COUNT + 1];
extern const struct ms_kernel ms_kernels_amx[MS_K_AMX_COUNT + 1];
extern const struct ms_kernel ms_kernels_amx_sim[MS_K_AMX_COUNT + 1];

/* FN(args..., NT) with NT the literal 1..4 equal to nt, for the fp32 ISA
 * kernels' token passes (up to 4 tokens per pass over a row): with a
 * constant count their token loops unroll and the accumulators stay in
 * registers; with a run-time one each fmadd went through memory (load,
 * fmadd, store back: the router's 32 x 2048 at 16 tokens took ~100 us a
 * layer). The same operations in the same order either way. */
#define MS_CALL_NT4(nt, FN, ...)                  \
	do {                                      \
		if ((nt) == 4)                    \
			FN(__VA_ARGS__, 4);       \
		else if ((nt) == 3)               \
			FN(__VA_ARGS__, 3);       \
		else if ((nt) == 2)               \
			FN(__VA_ARGS__, 2);       \
		else                              \
			FN(__VA_ARGS__, 1);       \
	} while (0)

/* The gemm over rows r0..r1 of the fp32 ISA kernels (kernels-avx2.c,
 * kernels-avx512.c) around their row function ROWS(row, row_bytes, K, x,
 * ldx, t0, y, ldy, r, RB, NT): RB rows a pass while RB remain, then one;
 * tokens 4 at a time (MS_CALL_NT4). RB is a literal, so is every count the
 * row function sees. */
#define MS_DEF_ROWS_GEMM(NAME, ELEM, ROWS, RB)                                                \
	static void NAME(const struct ms_wmat *w, int64_t r0, int64_t r1, const float *x,     \
			 int64_t ldx, int64_t n, float *y, int64_t ldy)                       \
	{                                                                                      \
		int64_t K = w->cols;                                                           \
		for (int64_t r = r0; r < r1;) {                                                \
			const ELEM *row = (const ELEM *)(w->w + (size_t)r * w->row_bytes);     \
			bool full = r + (RB) <= r1;                                            \
			for (int64_t t0 = 0; t0 < n; t0 += 4) {                                \
				int nt = (int)(n - t0 < 4 ? n - t0 : 4);                       \
				if (full)                                                      \
					MS_CALL_NT4(nt, ROWS, row, w->row_bytes, K, x, ldx, t0, y, \
						    ldy, r, RB);                               \
				else                                                           \
					MS_CALL_NT4(nt, ROWS, row, w->row_bytes, K, x, ldx, t0, y, \
						    ldy, r, 1);                                \
			}                                                                      \
			r += full ? (RB) : 1;                                                  \
		}                                                                              \
	}

#endif
