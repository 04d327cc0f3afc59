/*
 * amx-sim.h: Intel AMX for the tile kernels, on real tiles or on a model.
 *
 * No machine this project runs on has AMX, so the tile kernels
 * (kernels-amx.c) are built twice: against the real instructions, and with
 * -DMS_AMX_SIM against the software model below, which the tests hold to
 * the reference on every run. Where a CPU has AMX the first build runs.
 *
 * Kernels write MS_TILE_*(tile, ...) with tile numbers that are integer
 * constants (the instructions encode them): on real tiles the macros are
 * gcc's intrinsics, under MS_AMX_SIM they are the model. With MS_AMX_SIM
 * the intrinsics' own names (_tile_loadconfig, _tile_loadd, _tile_dpbsud,
 * ...) are the model too, so code written against <immintrin.h> runs on it
 * unchanged.
 *
 * What the model implements, palette 1 only. Sources: the "Operation"
 * pseudo-code of LDTILECFG, TILELOADD, TILESTORED, TILEZERO, TILERELEASE,
 * TDPBSSD/TDPBSUD/TDPBUSD/TDPBUUD and TDPBF16PS in the Intel SDM Vol. 2
 * (first published in ch. 3 of Intel's "ISA Extensions and Future Features
 * Programming Reference"); SDM Vol. 1 10.2.3.3-4 (FTZ, DAZ) and 11.5.2.5
 * (when a result is tiny); Bochs bochs/cpu/avx/amx.cc, which follows the
 * same steps, for the #GP/#UD checks:
 * - state: 8 tiles of 16 rows x 64 bytes, per thread (hardware tile
 *   registers are per logical CPU, i.e. per thread here), and the last
 *   loaded configuration;
 * - LDTILECFG: palette 0 = TILERELEASE; palette > 1, reserved bytes 2-15
 *   not zero, tiles 8-15 configured, rows > 16, colsb > 64, or a tile with
 *   exactly one of rows / colsb zero: #GP. Success zeroes every tile;
 * - TILELOADD: rows 0..rows-1 get colsb bytes from base + row * stride, the
 *   rest of each row and the rows above are zeroed; TILESTORED writes only
 *   rows x colsb; TILEZERO zeroes the whole tile; TILERELEASE returns to the
 *   init state (nothing configured, tiles zero);
 * - TDPB[SU][SU]D dst, a, b: M = rows(dst), N = colsb(dst) / 4,
 *   K = colsb(a) / 4; for each m < M, n < N, k < K:
 *     dst[m].dword[n] += sum over i < 4 of a[m].byte[4k+i] * b[k].byte[4n+i]
 *   bytes sign- (S) or zero- (U) extended, a's letter first; the sum is
 *   32-bit with wraparound, no saturation (integers: any order gives the
 *   same bits); bytes of dst beyond N dwords and rows beyond M are zeroed;
 * - TDPBF16PS dst, a, b: per row m a temporary of 2N fp32 zeros;
 *     tmp[2n]   = fma(a[m].bf16[2k],   b[k].bf16[2n],   tmp[2n])
 *     tmp[2n+1] = fma(a[m].bf16[2k+1], b[k].bf16[2n+1], tmp[2n+1])
 *   for k = 0..K-1 (K = colsb(a) / 4 pairs), then
 *     dst[m].fp32[n] = dst[m].fp32[n] + (tmp[2n] + tmp[2n+1]),
 *   every step one fp32 operation rounded to nearest even, denormal inputs
 *   (bf16 operands, tmp, dst) read as zero of their sign (DAZ), and results
 *   that are tiny (below 2^-126 after rounding to 24 bits with an unbounded
 *   exponent, exact ones included) returned as zero of their sign (FTZ);
 *   MXCSR is neither read nor written. NaN payloads are not modelled (a NaN
 *   in gives some quiet NaN out). The tiny rule is this CPU's: VDPBF16PS
 *   and FMA under MXCSR.FTZ flush exactly these results (tests/engine/test-amx.c).
 *   (Unlike VDPBF16PS, which chains both products of a pair into its
 *   accumulator, odd element first, AMX sums even and odd elements apart
 *   from zero and adds them to dst once per instruction.)
 * - tile instructions (#UD on hardware): tiles not configured, a tile number
 *   above 7, colsb not a multiple of 4 (Bochs raises #UD there), two
 *   operands naming the same tile, or shapes that do not chain
 *   (rows(a) != M, colsb(b) / 4 != N, rows(b) != K).
 * A fault never touches memory or tiles: the instruction is dropped and the
 * first fault is kept (ms_amx_sim_fault) until ms_amx_sim_clear_fault, so a
 * kernel can turn it into an error instead of undefined behaviour.
 * Not modelled: start_row != 0 (the restart point after an interrupt; the
 * model refuses it as a fault), TILELOADDT1's cache hint (a plain load),
 * AMX-FP16/COMPLEX, memory faults.
 */
#ifndef MS_AMX_SIM_H
#define MS_AMX_SIM_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MS_AMX_TILES 8
#define MS_AMX_MAX_ROWS 16
#define MS_AMX_MAX_COLSB 64

/* LDTILECFG's 64-byte memory operand (palette 1). */
struct ms_amx_tilecfg {
	uint8_t palette_id;
	uint8_t start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};
_Static_assert(sizeof(struct ms_amx_tilecfg) == 64, "LDTILECFG reads 64 bytes");

enum ms_amx_fault {
	MS_AMX_FAULT_NONE = 0,
	MS_AMX_FAULT_GP,        /* LDTILECFG: a configuration hardware refuses */
	MS_AMX_FAULT_UD,        /* a tile instruction on bad tiles or shapes */
	MS_AMX_FAULT_UNMODELED, /* legal on hardware, outside the model */
};

struct ms_amx_sim_state {
	_Alignas(64) uint8_t tile[MS_AMX_TILES][MS_AMX_MAX_ROWS][MS_AMX_MAX_COLSB];
	struct ms_amx_tilecfg cfg;
	bool configured;        /* TILES_CONFIGURED */
	int fault;              /* enum ms_amx_fault: the first since the last clear */
	char fault_msg[112];
};

/* One state per thread, and per translation unit (each that includes this
 * header has its own: the kernels' is separate from a test's). */
static _Thread_local struct ms_amx_sim_state ms_amx_sim_st __attribute__((unused));

static inline int ms_amx_sim_fault(void)
{
	return ms_amx_sim_st.fault;
}

static inline const char *ms_amx_sim_fault_msg(void)
{
	return ms_amx_sim_st.fault ? ms_amx_sim_st.fault_msg : "";
}

static inline void ms_amx_sim_clear_fault(void)
{
	ms_amx_sim_st.fault = MS_AMX_FAULT_NONE;
	ms_amx_sim_st.fault_msg[0] = '\0';
}

/* Record a fault (the first one wins) and tell the caller to drop the
 * instruction. */
static inline bool ms_amx_sim_raise(int kind, const char *insn, const char *why, int a, int b)
{
	if (!ms_amx_sim_st.fault) {
		ms_amx_sim_st.fault = kind;
		snprintf(ms_amx_sim_st.fault_msg, sizeof(ms_amx_sim_st.fault_msg), "%s: %s (%d, %d)",
			 insn, why, a, b);
	}
	return false;
}

static inline void ms_amx_sim_release(void)
{
	memset(ms_amx_sim_st.tile, 0, sizeof(ms_amx_sim_st.tile));
	memset(&ms_amx_sim_st.cfg, 0, sizeof(ms_amx_sim_st.cfg));
	ms_amx_sim_st.configured = false;
}

static inline void ms_amx_sim_loadconfig(const void *mem)
{
	struct ms_amx_tilecfg c;
	memcpy(&c, mem, sizeof(c));
	if (c.palette_id == 0) {
		ms_amx_sim_release();
		return;
	}
	if (c.palette_id != 1) {
		ms_amx_sim_raise(MS_AMX_FAULT_GP, "ldtilecfg", "palette not supported", c.palette_id, 1);
		return;
	}
	for (int i = 0; i < 14; i++)
		if (c.reserved[i]) {
			ms_amx_sim_raise(MS_AMX_FAULT_GP, "ldtilecfg", "reserved byte set", 2 + i,
					 c.reserved[i]);
			return;
		}
	for (int t = 0; t < 16; t++) {
		if (t >= MS_AMX_TILES && (c.rows[t] || c.colsb[t])) {
			ms_amx_sim_raise(MS_AMX_FAULT_GP, "ldtilecfg", "palette 1 has 8 tiles", t,
					 c.rows[t]);
			return;
		}
		if (c.rows[t] > MS_AMX_MAX_ROWS || c.colsb[t] > MS_AMX_MAX_COLSB) {
			ms_amx_sim_raise(MS_AMX_FAULT_GP, "ldtilecfg", "tile larger than 16 x 64 bytes",
					 c.rows[t], c.colsb[t]);
			return;
		}
		if ((c.rows[t] == 0) != (c.colsb[t] == 0)) {
			ms_amx_sim_raise(MS_AMX_FAULT_GP, "ldtilecfg", "tile with rows xor colsb zero",
					 c.rows[t], c.colsb[t]);
			return;
		}
	}
	if (c.start_row) {
		ms_amx_sim_raise(MS_AMX_FAULT_UNMODELED, "ldtilecfg", "start_row not modelled",
				 c.start_row, 0);
		return;
	}
	ms_amx_sim_release();
	ms_amx_sim_st.cfg = c;
	ms_amx_sim_st.configured = true;
}

static inline void ms_amx_sim_storeconfig(void *mem)
{
	memcpy(mem, &ms_amx_sim_st.cfg, sizeof(ms_amx_sim_st.cfg));
}

/* A tile an instruction may name: configured, in range, dword rows. */
static inline bool ms_amx_sim_tile_ok(const char *insn, int t)
{
	if (!ms_amx_sim_st.configured)
		return ms_amx_sim_raise(MS_AMX_FAULT_UD, insn, "tiles not configured", t, 0);
	if (t < 0 || t >= MS_AMX_TILES || !ms_amx_sim_st.cfg.rows[t])
		return ms_amx_sim_raise(MS_AMX_FAULT_UD, insn, "tile not configured", t, 0);
	if (ms_amx_sim_st.cfg.colsb[t] % 4)
		return ms_amx_sim_raise(MS_AMX_FAULT_UD, insn, "colsb not a multiple of 4", t,
					ms_amx_sim_st.cfg.colsb[t]);
	return true;
}

static inline void ms_amx_sim_zero(int t)
{
	if (!ms_amx_sim_st.configured || t < 0 || t >= MS_AMX_TILES || !ms_amx_sim_st.cfg.rows[t]) {
		ms_amx_sim_raise(MS_AMX_FAULT_UD, "tilezero", "tile not configured", t, 0);
		return;
	}
	memset(ms_amx_sim_st.tile[t], 0, sizeof(ms_amx_sim_st.tile[t]));
}

static inline void ms_amx_sim_loadd(int t, const void *base, long stride)
{
	if (!ms_amx_sim_tile_ok("tileloadd", t))
		return;
	int rows = ms_amx_sim_st.cfg.rows[t], colsb = ms_amx_sim_st.cfg.colsb[t];
	memset(ms_amx_sim_st.tile[t], 0, sizeof(ms_amx_sim_st.tile[t]));
	for (int r = 0; r < rows; r++)
		memcpy(ms_amx_sim_st.tile[t][r], (const uint8_t *)base + (ptrdiff_t)r * stride,
		       (size_t)colsb);
}

static inline void ms_amx_sim_stored(int t, void *base, long stride)
{
	if (!ms_amx_sim_tile_ok("tilestored", t))
		return;
	int rows = ms_amx_sim_st.cfg.rows[t], colsb = ms_amx_sim_st.cfg.colsb[t];
	for (int r = 0; r < rows; r++)
		memcpy((uint8_t *)base + (ptrdiff_t)r * stride, ms_amx_sim_st.tile[t][r], (size_t)colsb);
}

/* The checks every TDP* makes; M, N, K of the product on success. */
static inline bool ms_amx_sim_dp_ok(const char *insn, int c, int a, int b, int *M, int *N, int *K)
{
	if (!ms_amx_sim_tile_ok(insn, c) || !ms_amx_sim_tile_ok(insn, a) ||
	    !ms_amx_sim_tile_ok(insn, b))
		return false;
	if (c == a || c == b || a == b)
		return ms_amx_sim_raise(MS_AMX_FAULT_UD, insn, "operands must be distinct tiles", c,
					a == b ? a : (c == a ? a : b));
	const struct ms_amx_tilecfg *g = &ms_amx_sim_st.cfg;
	*M = g->rows[c];
	*N = g->colsb[c] / 4;
	*K = g->colsb[a] / 4;
	if (g->rows[a] != *M)
		return ms_amx_sim_raise(MS_AMX_FAULT_UD, insn, "rows(a) != rows(dst)", g->rows[a], *M);
	if (g->colsb[b] / 4 != *N)
		return ms_amx_sim_raise(MS_AMX_FAULT_UD, insn, "colsb(b) != colsb(dst)", g->colsb[b],
					g->colsb[c]);
	if (g->rows[b] != *K)
		return ms_amx_sim_raise(MS_AMX_FAULT_UD, insn, "rows(b) != colsb(a) / 4", g->rows[b],
					*K);
	return true;
}

static inline uint32_t ms_amx_sim_rd32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static inline void ms_amx_sim_wr32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

/* Zero what an instruction leaves above its result: dwords N..15 of rows
 * < M, and rows M..15 (the SDM's write_row_and_zero / zero_upper_rows). */
static inline void ms_amx_sim_zero_upper(int c, int M, int N)
{
	for (int m = 0; m < MS_AMX_MAX_ROWS; m++)
		memset(ms_amx_sim_st.tile[c][m] + (m < M ? 4 * N : 0), 0,
		       (size_t)(MS_AMX_MAX_COLSB - (m < M ? 4 * N : 0)));
}

/* TDPB{a_signed ? S : U}{b_signed ? S : U}D. Products are formed in int32
 * (|x| <= 255 * 255) and summed as uint32, which is the wraparound the
 * SDM's 32-bit dword arithmetic does, without C's signed overflow. */
static inline void ms_amx_sim_dpb(const char *insn, int c, int a, int b, bool a_signed,
				  bool b_signed)
{
	int M, N, K;
	if (!ms_amx_sim_dp_ok(insn, c, a, b, &M, &N, &K))
		return;
	for (int m = 0; m < M; m++) {
		const uint8_t *ar = ms_amx_sim_st.tile[a][m];
		uint8_t *cr = ms_amx_sim_st.tile[c][m];
		for (int k = 0; k < K; k++) {
			const uint8_t *br = ms_amx_sim_st.tile[b][k];
			for (int n = 0; n < N; n++) {
				uint32_t acc = ms_amx_sim_rd32(cr + 4 * n);
				for (int i = 0; i < 4; i++) {
					int32_t x = a_signed ? (int32_t)(int8_t)ar[4 * k + i] : (int32_t)ar[4 * k + i];
					int32_t y = b_signed ? (int32_t)(int8_t)br[4 * n + i] : (int32_t)br[4 * n + i];
					acc += (uint32_t)(x * y);
				}
				ms_amx_sim_wr32(cr + 4 * n, acc);
			}
		}
	}
	ms_amx_sim_zero_upper(c, M, N);
}

/* ---- fp32 arithmetic of TDPBF16PS: RNE, DAZ, FTZ ---- */

/* DAZ: a denormal operand counts as a zero of its sign (SDM Vol. 1,
 * "Denormals-Are-Zeros"). */
static inline float ms_amx_daz(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	if ((u & 0x7F800000u) == 0)
		u &= 0x80000000u;
	memcpy(&x, &u, 4);
	return x;
}

static inline float ms_amx_bf16_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* fma(a, b, c) as one fp32 operation with DAZ, FTZ, round to nearest even
 * (the rounding mode of the calling thread must be the default one, as it
 * is everywhere in moeserve). FTZ flushes a result that is tiny after
 * rounding: when the IEEE result is at most 2^-126 in magnitude, the
 * operation is redone 2^32 times larger, where the result is normal and
 * rounds to 24 bits as with an unbounded exponent, and compared with
 * 2^-94. (It cannot overflow: a result that small means |c| and |a * b| are
 * below 2^64, otherwise their bits would leave a multiple of 2^16.)
 * Checked against this CPU's VDPBF16PS and its FMA under MXCSR.FTZ|DAZ
 * (tests/engine/test-amx.c). */
static inline float ms_amx_fma(float a, float b, float c)
{
	a = ms_amx_daz(a);
	b = ms_amx_daz(b);
	c = ms_amx_daz(c);
	float r = fmaf(a, b, c);
	if (!(fabsf(r) <= FLT_MIN) || r == 0.0f) /* NaN, infinite, normal above 2^-126, or zero */
		return r;
	float sa = a, sb = b;
	if (fabsf(a) <= fabsf(b))
		sa = a * 0x1p32f;
	else
		sb = b * 0x1p32f;
	float s = fmaf(sa, sb, c * 0x1p32f);
	return fabsf(s) < 0x1p-94f ? copysignf(0.0f, r) : r;
}

static inline float ms_amx_add(float a, float b)
{
	return ms_amx_fma(a, 1.0f, b);
}

static inline void ms_amx_sim_dpbf16ps(int c, int a, int b)
{
	int M, N, K;
	if (!ms_amx_sim_dp_ok("tdpbf16ps", c, a, b, &M, &N, &K))
		return;
	for (int m = 0; m < M; m++) {
		float tmp[2 * MS_AMX_MAX_COLSB / 4] = {0};
		const uint8_t *ar = ms_amx_sim_st.tile[a][m];
		uint8_t *cr = ms_amx_sim_st.tile[c][m];
		for (int k = 0; k < K; k++) {
			const uint8_t *br = ms_amx_sim_st.tile[b][k];
			uint16_t a0, a1;
			memcpy(&a0, ar + 4 * k, 2);
			memcpy(&a1, ar + 4 * k + 2, 2);
			for (int n = 0; n < N; n++) {
				uint16_t b0, b1;
				memcpy(&b0, br + 4 * n, 2);
				memcpy(&b1, br + 4 * n + 2, 2);
				tmp[2 * n] = ms_amx_fma(ms_amx_bf16_f32(a0), ms_amx_bf16_f32(b0), tmp[2 * n]);
				tmp[2 * n + 1] =
					ms_amx_fma(ms_amx_bf16_f32(a1), ms_amx_bf16_f32(b1), tmp[2 * n + 1]);
			}
		}
		for (int n = 0; n < N; n++) {
			float d;
			memcpy(&d, cr + 4 * n, 4);
			d = ms_amx_add(d, ms_amx_add(tmp[2 * n], tmp[2 * n + 1]));
			memcpy(cr + 4 * n, &d, 4);
		}
	}
	ms_amx_sim_zero_upper(c, M, N);
}

/* ---- the intrinsics' names on the model ---- */
#ifdef MS_AMX_SIM
#if defined(__x86_64__) || defined(__i386__)
/* Bring in gcc's definitions first, then put the model in their place. */
#include <immintrin.h>
#endif
#undef _tile_loadconfig
#undef _tile_storeconfig
#undef _tile_release
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stream_loadd
#undef _tile_stored
#undef _tile_dpbssd
#undef _tile_dpbsud
#undef _tile_dpbusd
#undef _tile_dpbuud
#undef _tile_dpbf16ps
#define _tile_loadconfig(cfg) ms_amx_sim_loadconfig(cfg)
#define _tile_storeconfig(cfg) ms_amx_sim_storeconfig(cfg)
#define _tile_release() ms_amx_sim_release()
#define _tile_zero(t) ms_amx_sim_zero(t)
#define _tile_loadd(t, base, stride) ms_amx_sim_loadd((t), (base), (long)(stride))
#define _tile_stream_loadd(t, base, stride) ms_amx_sim_loadd((t), (base), (long)(stride))
#define _tile_stored(t, base, stride) ms_amx_sim_stored((t), (base), (long)(stride))
#define _tile_dpbssd(c, a, b) ms_amx_sim_dpb("tdpbssd", (c), (a), (b), true, true)
#define _tile_dpbsud(c, a, b) ms_amx_sim_dpb("tdpbsud", (c), (a), (b), true, false)
#define _tile_dpbusd(c, a, b) ms_amx_sim_dpb("tdpbusd", (c), (a), (b), false, true)
#define _tile_dpbuud(c, a, b) ms_amx_sim_dpb("tdpbuud", (c), (a), (b), false, false)
#define _tile_dpbf16ps(c, a, b) ms_amx_sim_dpbf16ps((c), (a), (b))
#define MS_AMX_MEM_BARRIER() ((void)0)
#else
#include <immintrin.h>
/* gcc's ldtilecfg and tileloadd asm name only the address they read, not
 * the memory behind it: without a barrier the compiler may keep stores to a
 * scratch tile (or the config) in registers past the load, or drop them. */
#define MS_AMX_MEM_BARRIER() __asm__ __volatile__("" ::: "memory")
#endif

/* The layer kernels are written against (tile numbers: integer constants). */
#define MS_TILE_LOADCONFIG(cfg)                                                                \
	do {                                                                                   \
		MS_AMX_MEM_BARRIER();                                                          \
		_tile_loadconfig(cfg);                                                         \
	} while (0)
#define MS_TILE_RELEASE() _tile_release()
#define MS_TILE_ZERO(t) _tile_zero(t)
#define MS_TILE_LOADD(t, base, stride)                                                         \
	do {                                                                                   \
		MS_AMX_MEM_BARRIER();                                                          \
		_tile_loadd(t, base, stride);                                                  \
	} while (0)
#define MS_TILE_STORED(t, base, stride) _tile_stored(t, base, stride)
#define MS_TILE_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define MS_TILE_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#define MS_TILE_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define MS_TILE_DPBUUD(c, a, b) _tile_dpbuud(c, a, b)
#define MS_TILE_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)

#endif
