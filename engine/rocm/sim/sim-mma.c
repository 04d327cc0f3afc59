/* sim-mma.c: the matrix instructions of sim-mma.h on the host. */
#include <math.h>
#include <string.h>

#include "sim-mma.h"

static int fnuz;

void ms_sim_mma_set_fnuz(int on)
{
	fnuz = on;
}

/* e4m3: OCP (bias 7, S.1111.111 NaN) or fnuz (bias 8, 0x80 the only NaN,
 * no negative zero). */
static float e4m3(unsigned b, int nuz)
{
	int e = (b >> 3) & 15, m = b & 7, bias = nuz ? 8 : 7;
	if (nuz ? b == 0x80 : (b & 0x7F) == 0x7F)
		return NAN;
	float v = e ? ldexpf(1.0f + (float)m / 8, e - bias) : ldexpf((float)m / 8, 1 - bias);
	return b & 0x80 ? -v : v;
}

static float e2m1(unsigned c)
{
	static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
	return c & 8 ? -mag[c & 7] : mag[c & 7];
}

static float bf16(unsigned h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Element j of a lane's operand registers r. */
static float elem(const uint32_t *r, int op, int type, int j)
{
	if (op == MS_SIM_MMA_BF16)
		return bf16((r[j / 2] >> (16 * (j % 2))) & 0xFFFF);
	if (op == MS_SIM_MMA_SCALED && type == MS_SIM_F8F6F4_E2M1)
		return e2m1((r[j / 8] >> (4 * (j % 8))) & 15);
	/* the scaled instruction's e4m3 is OCP's on every target */
	return e4m3((r[j / 4] >> (8 * (j % 4))) & 0xFF, op == MS_SIM_MMA_FP8 && fnuz);
}

/* D[m][n] of the instruction: lanes m + 32 h hold A's half h, n + 32 h B's. */
static float dot(struct ms_sim_mma *const *L, int m, int n, float c)
{
	const struct ms_sim_mma *r = L[0];
	int half = r->op == MS_SIM_MMA_BF16 ? 4 : (r->op == MS_SIM_MMA_FP8 ? 8 : 32);
	for (int h = 0; h < 2; h++) {
		const struct ms_sim_mma *a = L[m + 32 * h], *b = L[n + 32 * h];
		float s = r->op == MS_SIM_MMA_SCALED ? 0.0f : c;
		for (int j = 0; j < half; j++)
			s = fmaf(elem(a->a, r->op, r->atype, j), elem(b->b, r->op, r->btype, j), s);
		if (r->op == MS_SIM_MMA_SCALED)
			c += ldexpf(s, a->sa + b->sb - 254);
		else
			c = s;
	}
	return c;
}

void ms_sim_mma_run(void *const *lanes, int n)
{
	struct ms_sim_mma *const *L = (struct ms_sim_mma *const *)lanes;
	float d[64][16];
	for (int l = 0; l < n; l++)
		for (int i = 0; i < 16; i++) {
			int row = 8 * (i / 4) + 4 * (l / 32) + i % 4, col = l % 32;
			/* the instructions exist for 64 lanes only */
			d[l][i] = n == 64 ? dot(L, row, col, L[l]->c[i]) : NAN;
		}
	for (int l = 0; l < n; l++)
		memcpy(L[l]->c, d[l], sizeof(d[l]));
}
