/* sampler.c: see sampler.h. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "fastexp.h"
#include "ms-hash.h"

/* ---- RNG: xoshiro256** (Blackman & Vigna), seeded by splitmix64 ---------- */

static uint64_t splitmix64(uint64_t *x)
{
	return ms_mix64(*x += 0x9E3779B97F4A7C15ull);
}

void ms_rng_seed(struct ms_rng *r, uint64_t seed)
{
	uint64_t x = seed;
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&x);
	if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
		r->s[0] = 1; /* splitmix64 never gives four zeros, but the all-0 state is fatal */
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t ms_rng_next_u64(struct ms_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

double ms_rng_next_double(struct ms_rng *r)
{
	return (double)(ms_rng_next_u64(r) >> 11) * 0x1.0p-53;
}

/* ---- parameters --------------------------------------------------------- */

void ms_sampling_defaults(struct ms_sampling *p)
{
	memset(p, 0, sizeof(*p));
	p->temperature = 1.0f;
	p->top_k = 0;
	p->top_p = 1.0f;
	p->min_p = 0.0f;
	p->repetition_penalty = 1.0f;
	p->n_logprobs = -1;
}

/* Written as !(in range) so that NaN is out of range. */
int ms_sampling_check(const struct ms_sampling *p, int64_t vocab, struct ms_err *err)
{
	if (!p)
		return ms_err_set(err, -EINVAL, "no sampling parameters");
	if (vocab <= 0 || vocab > INT32_MAX)
		return ms_err_set(err, -EINVAL, "vocabulary size %lld is out of range [1, %d]",
				  (long long)vocab, INT32_MAX);
	if (!(p->temperature >= 0.0f && p->temperature <= MS_TEMPERATURE_MAX))
		return ms_err_set(err, -EINVAL, "temperature %g is out of range [0, %g]",
				  (double)p->temperature, (double)MS_TEMPERATURE_MAX);
	if (p->top_k < -1)
		return ms_err_set(err, -EINVAL,
				  "top_k %d is out of range: -1 or 0 (off), or a count >= 1",
				  (int)p->top_k);
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		return ms_err_set(err, -EINVAL, "top_p %g is out of range (0, 1]", (double)p->top_p);
	if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
		return ms_err_set(err, -EINVAL, "min_p %g is out of range [0, 1]", (double)p->min_p);
	if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
		return ms_err_set(err, -EINVAL, "presence_penalty %g is out of range [-2, 2]",
				  (double)p->presence_penalty);
	if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
		return ms_err_set(err, -EINVAL, "frequency_penalty %g is out of range [-2, 2]",
				  (double)p->frequency_penalty);
	if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= 10.0f))
		return ms_err_set(err, -EINVAL, "repetition_penalty %g is out of range (0, 10]",
				  (double)p->repetition_penalty);
	if (p->n_logit_bias && !p->logit_bias)
		return ms_err_set(err, -EINVAL, "logit_bias: %zu entries but no array",
				  p->n_logit_bias);
	for (size_t i = 0; i < p->n_logit_bias; i++) {
		const struct ms_logit_bias *b = &p->logit_bias[i];
		if (b->id < 0 || b->id >= vocab)
			return ms_err_set(err, -EINVAL,
					  "logit_bias[%zu]: token id %d is outside the vocabulary [0, %lld)",
					  i, (int)b->id, (long long)vocab);
		if (!(b->bias >= -MS_LOGIT_BIAS_MAX && b->bias <= MS_LOGIT_BIAS_MAX))
			return ms_err_set(err, -EINVAL,
					  "logit_bias[%zu] (token %d): bias %g is out of range [-%g, %g]",
					  i, (int)b->id, (double)b->bias, (double)MS_LOGIT_BIAS_MAX,
					  (double)MS_LOGIT_BIAS_MAX);
	}
	if (p->n_logprobs < -1 || p->n_logprobs > MS_LOGPROBS_MAX)
		return ms_err_set(err, -EINVAL,
				  "n_logprobs %d is out of range: -1 (none) or 0..%d",
				  p->n_logprobs, MS_LOGPROBS_MAX);
	return 0;
}

/* ---- vector helpers ------------------------------------------------------ */

/*
 * The passes over the vocabulary are written with GCC/clang vector extensions
 * of 16 bytes (SSE2 on x86-64, NEON on arm64: no ISA flag, no ABI change):
 * at -O2 the compiler vectorizes no loop of unknown length by itself, and
 * expf, called 201088 times, was most of a draw. 4-lane vectors; the tail of
 * an array goes through a padded copy so that every element sees the same
 * arithmetic.
 */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f v4f_load(const float *p)
{
	v4f v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static inline void v4f_store(float *p, v4f v)
{
	memcpy(p, &v, sizeof(v));
}

static inline v4f v4f_splat(float x)
{
	return (v4f){x, x, x, x};
}

/* m ? a : b, lane by lane (m: all ones or all zeros) */
static inline v4f v4f_select(v4i m, v4f a, v4f b)
{
	return (v4f)(((v4i)a & m) | ((v4i)b & ~m));
}

/* x[i .. i + 4) with lanes past n set to fill. */
static inline v4f v4f_load_tail(const float *x, int64_t i, int64_t n, float fill)
{
	if (i + 4 <= n)
		return v4f_load(x + i);
	float t[4] = {fill, fill, fill, fill};
	memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
	return v4f_load(t);
}

static inline void v4f_store_tail(float *x, int64_t i, int64_t n, v4f v)
{
	if (i + 4 <= n) {
		v4f_store(x + i, v);
		return;
	}
	float t[4];
	v4f_store(t, v);
	memcpy(x + i, t, (size_t)(n - i) * sizeof(float));
}

/*
 * exp(x) for x <= 0 (-inf included, NaN not): the tree's one approximation
 * (fastexp.h), four lanes at a time, 2^n through the exponent bits. Exactly
 * 1 at 0 and exactly 2^-k at k * ln2 rounded to float, so the argmax weighs
 * 1. Below -87 (where float leaves its normal range) the result is 0, so a
 * token masked to -inf never has weight.
 */
static inline v4f v4f_exp_neg(v4f x)
{
	const v4f magic = v4f_splat(MS_EXP_ROUND);
	v4i dead = x < v4f_splat(-87.0f);
	x = v4f_select(dead, v4f_splat(0.0f), x);
	v4f t = x * v4f_splat(MS_EXP_LOG2E) + magic;
	v4f nf = t - magic;
	v4i n = (v4i)t - (v4i)magic;
	v4f r = x - nf * v4f_splat(MS_EXP_LN2_HI);
	r = r - nf * v4f_splat(MS_EXP_LN2_LO);
	v4f q = v4f_splat(MS_EXP_P0);
	q = q * r + v4f_splat(MS_EXP_P1);
	q = q * r + v4f_splat(MS_EXP_P2);
	q = q * r + v4f_splat(MS_EXP_P3);
	q = q * r + v4f_splat(MS_EXP_P4);
	q = q * r + v4f_splat(MS_EXP_P5);
	v4f y = q * (r * r) + (r + v4f_splat(1.0f));
	y = y * (v4f)((n + 127) << 23);
	return (v4f)((v4i)y & ~dead);
}

/* The largest element, NaN ignored (-inf when all are NaN or -inf). */
static float max_of(const float *x, int64_t n)
{
	v4f m = v4f_splat(-INFINITY);
	for (int64_t i = 0; i < n; i += 4) {
		v4f v = v4f_load_tail(x, i, n, -INFINITY);
		m = v4f_select(v > m, v, m);
	}
	float a = m[0] > m[1] ? m[0] : m[1], b = m[2] > m[3] ? m[2] : m[3];
	return a > b ? a : b;
}

/* ---- float keys and radix select --------------------------------------- */

/* An unsigned key with the order of the floats (NaN excluded); -0 and +0 map
 * to the same key. */
static inline uint32_t f2key(float f)
{
	uint32_t b;
	memcpy(&b, &f, 4);
	if (b == 0x80000000u)
		b = 0;
	return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

static inline float key2f(uint32_t k)
{
	uint32_t b = (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k;
	float f;
	memcpy(&f, &b, 4);
	return f;
}

/* The kept set of a cut: key > key_v, or key == key_v and id <= id_cut. */
struct cut {
	uint32_t key_v;
	int64_t id_cut;
};

static inline bool cut_keeps(const struct cut *c, uint32_t key, int64_t i)
{
	return key > c->key_v || (key == c->key_v && i <= c->id_cut);
}

#define RADIX_BUCKETS 2048

/*
 * The smallest prefix of x[0..n) in descending order (ties: lower index
 * first) whose weight reaches target: weight 1 per element (by_mass false:
 * top_k) or x[i] itself (by_mass true, x >= 0: top_p). Three passes over the
 * key's digits (bits 31..21, 20..10, 9..0), each histogramming only the
 * elements whose higher digits equal the boundary found so far: at the end
 * the boundary is one exact value, and the number of its copies to keep
 * follows from the weight above it. Always keeps at least one element.
 * Elements below lo_bound are known to lie below the boundary and are skipped.
 */
static void radix_cut(const float *x, int64_t n, bool by_mass, double target, float lo_bound,
		      struct cut *out)
{
	static const int shift[3] = {21, 10, 0}, bits[3] = {11, 11, 10};
	uint32_t cnt[RADIX_BUCKETS];
	double mass[RADIX_BUCKETS];
	uint32_t prefix = 0, pmask = 0, n_tied = 0;
	double above = 0; /* weight of the elements whose key is above the current range */
	for (int pass = 0; pass < 3; pass++) {
		uint32_t nb = 1u << bits[pass], sh = (uint32_t)shift[pass];
		memset(cnt, 0, nb * sizeof(cnt[0]));
		if (by_mass)
			memset(mass, 0, nb * sizeof(mass[0]));
		for (int64_t i = 0; i < n; i++) {
			if (x[i] < lo_bound)
				continue;
			uint32_t k = f2key(x[i]);
			if ((k & pmask) != prefix)
				continue;
			uint32_t d = (k >> sh) & (nb - 1);
			cnt[d]++;
			if (by_mass)
				mass[d] += x[i];
		}
		int64_t d, low = -1;
		for (d = (int64_t)nb - 1; d >= 0; d--) {
			if (!cnt[d])
				continue;
			double w = by_mass ? mass[d] : (double)cnt[d];
			if (above + w >= target)
				break;
			above += w;
			low = d;
		}
		if (d < 0) {
			/* rounding left the target just out of reach: keep everything
			 * in range, the lowest bucket being the boundary */
			if (low < 0) { /* nothing in range (cannot happen): keep all */
				out->key_v = 0;
				out->id_cut = n;
				return;
			}
			d = low;
			above -= by_mass ? mass[d] : (double)cnt[d];
		}
		prefix |= (uint32_t)d << sh;
		pmask |= (nb - 1) << sh;
		n_tied = cnt[d];
	}
	int64_t r;
	if (by_mass) {
		double v = key2f(prefix);
		r = v > 0 ? (int64_t)ceil((target - above) / v) : (int64_t)n_tied;
	} else {
		r = (int64_t)(target - above);
	}
	r = r < 1 ? 1 : (r > (int64_t)n_tied ? (int64_t)n_tied : r);
	out->key_v = prefix;
	out->id_cut = n;
	if (r < (int64_t)n_tied) { /* the r lowest ids among the tied */
		int64_t seen = 0;
		for (int64_t i = 0; i < n; i++)
			if (f2key(x[i]) == prefix && ++seen == r) {
				out->id_cut = i;
				break;
			}
	}
}

/* ---- logprobs ----------------------------------------------------------- */

static inline float clean(float x)
{
	return x != x ? -INFINITY : x;
}

/* log Z of the raw logits and their top n_top (descending, ties: lower id),
 * NaN read as -inf. */
static double raw_stats(const float *logits, int64_t n, int n_top, struct ms_logprob *top,
			int *n_filled)
{
	int f = 0;
	for (int64_t i = 0; i < n && n_top > 0; i++) {
		float x = clean(logits[i]);
		if (f == n_top && !(x > top[f - 1].logprob))
			continue;
		/* insert after every entry >= x: earlier (lower) ids win ties */
		int j = f < n_top ? f++ : f - 1;
		while (j > 0 && top[j - 1].logprob < x) {
			top[j] = top[j - 1];
			j--;
		}
		top[j].id = (int32_t)i;
		top[j].logprob = x;
	}
	*n_filled = f;
	/* max and sum of exp(x - max), NaN as -inf, 4 partial sums in double */
	float m = max_of(logits, n);
	if (!isfinite(m))
		return m; /* all -inf: every logprob -inf; +inf: degenerate, the same */
	double sum[4] = {0, 0, 0, 0};
	v4f vm = v4f_splat(m);
	for (int64_t i = 0; i < n; i += 4) {
		v4f v = v4f_load_tail(logits, i, n, -INFINITY);
		v = v4f_select(v != v, v4f_splat(-INFINITY), v);
		v4f e = v4f_exp_neg(v - vm);
		for (int l = 0; l < 4; l++)
			sum[l] += e[l];
	}
	return (double)m + log((sum[0] + sum[1]) + (sum[2] + sum[3]));
}

static inline float logprob_of(float x, double log_z)
{
	double v = (double)clean(x) - log_z;
	return isnan(v) ? -INFINITY : (float)v;
}

int ms_logprobs_of(const float *logits, int64_t vocab, int32_t token, int n_top,
		   struct ms_token_logprobs *out)
{
	if (token < 0 || token >= vocab || n_top < 0 || n_top > MS_LOGPROBS_MAX)
		return -EINVAL;
	double log_z = raw_stats(logits, vocab, n_top, out->top, &out->n_top);
	for (int j = 0; j < out->n_top; j++)
		out->top[j].logprob = logprob_of(out->top[j].logprob, log_z);
	out->token = token;
	out->logprob = logprob_of(logits[token], log_z);
	return 0;
}

/* ---- token set ---------------------------------------------------------- */

static inline uint32_t tokset_hash(int32_t id, uint32_t cap)
{
	return ((uint32_t)id * 0x9E3779B1u) >> (32 - __builtin_ctz(cap));
}

static int tokset_grow(struct ms_tokset *t)
{
	uint32_t cap = t->cap ? t->cap * 2 : 64;
	int32_t *ids = malloc(cap * sizeof(*ids));
	uint32_t *counts = malloc(cap * sizeof(*counts));
	if (!ids || !counts) {
		free(ids);
		free(counts);
		return -ENOMEM;
	}
	memset(ids, 0xFF, cap * sizeof(*ids)); /* -1: empty */
	for (uint32_t i = 0; i < t->cap; i++) {
		if (t->ids[i] < 0)
			continue;
		uint32_t h = tokset_hash(t->ids[i], cap);
		while (ids[h] >= 0)
			h = (h + 1) & (cap - 1);
		ids[h] = t->ids[i];
		counts[h] = t->counts[i];
	}
	free(t->ids);
	free(t->counts);
	t->ids = ids;
	t->counts = counts;
	t->cap = cap;
	return 0;
}

/* The slot of id, or -1. */
static int64_t tokset_find(const struct ms_tokset *t, int32_t id)
{
	if (!t->cap)
		return -1;
	uint32_t h = tokset_hash(id, t->cap);
	for (; t->ids[h] >= 0; h = (h + 1) & (t->cap - 1))
		if (t->ids[h] == id)
			return h;
	return -1;
}

/* The count slot of id, inserted with 0 when absent; NULL and *rc = -ENOMEM
 * when growing fails. */
static uint32_t *tokset_slot(struct ms_tokset *t, int32_t id, int *rc)
{
	int64_t f = tokset_find(t, id);
	if (f >= 0)
		return &t->counts[f];
	if ((t->n + 1) * 2 > t->cap && (*rc = tokset_grow(t)) < 0)
		return NULL;
	uint32_t h = tokset_hash(id, t->cap);
	while (t->ids[h] >= 0)
		h = (h + 1) & (t->cap - 1);
	t->ids[h] = id;
	t->counts[h] = 0;
	t->n++;
	return &t->counts[h];
}

static void tokset_free(struct ms_tokset *t)
{
	free(t->ids);
	free(t->counts);
	memset(t, 0, sizeof(*t));
}

/* ---- sampler ------------------------------------------------------------ */

int ms_sampler_init(struct ms_sampler *s, const struct ms_sampling *p, int64_t vocab,
		    const int32_t *prompt, size_t n_prompt, uint64_t fallback_seed,
		    struct ms_err *err)
{
	memset(s, 0, sizeof(*s));
	int rc = ms_sampling_check(p, vocab, err);
	if (rc < 0)
		return rc;
	if (n_prompt && !prompt)
		return ms_err_set(err, -EINVAL, "prompt: %zu tokens but no array", n_prompt);
	s->p = *p;
	s->vocab = vocab;
	ms_rng_seed(&s->rng, p->has_seed ? p->seed : fallback_seed);

	/* logit_bias: one entry per id, the last one given winning (as the
	 * last of repeated keys does in a JSON object) */
	if (p->n_logit_bias) {
		struct ms_tokset where = {0};
		s->bias = malloc(p->n_logit_bias * sizeof(*s->bias));
		if (!s->bias)
			goto nomem;
		for (size_t i = 0; i < p->n_logit_bias; i++) {
			uint32_t *slot = tokset_slot(&where, p->logit_bias[i].id, &rc);
			if (!slot) {
				tokset_free(&where);
				goto nomem;
			}
			if (!*slot) {
				s->bias[s->n_bias++] = p->logit_bias[i];
				*slot = (uint32_t)s->n_bias; /* index + 1 */
			} else {
				s->bias[*slot - 1].bias = p->logit_bias[i].bias;
			}
		}
		tokset_free(&where);
	}
	s->p.logit_bias = s->bias;
	s->p.n_logit_bias = s->n_bias;

	s->track_prompt = p->repetition_penalty != 1.0f;
	s->track_output = s->track_prompt || p->presence_penalty != 0.0f ||
			  p->frequency_penalty != 0.0f;
	for (size_t i = 0; s->track_prompt && i < n_prompt; i++) {
		if (prompt[i] < 0 || prompt[i] >= vocab) {
			ms_sampler_free(s);
			return ms_err_set(err, -EINVAL,
					  "prompt token %d at position %zu is outside the vocabulary [0, %lld)",
					  (int)prompt[i], i, (long long)vocab);
		}
		if (!tokset_slot(&s->seen, prompt[i], &rc))
			goto nomem;
	}
	return 0;
nomem:
	ms_sampler_free(s);
	return ms_err_set(err, -ENOMEM, "sampler: out of memory");
}

void ms_sampler_free(struct ms_sampler *s)
{
	if (!s)
		return;
	free(s->bias);
	tokset_free(&s->seen);
	s->bias = NULL;
	s->n_bias = 0;
	s->p.logit_bias = NULL;
	s->p.n_logit_bias = 0;
}

int ms_sampler_accept(struct ms_sampler *s, int32_t id)
{
	if (id < 0 || id >= s->vocab)
		return -EINVAL;
	s->n_accepted++;
	if (!s->track_output)
		return 0;
	int rc = -ENOMEM;
	uint32_t *c = tokset_slot(&s->seen, id, &rc);
	if (!c)
		return rc;
	if (*c < UINT32_MAX)
		(*c)++;
	return 0;
}

uint32_t ms_sampler_count(const struct ms_sampler *s, int32_t id)
{
	int64_t f = tokset_find(&s->seen, id);
	return f >= 0 ? s->seen.counts[f] : 0;
}

/* Steps 1-3: z = logits with bias and penalties, into work. */
static void adjusted_logits(const struct ms_sampler *s, const float *logits, float *z)
{
	const struct ms_sampling *p = &s->p;
	for (int64_t i = 0; i < s->vocab; i += 4) { /* NaN -> -inf */
		v4f v = v4f_load_tail(logits, i, s->vocab, 0.0f);
		v4f_store_tail(z, i, s->vocab, v4f_select(v != v, v4f_splat(-INFINITY), v));
	}
	for (size_t i = 0; i < s->n_bias; i++)
		z[s->bias[i].id] += s->bias[i].bias;
	if (!s->track_output)
		return;
	const struct ms_tokset *t = &s->seen;
	float r = p->repetition_penalty;
	for (uint32_t h = 0; h < t->cap; h++) {
		int32_t id = t->ids[h];
		if (id < 0)
			continue;
		float v = z[id];
		if (r != 1.0f)
			v = v > 0 ? v / r : v * r;
		uint32_t c = t->counts[h];
		if (c)
			v -= p->presence_penalty + p->frequency_penalty * (float)c;
		z[id] = v;
	}
}

void ms_sampler_adjust(const struct ms_sampler *s, const float *logits, float *out)
{
	adjusted_logits(s, logits, out);
}

/* The first id of the largest value (no NaN in z): a vector max, then a
 * search for it. */
static int64_t argmax(const float *z, int64_t n)
{
	float m = max_of(z, n);
	for (int64_t i = 0; i < n; i++)
		if (z[i] == m)
			return i;
	return 0; /* all NaN: not after adjusted_logits */
}

/*
 * Masses per block of ids, so that the draw finds its block in a few steps
 * and scans one block, instead of walking up to the whole vocabulary with a
 * chain of dependent additions. blk[b] sums w[b * size .. (b + 1) * size) in
 * id order.
 */
#define SAMPLE_BLOCKS 256

struct blocks {
	int64_t size;
	int n;
	double sum;   /* sum of blk[] in order */
	double blk[SAMPLE_BLOCKS];
	int64_t last; /* highest id with w > 0, or -1 */
};

static void blocks_init(struct blocks *bl, int64_t n)
{
	bl->size = ((n + SAMPLE_BLOCKS - 1) / SAMPLE_BLOCKS + 3) & ~(int64_t)3; /* whole vectors */
	bl->n = (int)((n + bl->size - 1) / bl->size);
	bl->sum = 0;
	bl->last = -1;
}

/* Inverse CDF: the first id whose running mass exceeds u * sum. Within the
 * chosen block the partial sums are associated differently from blk[b], so
 * a u at the block's very top falls back to the block's last positive id
 * (it exists: blk[b] > 0 there). */
static int64_t blocks_draw(const struct blocks *bl, const float *w, int64_t n, double u01)
{
	double u = u01 * bl->sum, acc = 0;
	for (int b = 0; b < bl->n; b++) {
		if (!(acc + bl->blk[b] > u)) {
			acc += bl->blk[b];
			continue;
		}
		int64_t lo = (int64_t)b * bl->size, hi = lo + bl->size < n ? lo + bl->size : n;
		int64_t last = -1;
		for (int64_t i = lo; i < hi; i++) {
			if (w[i] == 0.0f)
				continue;
			acc += w[i];
			last = i;
			if (acc > u)
				return i;
		}
		return last;
	}
	return bl->last; /* u rounded up to sum */
}

/* ---- candidate lists ---------------------------------------------------- */

/*
 * When few tokens can survive (top_k <= CAND_MAX, or a nucleus whose
 * possible members number <= CAND_MAX) they are gathered into a list on the
 * stack, sorted (value descending, id ascending) and finished there: top_p is
 * then a prefix sum in sorted order, and the draw walks the list. Otherwise
 * the dense path below works over the whole vocabulary.
 */
#define CAND_MAX 1024

struct cand {
	float v;
	int32_t id;
};

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->v != y->v)
		return x->v > y->v ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* a ranks below b: lower value, or the same value and a higher id */
static inline bool cand_worse(const struct cand *a, const struct cand *b)
{
	return a->v < b->v || (a->v == b->v && a->id > b->id);
}

static void heap_sift_down(struct cand *h, int n, int i)
{
	for (;;) {
		int l = 2 * i + 1, r = l + 1, w = i;
		if (l < n && cand_worse(&h[l], &h[w]))
			w = l;
		if (r < n && cand_worse(&h[r], &h[w]))
			w = r;
		if (w == i)
			return;
		struct cand t = h[i];
		h[i] = h[w];
		h[w] = t;
		i = w;
	}
}

/* The k best of z (no NaN), sorted: a heap whose root is the worst kept.
 * Ids come in increasing order, so a newcomer equal to the root ranks below
 * it: only a strictly larger value enters. */
static int top_k_list(const float *z, int64_t n, int k, struct cand *h)
{
	int nh = 0;
	for (int64_t i = 0; i < n; i++) {
		if (nh == k) {
			if (!(z[i] > h[0].v))
				continue;
			h[0] = (struct cand){z[i], (int32_t)i};
			heap_sift_down(h, nh, 0);
			continue;
		}
		h[nh++] = (struct cand){z[i], (int32_t)i};
		if (nh == k)
			for (int j = k / 2 - 1; j >= 0; j--)
				heap_sift_down(h, nh, j);
	}
	qsort(h, (size_t)nh, sizeof(*h), cand_cmp);
	return nh;
}

static inline float exp_neg1(float x)
{
	return v4f_exp_neg(v4f_splat(x))[0];
}

/* top_p (against total, the mass of every token still in play), min_p and
 * the draw, on c[0..nc) holding e = exp((z - m) / t) in descending order. */
static int64_t draw_list(struct ms_sampler *s, struct cand *c, int nc, double total)
{
	const struct ms_sampling *p = &s->p;
	int kept = nc;
	if (p->top_p < 1.0f) {
		double target = ((double)p->top_p - 1e-6) * total, acc = 0;
		for (int j = 0; j < nc; j++) {
			acc += c[j].v;
			if (acc >= target) {
				kept = j + 1;
				break;
			}
		}
	}
	double sum = 0;
	int last = 0;
	for (int j = 0; j < kept; j++) {
		if (c[j].v < p->min_p) /* min_p * e_max, e_max = 1 */
			c[j].v = 0.0f;
		sum += c[j].v;
		last = c[j].v > 0.0f ? j : last;
	}
	double u = ms_rng_next_double(&s->rng) * sum, acc = 0;
	for (int j = 0; j < kept; j++) {
		acc += c[j].v;
		if (acc > u)
			return c[j].id;
	}
	return c[last].id;
}

/* ---- the draw ----------------------------------------------------------- */

/* Steps 4-8 on z (work), for a temperature above the greedy threshold. */
static int64_t draw(struct ms_sampler *s, float *w)
{
	const struct ms_sampling *p = &s->p;
	int64_t n = s->vocab;
	float t = p->temperature;
	struct cand c[CAND_MAX];
	if (p->top_k == 1)
		return argmax(w, n);

	/* top_k <= CAND_MAX: the k best in a heap, finished as a list */
	if (p->top_k > 1 && p->top_k <= CAND_MAX && p->top_k < n) {
		int nc = top_k_list(w, n, p->top_k, c);
		float m = c[0].v;
		if (!isfinite(m))
			return c[0].id;
		double total = 0;
		for (int j = 0; j < nc; j++) {
			c[j].v = exp_neg1((c[j].v - m) / t);
			total += c[j].v;
		}
		return draw_list(s, c, nc, total);
	}

	float m = max_of(w, n);
	if (!isfinite(m))
		return argmax(w, n); /* nothing finite to weigh */

	/* a larger top_k on z (the order temperature keeps) */
	if (p->top_k > 1 && p->top_k < n) {
		struct cut ck;
		radix_cut(w, n, false, (double)p->top_k, -INFINITY, &ck);
		for (int64_t i = 0; i < n; i++)
			if (!cut_keeps(&ck, f2key(w[i]), i))
				w[i] = -INFINITY;
	}
	/* e = exp((z - m) / t): unnormalized probabilities, the argmax's 1 */
	struct blocks bl;
	blocks_init(&bl, n);
	const v4f vm = v4f_splat(m), vt = v4f_splat(t);
	for (int b = 0; b < bl.n; b++) {
		int64_t lo = (int64_t)b * bl.size, hi = lo + bl.size < n ? lo + bl.size : n;
		double sum[4] = {0, 0, 0, 0};
		for (int64_t i = lo; i < hi; i += 4) {
			v4f e = v4f_exp_neg((v4f_load_tail(w, i, n, -INFINITY) - vm) / vt);
			v4f_store_tail(w, i, n, e);
			for (int l = 0; l < 4; l++)
				sum[l] += e[l];
		}
		bl.blk[b] = (sum[0] + sum[1]) + (sum[2] + sum[3]);
		bl.sum += bl.blk[b];
	}

	/* top_p over e. Tokens below c = (1 - top_p) * sum / (n - 1) weigh less
	 * than (1 - top_p) * sum all together, so the nucleus lies above c (most
	 * of a real vocabulary is below). Few above: a list; else a radix select
	 * that skips what is below. */
	bool use_p = p->top_p < 1.0f;
	struct cut cp = {0, n};
	float below = 0.0f; /* dropped whatever the cut */
	if (use_p) {
		double cb = n > 1 ? (1.0 - (double)p->top_p) * bl.sum / (double)(n - 1) : 0.0;
		below = (float)(cb < 1.0 ? cb : 1.0) * 0.999f; /* e_max = 1 is never below it */
		int nc = 0;
		for (int64_t i = 0; i < n && nc <= CAND_MAX; i++)
			if (w[i] >= below && w[i] > 0.0f) {
				if (nc < CAND_MAX)
					c[nc] = (struct cand){w[i], (int32_t)i};
				nc++;
			}
		if (nc <= CAND_MAX) {
			qsort(c, (size_t)nc, sizeof(c[0]), cand_cmp);
			return draw_list(s, c, nc, bl.sum);
		}
		radix_cut(w, n, true, ((double)p->top_p - 1e-6) * bl.sum, below, &cp);
	}
	/* then min_p: e < min_p * e_max = min_p */
	if (use_p || p->min_p > 0.0f) {
		float thr = p->min_p > below ? p->min_p : below;
		bl.sum = 0;
		for (int b = 0; b < bl.n; b++) {
			int64_t lo = (int64_t)b * bl.size, hi = lo + bl.size < n ? lo + bl.size : n;
			double sum = 0;
			for (int64_t i = lo; i < hi; i++) {
				float e = w[i];
				if (e == 0.0f)
					continue;
				if (e < thr || (use_p && !cut_keeps(&cp, f2key(e), i))) {
					w[i] = 0.0f;
					continue;
				}
				sum += e;
				bl.last = i;
			}
			bl.blk[b] = sum;
			bl.sum += sum;
		}
	} else {
		for (int64_t i = n - 1; i >= 0 && bl.last < 0; i--)
			if (w[i] > 0.0f)
				bl.last = i;
	}
	int64_t id = blocks_draw(&bl, w, n, ms_rng_next_double(&s->rng));
	return id >= 0 ? id : argmax(w, n);
}

int32_t ms_sampler_sample(struct ms_sampler *s, const float *logits, float *work,
			  struct ms_token_logprobs *lp)
{
	return ms_sampler_sample_masked(s, logits, work, lp, NULL, NULL);
}

int32_t ms_sampler_sample_masked(struct ms_sampler *s, const float *logits, float *work,
				 struct ms_token_logprobs *lp,
				 void (*mask)(void *ctx, float *z, int64_t vocab), void *ctx)
{
	adjusted_logits(s, logits, work);
	if (mask)
		mask(ctx, work, s->vocab);
	int64_t id;
	if (s->p.temperature < MS_GREEDY_TEMPERATURE)
		id = argmax(work, s->vocab);
	else
		id = draw(s, work);
	if (lp) {
		if (s->p.n_logprobs >= 0) {
			ms_logprobs_of(logits, s->vocab, (int32_t)id, s->p.n_logprobs, lp);
		} else {
			lp->token = (int32_t)id;
			lp->logprob = NAN;
			lp->n_top = 0;
		}
	}
	return (int32_t)id;
}

/* ---- stop strings ------------------------------------------------------- */

int ms_stopper_init(struct ms_stopper *st, const char *const *stops, size_t n, bool include_stop,
		    struct ms_err *err)
{
	memset(st, 0, sizeof(*st));
	st->matched = -1;
	st->include_stop = include_stop;
	if (!n)
		return 0;
	st->stops = calloc(n, sizeof(*st->stops));
	st->lens = calloc(n, sizeof(*st->lens));
	if (!st->stops || !st->lens)
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		size_t len = stops[i] ? strlen(stops[i]) : 0;
		if (!len) {
			ms_stopper_free(st);
			return ms_err_set(err, -EINVAL, "stop[%zu] is an empty string", i);
		}
		st->stops[i] = strdup(stops[i]);
		if (!st->stops[i])
			goto nomem;
		st->n = i + 1;
		st->lens[i] = len;
		st->max_len = len > st->max_len ? len : st->max_len;
	}
	return 0;
nomem:
	ms_stopper_free(st);
	return ms_err_set(err, -ENOMEM, "stop strings: out of memory");
}

void ms_stopper_free(struct ms_stopper *st)
{
	if (!st)
		return;
	for (size_t i = 0; i < st->n; i++)
		free(st->stops[i]);
	free(st->stops);
	free(st->lens);
	free(st->buf);
	memset(st, 0, sizeof(*st));
	st->matched = -1;
}

const char *ms_stopper_text(const struct ms_stopper *st)
{
	return st->buf ? st->buf : "";
}

const char *ms_stopper_matched(const struct ms_stopper *st)
{
	return st->matched >= 0 ? st->stops[st->matched] : NULL;
}

/* Drop what the last call handed out. */
static void stopper_consume(struct ms_stopper *st)
{
	if (!st->n_out)
		return;
	memmove(st->buf, st->buf + st->n_out, st->len - st->n_out);
	st->len -= st->n_out;
	st->n_out = 0;
}

int ms_stopper_push(struct ms_stopper *st, const char *text, size_t len, size_t *emit_len,
		    bool *stopped)
{
	*emit_len = 0;
	*stopped = st->stopped;
	if (st->stopped)
		return 0;
	stopper_consume(st);
	if (st->len + len > st->cap) {
		size_t cap = st->cap ? st->cap : 64;
		while (cap < st->len + len)
			cap *= 2;
		char *b = realloc(st->buf, cap);
		if (!b)
			return -ENOMEM;
		st->buf = b;
		st->cap = cap;
	}
	if (len)
		memcpy(st->buf + st->len, text, len);
	st->len += len;

	/* The held-back bytes held no complete stop string and nothing sent can
	 * begin one, so every occurrence lies in buf: take the first to end
	 * (ties: the earlier start, then the lower index). */
	size_t best_end = SIZE_MAX, best_start = 0;
	int best = -1;
	for (size_t j = 0; j < st->n && st->len; j++) {
		const char *hit = memmem(st->buf, st->len, st->stops[j], st->lens[j]);
		if (!hit)
			continue;
		size_t start = (size_t)(hit - st->buf), end = start + st->lens[j];
		if (end < best_end || (end == best_end && start < best_start)) {
			best_end = end;
			best_start = start;
			best = (int)j;
		}
	}
	if (best >= 0) {
		st->stopped = true;
		st->matched = best;
		*stopped = true;
		*emit_len = st->include_stop ? best_end : best_start;
		st->n_out = st->len; /* the rest is dropped */
		return 0;
	}

	/* Hold back the longest tail that is a proper prefix of a stop string. */
	size_t keep = st->len;
	size_t from = !st->n ? st->len : st->len > st->max_len - 1 ? st->len - (st->max_len - 1) : 0;
	for (size_t i = from; i < st->len && keep == st->len; i++)
		for (size_t j = 0; j < st->n; j++)
			if (st->len - i < st->lens[j] &&
			    !memcmp(st->buf + i, st->stops[j], st->len - i)) {
				keep = i;
				break;
			}
	*emit_len = keep;
	st->n_out = keep;
	return 0;
}

void ms_stopper_finish(struct ms_stopper *st, size_t *emit_len)
{
	*emit_len = 0;
	if (st->stopped)
		return;
	stopper_consume(st);
	*emit_len = st->len;
	st->n_out = st->len;
}
