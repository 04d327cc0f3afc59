/*
 * kern-mma.cu: the products through AMD's matrix instructions (gpu-mma.h),
 * for prefill on targets that have them, over the same struct ms_gpu_gemv
 * as k_gemv and k_gemm and with the same epilogue (input scale, bias,
 * clamped SwiGLU). Three kinds (gpu.h's ms_gpu_mma_kind), each a kernel:
 *
 *   k_mma_bf16  any weight format decoded (gpu_decode) and the inputs,
 *               each rounded to bf16 (nearest even): the one kind that
 *               rounds operands (exact for bf16, MXFP4 and FP8 weights
 *               and for inputs a scheme quantized; not for fp32 inputs)
 *   k_mma_fp8   MXFP4 or FP8 weights as e4m3 bytes (e2m1 values are e4m3
 *               values) by inputs the scheme quantized (FP8, or MXFP4 as
 *               e4m3 with the block's power of two taken out), the scales
 *               applied per 32-column chunk to that chunk's fp32 sums
 *   k_mma_f4f8  MXFP4 weights as their own e2m1 codes and E8M0 scales, the
 *               inputs as k_mma_fp8's, in the scaled instruction (gfx950)
 *
 * so for W4A8 and W4A4 every product is the scheme's own, exactly; what
 * differs from k_gemm is the summation inside the instruction.
 *
 * e4m3fnuz (gfx94x) reads the same bits as OCP e4m3 at half the value (its
 * exponent bias is 8, not 7; subnormals too), except 0x80, its NaN, which
 * only OCP's -0 has: the bytes go as they are, -0 as +0, and each
 * operand's chunk multiplier is doubled, an exact rescale.
 *
 * A block is 4 wavefronts of 64 lanes (the launcher refuses other widths)
 * and a tile of MM_BM weight rows by MM_BN inputs, 32 x 32 per wavefront;
 * per slab of MM_BK columns the block stages the tile's operands in
 * __shared__ memory in the instruction's formats, then each wavefront
 * runs its instructions on them. Tiles are numbered as k_gemm's
 * (gpu-tile.h); both loops stride, so any size fits the grid.
 */
#include <errno.h>

#include "gpu-compat.h"
#include "gpu-formats.h"
#include "gpu-mma.h"
#include "gpu-prod.h"
#include "gpu-tile.h"
#include "kern.h"

#define MM_BM 128               /* weight rows per tile: 4 wavefronts of 32 */
#define MM_BN 32                /* inputs per tile */
#define MM_BK 64                /* columns per slab: two chunks */
#define MM_THREADS 256          /* 4 wavefronts of 64 */
#define MM_W16 (MM_BK / 4 + 1)  /* a bf16 row's 64-bit words, one of padding */
#define MM_W8 (MM_BK / 4 + 4)   /* an e4m3 row's 32-bit words (16-byte aligned) */
#define MM_W4 (MM_BK / 8 + 4)   /* an e2m1 row's 32-bit words (16-byte aligned) */

#if MM_BK != 2 * GPU_CHUNK || MM_BM * 2 != MM_THREADS
#error "a slab is two chunks; a thread stages one chunk of one weight row"
#endif

struct mm_args {
	struct ms_gpu_gemv g;
	int fnuz;                   /* the target's fp8 is e4m3fnuz */
};

/* The tile's operands for one slab. */
struct mm_smem {
	union {
		uint64_t b16[MM_BM][MM_W16];
		uint32_t f8[MM_BM][MM_W8];
		uint32_t f4[MM_BM][MM_W4];
	} w;
	union {
		uint64_t b16[MM_BN][MM_W16];
		uint32_t f8[MM_BN][MM_W8];
	} x;
	float wmul[MM_BM][2];       /* k_mma_fp8: a chunk's weight multiplier */
	int wsc[MM_BM][2];          /* k_mma_f4f8: its E8M0 byte */
	int xe[MM_BN][2];           /* an input chunk's power of two */
};

/* ---- operand formats ---- */

GPU_DEV uint32_t mm_bf16_bits(float f)
{
	uint32_t u = gpu_f2u(f);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		return (u >> 16) | 0x40u; /* NaN stays NaN */
	return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

/* The OCP e4m3 byte of v, a value e4m3 holds exactly (quantized inputs,
 * e2m1 values); zeros of either sign give 0x00. */
GPU_DEV uint32_t mm_e4m3_bits(float v)
{
	uint32_t u = gpu_f2u(v), a = u & 0x7FFFFFFFu, s = (u >> 24) & 0x80u;
	if (a == 0)
		return 0;
	if (a >= 0x7F800000u)
		return s | 0x7Fu;
	int e = (int)(a >> 23) - 127;
	if (e < -6) /* subnormal: m * 2^-9 */
		return s | (uint32_t)(gpu_u2f(a) * 512.0f);
	return s | (uint32_t)(e + 7) << 3 | ((a >> 20) & 7u);
}

/* e2m1 code -> its e4m3 byte (-0 as +0: fnuz has no negative zero):
 * 0.5 is 0x30, then 1 1.5 2 3 4 6 are 0x38 + 4 i. */
GPU_DEV uint32_t mm_e2m1_e4m3(unsigned c)
{
	unsigned i = c & 7;
	uint32_t mag = i == 0 ? 0u : (i == 1 ? 0x30u : 0x38u + 4u * (i - 2));
	return i && (c & 8) ? mag | 0x80u : mag;
}

/* ---- staging ---- */

/* Thread i's weight chunk: row i / 2, chunk i % 2 of the slab at k0. */
GPU_DEV int64_t mm_chunk_cols(const struct ms_gpu_mat *m, int64_t r, int64_t k)
{
	if (r >= m->rows || k >= m->cols)
		return 0;
	return m->cols - k < GPU_CHUNK ? m->cols - k : GPU_CHUNK;
}

GPU_DEV void mm_stage_w_bf16(const struct ms_gpu_mat *m, int64_t r, int64_t k, int row, int c,
			     struct mm_smem *sm)
{
	float w[GPU_CHUNK];
	int n = (int)mm_chunk_cols(m, r, k);
	if (n)
		gpu_decode(m, r, k, n, w);
	for (int v = 0; v < GPU_CHUNK / 4; v++) {
		uint64_t word = 0;
		for (int j = 0; j < 4; j++)
			if (4 * v + j < n)
				word |= (uint64_t)mm_bf16_bits(w[4 * v + j]) << (16 * j);
		sm->w.b16[row][8 * c + v] = word;
	}
}

/* Row r's e2m1 codes of columns k .. k + n into 4 words, zeros past n. */
GPU_DEV void mm_codes(const struct ms_gpu_mat *m, int64_t r, int64_t k, int n, uint32_t q[4])
{
	const uint8_t *p = m->w + r * m->row_bytes + k / 2;
	if (n == GPU_CHUNK && gpu_aligned16(p)) {
		gpu_ld16(p, q);
		return;
	}
	for (int i = 0; i < 4; i++)
		q[i] = 0;
	for (int j = 0; j < n; j++)
		q[j / 8] |= (uint32_t)((p[j / 2] >> (4 * (j & 1))) & 0xF) << (4 * (j % 8));
}

GPU_DEV void mm_stage_w_fp8(const struct ms_gpu_mat *m, int64_t r, int64_t k, int row, int c,
			    int fnuz, struct mm_smem *sm)
{
	int n = (int)mm_chunk_cols(m, r, k);
	uint32_t *out = &sm->w.f8[row][8 * c];
	float mul = 0;
	if (n && m->fmt == MS_WFMT_MXFP4) {
		uint32_t q[4];
		mm_codes(m, r, k, n, q);
		for (int v = 0; v < 8; v++) {
			uint32_t word = 0;
			for (int j = 0; j < 4; j++)
				word |= mm_e2m1_e4m3((q[v / 2] >> (4 * (4 * (v % 2) + j))) & 0xF)
					<< (8 * j);
			out[v] = word;
		}
		mul = gpu_e8m0(m->scales[r * m->scale_row_bytes + k / GPU_CHUNK]);
	} else if (n) { /* FP8: the bytes, -0 as +0 */
		const uint8_t *p = m->w + r * m->row_bytes + k;
		for (int v = 0; v < 8; v++) {
			uint32_t word = 0;
			for (int j = 0; j < 4 && 4 * v + j < n; j++) {
				uint32_t b = p[4 * v + j];
				word |= (b == 0x80u ? 0u : b) << (8 * j);
			}
			out[v] = word;
		}
		mul = m->fscale[r];
	} else {
		for (int v = 0; v < 8; v++)
			out[v] = 0;
	}
	sm->wmul[row][c] = fnuz ? 2.0f * mul : mul;
}

GPU_DEV void mm_stage_w_f4(const struct ms_gpu_mat *m, int64_t r, int64_t k, int row, int c,
			   struct mm_smem *sm)
{
	int n = (int)mm_chunk_cols(m, r, k);
	uint32_t q[4] = {0, 0, 0, 0};
	if (n)
		mm_codes(m, r, k, n, q);
	for (int v = 0; v < 4; v++)
		sm->w.f4[row][4 * c + v] = q[v];
	sm->wsc[row][c] = n ? m->scales[r * m->scale_row_bytes + k / GPU_CHUNK] : 127;
}

/* Input q of the tile's chunk c of the slab at k0: its columns (0 past the
 * tile's inputs or the matrix's columns) and *x, their first. */
GPU_DEV int mm_input_chunk(const struct ms_gpu_gemv *g, int64_t q0, int64_t q1, int64_t k0, int q,
			   int c, const float **x)
{
	int64_t k = k0 + GPU_CHUNK * c;
	int n = q0 + q < q1 && k < g->cols ? (int)(g->cols - k < GPU_CHUNK ? g->cols - k : GPU_CHUNK) : 0;
	*x = n ? g->x + gpu_input_id(g, q0 + q) / g->xdiv * g->ldx + k : NULL;
	return n;
}

/* Input chunk (q, c) as e4m3 bytes and a power of two: FP8 inputs as they
 * are (2^0); MXFP4 ones (c * 2^e, c e2m1) over 2^e of their largest, so
 * every value is exact in e4m3. Zeros past the inputs and columns. */
GPU_DEV void mm_stage_x8(const struct ms_gpu_gemv *g, int64_t q0, int64_t q1, int64_t k0,
			 int q, int c, int mx, struct mm_smem *sm)
{
	const float *x;
	int n = mm_input_chunk(g, q0, q1, k0, q, c, &x);
	float amax = 0;
	for (int j = 0; mx && j < n; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	int e = mx && amax > 0 ? gpu_mx_exp(amax) : 0;
	uint32_t *out = &sm->x.f8[q][8 * c];
	for (int v = 0; v < 8; v++) {
		uint32_t word = 0;
		for (int j = 0; j < 4 && 4 * v + j < n; j++)
			word |= mm_e4m3_bits(ldexpf(x[4 * v + j], -e)) << (8 * j);
		out[v] = word;
	}
	sm->xe[q][c] = e;
}

GPU_DEV void mm_stage_x16(const struct ms_gpu_gemv *g, int64_t q0, int64_t q1, int64_t k0,
			  int q, int c, struct mm_smem *sm)
{
	const float *x;
	int n = mm_input_chunk(g, q0, q1, k0, q, c, &x);
	for (int v = 0; v < GPU_CHUNK / 4; v++) {
		uint64_t word = 0;
		for (int j = 0; j < 4 && 4 * v + j < n; j++)
			word |= (uint64_t)mm_bf16_bits(x[4 * v + j]) << (16 * j);
		sm->x.b16[q][8 * c + v] = word;
	}
}

/* The slab at k0 of the tile (rows r0.., inputs q0..q1) into sm. */
GPU_DEV void mm_stage(const struct mm_args *a, const struct ms_gpu_mat *m, int kind,
		      int64_t r0, int64_t q0, int64_t q1, int64_t k0, struct mm_smem *sm)
{
	int i = (int)threadIdx.x, row = i / 2, c = i % 2;
	int64_t k = k0 + GPU_CHUNK * c;
	if (kind == MS_GPU_MM_BF16)
		mm_stage_w_bf16(m, r0 + row, k, row, c, sm);
	else if (kind == MS_GPU_MM_FP8)
		mm_stage_w_fp8(m, r0 + row, k, row, c, a->fnuz, sm);
	else
		mm_stage_w_f4(m, r0 + row, k, row, c, sm);
	if (i >= 2 * MM_BN)
		return;
	if (kind == MS_GPU_MM_BF16)
		mm_stage_x16(&a->g, q0, q1, k0, i / 2, c, sm);
	else
		mm_stage_x8(&a->g, q0, q1, k0, i / 2, c, m->act == MS_GPU_ACT_MXFP4, sm);
}

/* ---- the instructions over a slab ---- */

GPU_DEV uint64_t mm_pair(const uint32_t *p)
{
	return (uint64_t)p[0] | (uint64_t)p[1] << 32;
}

/* acc += the slab's products for the wavefront's 32 rows (from wr) by the
 * tile's 32 inputs; lane's row and input m = l % 32, half h = l / 32. */
GPU_DEV void mm_slab(int kind, int fnuz, const struct mm_smem *sm, int wr, int m, int h,
		     gpu_acc *acc)
{
	if (kind == MS_GPU_MM_BF16) {
		for (int t = 0; t < MM_BK / 8; t++)
			gpu_mma_bf16(acc, sm->w.b16[wr + m][2 * t + h], sm->x.b16[m][2 * t + h]);
		return;
	}
	if (kind == MS_GPU_MM_F4F8) {
		gpu_mma_f4f8(acc, &sm->w.f4[wr + m][4 * h], &sm->x.f8[m][8 * h], sm->wsc[wr + m][h],
			     sm->xe[m][h] + 127);
		return;
	}
	/* fp8: each chunk's sums scaled by its row's and input's multipliers */
	for (int c = 0; c < 2; c++) {
		gpu_acc s;
		gpu_acc_zero(&s);
		for (int t = 2 * c; t < 2 * c + 2; t++)
			gpu_mma_fp8(&s, mm_pair(&sm->w.f8[wr + m][4 * t + 2 * h]),
				    mm_pair(&sm->x.f8[m][4 * t + 2 * h]));
		float xm = ldexpf(fnuz ? 2.0f : 1.0f, sm->xe[m][c]);
		for (int i = 0; i < 16; i++) {
			int row = 8 * (i / 4) + 4 * h + i % 4;
			GPU_ACC(*acc, i) = fmaf(GPU_ACC(s, i), sm->wmul[wr + row][c] * xm,
						GPU_ACC(*acc, i));
		}
	}
}

/* The lane's outputs: items i of rows r + 8 (i / 4) + i % 4 (pairs of
 * adjacent items with glu) for list position q, as gemm_store. */
GPU_DEV void mm_store(const struct ms_gpu_gemv *g, const struct ms_gpu_mat *m, int64_t r,
		      int64_t q, int64_t q1, gpu_acc *acc)
{
	if (q >= q1)
		return;
	int64_t id = gpu_input_id(g, q);
	float xsc = g->xs ? g->xs[id] : 1.0f, *y = g->y + id * g->ldy;
	for (int i = 0; i < 16; i += 2) {
		int64_t ri = r + 8 * (i / 4) + i % 4;
		float s0 = GPU_ACC(*acc, i), s1 = GPU_ACC(*acc, i + 1);
		if (g->glu && ri + 1 < m->rows)
			y[ri / 2] = gpu_swiglu(gpu_prod_out(s0, xsc, m->bias, ri),
					       gpu_prod_out(s1, xsc, m->bias, ri + 1), g->limit,
					       g->alpha);
		if (!g->glu && ri < m->rows)
			y[ri] = gpu_prod_out(s0, xsc, m->bias, ri);
		if (!g->glu && ri + 1 < m->rows)
			y[ri + 1] = gpu_prod_out(s1, xsc, m->bias, ri + 1);
	}
}

GPU_DEV void mm_tile(const struct mm_args *a, const struct ms_gpu_mat *m, int kind, int64_t r0,
		     int64_t q0, int64_t q1, struct mm_smem *sm)
{
	int wave = (int)threadIdx.x / warpSize, lane = (int)threadIdx.x % warpSize;
	int m32 = lane % 32, h = lane / 32, wr = 32 * wave;
	gpu_acc acc;
	gpu_acc_zero(&acc);
	for (int64_t k0 = 0; k0 < a->g.cols; k0 += MM_BK) {
		mm_stage(a, m, kind, r0, q0, q1, k0, sm);
		__syncthreads();
		mm_slab(kind, a->fnuz, sm, wr, m32, h, &acc);
		__syncthreads(); /* before the next slab overwrites this one */
	}
	mm_store(&a->g, m, r0 + wr + 4 * h, q0 + m32, q1, &acc);
}

GPU_DEV void mm_run(const struct mm_args *a, int kind, struct mm_smem *sm)
{
	int64_t e, q0, q1;
	for (int64_t slot = blockIdx.y; gpu_tile_of(&a->g, slot, MM_BN, &e, &q0, &q1);
	     slot += gridDim.y) {
		const struct ms_gpu_mat *m = &a->g.mats[e];
		for (int64_t r0 = (int64_t)blockIdx.x * MM_BM; r0 < m->rows;
		     r0 += (int64_t)gridDim.x * MM_BM)
			mm_tile(a, m, kind, r0, q0, q1, sm);
	}
}

GPU_KERNEL(k_mma_bf16, struct mm_args)
{
	GPU_SHARED struct mm_smem sm;
	mm_run(&a, MS_GPU_MM_BF16, &sm);
}

GPU_KERNEL(k_mma_fp8, struct mm_args)
{
	GPU_SHARED struct mm_smem sm;
	mm_run(&a, MS_GPU_MM_FP8, &sm);
}

GPU_KERNEL(k_mma_f4f8, struct mm_args)
{
	GPU_SHARED struct mm_smem sm;
	mm_run(&a, MS_GPU_MM_F4F8, &sm);
}

/* The instruction kind needs, of gpu.h's MS_GPU_MMA_*. */
static unsigned mm_needs(int kind)
{
	return kind == MS_GPU_MM_BF16 ? MS_GPU_MMA_BF16
	       : kind == MS_GPU_MM_FP8 ? MS_GPU_MMA_FP8 | MS_GPU_MMA_FP8_FNUZ
	       : kind == MS_GPU_MM_F4F8 ? MS_GPU_MMA_F8F6F4 : 0;
}

GPU_API int GPU_NS(mma)(const struct ms_gpu_ctx *c, const struct ms_gpu_gemv *g, int kind)
{
	if (!(c->mma & mm_needs(kind)) || c->wave != 64)
		return ms_err_set(c->err, -ENOTSUP, "mma: kind %d not on this device (its matrix "
				  "instructions: %#x, wavefront %d)", kind, c->mma, c->wave);
	struct mm_args a = {*g, (c->mma & MS_GPU_MMA_FP8_FNUZ) != 0};
	gpu_dim grid = GPU_DIM(kern_blocks(g->rows, MM_BM), kern_blocks(gpu_tile_bound(g, MM_BN), 1), 1);
	gpu_dim block = GPU_DIM(MM_THREADS, 1, 1);
	if (kind == MS_GPU_MM_BF16)
		return GPU_LAUNCH(c, k_mma_bf16, grid, block, 0, a);
	if (kind == MS_GPU_MM_FP8)
		return GPU_LAUNCH(c, k_mma_fp8, grid, block, 0, a);
	return GPU_LAUNCH(c, k_mma_f4f8, grid, block, 0, a);
}
