/*
 * test-grammar-masks.c: token masks (engine/grammar/token-mask.c) against brute
 * force (every token fed to a copy of the state) on a synthetic vocabulary
 * and, with MS_O200K, the real o200k_harmony one; the cache under threads,
 * eviction, refusals. Its cases run in test-grammar (grammar_masks_tcase,
 * and --o200k).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "grammar-cache.h"
#include "grammar-json.h"
#include "grammar-text.h"
#include "grammar.h"
#include "kernel-table.h"
#include "token-mask.h"
#include "tokenizer.h"

#include "grammartest.h"
#include "test-grammar.h"

/* ============================================================ token masks */

/* GPT-2's byte -> code point map (byte-level BPE spells tokens so). */
static void put_level_byte(struct buf *o, uint8_t b)
{
	uint32_t cp = b;
	bool plain = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
	if (!plain) {
		cp = 256;
		for (int x = 0; x < b; x++)
			cp += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
	}
	if (cp == '"' || cp == '\\')
		buf_putc(o, '\\');
	put_cp(o, cp);
}

/* Multi-byte tokens of the synthetic vocabulary: JSON's pieces (and pieces
 * that straddle tokens of the grammars below), UTF-8 whole and cut. */
static const char *const syn_tokens[] = {
	"{\"", "\":", "\":\"", "\",\"", "\"}", "\"]", "}", "]}", "},{", "[[", ", ", ",\n  ", "\n  ", "\n",
	"  ", "true", "false", "null", "nu", "12", "345", "-1", "0.", ".5", "e+", "E-9", "\\n", "\\\"",
	"\\u00", "\\ud83d", "é", "😀", "\xf0\x9f", "\x98\x80", "αβ", "ω", "ab", "abc", "cat", "dogs",
	"name", "\"name", "age", "address", "street", "\"city\":", "geo", "lat", "1.5", "x", "xyz",
	"((", "))", "()", "[]", "1+", " * ", "(-", "<", ">", "&[", "\x80", "\xc3",
};

/* A byte-level tokenizer.json: the 256 bytes (ids 0..255), syn_tokens and
 * random ASCII and UTF-8 pieces from 256 on, a gap id, two added tokens
 * (one special). Written to a temporary file, loaded, removed. */
static struct ms_tokenizer *synthetic_tokenizer(struct rng *r)
{
	struct buf j = {0}, t = {0};
	int id = 256, n_syn = (int)(sizeof(syn_tokens) / sizeof(syn_tokens[0]));
	buf_puts(&j, "{\"version\":\"1.0\",\"normalizer\":null,\"pre_tokenizer\":null,"
		 "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"merges\":[],\"vocab\":{");
	for (int b = 0; b < 256; b++) {
		buf_puts(&j, b ? ",\"" : "\"");
		put_level_byte(&j, (uint8_t)b);
		char e[16];
		snprintf(e, sizeof(e), "\":%d", b);
		buf_puts(&j, e);
	}
	static const char pieces[] = "\"{}[],: \n0123456789.-ab\\xyz";
	char *seen[512];
	int n_seen = 0;
	for (int i = 0; i < n_syn + 300; i++) {
		buf_set(&t, "", 0);
		if (i < n_syn)
			buf_puts(&t, syn_tokens[i]);
		for (int k = i < n_syn ? 0 : 2 + (int)rbelow(r, 5); k > 0; k--)
			if (rbelow(r, 6))
				buf_putc(&t, pieces[rbelow(r, sizeof(pieces) - 1)]);
			else
				buf_puts(&t, rbelow(r, 2) ? "é" : "\xce\xb1");
		/* a vocab holds a string once (tokenizer.json is held to RFC 8259
		 * with no key twice, config/ms-json.h): a piece equal to a byte's
		 * token or to one before it is left out */
		bool again = t.n == 1;
		for (int k = 0; k < n_seen && !again; k++)
			again = strlen(seen[k]) == t.n && !memcmp(seen[k], t.p, t.n);
		if (again)
			continue;
		ensure(n_seen < (int)(sizeof(seen) / sizeof(seen[0])) && (seen[n_seen] = strndup((const char *)t.p, t.n)));
		n_seen++;
		char e[24];
		buf_puts(&j, ",\"");
		for (size_t k = 0; k < t.n; k++)
			put_level_byte(&j, t.p[k]);
		id += i == 40;  /* an id no token has */
		snprintf(e, sizeof(e), "\":%d", id++);
		buf_puts(&j, e);
	}
	char tail[256];
	snprintf(tail, sizeof(tail), "}},\"added_tokens\":[{\"id\":%d,\"content\":\"<|end|>\",\"special\":true},"
		 "{\"id\":%d,\"content\":\"[X]\",\"special\":false}]}", id + 1, id + 2);
	buf_puts(&j, tail);
	char path[] = "/tmp/test-grammar-XXXXXX";
	int fd = mkstemp(path);
	ensure(fd >= 0 && write(fd, j.p, j.n) == (ssize_t)j.n);
	close(fd);
	struct ms_tokenizer *tok = NULL;
	struct ms_err err = {0};
	int rc = ms_tokenizer_load(&tok, path, &err);
	unlink(path);
	ensure_msg(rc == 0, "the synthetic tokenizer: %s", err.msg);
	while (n_seen > 0)
		free(seen[--n_seen]);
	buf_free(&j);
	buf_free(&t);
	return tok;
}

/* The allowed set by brute force: each normal token's bytes fed to the
 * state (then undone), allowed when the matcher takes them all. */
static void brute_bits(const struct ms_vocab_trie *v, struct ms_gmatch *m, uint64_t *bits)
{
	int64_t vocab = ms_vocab_trie_vocab(v);
	struct snap sn = {0};
	snap_take(&sn, m);
	memset(bits, 0, (size_t)(vocab + 63) / 64 * 8);
	for (int32_t id = 0; id < vocab; id++) {
		uint32_t len;
		const uint8_t *p = ms_vocab_trie_bytes(v, id, &len);
		if (len && ms_gmatch_feed(m, p, len)) {
			bits[id >> 6] |= 1ull << (id & 63);
			snap_put(&sn, m);
		}
	}
	free(sn.buf);
}

/* The mask at m (the state after prefix) equals brute force, a second
 * lookup is a cache hit with the same bits, and apply masks the same
 * logits. Returns the tokens allowed. */
static int64_t check_mask_at(struct ms_tmask *t, struct ms_gmatch *m, const struct buf *prefix)
{
	const struct ms_vocab_trie *v = ms_tmask_vocab(t);
	int64_t vocab = ms_vocab_trie_vocab(v), allowed = 0;
	size_t words = (size_t)(vocab + 63) / 64;
	uint64_t *got = calloc(words, 8), *want = calloc(words, 8), *again = calloc(words, 8);
	float *z = calloc((size_t)vocab, sizeof(float));
	struct ms_tmask_stats s0, s1;
	ensure(got && want && again && z);
	ck_assert_int_eq(ms_tmask_bits(t, m, got), 0);
	brute_bits(v, m, want);
	for (int32_t id = 0; id < vocab; id++) {
		bool g = got[id >> 6] >> (id & 63) & 1, w = want[id >> 6] >> (id & 63) & 1;
		uint32_t len;
		const uint8_t *p = ms_vocab_trie_bytes(v, id, &len);
		ensure_msg(g == w, "after \"%s\": token %d \"%s\" is %s by the mask, %s by brute force",
			      show(prefix->p, prefix->n), id, show(p, len), g ? "allowed" : "refused",
			      w ? "allowed" : "refused");
		allowed += g;
	}
	ms_tmask_get_stats(t, &s0);
	ck_assert_int_eq(ms_tmask_bits(t, m, again), 0);
	ms_tmask_get_stats(t, &s1);
	ensure_msg(!memcmp(got, again, words * 8), "after \"%s\": the cached mask differs",
		      show(prefix->p, prefix->n));
	ck_assert_uint_eq(s1.hits, s0.hits + 1);
	ck_assert_int_eq(ms_tmask_apply(t, m, z, vocab), 0);
	for (int32_t id = 0; id < vocab; id++)
		ensure_msg((isinf(z[id]) != 0) == !(got[id >> 6] >> (id & 63) & 1),
			   "apply and bits differ at %d", id);
	free(got);
	free(want);
	free(again);
	free(z);
	return allowed;
}

/* Cuts worth a mask: just inside a string, after a key's colon or a comma,
 * inside a UTF-8 character; else anywhere. */
static size_t pick_cut(struct rng *r, const struct buf *s)
{
	for (int tries = 0; tries < 20; tries++) {
		size_t p = rbelow(r, (uint32_t)s->n + 1);
		uint8_t before = p ? s->p[p - 1] : 0;
		if (before == '"' || before == ':' || before == ',' || (before & 0xc0) == 0xc0 || tries > 12)
			return p;
	}
	return 0;
}

/* Masks along n_sent sentences of t's grammar: the start, per_sent cuts
 * each, and the end, where a finished sentence allows nothing. */
static void check_masks(struct ms_tmask *t, struct rng *r, int n_sent, int per_sent, size_t budget)
{
	const struct ms_grammar *g = ms_tmask_grammar(t);
	for (int i = 0; i < n_sent; i++) {
		struct buf s = {0}, pre = {0};
		ensure(gen_sentence(g, r, rbelow(r, (uint32_t)budget), 3, &s));
		for (int k = 0; k < per_sent + 2; k++) {
			size_t cut = k == 0 ? 0 : k == 1 ? s.n : pick_cut(r, &s);
			struct ms_gmatch m;
			ck_assert_int_eq(ms_gmatch_init(&m, g), 0);
			ensure(ms_gmatch_feed(&m, s.p, cut));
			buf_set(&pre, s.p, cut);
			int64_t n = check_mask_at(t, &m, &pre);
			ensure_msg(ms_gmatch_open(&m) || n == 0, "a finished \"%s\" allows %lld tokens",
				      show(s.p, s.n), (long long)n);
			ms_gmatch_free(&m);
		}
		buf_free(&s);
		buf_free(&pre);
	}
}

/* The grammars of the mask tests: nested objects and escapes, any object,
 * UTF-8 classes, a dead end inside a token ("abc" leads nowhere), several
 * stacks at once (two rules alike up to their last byte), recursion, the
 * empty sentence alone. */
static const struct { enum ms_grammar_kind kind; const char *text; } mask_grammars[] = {
	{MS_GK_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
	 "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"tags\":{\"type\":\"array\",\"items\":"
	 "{\"enum\":[\"a\\\"b\",\"é😀\",\"x\\ny\"]},\"maxItems\":3},\"geo\":{\"type\":\"object\",\"properties\":"
	 "{\"lat\":{\"type\":\"number\"}},\"required\":[\"lat\"]}},\"required\":[\"name\",\"geo\"]}"},
	{MS_GK_JSON_OBJECT, ""},
	{MS_GK_REGEX, "[α-ω]+é?|x{2,3}"},
	{MS_GK_REGEX, "ab(?:c[]|d)e"},
	{MS_GK_GBNF, "root ::= a | b\na ::= \"x\" [0-9]* \"y\"\nb ::= \"x\" [0-9]* \"z\""},
	{MS_GK_GBNF, "root ::= pair*\npair ::= \"(\" root \")\" | \"[\" root \"]\""},
	{MS_GK_GBNF, "root ::= expr\nexpr ::= term ([-+] term)*\nterm ::= [0-9]+ | \"(\" expr \")\" | \"-\" term"},
	{MS_GK_CHOICE, "[\"cat\",\"dogs\",\"ca\",\"é\"]"},
	{MS_GK_REGEX, ""},  /* finished before a byte: a state with no stacks at all */
};
#define N_MASKG (int)(sizeof(mask_grammars) / sizeof(mask_grammars[0]))

/* The tokenizer's bytes and the trie's agree; specials, gaps and ids past
 * the tokenizer have none. */
static void check_trie(const struct ms_tokenizer *tok, const struct ms_vocab_trie *v)
{
	int64_t vocab = ms_vocab_trie_vocab(v);
	for (int32_t id = 0; id < vocab; id++) {
		size_t n = 0;
		uint32_t len;
		const char *want = id < ms_tokenizer_n_ids(tok) ? ms_tokenizer_bytes(tok, id, &n) : NULL;
		const uint8_t *got = ms_vocab_trie_bytes(v, id, &len);
		if (!want || ms_tokenizer_is_special(tok, id))
			n = 0;
		ensure_msg(len == n && (!n || !memcmp(got, want, n)), "token %d: trie %u bytes, tokenizer %zu",
			      id, len, n);
	}
	for (int b = 0; b < 256; b++) {
		int32_t id = ms_vocab_trie_byte_token(v, (uint8_t)b);
		uint32_t len;
		const uint8_t *p = id >= 0 ? ms_vocab_trie_bytes(v, id, &len) : NULL;
		ensure_msg(p && len == 1 && p[0] == b, "byte 0x%02x: token %d", b, id);
	}
}

static void masks_on(const struct ms_tokenizer *tok, int64_t vocab, int n_sent, int per_sent, uint64_t seed)
{
	struct ms_grammar_cache *c = NULL;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_grammar_cache_new(ms_tokenizer_vocab(tok), vocab, 4, NULL, &c, &err), 0);
	struct rng r = {seed};
	for (int i = 0; i < N_MASKG; i++) {
		struct ms_tmask *t = NULL, *t2 = NULL;
		int rc = ms_grammar_cache_get(c, mask_grammars[i].kind, mask_grammars[i].text, &t, &err);
		ensure_msg(rc == 0, "%s: %s", mask_grammars[i].text, err.msg);
		if (i == 0)
			check_trie(tok, ms_tmask_vocab(t));
		check_masks(t, &r, n_sent, per_sent, 60);
		/* the same text again: the same compiled grammar */
		ck_assert_int_eq(ms_grammar_cache_get(c, mask_grammars[i].kind, mask_grammars[i].text, &t2, &err), 0);
		ck_assert_ptr_eq(t, t2);
		ms_tmask_unref(t2);
		ms_tmask_unref(t);
	}
	struct ms_grammar_cache_stats st;
	ms_grammar_cache_get_stats(c, &st);
	ck_assert_uint_eq(st.hits, N_MASKG);
	ck_assert_uint_eq(st.misses, N_MASKG);
	ck_assert_int_eq(st.entries, 4);
	ck_assert_uint_eq(st.evictions, N_MASKG - 4);
	ms_grammar_cache_free(c);
}

START_TEST(masks_synthetic)
{
	struct rng r = {6000};
	struct ms_tokenizer *tok = synthetic_tokenizer(&r);
	/* logits past the tokenizer's ids: never allowed */
	masks_on(tok, ms_tokenizer_n_ids(tok) + 37, 10, 8, 6001);
	ms_tokenizer_free(tok);
}
END_TEST

/* A grammar ambiguous enough that one mask's walk would expand ~10^9
 * configurations (nested repetitions of an empty rule around a recursive
 * one; the fuzzer's find, minutes a mask): every mask either comes back
 * or is refused with -E2BIG within MS_TMASK_MAX_WORK, and the cache
 * refuses it when its first mask is. */
START_TEST(masks_bounded_work)
{
	static const char *const texts[] = {
		"root ::= (.item++root+++++)* item\nitem ::= ",
		"root ::= (\"x\" item+++ root* item**)* \"x\"\nitem ::= \"\" | \"a\"?",
	};
	struct rng r = {6600};
	struct ms_tokenizer *tok = synthetic_tokenizer(&r);
	struct ms_grammar_cache *c = NULL;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_grammar_cache_new(ms_tokenizer_vocab(tok), ms_tokenizer_n_ids(tok), 0, NULL, &c, &err), 0);
	int64_t words = (ms_tokenizer_n_ids(tok) + 63) / 64, refused = 0;
	uint64_t *bits = malloc((size_t)words * 8);
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		struct ms_tmask *t = NULL;
		memset(&err, 0, sizeof(err));
		int rc = ms_grammar_cache_get(c, MS_GK_GBNF, texts[i], &t, &err);
		if (rc) {
			ensure_msg(rc == -E2BIG && !t && strstr(err.msg, "too ambiguous"), "%s: %d %s",
				   texts[i], rc, err.msg);
			refused++;
			continue;
		}
		struct ms_gmatch m;
		ck_assert_int_eq(ms_gmatch_init(&m, ms_tmask_grammar(t)), 0);
		for (int k = 0; k < 6 && ms_gmatch_open(&m); k++) {
			int mr = ms_tmask_bits(t, &m, bits);
			ensure_msg(mr == 0 || mr == -E2BIG, "%s: mask %d: %d", texts[i], k, mr);
			refused += mr != 0;
			if (!ms_gmatch_feed(&m, "xa", 1 + (k & 1)))
				break;
		}
		ms_gmatch_free(&m);
		ms_tmask_unref(t);
	}
	ck_assert_int_gt(refused, 0);  /* the bound did stop a walk */
	free(bits);
	ms_grammar_cache_free(c);
	ms_tokenizer_free(tok);
}
END_TEST

/* Texts that do not compile: refused with the reason, nothing cached;
 * json_object's text does not matter. */
START_TEST(cache_refusals)
{
	static const struct { enum ms_grammar_kind kind; const char *text; int rc; const char *why; } cases[] = {
		{MS_GK_JSON_SCHEMA, "{", -EINVAL, "not JSON"}, {MS_GK_JSON_SCHEMA, "{\"not\":{}}", -ENOTSUP, "\"not\""},
		{MS_GK_REGEX, "(a", -EINVAL, "unclosed group"}, {MS_GK_GBNF, "root ::= x", -EINVAL, "\"x\" is used"},
		{MS_GK_CHOICE, "[]", -EINVAL, "non-empty list"}, {MS_GK_CHOICE, "x", -EINVAL, "non-empty list"},
		{MS_GK_CHOICE, "[\"a\",1]", -EINVAL, "choice 1"}, {MS_GK_CHOICE, "[\"\"]", -EINVAL, "choice 0"},
	};
	struct rng r = {6500};
	struct ms_tokenizer *tok = synthetic_tokenizer(&r);
	struct ms_grammar_cache *c = NULL;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_grammar_cache_new(ms_tokenizer_vocab(tok), ms_tokenizer_n_ids(tok), 0, NULL, &c, &err), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ms_tmask *t = (struct ms_tmask *)&err;  /* must come back NULL */
		memset(&err, 0, sizeof(err));
		int rc = ms_grammar_cache_get(c, cases[i].kind, cases[i].text, &t, &err);
		ensure_msg(rc == cases[i].rc && !t && strstr(err.msg, cases[i].why), "%s: %d \"%s\", wanted %d naming %s",
			   cases[i].text, rc, err.msg, cases[i].rc, cases[i].why);
	}
	struct ms_tmask *a = NULL, *b = NULL;
	ck_assert_int_eq(ms_grammar_cache_get(c, MS_GK_JSON_OBJECT, "", &a, &err), 0);
	ck_assert_int_eq(ms_grammar_cache_get(c, MS_GK_JSON_OBJECT, "{\"ignored\":1}", &b, &err), 0);
	ck_assert_ptr_eq(a, b);
	struct ms_grammar_cache_stats st;
	ms_grammar_cache_get_stats(c, &st);
	ck_assert_int_eq(st.entries, 1);
	ms_tmask_unref(a);
	ms_tmask_unref(b);
	ms_grammar_cache_free(c);
	ms_tokenizer_free(tok);
}
END_TEST

/* ---- the cache from several threads at once ---- */

#define MT_STATES 4
#define MT_THREADS 4

struct mt_case {
	struct buf prefix[MT_STATES];
	uint64_t *want[MT_STATES];       /* brute force, computed first */
};

struct mt_shared {
	struct ms_grammar_cache *c;
	struct mt_case cases[N_MASKG];
	size_t words;
	int failures;                    /* under the lock */
	char why[MS_ERR_MSG_MAX + 64];
	pthread_mutex_t lock;
};

struct mt_arg { struct mt_shared *sh; uint64_t seed; };

static void mt_fail(struct mt_shared *sh, const char *why, int grammar, int state)
{
	pthread_mutex_lock(&sh->lock);
	if (!sh->failures++)
		snprintf(sh->why, sizeof(sh->why), "%s: grammar %d, state %d", why, grammar, state);
	pthread_mutex_unlock(&sh->lock);
}

/* Random grammars (a cache of 3 for 9: evictions while others hold them)
 * and states: each mask as brute force said. */
static void *mt_worker(void *p)
{
	struct mt_arg *a = p;
	struct mt_shared *sh = a->sh;
	struct rng r = {a->seed};
	uint64_t *bits = calloc(sh->words, 8);
	for (int it = 0; it < 60 && bits; it++) {
		int i = (int)rbelow(&r, N_MASKG), k = (int)rbelow(&r, MT_STATES);
		struct ms_tmask *t = NULL;
		struct ms_err err = {0};
		struct ms_gmatch m;
		if (ms_grammar_cache_get(sh->c, mask_grammars[i].kind, mask_grammars[i].text, &t, &err)) {
			mt_fail(sh, err.msg, i, k);
			continue;
		}
		const struct buf *pre = &sh->cases[i].prefix[k];
		if (ms_gmatch_init(&m, ms_tmask_grammar(t)) || !ms_gmatch_feed(&m, pre->p, pre->n))
			mt_fail(sh, "the prefix is refused", i, k);
		else if (ms_tmask_bits(t, &m, bits) || memcmp(bits, sh->cases[i].want[k], sh->words * 8))
			mt_fail(sh, "the mask differs from brute force", i, k);
		ms_gmatch_free(&m);
		ms_tmask_unref(t);
	}
	free(bits);
	return NULL;
}

/* The expected masks: MT_STATES prefixes of a sentence of each grammar. */
static void mt_prepare(struct mt_shared *sh, struct rng *r)
{
	for (int i = 0; i < N_MASKG; i++) {
		struct ms_tmask *t = NULL;
		struct ms_err err = {0};
		ck_assert_int_eq(ms_grammar_cache_get(sh->c, mask_grammars[i].kind, mask_grammars[i].text, &t, &err), 0);
		struct buf s = {0};
		ensure(gen_sentence(ms_tmask_grammar(t), r, rbelow(r, 40), 3, &s));
		sh->words = (size_t)(ms_vocab_trie_vocab(ms_tmask_vocab(t)) + 63) / 64;
		for (int k = 0; k < MT_STATES; k++) {
			struct ms_gmatch m;
			struct mt_case *c = &sh->cases[i];
			buf_set(&c->prefix[k], s.p, k == 0 ? 0 : k == 1 ? s.n : rbelow(r, (uint32_t)s.n + 1));
			c->want[k] = calloc(sh->words, 8);
			ck_assert_int_eq(ms_gmatch_init(&m, ms_tmask_grammar(t)), 0);
			ensure(ms_gmatch_feed(&m, c->prefix[k].p, c->prefix[k].n));
			brute_bits(ms_tmask_vocab(t), &m, c->want[k]);
			ms_gmatch_free(&m);
		}
		buf_free(&s);
		ms_tmask_unref(t);
	}
}

START_TEST(masks_threads)
{
	struct rng r = {6300};
	struct ms_tokenizer *tok = synthetic_tokenizer(&r);
	struct mt_shared sh = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct ms_err err = {0};
	ck_assert_int_eq(ms_grammar_cache_new(ms_tokenizer_vocab(tok), ms_tokenizer_n_ids(tok), 3, NULL, &sh.c,
						 &err), 0);
	mt_prepare(&sh, &r);
	pthread_t th[MT_THREADS];
	struct mt_arg args[MT_THREADS];
	for (int i = 0; i < MT_THREADS; i++) {
		args[i] = (struct mt_arg){&sh, 6400 + (uint64_t)i};
		ck_assert_int_eq(pthread_create(&th[i], NULL, mt_worker, &args[i]), 0);
	}
	for (int i = 0; i < MT_THREADS; i++)
		pthread_join(th[i], NULL);
	ensure_msg(!sh.failures, "%d failures, the first %s", sh.failures, sh.why);
	for (int i = 0; i < N_MASKG; i++)
		for (int k = 0; k < MT_STATES; k++) {
			buf_free(&sh.cases[i].prefix[k]);
			free(sh.cases[i].want[k]);
		}
	ms_grammar_cache_free(sh.c);
	ms_tokenizer_free(tok);
}
END_TEST

/* A cache of one entry: every miss evicts, the masks stay right. */
START_TEST(masks_eviction)
{
	struct rng r = {6100};
	struct ms_tokenizer *tok = synthetic_tokenizer(&r);
	struct ms_vocab_trie *v = NULL;
	struct ms_err err = {0};
	struct ms_vocab voc = ms_tokenizer_vocab(tok);
	ck_assert_int_eq(ms_vocab_trie_new(&voc, ms_tokenizer_n_ids(tok), &v, &err), 0);
	struct outcome oc;
	struct ms_tmask *t = NULL;
	ck_assert_int_eq(ms_tmask_new(schema_grammar(mask_grammars[0].text, &oc), v, 1, NULL, &t, &err), 0);
	check_masks(t, &r, 3, 5, 60);
	struct ms_tmask_stats st;
	ms_tmask_get_stats(t, &st);
	ck_assert_uint_gt(st.evictions, 0);
	ck_assert_uint_eq(st.entries, 1);
	ms_tmask_unref(ms_tmask_ref(t));  /* a second reference, dropped: t lives on */
	ck_assert_ptr_nonnull(ms_tmask_grammar(t));
	ms_tmask_unref(t);
	ms_vocab_trie_free(v);
	ms_tokenizer_free(tok);
}
END_TEST

static const char *o200k_path(void)
{
	const char *p = getenv("MS_O200K");
	return p && *p && access(p, R_OK) == 0 ? p : NULL;
}

/* The real vocabulary (201,088 ids, byte tokens, long pieces): fewer
 * states, each against 201k brute-force feeds. */
START_TEST(masks_o200k)
{
	struct ms_tokenizer *tok = NULL;
	struct ms_err err = {0};
	ensure_msg(ms_tokenizer_load(&tok, o200k_path(), &err) == 0, "%s", err.msg);
	masks_on(tok, ms_tokenizer_n_ids(tok), 3, 5, 6200);
	ms_tokenizer_free(tok);
}
END_TEST

/* Each logit writer of the CPU kernel table (the backend's mask_words)
 * this CPU runs against the portable one, on random bits of every density
 * (words all 0, all 1, single bits, random) and ragged word counts, random
 * logits: the same floats, bit for bit; the words past the count
 * untouched. */
START_TEST(mask_writers)
{
	ms_mask_words_fn *ref = ms_mask_words_ref;
	unsigned cpu = ms_cpu_detect();
	struct rng r = {0x5eedf00dull};
	enum { MAXW = 70 };
	uint64_t bits[MAXW];
	static float z0[MAXW * 64 + 64], z1[MAXW * 64 + 64], z2[MAXW * 64 + 64];
	int n_mask = 0;
	for (size_t k = 0; k < ms_kernel_table_len; k++) {
		const struct ms_choice *e = &ms_kernel_table[k];
		if (e->kind != MS_CHOICE_MASK)
			continue;
		n_mask++;
		ms_mask_words_fn *w = e->mask;
		const char *name = ms_choice_name(e);
		if ((cpu & ms_choice_needs(e)) != ms_choice_needs(e))
			continue;  /* this CPU lacks it */
		for (int round = 0; round < 200; round++) {
			int64_t n = (int64_t)rbelow(&r, MAXW + 1);  /* 0 .. MAXW words */
			for (int64_t i = 0; i < MAXW; i++) {
				int kind = (int)rbelow(&r, 4);
				bits[i] = kind == 0 ? 0 : kind == 1 ? ~0ull : kind == 2 ? 1ull << rbelow(&r, 64)
					  : rnext(&r);
			}
			for (size_t i = 0; i < sizeof(z0) / sizeof(z0[0]); i++)
				z0[i] = (float)(int32_t)(rnext(&r) >> 40) / 1024.0f;
			memcpy(z1, z0, sizeof(z0));
			memcpy(z2, z0, sizeof(z0));
			ref(bits, n, z1);
			w(bits, n, z2);
			ensure_msg(!memcmp(z1, z2, sizeof(z1)), "%s: %lld words: not the portable writer's",
				   name, (long long)n);
			ensure_msg(!memcmp(z1 + n * 64, z0 + n * 64, sizeof(z0) - (size_t)n * 64 * 4),
				   "%s: wrote past %lld words", name, (long long)n);
		}
	}
	ensure_msg(n_mask >= 3, "the kernel table has %d mask writers", n_mask);
}
END_TEST

TCase *grammar_masks_tcase(void)
{
	TCase *tm = tcase_create("masks");
	tcase_add_test(tm, masks_synthetic);
	tcase_add_test(tm, masks_eviction);
	tcase_add_test(tm, masks_threads);
	tcase_add_test(tm, cache_refusals);
	tcase_add_test(tm, masks_bounded_work);
	tcase_add_test(tm, mask_writers);
	return tm;
}

const TTest *grammar_masks_o200k(void)
{
	return masks_o200k;
}

bool grammar_o200k_available(void)
{
	return o200k_path() != NULL;
}
