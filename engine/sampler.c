/* sampler.c: see sampler.h. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- RNG: xoshiro256** (Blackman & Vigna), seeded by splitmix64 ---------- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
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

/* log Z of the raw logits and their top n_top (descending, ties: lower id). */
static double raw_stats(const float *logits, int64_t n, int n_top, struct ms_logprob *top,
			int *n_filled)
{
	float m = -INFINITY;
	int f = 0;
	for (int64_t i = 0; i < n; i++) {
		float x = clean(logits[i]);
		m = x > m ? x : m;
		if (n_top <= 0 || (f == n_top && !(x > top[f - 1].logprob)))
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
	if (m == -INFINITY)
		return -INFINITY;
	double sum = 0;
	for (int64_t i = 0; i < n; i++)
		sum += expf(clean(logits[i]) - m);
	return (double)m + log(sum);
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

/* The count slot of id, inserted with 0 when absent (insert) or NULL. */
static uint32_t *tokset_slot(struct ms_tokset *t, int32_t id, bool insert, int *rc)
{
	if (t->cap) {
		uint32_t h = tokset_hash(id, t->cap);
		for (; t->ids[h] >= 0; h = (h + 1) & (t->cap - 1))
			if (t->ids[h] == id)
				return &t->counts[h];
	}
	if (!insert)
		return NULL;
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
			uint32_t *slot = tokset_slot(&where, p->logit_bias[i].id, true, &rc);
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
		if (!tokset_slot(&s->seen, prompt[i], true, &rc))
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
	uint32_t *c = tokset_slot(&s->seen, id, true, &rc);
	if (!c)
		return rc;
	if (*c < UINT32_MAX)
		(*c)++;
	return 0;
}

uint32_t ms_sampler_count(const struct ms_sampler *s, int32_t id)
{
	int rc = 0;
	uint32_t *c = tokset_slot((struct ms_tokset *)&s->seen, id, false, &rc);
	return c ? *c : 0;
}

/* Steps 1-3: z = logits with bias and penalties, into work. */
static void adjusted_logits(const struct ms_sampler *s, const float *logits, float *z)
{
	const struct ms_sampling *p = &s->p;
	for (int64_t i = 0; i < s->vocab; i++)
		z[i] = clean(logits[i]);
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

static int64_t argmax(const float *z, int64_t n)
{
	int64_t best = 0;
	float bv = z[0];
	for (int64_t i = 1; i < n; i++)
		if (z[i] > bv) {
			bv = z[i];
			best = i;
		}
	return best;
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
	bl->size = (n + SAMPLE_BLOCKS - 1) / SAMPLE_BLOCKS;
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

/* Steps 4-8 on z (work), for a temperature above the greedy threshold. */
static int64_t draw(struct ms_sampler *s, float *w)
{
	const struct ms_sampling *p = &s->p;
	int64_t n = s->vocab, best = argmax(w, n);
	float m = w[best], t = p->temperature;
	if (!isfinite(m) || p->top_k == 1)
		return best; /* nothing finite to weigh, or one token kept */

	/* top_k on z (the order temperature keeps), then e = exp((z - m) / t):
	 * unnormalized probabilities, the argmax's being exactly 1 */
	bool use_k = p->top_k > 1 && p->top_k < n;
	struct cut ck = {0, n};
	if (use_k)
		radix_cut(w, n, false, (double)p->top_k, -INFINITY, &ck);
	struct blocks bl;
	blocks_init(&bl, n);
	for (int b = 0; b < bl.n; b++) {
		int64_t lo = (int64_t)b * bl.size, hi = lo + bl.size < n ? lo + bl.size : n;
		double sum = 0;
		for (int64_t i = lo; i < hi; i++) {
			float e = 0.0f;
			if (!use_k || cut_keeps(&ck, f2key(w[i]), i))
				e = expf((w[i] - m) / t);
			w[i] = e;
			sum += e;
		}
		bl.blk[b] = sum;
		bl.sum += sum;
	}

	/* top_p over e. Tokens below c = (1 - top_p) * sum / (n - 1) weigh less
	 * than (1 - top_p) * sum all together, so the nucleus lies above c: the
	 * select skips them (most of a real vocabulary). */
	bool use_p = p->top_p < 1.0f;
	struct cut cp = {0, n};
	if (use_p) {
		double c = n > 1 ? (1.0 - (double)p->top_p) * bl.sum / (double)(n - 1) : 0.0;
		c = c < 1.0 ? c : 1.0; /* e_max = 1 is never below it */
		radix_cut(w, n, true, ((double)p->top_p - 1e-6) * bl.sum, (float)c * 0.999f, &cp);
	}
	/* then min_p: e < min_p * e_max = min_p */
	if (use_p || p->min_p > 0.0f) {
		float thr = p->min_p;
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
	return id >= 0 ? id : best;
}

int32_t ms_sampler_sample(struct ms_sampler *s, const float *logits, float *work,
			  struct ms_token_logprobs *lp)
{
	adjusted_logits(s, logits, work);
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
