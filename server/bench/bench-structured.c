/*
 * bench-structured.c: `moeserve bench --structured`, what structured
 * outputs cost on this machine: for each of a fixed set of JSON
 * Schemas, the grammar's compile time and the time of every token's mask
 * and accept during constrained generation; then the model's decode speed
 * with a grammar against the same run without one.
 *
 * A mask is the grammar's (token-mask.h) applied to a row of logits over
 * the tokenizer's whole vocabulary, as tool-force applies it to every token
 * of a body; an accept feeds the token drawn to the matcher. The logits are
 * random at temperature 1: drawn independently of each other, every allowed
 * token is as likely as any other, so the token is drawn uniformly among
 * those the mask leaves (rather than a softmax over 201k logits a step,
 * which is not what is measured); the end of text is allowed once the JSON
 * is complete. Each schema gets SEQS sequences of at most MASK_BUDGET
 * tokens (random text rarely closes a string: the budget ends those,
 * unfinished; tool-force's closing of a body near max_tokens is its own
 * and not timed here) through one grammar, so one mask cache: the first
 * sequence meets its states first (a miss walks the vocabulary), later
 * ones meet many again (hits). The figures: the median and the 99th
 * percentile over every step of every sequence, per schema and over all
 * schemas together, and over the first sequence alone (cold). A token the
 * mask allowed that the matcher refuses would stop the bench (the masks
 * are exact: never).
 *
 * Decode: bench-common.c's engine runs at batch 1 and 8, each request
 * plain or under the first schema (tool-force's constraint in plain mode,
 * without a budget: the steady state, not the closing of an answer near
 * max_tokens, which tool-force does its own way), alternated ROUNDS times
 * (a shared machine drifts), the better of each kept; their tokens/s and
 * the ratio. Both draw at temperature 1 with fixed seeds: on random
 * weights greedy decoding can repeat one token, and with it the same
 * experts from the caches, which a grammar would change either way. On a
 * shared machine the ratio of two short runs moves by several percent
 * whatever the grammar costs, so the constraint's own time is counted too
 * (its mask and accept, per token) and given as a share of a step.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "bench-int.h"
#include "engine.h"
#include "grammar-json.h"
#include "ms-clock.h"
#include "ms-strbuf.h"
#include "token-mask.h"
#include "tool-force.h"

#define SEQS 8             /* sequences per schema */
#define MASK_BUDGET 200    /* tokens per sequence at most */
#define COMPILES 5         /* compiles per schema: the median */
#define N_SCHEMA 6

/* ---- the schemas ---- */

static const char *const flat_schema =
	"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
	"\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
	"\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]},\"active\":{\"type\":\"boolean\"},"
	"\"score\":{\"type\":\"number\"}},\"required\":[\"name\",\"age\",\"color\",\"active\"],"
	"\"additionalProperties\":false}";

static const char *const nested_schema =
	"{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":{"
	"\"id\":{\"type\":\"integer\"},\"email\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\","
	"\"items\":{\"type\":\"string\"},\"maxItems\":5}},\"required\":[\"id\",\"tags\"]},"
	"\"items\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
	"\"sku\":{\"type\":\"string\"},\"qty\":{\"type\":\"integer\",\"minimum\":1},"
	"\"price\":{\"type\":\"number\"}},\"required\":[\"sku\",\"qty\"],"
	"\"additionalProperties\":false}},\"meta\":{\"type\":\"object\"}},"
	"\"required\":[\"user\",\"items\"],\"additionalProperties\":false}";

static const char *const tree_schema =
	"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},"
	"\"label\":{\"type\":\"string\",\"maxLength\":12},\"children\":{\"type\":\"array\","
	"\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":3}},\"required\":[\"value\",\"children\"],"
	"\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";

static const char *const strings_schema =
	"{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\",\"maxLength\":20},"
	"\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}(-[0-9]{4})?$\"},"
	"\"when\":{\"type\":\"string\",\"format\":\"date-time\"},"
	"\"email\":{\"type\":\"string\",\"format\":\"email\"},"
	"\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
	"\"note\":{\"type\":\"string\",\"minLength\":5,\"maxLength\":200}},"
	"\"required\":[\"code\",\"zip\",\"when\",\"email\",\"id\",\"note\"],"
	"\"additionalProperties\":false}";

/* 50 properties of five kinds, the first ten required. */
static char *props50_schema(void)
{
	static const char *const kinds[] = {
		"{\"type\":\"string\",\"maxLength\":40}", "{\"type\":\"integer\"}",
		"{\"type\":\"boolean\"}", "{\"enum\":[\"low\",\"medium\",\"high\"]}",
		"{\"type\":\"number\"}"};
	struct ms_strbuf b = {0};
	ms_strbuf_str(&b, "{\"type\":\"object\",\"properties\":{");
	for (int i = 0; i < 50; i++)
		ms_strbuf_printf(&b, "%s\"field_%02d\":%s", i ? "," : "", i, kinds[i % 5]);
	ms_strbuf_str(&b, "},\"required\":[");
	for (int i = 0; i < 10; i++)
		ms_strbuf_printf(&b, "%s\"field_%02d\"", i ? "," : "", i);
	ms_strbuf_str(&b, "],\"additionalProperties\":false}");
	const char *s = ms_strbuf_cstr(&b);
	char *r = s ? strdup(s) : NULL;
	ms_strbuf_free(&b);
	return r;
}

struct schema {
	const char *name;
	char *text;          /* NULL: any JSON object (json_object) */
};

static int schemas_new(struct schema *s)
{
	const char *const names[N_SCHEMA] = {"flat", "nested", "props50", "tree", "strings",
					      "json_object"};
	const char *const texts[N_SCHEMA] = {flat_schema, nested_schema, NULL, tree_schema,
					     strings_schema, NULL};
	for (int i = 0; i < N_SCHEMA; i++) {
		s[i].name = names[i];
		s[i].text = i == 2 ? props50_schema() : texts[i] ? strdup(texts[i]) : NULL;
		if ((texts[i] || i == 2) && !s[i].text)
			return -ENOMEM;
	}
	return 0;
}

static void schemas_free(struct schema *s)
{
	for (int i = 0; i < N_SCHEMA; i++)
		free(s[i].text);
}

/* ---- statistics ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The q-quantile of v[0..n) (sorted in place); 0 when empty. */
static double quantile(double *v, int64_t n, double q)
{
	if (n <= 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	int64_t i = (int64_t)ceil(q * (double)n) - 1;
	return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

struct times {
	double *v;
	int64_t n, cap;
};

static bool times_add(struct times *t, double x)
{
	if (t->n == t->cap) {
		int64_t c = t->cap ? 2 * t->cap : 1024;
		double *v = realloc(t->v, (size_t)c * sizeof(*v));
		if (!v)
			return false;
		t->v = v, t->cap = c;
	}
	t->v[t->n++] = x;
	return true;
}

/* ---- the masks ---- */

/* What a mask run needs besides the schema. */
struct mask_env {
	const struct ms_tokenizer *tok;
	const struct ms_vocab_trie *trie;
	ms_mask_words_fn *write;        /* the backend's mask writer */
	int64_t vocab;
	struct ms_harmony_ids hids;
	const int32_t *eos;
	int n_eos;
};

struct mask_fig {
	double compile_ms;       /* JSON Schema to grammar, the median of COMPILES */
	int64_t states;
	int64_t steps;
	double med_us, p99_us, max_us;       /* mask(), every step */
	double cold_med_us, cold_p99_us;     /* the first sequence's */
	double accept_med_us, accept_p99_us; /* accept() */
	double tokens_per_seq;
	uint64_t hits, misses;
};

static int compile_schema(const struct schema *s, struct ms_grammar **g, double *ms,
			  struct ms_err *err)
{
	cJSON *j = s->text ? cJSON_Parse(s->text) : NULL;
	if (s->text && !j)
		return ms_err_set(err, -EINVAL, "bench: schema %s does not parse", s->name);
	double t[COMPILES];
	int rc = 0;
	for (int i = 0; !rc && i < COMPILES; i++) {
		double t0 = ms_now_s();
		rc = ms_json_schema_compile(j, g, err);
		t[i] = (ms_now_s() - t0) * 1e3;
		if (!rc && i + 1 < COMPILES)
			ms_grammar_free(*g);
	}
	cJSON_Delete(j);
	*ms = rc ? 0 : quantile(t, COMPILES, 0.5);
	return rc;
}

/* A token drawn uniformly among the finite logits (-1: none). */
static int32_t draw(const float *z, int64_t vocab, uint64_t *rng)
{
	int64_t n = 0;
	for (int64_t i = 0; i < vocab; i++)
		n += isfinite(z[i]) != 0;
	if (!n)
		return -1;
	*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
	int64_t k = (int64_t)((*rng >> 33) % (uint64_t)n);
	for (int64_t i = 0; i < vocab; i++)
		if (isfinite(z[i]) && k-- == 0)
			return (int32_t)i;
	return -1;
}

static bool is_eos(const struct mask_env *e, int32_t t)
{
	for (int i = 0; i < e->n_eos; i++)
		if (e->eos[i] == t)
			return true;
	return false;
}

/* One sequence: each step's mask (the grammar's, applied to a row of
 * logits as tool-force applies it) and accept (the token fed to the
 * matcher) timed and added. The end of text is allowed once the JSON is
 * complete; the budget ends the others, unfinished. -EPROTO: a token the
 * mask allowed and the grammar refused (never). */
static int mask_seq(const struct mask_env *e, struct ms_tmask *t, float *z, uint64_t seed,
		    struct times *mk, struct times *ac, int64_t *n_tok)
{
	struct ms_gmatch m;
	if (ms_gmatch_init(&m, ms_tmask_grammar(t)))
		return -ENOMEM;
	uint64_t rng = seed;
	int rc = 0;
	for (int64_t i = 0; !rc && i < MASK_BUDGET; i++) {
		memset(z, 0, (size_t)e->vocab * sizeof(*z));
		double t0 = ms_now_s();
		rc = ms_tmask_apply(t, &m, z, e->vocab);
		double t1 = ms_now_s();
		for (int k = 0; m.accept && k < e->n_eos; k++)
			if (e->eos[k] >= 0 && e->eos[k] < e->vocab)
				z[e->eos[k]] = 0;
		int32_t tok = draw(z, e->vocab, &rng);
		if (rc || tok < 0 || is_eos(e, tok))
			break;
		uint32_t len;
		const uint8_t *b = ms_vocab_trie_bytes(e->trie, tok, &len);
		double t2 = ms_now_s();
		bool ok = b && ms_gmatch_feed(&m, b, len);
		double t3 = ms_now_s();
		rc = !ok ? -EPROTO : times_add(mk, (t1 - t0) * 1e6) && times_add(ac, (t3 - t2) * 1e6) ? 0
								: -ENOMEM;
		(*n_tok)++;
	}
	ms_gmatch_free(&m);
	return rc;
}

/* The SEQS sequences of one grammar; every mask time also into pool. */
static int mask_runs(const struct mask_env *e, struct ms_tmask *t, struct mask_fig *f,
		     struct times *pool, struct ms_err *err)
{
	float *z = malloc((size_t)e->vocab * sizeof(*z));
	struct times mk = {0}, ac = {0};
	int64_t n_tok = 0, cold = 0;
	int rc = z ? 0 : -ENOMEM;
	for (int s = 0; !rc && s < SEQS; s++) {
		rc = mask_seq(e, t, z, 0x9e3779b97f4a7c15ull * (uint64_t)(s + 1), &mk, &ac, &n_tok);
		if (!s)
			cold = mk.n;
	}
	for (int64_t i = 0; !rc && i < mk.n; i++)
		rc = times_add(pool, mk.v[i]) ? 0 : -ENOMEM;
	if (!rc) {
		f->steps = mk.n;
		f->tokens_per_seq = (double)n_tok / SEQS;
		f->cold_med_us = quantile(mk.v, cold, 0.5);
		f->cold_p99_us = quantile(mk.v, cold, 0.99);
		f->med_us = quantile(mk.v, mk.n, 0.5);
		f->p99_us = quantile(mk.v, mk.n, 0.99);
		f->max_us = mk.n ? mk.v[mk.n - 1] : 0;
		f->accept_med_us = quantile(ac.v, ac.n, 0.5);
		f->accept_p99_us = quantile(ac.v, ac.n, 0.99);
	}
	free(mk.v);
	free(ac.v);
	free(z);
	if (rc == -EPROTO)
		return ms_err_set(err, rc, "bench: a token the mask allowed was refused by the grammar");
	return rc ? ms_err_set(err, rc, "bench: out of memory in the mask runs") : 0;
}

/* One schema: compile, mask cache, sequences (their mask times also into
 * pool). */
static int mask_schema(const struct mask_env *e, const struct schema *s, struct mask_fig *f,
		       struct times *pool, struct ms_err *err)
{
	memset(f, 0, sizeof(*f));
	struct ms_grammar *g;
	int rc = compile_schema(s, &g, &f->compile_ms, err);
	if (rc)
		return rc;
	f->states = (int64_t)ms_grammar_states(g);
	struct ms_tmask *t;
	if ((rc = ms_tmask_new(g, e->trie, 0, e->write, &t, err)))
		return rc;
	rc = mask_runs(e, t, f, pool, err);
	struct ms_tmask_stats ts;
	ms_tmask_get_stats(t, &ts);
	f->hits = ts.hits, f->misses = ts.misses;
	ms_tmask_unref(t);
	return rc;
}

/* ---- decode, constrained and not ---- */

struct dec_fig {
	int n;
	double plain_tps, cons_tps, ratio;
	double cons_us;     /* the constraint's time (mask and accept) per token */
	double share;       /* the share of a constrained step it takes */
};

static double tps(const struct run_stats *st)
{
	return st->secs > 0 ? (double)st->tokens / st->secs : 0;
}

/* A constraint with its time counted: every mask and accept of the inner
 * one (tool-force's), on the engine's thread (here the bench's own). */
struct timed {
	struct ms_constraint inner;
	double secs;
	int64_t tokens;
};

struct timed_state {
	struct timed *t;
	void *inner;
};

static void *timed_init(const void *arg)
{
	struct timed_state *s = malloc(sizeof(*s));
	if (s) {
		s->t = (struct timed *)arg;  /* the bench's own, not const */
		s->inner = s->t->inner.init(s->t->inner.arg);
	}
	if (s && !s->inner) {
		free(s);
		s = NULL;
	}
	return s;
}

static void timed_mask(void *st, float *logits, int64_t vocab)
{
	struct timed_state *s = st;
	double t0 = ms_now_s();
	s->t->inner.mask(s->inner, logits, vocab);
	s->t->secs += ms_now_s() - t0;
	s->t->tokens++;
}

static void timed_accept(void *st, int32_t token)
{
	struct timed_state *s = st;
	double t0 = ms_now_s();
	s->t->inner.accept(s->inner, token);
	s->t->secs += ms_now_s() - t0;
}

static void timed_free(void *st)
{
	struct timed_state *s = st;
	s->t->inner.free(s->inner);
	free(s);
}

#define ROUNDS 3

/* Batch n, plain then constrained, ROUNDS times; the better of each, and
 * the constraint's time per token over every constrained run. */
static int dec_pair(struct ms_model *m, struct timed *tc, int n, const struct ms_bench_opts *o,
		    struct dec_fig *d, struct ms_err *err)
{
	const struct ms_constraint c = {.init = timed_init, .mask = timed_mask,
					.accept = timed_accept, .free = timed_free, .arg = tc};
	memset(d, 0, sizeof(*d));
	d->n = n;
	tc->secs = 0, tc->tokens = 0;
	int64_t prompt = bench_decode_prompt(o);
	int rc = 0;
	for (int round = 0; !rc && round < ROUNDS; round++) {
		struct run_stats a, b;
		rc = bench_run_with(m, n, prompt, o->decode_tokens, NULL, 1, NULL, &a, err);
		if (!rc)
			rc = bench_run_with(m, n, prompt, o->decode_tokens, &c, 1, NULL, &b, err);
		d->plain_tps = !rc && tps(&a) > d->plain_tps ? tps(&a) : d->plain_tps;
		d->cons_tps = !rc && tps(&b) > d->cons_tps ? tps(&b) : d->cons_tps;
	}
	d->ratio = d->plain_tps > 0 ? d->cons_tps / d->plain_tps : 0;
	d->cons_us = tc->tokens ? tc->secs / (double)tc->tokens * 1e6 : 0;
	d->share = d->cons_us * 1e-6 * d->cons_tps;
	return rc;
}

/* The first schema's grammar over the model's vocabulary, as a request
 * would have it; both decode batches. */
static int decode_runs(struct ms_model *m, const struct mask_env *e, const struct schema *s,
		       const struct ms_bench_opts *o, struct dec_fig *d, struct ms_err *err)
{
	struct ms_vocab_trie *v = NULL;
	struct ms_grammar *g = NULL;
	struct ms_tmask *t = NULL;
	struct ms_tool_force *tf = NULL;
	double ms;
	struct ms_vocab voc = ms_tokenizer_vocab(e->tok);
	int rc = ms_vocab_trie_new(&voc, m->cfg.vocab, &v, err);
	if (!rc)
		rc = compile_schema(s, &g, &ms, err);
	if (!rc)
		rc = ms_tmask_new(g, v, 0, e->write, &t, err);
	/* no budget: max_tokens ends the runs, and no closing is timed */
	struct ms_force_spec sp = {.final_ok = true, .final = t, .plain = true};
	if (!rc)
		rc = ms_tool_force_new(e->tok, &e->hids, e->eos, e->n_eos, &sp, &tf, err);
	struct timed tc = {0};
	if (!rc)
		tc.inner = ms_tool_force_constraint(tf);
	static const int batch[2] = {1, 8};
	for (int i = 0; !rc && i < 2; i++)
		rc = dec_pair(m, &tc, batch[i], o, &d[i], err);
	ms_tool_force_free(tf);
	ms_tmask_unref(t);
	ms_vocab_trie_free(v);
	return rc;
}

/* ---- the report ---- */

struct sreport {
	const char *tok_path;
	int64_t vocab;
	double trie_ms;
	struct schema sc[N_SCHEMA];
	struct mask_fig f[N_SCHEMA];
	double med_us, p99_us;          /* every schema's steps together */
	struct dec_fig d[2];
	struct bench_target tg[4];
	int n_pass;
};

static void targets(struct sreport *r)
{
	const struct bench_target tg[4] = {
		{"mask time, median over the schemas", "mask_median", " us", r->med_us, 50, true, true, false},
		{"mask time, p99 over the schemas", "mask_p99", " us", r->p99_us, 1000, true, true, false},
		{"compile, 50-property schema", "compile_props50", " ms", r->f[2].compile_ms, 50, true,
		 true, false},
		{"constrained over plain decode, batch 1", "decode_ratio", "", r->d[0].ratio, 0.95, false,
		 false, false},
	};
	memcpy(r->tg, tg, sizeof(tg));
	r->n_pass = bench_targets_judge(r->tg, 4);
}

static void print_table(const struct ms_bench_opts *o, const struct sreport *r)
{
	printf("moeserve bench --structured: %s, vocabulary %s (%lld tokens, trie %.1f ms)\n", o->model,
	       r->tok_path, (long long)r->vocab, r->trie_ms);
	printf("  %d sequences of <= %d tokens per schema, random logits at temperature 1\n", SEQS,
	       MASK_BUDGET);
	printf("  schema       states  compile   mask us: median     p99     max  | cold median    p99"
	       "  | accept us med   p99  tokens/seq  hits/misses\n");
	for (int i = 0; i < N_SCHEMA; i++) {
		const struct mask_fig *f = &r->f[i];
		printf("  %-11s %7lld %7.2f ms %14.1f %7.1f %7.0f  | %11.1f %6.1f  | %13.1f %5.1f  %10.1f"
		       "  %llu/%llu\n",
		       r->sc[i].name, (long long)f->states, f->compile_ms, f->med_us, f->p99_us, f->max_us,
		       f->cold_med_us, f->cold_p99_us, f->accept_med_us, f->accept_p99_us,
		       f->tokens_per_seq, (unsigned long long)f->hits, (unsigned long long)f->misses);
	}
	printf("  mask time over every schema          median %.1f us, p99 %.1f us\n", r->med_us,
	       r->p99_us);
	for (int i = 0; i < 2; i++)
		printf("  decode, batch %d: plain %.2f tokens/s, constrained (%s) %.2f tokens/s: %.3fx\n"
		       "    the constraint: %.1f us a token, %.4f of a step\n",
		       r->d[i].n, r->d[i].plain_tps, r->sc[0].name, r->d[i].cons_tps, r->d[i].ratio,
		       r->d[i].cons_us, r->d[i].share);
	bench_targets_print("structured outputs", r->tg, 4);
}

static void json_schema_fig(struct ms_strbuf *j, const char *name, const struct mask_fig *f)
{
	const struct { const char *k; double v; int dec; } kv[] = {
		{"compile_ms", f->compile_ms, 3}, {"states", (double)f->states, 0},
		{"mask_us_median", f->med_us, 2}, {"mask_us_p99", f->p99_us, 2},
		{"mask_us_max", f->max_us, 2}, {"mask_cold_us_median", f->cold_med_us, 2},
		{"mask_cold_us_p99", f->cold_p99_us, 2}, {"accept_us_median", f->accept_med_us, 2},
		{"accept_us_p99", f->accept_p99_us, 2}, {"tokens_per_seq", f->tokens_per_seq, 1},
		{"cache_hits", (double)f->hits, 0}, {"cache_misses", (double)f->misses, 0},
	};
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++) {
		char k[96];
		snprintf(k, sizeof(k), "%s_%s", name, kv[i].k);
		jnum(j, k, kv[i].v, kv[i].dec);
	}
}

static bool print_json(const struct sreport *r)
{
	struct ms_strbuf j = {0};
	ms_strbuf_str(&j, "{");
	jstr(&j, "tokenizer", r->tok_path);
	jint(&j, "vocab", (long long)r->vocab);
	jnum(&j, "trie_ms", r->trie_ms, 2);
	for (int i = 0; i < N_SCHEMA; i++)
		json_schema_fig(&j, r->sc[i].name, &r->f[i]);
	jnum(&j, "mask_us_median", r->med_us, 2);
	jnum(&j, "mask_us_p99", r->p99_us, 2);
	jstr(&j, "decode_schema", r->sc[0].name);
	for (int i = 0; i < 2; i++) {
		jnum_batch(&j, r->d[i].n, "tokens_per_s", r->d[i].plain_tps, 3);
		jnum_batch(&j, r->d[i].n, "constrained_tokens_per_s", r->d[i].cons_tps, 3);
		jnum_batch(&j, r->d[i].n, "constrained_ratio", r->d[i].ratio, 4);
		jnum_batch(&j, r->d[i].n, "constraint_us_per_token", r->d[i].cons_us, 2);
		jnum_batch(&j, r->d[i].n, "constraint_share", r->d[i].share, 5);
	}
	bench_targets_json(&j, r->tg, 4);
	ms_strbuf_str(&j, "}");
	return bench_json_line(&j);
}

/* ---- the whole ---- */

/* Every schema's masks; the pooled figures into r. */
static int mask_all(const struct mask_env *e, struct sreport *r, struct ms_err *err)
{
	struct times pool = {0};
	int rc = 0;
	for (int i = 0; !rc && i < N_SCHEMA; i++)
		rc = mask_schema(e, &r->sc[i], &r->f[i], &pool, err);
	r->med_us = quantile(pool.v, pool.n, 0.5);
	r->p99_us = quantile(pool.v, pool.n, 0.99);
	free(pool.v);
	return rc;
}

static int load_tok(const struct ms_bench_opts *o, struct ms_tokenizer **tok, char *path,
		    size_t cap)
{
	struct ms_err err = {0};
	if (o->tokenizer)
		snprintf(path, cap, "%s", o->tokenizer);
	else
		snprintf(path, cap, "%s/tokenizer.json", o->model);
	if (!ms_tokenizer_load(tok, path, &err))
		return 0;
	fprintf(stderr, "moeserve: error: bench --structured: %s%s\n", err.msg,
		o->tokenizer ? "" : " (give the vocabulary with --tokenizer FILE)");
	return EX_USAGE;
}

static void env_init(struct mask_env *e, const struct ms_tokenizer *tok, const struct ms_model *m,
		     int32_t *eos)
{
	memset(e, 0, sizeof(*e));
	e->tok = tok;
	e->write = m->be->mask_words;
	e->vocab = ms_tokenizer_n_ids(tok);
	e->hids = ms_harmony_ids_find(tok);
	e->n_eos = m->cfg.n_eos < 8 ? m->cfg.n_eos : 8;
	for (int i = 0; i < e->n_eos; i++)
		eos[i] = (int32_t)m->cfg.eos_ids[i];
	e->eos = eos;
}

int bench_structured(struct ms_model *m, const struct ms_bench_opts *o)
{
	char path[4096];
	struct ms_tokenizer *tok;
	int ex = load_tok(o, &tok, path, sizeof(path));
	if (ex)
		return ex;
	struct sreport r = {0};
	r.tok_path = path;
	struct mask_env e;
	int32_t eos[8];
	env_init(&e, tok, m, eos);
	r.vocab = e.vocab;
	struct ms_err err = {0};
	struct ms_vocab_trie *v = NULL;
	int rc = schemas_new(r.sc) ? ms_err_set(&err, -ENOMEM, "bench: out of memory") : 0;
	double t0 = ms_now_s();
	struct ms_vocab voc = ms_tokenizer_vocab(tok);
	if (!rc)
		rc = ms_vocab_trie_new(&voc, e.vocab, &v, &err);
	r.trie_ms = (ms_now_s() - t0) * 1e3;
	e.trie = v;
	if (!rc)
		rc = mask_all(&e, &r, &err);
	if (!rc)
		rc = decode_runs(m, &e, &r.sc[0], o, r.d, &err);
	ms_vocab_trie_free(v);
	if (!rc) {
		targets(&r);
		if (!o->json_only)
			print_table(o, &r);
		if (!print_json(&r))
			rc = -ENOMEM;
	} else {
		fprintf(stderr, "moeserve: error: bench --structured: %s\n", err.msg);
	}
	schemas_free(r.sc);
	ms_tokenizer_free(tok);
	return rc ? EX_SOFTWARE : EX_OK;
}
