/*
 * sim-mma.h: the matrix instructions (MFMA) of the CDNA targets, modelled
 * for the host model of the execution model (hip-sim.h), from AMD's
 * documented semantics and lane layout (the CDNA3/CDNA4 ISA guides;
 * Composable Kernel's warp_gemm_attribute_mfma_impl.hpp agrees):
 *
 *   v_mfma_f32_32x32x8_bf16      (gfx90a, gfx94x, gfx950)  D = A B + C
 *   v_mfma_f32_32x32x16_fp8_fp8  (gfx94x: e4m3fnuz; gfx950: OCP e4m3)
 *   v_mfma_scale_f32_32x32x64_f8f6f4 (gfx950; A e2m1 or e4m3, B the same,
 *                                each 32 k a block with an E8M0 scale)
 *
 * All three are 32 x 32 over a 64-lane wavefront. Lane l holds row l % 32
 * of A (and column l % 32 of B) for k = (K / 2) * (l / 32) + j, j < K / 2,
 * element j in its operand registers lowest first (e2m1 two per byte, low
 * nibble first); item i < 16 of its D is row 8 (i / 4) + 4 (l / 32) + i % 4,
 * column l % 32.
 *
 * The hardware sums a D element's products inside the instruction in an
 * order and width of its own (wider than fp32; not documented to the bit).
 * The model sums them in k order with fp32 fma from C (per scaled block:
 * the block's sum, times both scales, added to C): products of these
 * formats are exact in fp32, so model and hardware differ by the rounding
 * of the sums only, and the tests that use MFMA state a tolerance for
 * that rather than bits.
 */
#ifndef MS_SIM_MMA_H
#define MS_SIM_MMA_H

#include <stdint.h>

enum ms_sim_mma_op { MS_SIM_MMA_BF16, MS_SIM_MMA_FP8, MS_SIM_MMA_SCALED };

/* Scaled operand formats, the instruction's cbsz / blgp codes. */
enum { MS_SIM_F8F6F4_E4M3 = 0, MS_SIM_F8F6F4_E2M1 = 4 };

/* One lane's part of an instruction (hip-sim's wavefront operation). */
struct ms_sim_mma {
	int op;
	uint32_t a[8], b[8];   /* the operand registers */
	int atype, btype;      /* MS_SIM_MMA_SCALED */
	int sa, sb;            /* its E8M0 scales (127: 1) */
	float c[16];           /* C in, D out */
};

/* The instruction over a wavefront's records (ms_sim_wave_fn). */
void ms_sim_mma_run(void *const *lanes, int n);

/* Whether fp8 is e4m3fnuz (gfx94x) rather than OCP e4m3 (gfx950). */
void ms_sim_mma_set_fnuz(int on);

#endif
