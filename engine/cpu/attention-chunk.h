/*
 * attention-chunk.h: the chunk walk shared by the ISA attention kernels,
 * included once by attention-avx512.c and once by attention-avx2.c (each
 * compiled with its own flags). The includer defines, before including:
 *   TILE              keys per tile = vector lanes (16 or 8)
 *   vf, vkmask, vtail the float vector, a mask of a tile's keys, a mask of
 *                     head_dim's last vector
 *   v_zero v_set1 v_load v_store v_add v_sub v_mul v_fmadd v_exp v_hsum
 *   key_mask(ja, jb)  keys [ja, jb) of a tile
 *   head_tail(d)      the lanes of head_dim's last vector
 *   masked_max(m, s)  the max of s over the keys in m
 *   mask_zero(m, x)   x on the keys in m, 0 elsewhere
 *   KV_ES             bytes of a stored K/V value (4: f32, 2: bf16, 1: fp8)
 *   KV_FP8            (optional) the values are fp8 codes that the kernels
 *                     widen through fp16 (fp8_f16_bits): value * 2^-8; the
 *                     walk multiplies each key's scores, and each key's
 *                     probabilities before they weight its values, by its
 *                     head's scale times 2^8 (fp8_key_scale)
 *   K_SCORES(q, kh, d, scale), K_PV(acc, p, vh, ja, jb, nb, tail)
 *                     the dot products and the weighted values of one query
 *                     row on K and V rows of that dtype (kh, vh: const void
 *                     *[TILE]); or, instead, K_SCORES_G(q, G, kh, d, scale,
 *                     out) and K_PV_G(acc, ld, G, p, vh, ja, jb, nb, tail)
 *                     for the G rows of a kv head at once (out, p: [G][16];
 *                     acc rows ld apart), which read each K and V vector
 *                     once for all of them
 *   K_ROUND_P(p)      (optional) what the probabilities weighting the values
 *                     are rounded to (l sums them unrounded)
 *   CHUNK_FN          the name of the function to define
 * and may include it again with other KV_ES, kernels and CHUNK_FN
 * (undefined after each inclusion).
 *
 * A chunk is walked in tiles of TILE keys aligned to absolute positions.
 * Per row and tile: TILE dot products reduced to one vector of scores; an
 * online softmax (running max, a TILE-lane running sum, the accumulator
 * rescaled only when the max grows); then the values weighted by the
 * probabilities. Each step is done for the G query heads of a kv head
 * before the next: three passes of independent chains the core overlaps.
 * Keys outside a row's range are masked, and each lane's arithmetic
 * depends only on its own key, so a row's result does not depend on the
 * other rows of its block.
 */

#ifndef MS_ATTN_FP8_WIDEN
#define MS_ATTN_FP8_WIDEN
/* What a scale byte multiplies fp8 codes widened through fp16 by: the
 * e4m3 code's bits shifted into an fp16 (sign, 0, exponent, mantissa) read
 * as value * 2^-8 exactly, subnormals included (both formats' subnormals
 * are their smallest exponent's), so 2^(k + 8); NaN for the NaN byte. */
static inline float fp8_key_scale(uint8_t b)
{
	return ms_e8m0_f32(b) * 256.0f;
}

/* Ask for one head's part of key p's K and V rows (bytes each) ahead of
 * its use. Into L2 (prefetcht1), not L1: t0's requests hold L1's few miss
 * buffers, which the current tile's own loads then wait for; bench
 * --attention at 8k, bf16, 2 threads: 2.2 ms with t0, 1.0 with t1, 1.1
 * with two tiles ahead, 1.3 for whole rows in address order, 2.1 for t0
 * on whole rows. */
static inline void kv_prefetch_l2(const char *k, const char *v, int64_t bytes)
{
	for (int64_t o = 0; o < bytes; o += 64) {
		__builtin_prefetch(k + o, 0, 2);
		__builtin_prefetch(v + o, 0, 2);
	}
}
#endif

#ifndef K_SCORES_G
#define K_SCORES_G(q, G, kh, d, s, out)                                         \
	for (int g_ = 0; g_ < (G); g_++)                                         \
		v_store((out) + 16 * g_, K_SCORES((q) + g_ * (d), kh, d, s))
#define K_PV_G(acc, ld, G, p, vh, ja, jb, nb, t)                                  \
	for (int g_ = 0; g_ < (G); g_++)                                         \
		K_PV((acc) + g_ * (ld), (p) + 16 * g_, vh, ja, jb, nb, t)
#endif

static void CHUNK_FN(const struct ms_attn_chunk *c)
{
	const int64_t d = c->d, ld = c->ld, k0 = c->k0, k1 = c->k1;
	const int nb = (int)((d + TILE - 1) / TILE), R = c->nq * c->nkv * c->G, G = c->G;
	const vtail tail = head_tail(d);
	float *lsum = c->tmp;          /* [R][16] running sums, TILE lanes used */
	float *pr = c->tmp + 16 * R;   /* [G][16] a token's scores, then probabilities */
	float *al = c->tmp + 32 * R;   /* [G][16] rescale factors (1: none) */
	const void *kp[TILE], *vp[TILE];
#ifdef KV_FP8
	const uint8_t *ksp[TILE], *vsp[TILE];
	float *sk = c->tmp + 32 * R + 16 * G; /* [16] this tile's K scales */
	float *sv = sk + 16;                  /* [16] and V scales, of one kv head */
#endif
	for (int r = 0; r < R; r++) {
		c->m[r] = -INFINITY;
		v_store(lsum + 16 * r, v_zero());
		memset(c->acc + r * ld, 0, (size_t)ld * sizeof(float));
	}
	for (int64_t t0 = k0 - k0 % TILE; t0 < k1; t0 += TILE) {
		for (int j = 0; j < TILE; j++) {
			int64_t p = t0 + j;
			bool in = p >= k0 && p < k1;
			kp[j] = in ? c->k[p - k0] : (const void *)c->zero;
			vp[j] = in ? c->v[p - k0] : (const void *)c->zero;
#ifdef KV_FP8
			ksp[j] = in ? c->ks[p - k0] : (const uint8_t *)c->zero;
			vsp[j] = in ? c->vs[p - k0] : (const uint8_t *)c->zero;
#endif
		}
		for (int i = 0; i < c->nq; i++) {
			int64_t a = c->lo[i] > t0 ? c->lo[i] : t0;
			int64_t b = c->hi[i] + 1 < t0 + TILE ? c->hi[i] + 1 : t0 + TILE;
			a = a > k0 ? a : k0;
			b = b < k1 ? b : k1;
			if (a >= b)
				continue;
			int ja = (int)(a - t0), jb = (int)(b - t0);
			vkmask mask = key_mask(ja, jb);
			for (int hh = 0; hh < c->nkv; hh++) {
				/* kv head hh of the item: its G query heads */
				const void *kh[TILE], *vh[TILE];
				for (int j = 0; j < TILE; j++) {
					kh[j] = (const char *)kp[j] + hh * d * KV_ES;
					vh[j] = (const char *)vp[j] + hh * d * KV_ES;
				}
				/* This head's part of the next tile's rows while this
				 * tile's is read. A row holds every kv head, so a tile is
				 * read a column at a time, rows 1-2 KB apart across 4 KB
				 * pages, which the hardware prefetchers do not follow. */
				for (int j = 0; j < TILE && i == 0 && t0 + TILE + j < k1; j++)
					kv_prefetch_l2((const char *)c->k[t0 + TILE + j - k0] + hh * d * KV_ES,
						       (const char *)c->v[t0 + TILE + j - k0] + hh * d * KV_ES,
						       d * KV_ES);
				const float *qi = c->q + i * c->ldq + (int64_t)hh * G * d;
				int r0 = (i * c->nkv + hh) * G;
				float *m = c->m + r0, *ls = lsum + 16 * r0;
				K_SCORES_G(qi, G, kh, d, c->scale, pr);
#ifdef KV_FP8
				for (int j = 0; j < TILE; j++) {
					sk[j] = fp8_key_scale(ksp[j][hh]);
					sv[j] = fp8_key_scale(vsp[j][hh]);
				}
#endif
				for (int g = 0; g < G; g++) {
					vf s = v_load(pr + 16 * g);
#ifdef KV_FP8
					s = v_mul(s, v_load(sk));
#endif
					float mt = masked_max(mask, s), mo = m[g];
					float mn = mt > mo ? mt : mo;
					/* Rescale only when the max grows (and not from the
					 * empty state, where everything is 0). */
					bool grow = mt > mo && mo != -INFINITY;
					vf alpha = grow ? v_exp(v_set1(mo - mn)) : v_set1(1.0f);
					vf p = mask_zero(mask, v_exp(v_sub(s, v_set1(mn))));
					vf l = v_load(ls + 16 * g);
					l = grow ? v_fmadd(l, alpha, p) : v_add(l, p);
					v_store(ls + 16 * g, l);
#ifdef KV_FP8
					p = v_mul(p, v_load(sv));
#endif
#ifdef K_ROUND_P
					p = K_ROUND_P(p);
#endif
					v_store(pr + 16 * g, p);
					v_store(al + 16 * g, alpha);
					m[g] = mn;
				}
				float *acc = c->acc + (int64_t)r0 * ld;
				for (int g = 0; g < G; g++) {
					if (al[16 * g] == 1.0f)
						continue;
					vf alpha = v_load(al + 16 * g);
					for (int bb = 0; bb < nb; bb++)
						v_store(acc + g * ld + TILE * bb,
							v_mul(v_load(acc + g * ld + TILE * bb), alpha));
				}
				K_PV_G(acc, ld, G, pr, vh, ja, jb, nb, tail);
			}
		}
	}
	for (int r = 0; r < R; r++)
		if (c->m[r] != -INFINITY)
			c->l[r] = v_hsum(v_load(lsum + 16 * r));
}
#undef KV_ES
#undef KV_FP8
#undef K_SCORES
#undef K_PV
#undef K_SCORES_G
#undef K_PV_G
#undef K_ROUND_P
#undef CHUNK_FN
