/*
 * test-grammar.c: the structured-output grammar engine (server/grammar.c,
 * grammar-text.c, grammar-json.c, token-mask.c, grammar-cache.c) against
 * independent matchers. Regexes against PCRE2 on strings the compiled
 * grammar generates (random walks of its matcher), random strings and
 * mutations, both ways; JSON-string patterns against PCRE2's search of the
 * decoded string; GBNF against equivalent regexes or small recognizers of
 * their own; JSON Schema on tests/structured_schemas.json's instances,
 * exhaustive integer ranges, string lengths and refusals; token masks
 * against brute force (every token fed to the state, then undone) on a
 * synthetic vocabulary and, with MS_O200K, the real o200k_harmony one; a
 * fuzz of random bytes and mutations.
 *
 *   test-grammar               the Check suite (the o200k case aside)
 *   test-grammar --o200k       the token-mask case on $MS_O200K (77 without)
 *   test-grammar --generate N [FILE]
 *                              N random sentences of the grammar of each
 *                              schema of FILE (tests/structured_schemas.json's
 *                              form; that file by default) and mutations of
 *                              them that it accepts, as json_validate.mjs
 *                              requests, one a line (tests/grammar_ajv.sh
 *                              checks them with ajv)
 *
 * Random data come from fixed seeds (one per case and item), so a failure
 * repeats; the message names the pattern and the string.
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

#include "check-run.h"
#include "grammar-cache.h"
#include "grammar-json.h"
#include "grammar-text.h"
#include "grammar.h"
#include "token-mask.h"
#include "tokenizer.h"

#ifndef MS_TEST_SCHEMAS
#error "meson defines MS_TEST_SCHEMAS: the path of tests/structured_schemas.json"
#endif

/* ============================================================ helpers */

/* ck_assert's test without its bookkeeping: Check writes the place of every
 * assertion that passes to a file (a system call each), too slow for a
 * check per token of a 201k vocabulary. A failure reports as Check's. */
#define ensure_msg(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)
#define ensure(cond) ensure_msg(cond, "%s", #cond)

struct rng { uint64_t s; };

static uint64_t rnext(struct rng *r)  /* splitmix64 */
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t rbelow(struct rng *r, uint32_t n)
{
	return (uint32_t)(rnext(r) % n);
}

/* A growable byte string, always NUL-terminated. */
struct buf { uint8_t *p; size_t n, cap; };

static void buf_put(struct buf *b, const void *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		ensure(b->p);
	}
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static void buf_putc(struct buf *b, int c)
{
	uint8_t x = (uint8_t)c;
	buf_put(b, &x, 1);
}

static void buf_puts(struct buf *b, const char *s)
{
	buf_put(b, s, strlen(s));
}

static void buf_set(struct buf *b, const void *s, size_t n)
{
	b->n = 0;
	buf_put(b, s, n);
}

static void buf_free(struct buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* s for a message: printable ASCII as is, other bytes as \xHH (four
 * rotating buffers, so one message can show several). */
static const char *show(const void *s, size_t n)
{
	static char ring[4][1600];
	static int at;
	char *o = ring[at++ & 3];
	size_t k = 0;
	const uint8_t *p = s;
	for (size_t i = 0; i < n && k < sizeof(ring[0]) - 8; i++) {
		if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\')
			o[k++] = (char)p[i];
		else
			k += (size_t)snprintf(o + k, 8, "\\x%02x", p[i]);
	}
	if (k >= sizeof(ring[0]) - 8)
		k += (size_t)snprintf(o + k, 8, "...");
	o[k] = 0;
	return o;
}

/* The length of the UTF-8 sequence at s (1 for a byte that starts none). */
static size_t u8len(const uint8_t *s, size_t n)
{
	size_t l = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
		 : (s[0] & 0xf8) == 0xf0 ? 4 : 1;
	return l <= n ? l : 1;
}

/* ============================================================ the generator */

/* A saved match state: the matcher leaves its state as it was only when a
 * feed fails, so a byte that is taken and then not wanted is undone from
 * this (cheaper than a copy with its scratch, 201k times a state). */
struct snap { int32_t *buf; uint32_t len; int n; bool accept; };

static void snap_take(struct snap *s, const struct ms_gmatch *m)
{
	s->buf = realloc(s->buf, ((size_t)m->len + 1) * 4);
	ensure(s->buf);
	if (m->len)
		memcpy(s->buf, m->buf, (size_t)m->len * 4);
	s->len = m->len;
	s->n = m->n;
	s->accept = m->accept;
}

static void snap_put(const struct snap *s, struct ms_gmatch *m)
{
	if (m->cap < s->len + 1) {
		m->buf = realloc(m->buf, ((size_t)s->len + 1) * 4);
		ensure(m->buf);
		m->cap = s->len + 1;
	}
	if (s->len)
		memcpy(m->buf, s->buf, (size_t)s->len * 4);
	m->len = s->len;
	m->n = s->n;
	m->accept = s->accept;
}

static void add_shuffled(struct rng *r, uint8_t *order, int *k, bool *taken, const uint8_t *cand,
			 int n)
{
	int k0 = *k;
	for (int i = 0; i < n; i++)
		if (!taken[cand[i]]) {
			taken[cand[i]] = true;
			order[(*k)++] = cand[i];
		}
	for (int i = *k - 1; i > k0; i--) {
		int j = k0 + (int)rbelow(r, (uint32_t)(i - k0 + 1));
		uint8_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
}

/* The order in which a step tries bytes. Uniform alone would leave JSON
 * strings running to the budget (most bytes continue one) and structure
 * shallow, so now and then JSON's closers come first, often printable
 * ASCII. */
static void byte_order(struct rng *r, uint8_t order[256])
{
	static const uint8_t closers[] = {'"', '}', ']', ','};
	uint8_t ascii[96], all[256];
	bool taken[256] = {0};
	int k = 0;
	for (int i = 0; i < 95; i++)
		ascii[i] = (uint8_t)(0x20 + i);
	ascii[95] = '\n';
	for (int i = 0; i < 256; i++)
		all[i] = (uint8_t)i;
	uint32_t mode = rbelow(r, 8);
	if (mode < 2)
		add_shuffled(r, order, &k, taken, closers, 4);
	if (mode < 5)
		add_shuffled(r, order, &k, taken, ascii, 96);
	add_shuffled(r, order, &k, taken, all, 256);
}

static int feed_any(struct ms_gmatch *m, const uint8_t order[256])
{
	for (int i = 0; i < 256; i++)
		if (ms_gmatch_feed(m, &order[i], 1))
			return order[i];
	return -1;
}

/* A byte that brings ms_gmatch_min_bytes down by one: one must exist, and
 * none may bring it down further (the count is exact). */
static int feed_closer(struct ms_gmatch *m, const uint8_t order[256], struct snap *sn)
{
	int64_t want = ms_gmatch_min_bytes(m) - 1;
	snap_take(sn, m);
	for (int i = 0; i < 256; i++) {
		if (!ms_gmatch_feed(m, &order[i], 1))
			continue;
		int64_t got = ms_gmatch_min_bytes(m);
		ensure_msg(got >= want, "min_bytes %lld after byte 0x%02x, %lld before", (long long)got,
			      order[i], (long long)want + 1);
		if (got == want)
			return order[i];
		snap_put(sn, m);
	}
	return -1;
}

/* A random sentence of g appended to out: random bytes the matcher takes
 * while under budget, stopping at an accepting state 1 time in stop_in;
 * past the budget the shortest way to a finish. false: a dead end (no
 * byte is taken and the bytes so far are no sentence). */
static bool gen_sentence(const struct ms_grammar *g, struct rng *r, size_t budget, int stop_in,
			 struct buf *out)
{
	struct ms_gmatch m;
	struct snap sn = {0};
	uint8_t order[256];
	ck_assert_int_eq(ms_gmatch_init(&m, g), 0);
	size_t n0 = out->n;
	bool ok = true;
	for (;;) {
		bool over = out->n - n0 >= budget;
		if (m.accept && (!ms_gmatch_open(&m) || over || !rbelow(r, (uint32_t)stop_in)))
			break;
		byte_order(r, order);
		int64_t need = ms_gmatch_min_bytes(&m);
		int c;
		if (!over) {
			c = feed_any(&m, order);
		} else if (need == INT64_MAX) {
			c = -1;
		} else {
			c = feed_closer(&m, order, &sn);
			ensure_msg(c >= 0, "min_bytes is %lld after \"%s\", but no byte lowers it",
				      (long long)need, show(out->p + n0, out->n - n0));
		}
		if (c < 0) {
			ok = m.accept;
			break;
		}
		buf_putc(out, c);
	}
	ms_gmatch_free(&m);
	free(sn.buf);
	return ok;
}

/* ============================================================ strings, mutated */

/* The distinct code points (as UTF-8) seen in some strings: the alphabet
 * of random strings and insertions. */
struct units { char u[256][5]; int n; };

static void units_add(struct units *u, const void *s, size_t n)
{
	const uint8_t *p = s;
	for (size_t i = 0; i < n;) {
		size_t l = u8len(p + i, n - i);
		int k = 0;
		while (k < u->n && (strlen(u->u[k]) != l || memcmp(u->u[k], p + i, l)))
			k++;
		if (k == u->n && u->n < 256) {
			memcpy(u->u[u->n], p + i, l);
			u->u[u->n++][l] = 0;
		}
		i += l;
	}
}

static void put_unit(struct rng *r, const struct units *u, struct buf *o)
{
	const char *s = u->u[rbelow(r, (uint32_t)u->n)];
	buf_put(o, s, strlen(s) ? strlen(s) : 1);  /* "" is the unit NUL */
}

static void random_string(struct rng *r, const struct units *u, int maxlen, struct buf *o)
{
	o->n = 0;
	buf_put(o, "", 0);
	for (int k = (int)rbelow(r, (uint32_t)maxlen + 1); k > 0; k--)
		put_unit(r, u, o);
}

/* The unit boundaries of s: at[0..*n], at[0] = 0, at[*n] = len. */
static int unit_bounds(const uint8_t *s, size_t len, size_t *at, int cap)
{
	int n = 0;
	at[0] = 0;
	for (size_t i = 0; i < len && n + 1 < cap;) {
		i += u8len(s + i, len - i);
		at[++n] = i;
	}
	return n;
}

/* One edit of s at unit boundaries: delete, insert, replace, duplicate a
 * span, swap neighbours, truncate, or (raw) set one byte to any value. */
static void mutate_once(struct rng *r, const struct units *u, struct buf *s, bool raw)
{
	size_t at[4100];
	int n = unit_bounds(s->p, s->n, at, 4100);
	struct buf o = {0};
	buf_put(&o, "", 0);
	int i = n ? (int)rbelow(r, (uint32_t)n) : 0, j = i + 1 <= n ? i + 1 : i;
	int op = (int)rbelow(r, raw ? 7 : 6);
	if (!n)
		op = 1;
	buf_put(&o, s->p, at[i]);
	switch (op) {
	case 0: break;                                                  /* delete unit i */
	case 1: put_unit(r, u, &o); j = i; break;                       /* insert */
	case 2: put_unit(r, u, &o); break;                              /* replace */
	case 3: j = i + (int)rbelow(r, (uint32_t)(n - i)) + 1;          /* duplicate i..j */
		buf_put(&o, s->p + at[i], at[j] - at[i]);
		j = i;
		break;
	case 4: if (j < n) {                                            /* swap i, i+1 */
			buf_put(&o, s->p + at[j], at[j + 1] - at[j]);
			buf_put(&o, s->p + at[i], at[j] - at[i]);
			j++;
		} else {
			j = i;
		}
		break;
	case 5: j = n; break;                                           /* truncate */
	default: buf_putc(&o, (int)rbelow(r, 256)); break;              /* a raw byte */
	}
	buf_put(&o, s->p + at[j], s->n - at[j]);
	buf_set(s, o.p, o.n);
	buf_free(&o);
}

static void mutate(struct rng *r, const struct units *u, const struct buf *in, struct buf *o, bool raw)
{
	buf_set(o, in->p, in->n);
	for (int k = 1 + (int)rbelow(r, 3); k > 0; k--)
		mutate_once(r, u, o, raw);
}

/* ============================================================ PCRE2, the independent matcher */

/* ECMAScript's \s (Unicode white space and line ends), as PCRE2 class
 * members: PCRE2's own \s without UCP is ASCII only. */
#define ES_SPACE "\\t\\n\\x{0b}\\f\\r \\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}" \
		 "\\x{202f}\\x{205f}\\x{3000}\\x{feff}"

/* {m}, {m,}, {m,n} at s (past '{'): ECMAScript without the u flag reads
 * any other '{' as a literal. */
static bool es_braces(const char *s)
{
	size_t i = strspn(s, "0123456789");
	if (!i)
		return false;
	if (s[i] == ',')
		i += 1 + strspn(s + i + 1, "0123456789");
	return s[i] == '}';
}

/* An escape of the ECMAScript subset at s (past '\') in PCRE2's words;
 * returns the characters of s it used. */
static size_t es_escape(const char *s, bool in_class, struct buf *o)
{
	char c = s[0];
	if (c == 's' && !in_class) {
		buf_puts(o, "[" ES_SPACE "]");
	} else if (c == 's') {
		buf_puts(o, ES_SPACE);
	} else if (c == 'S') {
		ensure_msg(!in_class, "the PCRE2 translation has no \\S inside a class");
		buf_puts(o, "[^" ES_SPACE "]");
	} else if (c == 'v' || c == '0' || (c == 'b' && in_class)) {
		buf_puts(o, c == 'v' ? "\\x{0b}" : c == '0' ? "\\x{00}" : "\\x{08}");
	} else if (c == 'u' && s[1] == '{') {
		size_t k = strcspn(s, "}");
		buf_puts(o, "\\x");
		buf_put(o, s + 1, k);
		return k + 1;
	} else if (c == 'u') {
		buf_puts(o, "\\x{");
		buf_put(o, s + 1, 4);
		buf_puts(o, "}");
		return 5;
	} else if (c == '/') {
		buf_puts(o, "/");
	} else {
		buf_putc(o, '\\');
		buf_putc(o, c);
	}
	return 1;
}

/* The pattern es (the ECMAScript subset of grammar-text.h) as PCRE2 reads
 * it with PCRE2_UTF: "." without ECMAScript's line ends, \s as Unicode
 * space, \v \0 \u, the empty class [] and the full one [^], literal '{'. */
static void es_to_pcre(const char *es, struct buf *o)
{
	bool cls = false;
	buf_set(o, "", 0);
	for (size_t i = 0; es[i];) {
		char c = es[i++];
		if (c == '\\') {
			i += es_escape(es + i, cls, o);
		} else if (cls) {
			cls = c != ']';
			buf_puts(o, c == '[' ? "\\[" : (char[]){c, 0});
		} else if (c == '.') {
			buf_puts(o, "[^\\n\\r\\x{2028}\\x{2029}]");
		} else if (c == '[' && es[i] == ']') {
			buf_puts(o, "(?!)");
			i++;
		} else if (c == '[' && es[i] == '^' && es[i + 1] == ']') {
			buf_puts(o, "(?s:.)");
			i += 2;
		} else if (c == '[') {
			cls = true;
			buf_putc(o, '[');
			if (es[i] == '^')
				buf_putc(o, es[i++]);
		} else if (c == '{' && !es_braces(es + i)) {
			buf_puts(o, "\\{");
		} else {
			buf_putc(o, c);
		}
	}
}

/* A PCRE2 pattern: full (the whole subject, ^(?:pat)$) or a search; es:
 * pat is in the ECMAScript subset, translated first. */
static pcre2_code *pcre_new(const char *pat, bool es, bool full)
{
	struct buf t = {0}, w = {0};
	if (es)
		es_to_pcre(pat, &t);
	else
		buf_puts(&t, pat);
	if (full)
		buf_puts(&w, "^(?:");
	buf_put(&w, t.p, t.n);
	if (full)
		buf_puts(&w, ")$");
	int e;
	PCRE2_SIZE off;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)w.p, w.n, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY |
				       PCRE2_MATCH_INVALID_UTF, &e, &off, NULL);
	PCRE2_UCHAR msg[256] = "";
	if (!re)
		pcre2_get_error_message(e, msg, sizeof(msg));
	ensure_msg(re, "PCRE2 refuses /%s/ (from /%s/): %s at %zu", show(w.p, w.n), pat, msg,
		      (size_t)off);
	buf_free(&t);
	buf_free(&w);
	return re;
}

static bool pcre_match(pcre2_code *re, const void *s, size_t n)
{
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	ensure(md);
	int rc = pcre2_match(re, s, n, 0, 0, md, NULL);
	pcre2_match_data_free(md);
	/* invalid UTF-8 is no match (PCRE2_MATCH_INVALID_UTF); anything else
	 * (a match limit) would make the comparison meaningless */
	ensure_msg(rc >= 0 || rc == PCRE2_ERROR_NOMATCH, "pcre2_match on \"%s\": %d", show(s, n), rc);
	return rc >= 0;
}

/* ============================================================ JSON strings */

static int hexv(int c)
{
	int l = c | 0x20;
	return c >= '0' && c <= '9' ? c - '0' : l >= 'a' && l <= 'f' ? l - 'a' + 10 : -1;
}

static void put_cp(struct buf *o, uint32_t c)
{
	uint8_t e[4];
	int n = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
	if (n == 1) {
		e[0] = (uint8_t)c;
	} else {
		for (int i = n - 1; i > 0; i--, c >>= 6)
			e[i] = (uint8_t)(0x80 | (c & 0x3f));
		e[0] = (uint8_t)((n == 2 ? 0xc0 : n == 3 ? 0xe0 : 0xf0) | c);
	}
	buf_put(o, e, (size_t)n);
}

static int64_t hex4(const uint8_t *s, size_t left)
{
	int64_t v = 0;
	for (int k = 0; k < 4; k++) {
		int h = (size_t)k < left ? hexv(s[k]) : -1;
		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

/* A JSON escape at s[*i] (past '\') decoded into o; false: none (a lone
 * surrogate counts as none). */
static bool json_escape(const uint8_t *s, size_t n, size_t *i, struct buf *o)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *k = *i < n && s[*i] ? strchr(from, s[*i]) : NULL;
	if (k) {
		buf_putc(o, to[k - from]);
		(*i)++;
		return true;
	}
	if (*i >= n || s[*i] != 'u')
		return false;
	int64_t v = hex4(s + *i + 1, n - *i - 1);
	*i += 5;
	if (v >= 0xd800 && v < 0xdc00 && *i + 6 <= n && s[*i] == '\\' && s[*i + 1] == 'u') {
		int64_t lo = hex4(s + *i + 2, n - *i - 2);
		if (lo < 0xdc00 || lo > 0xdfff)
			return false;
		v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
		*i += 6;
	} else if (v < 0 || (v >= 0xd800 && v <= 0xdfff)) {
		return false;
	}
	put_cp(o, (uint32_t)v);
	return true;
}

/* s, a JSON string literal (quotes included, nothing after), decoded into
 * o; false if it is not one. The test's own decoder: cJSON's stops at an
 * escaped NUL. */
static bool json_unquote(const uint8_t *s, size_t n, struct buf *o)
{
	buf_set(o, "", 0);
	if (n < 2 || s[0] != '"')
		return false;
	for (size_t i = 1; i < n;) {
		if (s[i] == '"')
			return i + 1 == n;
		if (s[i] < 0x20)
			return false;
		if (s[i] != '\\') {
			buf_putc(o, s[i++]);
			continue;
		}
		i++;
		if (!json_escape(s, n, &i, o))
			return false;
	}
	return false;
}

/* s (UTF-8) as a JSON string literal in the canonical form the grammars
 * write: short escapes, \u00xx for other controls, everything else raw. */
static void json_quote(const uint8_t *s, size_t n, struct buf *o)
{
	static const char from[] = "\"\\\b\f\n\r\t", to[] = "\"\\bfnrt";
	buf_set(o, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		const char *k = s[i] ? memchr(from, s[i], sizeof(from) - 1) : NULL;
		char e[8];
		if (k) {
			buf_putc(o, '\\');
			buf_putc(o, to[k - from]);
		} else if (s[i] < 0x20) {
			snprintf(e, sizeof(e), "\\u%04x", s[i]);
			buf_puts(o, e);
		} else {
			buf_putc(o, s[i]);
		}
	}
	buf_putc(o, '"');
}

/* A whole JSON text cJSON takes, nothing after it. */
static bool json_parses(const struct buf *s)
{
	const char *end = NULL;
	cJSON *j = cJSON_ParseWithLengthOpts((const char *)s->p, s->n, &end, false);
	bool ok = j && end == (const char *)s->p + s->n;
	cJSON_Delete(j);
	return ok;
}

/* ============================================================ compiling */

/* rc and err of a failed compile, for refusals */
struct outcome { int rc; struct ms_err err; };

static struct ms_grammar *compile_root(struct ms_gb *b, int root, ms_gx x, struct outcome *oc)
{
	struct ms_grammar *g = NULL;
	if (x >= 0) {
		ms_gb_define(b, root, x);
		oc->rc = ms_gb_compile(b, root, &g, &oc->err);
	} else if (!oc->rc) {
		oc->rc = oc->err.code ? oc->err.code : -EINVAL;
	}
	ms_gb_free(b);
	return g;
}

/* Pattern re in mode: FULL as it is, JSON_SEARCH inside the quotes of a
 * JSON string (as grammar-json.c uses it). NULL with oc set on failure. */
static struct ms_grammar *regex_grammar(const char *re, enum ms_regex_mode mode, struct outcome *oc)
{
	struct ms_gb *b;
	memset(oc, 0, sizeof(*oc));
	ck_assert_int_eq(ms_gb_new(&b), 0);
	int root = ms_gb_rule(b, "root");
	ms_gx x = ms_regex_expr(b, re, mode, &oc->err);
	if (x >= 0 && mode == MS_REGEX_JSON_SEARCH) {
		ms_gx q[3] = {ms_gb_str(b, "\""), x, ms_gb_str(b, "\"")};
		x = ms_gb_seq(b, q, 3);
	}
	return compile_root(b, root, x, oc);
}

static struct ms_grammar *regex_ok(const char *re, enum ms_regex_mode mode)
{
	struct outcome oc;
	struct ms_grammar *g = regex_grammar(re, mode, &oc);
	ensure_msg(g, "regex /%s/ does not compile: %d %s", re, oc.rc, oc.err.msg);
	return g;
}

static struct ms_grammar *gbnf_grammar(const char *text, struct outcome *oc)
{
	struct ms_gb *b;
	memset(oc, 0, sizeof(*oc));
	ck_assert_int_eq(ms_gb_new(&b), 0);
	int root = -1;
	oc->rc = ms_gbnf_parse(b, text, &root, &oc->err);
	struct ms_grammar *g = NULL;
	if (!oc->rc)
		oc->rc = ms_gb_compile(b, root, &g, &oc->err);
	ms_gb_free(b);
	return g;
}

static struct ms_grammar *schema_grammar(const char *text, struct outcome *oc)
{
	memset(oc, 0, sizeof(*oc));
	cJSON *s = cJSON_Parse(text);
	ensure_msg(s, "the test's schema is not JSON: %s", text);
	struct ms_grammar *g = NULL;
	oc->rc = ms_json_schema_compile(s, &g, &oc->err);
	cJSON_Delete(s);
	return g;
}

static bool accepts(const struct ms_grammar *g, const struct buf *s)
{
	return ms_grammar_accepts(g, s->p, s->n);
}

/* The matcher fed s in random pieces ends where the whole-string test
 * does, and every prefix of a sentence is taken. */
static void check_pieces(const struct ms_grammar *g, struct rng *r, const struct buf *s, bool whole)
{
	struct ms_gmatch m;
	ck_assert_int_eq(ms_gmatch_init(&m, g), 0);
	bool alive = true;
	for (size_t at = 0; at < s->n && alive;) {
		size_t k = 1 + rbelow(r, 6);
		k = k < s->n - at ? k : s->n - at;
		alive = ms_gmatch_feed(&m, s->p + at, k);
		ensure_msg(alive || !whole, "the sentence \"%s\" is refused at byte %zu of %zu fed in pieces",
			      show(s->p, s->n), at, s->n);
		at += k;
	}
	ensure_msg((alive && m.accept) == whole, "\"%s\": fed in pieces %d, whole %d", show(s->p, s->n),
		      alive && m.accept, whole);
	ms_gmatch_free(&m);
}

/* ============================================================ regexes vs PCRE2 */

/* The ECMAScript subset (grammar-text.h), every construct, ragged as well
 * as round: empty alternatives and classes, nested stars, astral ranges. */
static const char *const full_patterns[] = {
	"abc", "a|b|cd", "(ab|a)(bc|c)?", "a*b+c?", "x{3}", "x{2,4}y{0,}z{1,2}?", "(?:ab){1,3}",
	"a{0}b", "(a{0,2}b){2}", "[a-f0-9]+", "[^a-z]", "[^\\n]*", "\\d{2}-\\d{2}", "\\w+@\\w+\\.com",
	"\\s*x\\s*", "\\D\\W\\S", ".", ".{2,3}", "a.c", "^abc$", "^(a|b)*$", "(a|b)*?c", "a+?b??",
	"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\/\\^\\$", "\\t\\n\\r\\f\\v\\0", "\\x41\\u00e9\\u{1F600}",
	"é+ü?", "[α-ω]+", "[^α-ω]{1,2}", "[😀-😂a]*", "[\\u0100-\\u017f\\d]+", "[-a][a-]", "[\\]\\[x]+",
	"[.*+?|()]", "(?<year>\\d{4})-(?<m>0[1-9]|1[0-2])", "((a|bc)d)+e", "(a*)*b", "(|a)b",
	"x{,3}a{b}", "[\\s\\d]+", "[^]a", "a|[]", "[\\b]", "\\/path\\/\\w+", "(?:a|b|c){2,5}?",
	"[a-zA-Z_][a-zA-Z0-9_]{0,7}", "0|[1-9][0-9]*", "-?(0|[1-9]\\d*)(\\.\\d+)?([eE][+-]?\\d+)?",
	"[\\w-]+", "\\S+", "", "(((a)))", "(?:a{2,3}){2}",
};
#define N_FULL (int)(sizeof(full_patterns) / sizeof(full_patterns[0]))

/* The grammar and PCRE2 agree on s (a generated sentence must match). */
static void agree(const char *re, const struct ms_grammar *g, pcre2_code *pc, const struct buf *s,
		  const char *what)
{
	bool mine = accepts(g, s), theirs = pcre_match(pc, s->p, s->n);
	ensure_msg(mine == theirs, "/%s/ on %s \"%s\": grammar %s, PCRE2 %s", re, what,
		      show(s->p, s->n), mine ? "accepts" : "refuses", theirs ? "matches" : "does not");
}

/* Sentences of /re/ (random walks), then random strings of its alphabet and
 * mutations of the sentences: the grammar and PCRE2 agree on all. raw:
 * mutations may write any byte (invalid UTF-8 too). */
static void regex_vs_pcre(const char *re, uint64_t seed, int n_gen, int n_other, bool raw)
{
	struct ms_grammar *g = regex_ok(re, MS_REGEX_FULL);
	pcre2_code *pc = pcre_new(re, true, true);
	struct rng r = {seed};
	struct units u = {0};
	units_add(&u, re, strlen(re));
	units_add(&u, "a0 \n\xc3\xa9-", 7);
	struct buf *sent = calloc((size_t)n_gen, sizeof(struct buf)), s = {0};
	int dead = 0;
	for (int i = 0; i < n_gen; i++) {
		buf_put(&sent[i], "", 0);
		if (!gen_sentence(g, &r, rbelow(&r, 24), 3, &sent[i])) {
			dead++;  /* only a pattern that matches nothing ends so */
			continue;
		}
		units_add(&u, sent[i].p, sent[i].n);
		ensure_msg(accepts(g, &sent[i]), "/%s/: its own sentence \"%s\" is refused", re,
			      show(sent[i].p, sent[i].n));
		ensure_msg(pcre_match(pc, sent[i].p, sent[i].n), "/%s/: sentence \"%s\" is no PCRE2 match",
			      re, show(sent[i].p, sent[i].n));
		check_pieces(g, &r, &sent[i], true);
	}
	ensure_msg(dead == 0 || dead == n_gen, "/%s/: %d of %d walks ended nowhere", re, dead, n_gen);
	for (int i = 0; i < n_other; i++) {
		random_string(&r, &u, 8, &s);
		agree(re, g, pc, &s, "random string");
		if (dead)
			continue;
		mutate(&r, &u, &sent[rbelow(&r, (uint32_t)n_gen)], &s, raw);
		agree(re, g, pc, &s, "mutation");
		if (i % 8 == 0)
			check_pieces(g, &r, &s, accepts(g, &s));
	}
	for (int i = 0; i < n_gen; i++)
		buf_free(&sent[i]);
	free(sent);
	buf_free(&s);
	pcre2_code_free(pc);
	ms_grammar_free(g);
}

START_TEST(regex_full_vs_pcre2)
{
	for (int i = 0; i < N_FULL; i++)
		regex_vs_pcre(full_patterns[i], 1000 + (uint64_t)i, 100, 600, false);
}
END_TEST

/* Code point ranges across every UTF-8 length boundary and the
 * surrogates, plain and negated, on every code point near an edge, and
 * the byte sequences that encode none (overlong, surrogate, past
 * U+10FFFF, cut short): never taken. */
START_TEST(regex_utf8_edges)
{
	static const uint32_t ranges[][2] = {
		{0x7f, 0x80}, {0x7ff, 0x800}, {0xffff, 0x10000}, {0xd7ff, 0xe000}, {0x10fffe, 0x10ffff},
		{0x1, 0x10ffff}, {0x80, 0x7ff}, {0x800, 0xffff}, {0x3b1, 0x3c9}, {0x1f600, 0x1f64f},
	};
	static const uint32_t edges[] = {0, 1, 0x7f, 0x80, 0x7ff, 0x800, 0xd7ff, 0xe000, 0xffff,
					 0x10000, 0x10fffe, 0x10ffff, 0x3b1, 0x3c9, 0x1f600, 0x1f64f};
	static const char *const bad[] = {"\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80",
					  "\xed\xbf\xbf", "\xf0\x80\x80\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80",
					  "\xc3", "\xe2\x82", "\x80", "\xff"};
	struct buf s = {0};
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
		for (int neg = 0; neg < 2; neg++) {
			char re[64];
			snprintf(re, sizeof(re), "[%s\\u{%x}-\\u{%x}]", neg ? "^" : "", ranges[i][0],
				 ranges[i][1]);
			struct ms_grammar *g = regex_ok(re, MS_REGEX_FULL);
			pcre2_code *pc = pcre_new(re, true, true);
			for (size_t e = 0; e < sizeof(edges) / sizeof(edges[0]); e++)
				for (int64_t d = -2; d <= 2; d++) {
					int64_t cp = (int64_t)edges[e] + d;
					if (cp < 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
						continue;
					buf_set(&s, "", 0);
					put_cp(&s, (uint32_t)cp);
					bool in = cp >= ranges[i][0] && cp <= ranges[i][1];
					ensure_msg(accepts(g, &s) == (in != neg), "/%s/ on U+%04llx", re,
						   (long long)cp);
					agree(re, g, pc, &s, "code point");
				}
			for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
				buf_set(&s, bad[b], strlen(bad[b]));
				ensure_msg(!accepts(g, &s), "/%s/ takes the malformed \"%s\"", re,
					   show(s.p, s.n));
			}
			pcre2_code_free(pc);
			ms_grammar_free(g);
		}
	buf_free(&s);
}
END_TEST

/* Refused by name: what the grammar cannot enforce, and malformed text. */
START_TEST(regex_refusals)
{
	static const struct { const char *re, *why; } cases[] = {
		{"(a)\\1", "backreference \\1"}, {"(?=a)", "lookaround"}, {"(?!a)b", "lookaround"},
		{"(?<=a)b", "lookaround"}, {"(?<!a)b", "lookaround"}, {"\\bfoo", "uses \\b"},
		{"a\\B", "uses \\B"}, {"\\p{L}", "uses \\p"}, {"\\P{L}", "uses \\P"}, {"(?<n>a)\\k<n>", "uses \\k"},
		{"\\cJ", "uses \\c"}, {"a^b", "anchor ^"}, {"a$b", "anchor $"}, {"(^a)", "anchor ^"},
		{"(a$)", "anchor $"}, {"(a", "unclosed group"}, {"a)", "unmatched ')'"}, {"[a", "unclosed class"},
		{"[z-a]", "out of order"}, {"*a", "misplaced '*'"}, {"a|+", "misplaced '+'"},
		{"a{5000}", "4096"}, {"\\", "lone backslash"}, {"\\xZZ", "malformed escape"},
		{"\\u{110000}", "malformed escape"}, {"(?i)a", "group flag"}, {"(?<n", "unclosed group name"},
		{"a\xff", "not UTF-8"}, {"a**", "misplaced '*'"}, {"a{2}{3}", "misplaced '{'"},
		{"a+?+", "misplaced '+'"}, {"{2}", "misplaced '{'"}, {"a{3,1}", "out of order"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct outcome oc;
		struct ms_grammar *g = regex_grammar(cases[i].re, MS_REGEX_FULL, &oc);
		ensure_msg(!g, "/%s/ compiled", cases[i].re);
		ensure_msg(oc.rc == -EINVAL && strstr(oc.err.msg, cases[i].why),
			      "/%s/: %d \"%s\", wanted -EINVAL naming %s", cases[i].re, oc.rc, oc.err.msg,
			      cases[i].why);
	}
}
END_TEST

/* JSON Schema "pattern": the grammar writes a JSON string (escaped as JSON
 * writes it) whose content PCRE2 finds the pattern in, anchored only where
 * the pattern says so. */
static const char *const json_patterns[] = {
	"ab+c", "^[A-Z]{2}-[0-9]{3,5}$", "^(cat|dog|bird)s?$", "\\d{3}", "é+", "[\"\\\\]x",
	"\\n\\t", "x$", "^x", "", "^$", "[^a]", "^.$", "\\u0001|\\u001f", "a\\/b", "^\\s+$",
	"^[^\"]{2}$", "😀", "^(\\+1-)?[0-9]{3}-[0-9]{4}$",
};
#define N_JSONPAT (int)(sizeof(json_patterns) / sizeof(json_patterns[0]))

/* Generated literals decode and match; random contents, written
 * canonically, are taken exactly when PCRE2 finds the pattern; mutated
 * literals the grammar takes decode and match. */
static void json_pattern_vs_pcre(const char *re, uint64_t seed)
{
	struct ms_grammar *g = regex_ok(re, MS_REGEX_JSON_SEARCH);
	pcre2_code *pc = pcre_new(re, true, false);
	struct rng r = {seed};
	struct units u = {0};
	struct buf s = {0}, d = {0}, q = {0}, sent[100] = {{0}};
	units_add(&u, re, strlen(re));
	units_add(&u, "a\"\\\n\x01/ \xc3\xa9", 9);
	for (int i = 0; i < 100; i++) {
		buf_put(&sent[i], "", 0);
		ensure(gen_sentence(g, &r, rbelow(&r, 20), 4, &sent[i]));
		ensure_msg(json_unquote(sent[i].p, sent[i].n, &d), "/%s/: \"%s\" is no JSON string", re,
			      show(sent[i].p, sent[i].n));
		ensure_msg(pcre_match(pc, d.p, d.n), "/%s/: the string %s (\"%s\") has no match", re,
			      show(sent[i].p, sent[i].n), show(d.p, d.n));
		units_add(&u, d.p, d.n);
	}
	for (int i = 0; i < 1500; i++) {
		random_string(&r, &u, 6, &s);
		json_quote(s.p, s.n, &q);
		bool mine = accepts(g, &q), theirs = pcre_match(pc, s.p, s.n);
		ensure_msg(mine == theirs, "/%s/ on %s: grammar %d, PCRE2 %d", re, show(q.p, q.n), mine,
			   theirs);
		mutate(&r, &u, &sent[rbelow(&r, 100)], &s, true);
		if (!accepts(g, &s))
			continue;
		ensure_msg(json_unquote(s.p, s.n, &d) && pcre_match(pc, d.p, d.n),
			      "/%s/: the grammar takes %s, no JSON string with a match", re, show(s.p, s.n));
	}
	for (int i = 0; i < 100; i++)
		buf_free(&sent[i]);
	buf_free(&s);
	buf_free(&d);
	buf_free(&q);
	pcre2_code_free(pc);
	ms_grammar_free(g);
}

START_TEST(regex_json_string_vs_pcre2)
{
	for (int i = 0; i < N_JSONPAT; i++)
		json_pattern_vs_pcre(json_patterns[i], 2000 + (uint64_t)i);
}
END_TEST

/* ============================================================ GBNF */

/* Recognizers of the recursive grammars, written independently: sets of
 * end positions (strings under 64 bytes), so ambiguity costs nothing. */
typedef uint64_t pos_set;

static pos_set lit_at(const uint8_t *s, size_t n, pos_set in, const char *any_of)
{
	pos_set out = 0;
	for (size_t i = 0; i < n && i < 63; i++)
		if (in >> i & 1 && s[i] && strchr(any_of, s[i]))
			out |= 1ull << (i + 1);
	return out;
}

/* x* over the sets: a fixed point. */
static pos_set star(const uint8_t *s, size_t n, pos_set in, pos_set (*x)(const uint8_t *, size_t, pos_set))
{
	pos_set all = in, front = in;
	while (front) {
		front = x(s, n, front) & ~all;
		all |= front;
	}
	return all;
}

/* root ::= pair*   pair ::= "(" root ")" | "[" root "]" */
static pos_set br_root(const uint8_t *s, size_t n, pos_set in);

static pos_set br_pair(const uint8_t *s, size_t n, pos_set in)
{
	pos_set a = lit_at(s, n, br_root(s, n, lit_at(s, n, in, "(")), ")");
	return a | lit_at(s, n, br_root(s, n, lit_at(s, n, in, "[")), "]");
}

static pos_set br_root(const uint8_t *s, size_t n, pos_set in)
{
	return in ? star(s, n, in, br_pair) : 0;
}

static bool brackets_ok(const uint8_t *s, size_t n)
{
	return n < 63 && br_root(s, n, 1) >> n & 1;
}

/* expr ::= term (ws [-+] ws term)*   term ::= factor (ws [*\/] ws factor)*
 * factor ::= [0-9]+ | "(" ws expr ws ")" | "-" factor   ws ::= " "? */
static pos_set ar_expr(const uint8_t *s, size_t n, pos_set in);

static pos_set ar_ws(const uint8_t *s, size_t n, pos_set in)
{
	return in | lit_at(s, n, in, " ");
}

static pos_set ar_digit(const uint8_t *s, size_t n, pos_set in)
{
	return lit_at(s, n, in, "0123456789");
}

static pos_set ar_factor(const uint8_t *s, size_t n, pos_set in)
{
	if (!in)
		return 0;
	pos_set d = ar_digit(s, n, in);
	pos_set num = star(s, n, d, ar_digit);
	pos_set par = lit_at(s, n, ar_ws(s, n, ar_expr(s, n, ar_ws(s, n, lit_at(s, n, in, "(")))), ")");
	return num | par | ar_factor(s, n, lit_at(s, n, in, "-"));
}

static pos_set ar_mul(const uint8_t *s, size_t n, pos_set in)
{
	return ar_factor(s, n, ar_ws(s, n, lit_at(s, n, ar_ws(s, n, in), "*/")));
}

static pos_set ar_term(const uint8_t *s, size_t n, pos_set in)
{
	return star(s, n, ar_factor(s, n, in), ar_mul);
}

static pos_set ar_add(const uint8_t *s, size_t n, pos_set in)
{
	return ar_term(s, n, ar_ws(s, n, lit_at(s, n, ar_ws(s, n, in), "+-")));
}

static pos_set ar_expr(const uint8_t *s, size_t n, pos_set in)
{
	return in ? star(s, n, ar_term(s, n, in), ar_add) : 0;
}

static bool arith_ok(const uint8_t *s, size_t n)
{
	return n < 63 && ar_expr(s, n, 1) >> n & 1;
}

struct gbnf_case {
	const char *text;
	const char *pcre;                           /* the same language in PCRE2, or NULL */
	bool (*oracle)(const uint8_t *, size_t);    /* else this recognizer */
	const char *yes[6], *no[6];                 /* by hand, besides */
};

static const struct gbnf_case gbnf_cases[] = {
	{"root ::= \"a\" | \"b\" \"c\"\n", "a|bc", NULL, {"a", "bc"}, {"", "b", "ac", "abc"}},
	{"root ::= [a-z]+ (\"-\" [a-z0-9]+)* \"!\"?", "[a-z]+(-[a-z0-9]+)*!?", NULL,
	 {"a", "ab-c9!", "x-1-2"}, {"-a", "a-", "A", "a!!"}},
	{"root ::= \"x\"{2} \"y\"{1,3} \"z\"{2,} [0-9]{0,2}", "x{2}y{1,3}z{2,}[0-9]{0,2}", NULL,
	 {"xxyzz", "xxyyyzzzz12"}, {"xyzz", "xxyyyyzz", "xxyz", "xxyzz123"}},
	{"# greetings\nroot ::= greeting ws name (\",\" ws name)*   # names\n\n"
	 "greeting ::= \"hi\" | \"hello\"\nws ::= [ \\t]+\nname ::= [A-Z] [a-z]*\n",
	 "(hi|hello)[ \\t]+[A-Z][a-z]*(,[ \\t]+[A-Z][a-z]*)*", NULL,
	 {"hi Ann", "hello\tB, Cy"}, {"hiAnn", "hi ann", "hey Ann", "hi Ann,Bo"}},
	{"root ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\/bfnrt] )* \"\\\"\"",
	 "\"([^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/bfnrt])*\"", NULL,
	 {"\"\"", "\"a\\n\\\"é\""}, {"\"", "\"\\x\"", "\"a\nb\"", "\"\\\""}},
	{"root ::= [α-ω]+ \"\\u00e9\"? \"\\U0001F600\"* \"\\x41\"", "[α-ω]+é?😀*A", NULL,
	 {"αA", "ωωé😀😀A"}, {"A", "αéé A", "α😀"}},
	{"root ::= (\n    \"<\" . \">\"\n  | \"[\" [^\\]]* \"]\"\n) (\"&\" root)?",
	 "(?:<(?s:.)>|\\[[^\\]]*\\])(?:&(?:<(?s:.)>|\\[[^\\]]*\\]))*", NULL,
	 {"<\n>", "[ab]&<😀>", "[]&[]&<x>"}, {"<>", "[a]]", "[a]&", "<ab>"}},
	{"root ::= item-1{1,3} ( | \"?\" )\nitem-1 ::= [\\[\\]\\-\\^a] | \"\\\\\"",
	 "(?:[\\[\\]\\-^a]|\\\\){1,3}\\??", NULL, {"a", "[]^?", "\\-"}, {"", "b", "a??", "aaaa"}},
	{"root ::= x\r\nx ::= \"a\" |\r\n  \"b\"\r\n", "a|b", NULL, {"a", "b"}, {"", "ab", "\r"}},
	{"root ::= (\"a\" | ) \"b\" (\"c\" \"d\"?)* \"e\"{0,1}", "a?b(cd?)*e?", NULL,
	 {"b", "abcdcce"}, {"ab d", "bdc", "abee"}},
	{"root ::= pair*\npair ::= \"(\" root \")\" | \"[\" root \"]\"", NULL, brackets_ok,
	 {"", "()", "([])[()]"}, {"(", "(]", "([)]", ")("}},
	{"root ::= expr\nexpr ::= term (ws [-+] ws term)*\nterm ::= factor (ws [*/] ws factor)*\n"
	 "factor ::= [0-9]+ | \"(\" ws expr ws \")\" | \"-\" factor\nws ::= \" \"?",
	 NULL, arith_ok, {"1", "1 + 2*3", "(1- -2) / 4", "--7"}, {"", "1 +", "(1", "1  + 2", "+1"}},
};
#define N_GBNF (int)(sizeof(gbnf_cases) / sizeof(gbnf_cases[0]))

static bool oracle(const struct gbnf_case *c, pcre2_code *pc, const struct buf *s)
{
	return c->pcre ? pcre_match(pc, s->p, s->n) : c->oracle(s->p, s->n);
}

static void gbnf_hand_lists(const struct gbnf_case *c, const struct ms_grammar *g, pcre2_code *pc)
{
	struct buf s = {0};
	for (int k = 0; k < 6; k++) {
		const char *w[2] = {c->yes[k], c->no[k]};
		for (int yes = 0; yes < 2; yes++) {
			if (!w[yes])
				continue;
			buf_set(&s, w[yes], strlen(w[yes]));
			ensure_msg(accepts(g, &s) == !yes, "GBNF %s on \"%s\": wanted %s", show(c->text,
				      strlen(c->text)), w[yes], yes ? "refused" : "accepted");
			ensure_msg(oracle(c, pc, &s) == !yes, "the oracle of %s on \"%s\"", c->pcre, w[yes]);
		}
	}
	buf_free(&s);
}

static void gbnf_vs_oracle(const struct gbnf_case *c, uint64_t seed)
{
	struct outcome oc;
	struct ms_grammar *g = gbnf_grammar(c->text, &oc);
	ensure_msg(g, "GBNF %s: %d %s", show(c->text, strlen(c->text)), oc.rc, oc.err.msg);
	pcre2_code *pc = c->pcre ? pcre_new(c->pcre, false, true) : NULL;
	gbnf_hand_lists(c, g, pc);
	struct rng r = {seed};
	struct units u = {0};
	struct buf s = {0}, sent[100] = {{0}};
	units_add(&u, c->text, strlen(c->text));
	for (int i = 0; i < 100; i++) {
		buf_put(&sent[i], "", 0);
		ensure(gen_sentence(g, &r, rbelow(&r, c->pcre ? 30 : 40), 3, &sent[i]));
		if (!c->pcre && sent[i].n >= 63)
			sent[i].n = 0;  /* the recognizers' limit; "" is a sentence of both */
		ensure_msg(oracle(c, pc, &sent[i]), "GBNF %s: its sentence \"%s\" is no match",
			      show(c->text, strlen(c->text)), show(sent[i].p, sent[i].n));
		check_pieces(g, &r, &sent[i], accepts(g, &sent[i]));
	}
	for (int i = 0; i < 3000; i++) {
		if (i & 1)
			random_string(&r, &u, 10, &s);
		else
			mutate(&r, &u, &sent[rbelow(&r, 100)], &s, true);
		if (!c->pcre && s.n >= 63)
			continue;
		bool mine = accepts(g, &s), theirs = oracle(c, pc, &s);
		ensure_msg(mine == theirs, "GBNF %s on \"%s\": grammar %d, oracle %d",
			      show(c->text, strlen(c->text)), show(s.p, s.n), mine, theirs);
	}
	for (int i = 0; i < 100; i++)
		buf_free(&sent[i]);
	buf_free(&s);
	pcre2_code_free(pc);
	ms_grammar_free(g);
}

START_TEST(gbnf_vs_oracles)
{
	for (int i = 0; i < N_GBNF; i++)
		gbnf_vs_oracle(&gbnf_cases[i], 3000 + (uint64_t)i);
}
END_TEST

START_TEST(gbnf_errors)
{
	static const struct { const char *text, *why; } cases[] = {
		{"root ::= foo\n", "rule \"foo\" is used but not defined"},
		{"root ::= root \"a\" | \"b\"", "rule \"root\" is left-recursive"},
		{"root ::= a\na ::= b \"x\"\nb ::= \"y\"? root", "left-recursive"},
		{"root ::= \"abc", "line 1: an unterminated string literal"},
		{"# x\n\nroot = \"a\"", "line 3: expected a rule"},
		{"root ::= \"a\"\n\nx ::= [a-", "line 3: an unterminated character class"},
		{"root ::= (\"a\"", "an unclosed '('"},
		{"a ::= \"x\"", "no rule \"root\""},
		{"root ::= \"a\"\nroot ::= \"b\"", "line 2: a rule defined twice"},
		{"root ::= \"a\"{3,1}", "out of range"},
		{"root ::= \"a\"{9999}", "out of range"},
		{"root ::= \"a\"{x}", "malformed {m,n}"},
		{"root ::= \"\\q\"", "unknown escape"},
		{"root ::= \"\\x4\"", "malformed \\x"},
		{"root ::= [z-a]", "out of order"},
		{"root ::= <tok>", "token references"},
		{"root ::= \"a\" @", "an unexpected character"},
		{"root ::= \"\xc3\"", "not UTF-8"},
		{"", "no rule \"root\""},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct outcome oc;
		struct ms_grammar *g = gbnf_grammar(cases[i].text, &oc);
		ensure_msg(!g, "GBNF \"%s\" compiled", show(cases[i].text, strlen(cases[i].text)));
		ensure_msg(oc.rc == -EINVAL && strstr(oc.err.msg, cases[i].why),
			      "GBNF \"%s\": %d \"%s\", wanted -EINVAL naming %s",
			      show(cases[i].text, strlen(cases[i].text)), oc.rc, oc.err.msg, cases[i].why);
	}
}
END_TEST

/* ============================================================ the matcher */

static struct ms_grammar *any_grammar(int kind, const char *text)
{
	struct outcome oc;
	struct ms_grammar *g = kind == 0 ? regex_grammar(text, MS_REGEX_FULL, &oc)
			     : kind == 1 ? gbnf_grammar(text, &oc) : schema_grammar(text, &oc);
	ensure_msg(g, "%s: %s", text, oc.err.msg);
	return g;
}

/* The fewest bytes to a sentence, counted by hand. */
START_TEST(matcher_min_bytes)
{
	static const char *const obj = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},"
				       "\"required\":[\"a\"]}";
	static const struct { int kind; const char *text, *prefix; int64_t want; } cases[] = {
		{0, "abc", "", 3}, {0, "abc", "ab", 1}, {0, "abc", "abc", 0}, {0, "a{5}|b{2}", "", 2},
		{0, "a{5}|b{2}", "a", 4}, {0, "a[]", "", INT64_MAX}, {0, "a[]|bcd", "", 3},
		{0, "é+", "", 2}, {0, "é+", "\xc3", 1}, {0, "(x|yz)*w", "y", 2},
		{1, "root ::= x x\nx ::= \"ab\" | \"c\"", "", 2}, {1, "root ::= x x\nx ::= \"ab\" | \"c\"", "a", 2},
		{1, "root ::= \"(\" root \")\" | \"\"", "(((", 3}, {1, "root ::= \"(\" root \")\" | \"\"", "", 0},
		{2, obj, "", 8}, {2, obj, "{\"a\":\"xy", 2}, {2, obj, "{\n  \"a\"", 4},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ms_grammar *g = any_grammar(cases[i].kind, cases[i].text);
		struct ms_gmatch m;
		ck_assert_int_eq(ms_gmatch_init(&m, g), 0);
		ensure(ms_gmatch_feed(&m, cases[i].prefix, strlen(cases[i].prefix)));
		ensure_msg(ms_gmatch_min_bytes(&m) == cases[i].want, "%s after \"%s\": %lld, wanted %lld",
			      cases[i].text, cases[i].prefix, (long long)ms_gmatch_min_bytes(&m),
			      (long long)cases[i].want);
		ms_gmatch_free(&m);
		ms_grammar_free(g);
	}
}
END_TEST

/* A refused feed leaves the state as it was; copies, keys and equality;
 * open and accept. */
START_TEST(matcher_states)
{
	struct ms_grammar *g = any_grammar(1, "root ::= x x | \"q\"\nx ::= \"a\" | \"bc\"");
	struct ms_gmatch m, c, d;
	ck_assert_int_eq(ms_gmatch_init(&m, g), 0);
	ensure(ms_gmatch_open(&m) && !m.accept);
	ck_assert_int_eq(ms_gmatch_copy(&c, &m), 0);
	ensure(ms_gmatch_equal(&c, &m) && ms_gmatch_key(&c) == ms_gmatch_key(&m));
	ensure(!ms_gmatch_feed(&m, "x", 1) && ms_gmatch_equal(&c, &m));
	ensure(!ms_gmatch_feed(&m, "bq", 2) && ms_gmatch_equal(&c, &m));
	ensure(ms_gmatch_feed(&m, "", 0) && ms_gmatch_equal(&c, &m));
	ensure(ms_gmatch_feed(&m, "a", 1) && !ms_gmatch_equal(&c, &m) && !m.accept);
	/* two ways to the same state: "a" and "bc" both end the first x */
	ensure(ms_gmatch_feed(&c, "bc", 2));
	ensure(ms_gmatch_equal(&c, &m) && ms_gmatch_key(&c) == ms_gmatch_key(&m));
	ensure(ms_gmatch_feed(&m, "b", 1) && ms_gmatch_open(&m) && !m.accept);
	ensure(ms_gmatch_feed(&m, "c", 1) && !ms_gmatch_open(&m) && m.accept);
	ck_assert_int_eq(ms_gmatch_copy(&d, &m), 0);
	ensure(!ms_gmatch_feed(&m, "a", 1) && ms_gmatch_equal(&d, &m) && m.accept);
	ck_assert_int_eq(ms_gmatch_min_bytes(&m), 0);
	ensure(ms_grammar_accepts(g, "q", 1) && ms_grammar_accepts(g, "bca", 3));
	ensure(!ms_grammar_accepts(g, "", 0) && !ms_grammar_accepts(g, "qa", 2));
	ms_gmatch_free(&m);
	ms_gmatch_free(&c);
	ms_gmatch_free(&d);
	ms_grammar_free(g);
}
END_TEST

/* Past MS_GRAMMAR_MAX_DEPTH nested calls a path goes no deeper: the
 * matcher refuses the next "(" and still closes what it opened. */
START_TEST(matcher_depth)
{
	struct ms_grammar *g = any_grammar(1, "root ::= pair*\npair ::= \"(\" root \")\"");
	struct ms_gmatch m;
	ck_assert_int_eq(ms_gmatch_init(&m, g), 0);
	int n = 0;
	while (n < 1000 && ms_gmatch_feed(&m, "(", 1))
		n++;
	ensure_msg(n > 50 && n < MS_GRAMMAR_MAX_DEPTH, "%d nested", n);
	ck_assert_int_eq(ms_gmatch_min_bytes(&m), n);
	for (int i = 0; i < n; i++)
		ensure(ms_gmatch_feed(&m, ")", 1));
	ensure(m.accept);
	ms_gmatch_free(&m);
	ms_grammar_free(g);
}
END_TEST

/* The builder's own refusals, each with its code. */
START_TEST(builder_errors)
{
	struct ms_gb *b;
	struct ms_grammar *g = NULL;
	struct ms_err err = {0};
	int root;
	static const struct { int code; const char *why; } want[] = {
		{-EINVAL, "rule \"u\" is used but not defined"}, {-E2BIG, "out of range"},
		{-E2BIG, "out of range"}, {-EINVAL, "no root rule"}, {-EINVAL, "left-recursive"},
		{-E2BIG, "too large"},
	};
	for (int k = 0; k < 6; k++) {
		ck_assert_int_eq(ms_gb_new(&b), 0);
		root = ms_gb_rule(b, "root");
		ms_gx a = ms_gb_str(b, "a"), x;
		switch (k) {
		case 0: x = ms_gb_seq2(b, a, ms_gb_ref(b, ms_gb_rule(b, "u"))); break;
		case 1: x = ms_gb_rep(b, a, 5, 2); break;
		case 2: x = ms_gb_rep(b, a, 0, MS_GRAMMAR_MAX_REPEAT + 1); break;
		case 3: x = a; break;
		case 4: x = ms_gb_alt2(b, a, ms_gb_seq2(b, ms_gb_opt(b, a), ms_gb_ref(b, root))); break;
		default: x = ms_gb_rep(b, ms_gb_rep(b, a, 0, 4096), 0, 4096);
		}
		ms_gb_define(b, root, x);
		int rc = ms_gb_compile(b, k == 3 ? -1 : root, &g, &err);
		ensure_msg(rc == want[k].code && !g && strstr(err.msg, want[k].why), "case %d: %d %s", k, rc,
			      err.msg);
		ms_gb_free(b);
	}
}
END_TEST

/* ============================================================ JSON Schema */

static const char *schemas_path = MS_TEST_SCHEMAS;  /* --generate N FILE: FILE */

static cJSON *load_fixture(void)
{
	FILE *f = fopen(schemas_path, "rb");
	ensure_msg(f, "cannot open %s", schemas_path);
	struct buf b = {0};
	char chunk[65536];
	size_t k;
	while ((k = fread(chunk, 1, sizeof(chunk), f)) > 0)
		buf_put(&b, chunk, k);
	fclose(f);
	cJSON *j = cJSON_ParseWithLength((const char *)b.p, b.n);
	buf_free(&b);
	ensure_msg(cJSON_IsArray(j) && cJSON_GetArraySize(j) > 0, "%s is not a list", schemas_path);
	return j;
}

static void put_json(const cJSON *v, struct buf *o)
{
	char *s = cJSON_PrintUnformatted(v);
	ensure(s);
	buf_puts(o, s);
	free(s);
}

static void put_indent(struct buf *o, int depth)
{
	buf_putc(o, '\n');
	for (int i = 0; i < 2 * depth; i++)
		buf_putc(o, ' ');
}

/* v pretty-printed as Python's json.dumps(indent=2) does (what a model
 * copies): the whitespace the grammars allow between tokens. */
static void put_pretty(const cJSON *v, int depth, struct buf *o)
{
	if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) {
		put_json(v, o);
		return;
	}
	bool obj = cJSON_IsObject(v), first = true;
	buf_putc(o, obj ? '{' : '[');
	const cJSON *k;
	cJSON_ArrayForEach(k, v) {
		if (!first)
			buf_putc(o, ',');
		first = false;
		put_indent(o, depth + 1);
		if (obj) {
			cJSON *name = cJSON_CreateString(k->string);
			put_json(name, o);
			cJSON_Delete(name);
			buf_puts(o, ": ");
		}
		put_pretty(k, depth + 1, o);
	}
	if (!first)
		put_indent(o, depth);
	buf_putc(o, obj ? '}' : ']');
}

static struct ms_grammar *fixture_grammar(const cJSON *item, const char **name)
{
	*name = cJSON_GetObjectItemCaseSensitive(item, "name")->valuestring;
	struct ms_grammar *g = NULL;
	struct ms_err err = {0};
	int rc = ms_json_schema_compile(cJSON_GetObjectItemCaseSensitive(item, "schema"), &g, &err);
	ensure_msg(rc == 0, "schema %s does not compile: %d %s", *name, rc, err.msg);
	return g;
}

/* A const or enum with an object or array in it: the grammar writes those
 * compact (as cJSON prints them), so their pretty forms are not its. */
static bool composite_literal(const cJSON *s)
{
	const cJSON *k;
	cJSON_ArrayForEach(k, s) {
		bool lit = k->string && (!strcmp(k->string, "const") || !strcmp(k->string, "enum"));
		if (lit && (cJSON_IsObject(k) || (cJSON_IsArray(k) && !strcmp(k->string, "const"))))
			return true;
		if (lit && cJSON_IsArray(k) && cJSON_GetArrayItem(k, 0)) {
			const cJSON *e;
			cJSON_ArrayForEach(e, k)
				if (cJSON_IsObject(e) || cJSON_IsArray(e))
					return true;
		}
		if ((cJSON_IsObject(k) || cJSON_IsArray(k)) && !lit && composite_literal(k))
			return true;
	}
	return false;
}

/* An instance of the fixture, compact and pretty: taken (valid) or not. */
static void check_instance(const struct ms_grammar *g, const char *name, const cJSON *v, bool valid,
			   bool pretty)
{
	struct buf s = {0};
	put_json(v, &s);
	ensure_msg(accepts(g, &s) == valid, "schema %s: its %s instance %s is %s", name,
		      valid ? "valid" : "invalid", show(s.p, s.n), valid ? "refused" : "accepted");
	if (!pretty) {
		buf_free(&s);
		return;
	}
	buf_set(&s, "", 0);
	put_pretty(v, 0, &s);
	ensure_msg(accepts(g, &s) == valid, "schema %s: its %s instance, pretty, %s is %s", name,
		      valid ? "valid" : "invalid", show(s.p, s.n), valid ? "refused" : "accepted");
	buf_free(&s);
}

/* Every schema compiles; its valid instance is taken, its invalid one not;
 * its sentences parse (ajv checks them: tests/grammar_ajv.sh). */
START_TEST(schema_fixtures)
{
	cJSON *all = load_fixture();
	const cJSON *item;
	struct rng r = {4000};
	cJSON_ArrayForEach(item, all) {
		const char *name;
		struct ms_grammar *g = fixture_grammar(item, &name);
		bool pretty = !composite_literal(cJSON_GetObjectItemCaseSensitive(item, "schema"));
		check_instance(g, name, cJSON_GetObjectItemCaseSensitive(item, "valid"), true, pretty);
		const cJSON *bad = cJSON_GetObjectItemCaseSensitive(item, "invalid");
		if (bad)
			check_instance(g, name, bad, false, pretty);
		for (int i = 0; i < 30; i++) {
			struct buf s = {0};
			ensure(gen_sentence(g, &r, rbelow(&r, 200), 2, &s));
			ensure_msg(json_parses(&s), "schema %s: sentence %s does not parse", name,
				      show(s.p, s.n));
			buf_free(&s);
		}
		ms_grammar_free(g);
	}
	cJSON_Delete(all);
}
END_TEST

static void expect_json(const struct ms_grammar *g, const char *schema, const char *text, bool yes)
{
	struct buf s = {0};
	buf_puts(&s, text);
	ensure_msg(accepts(g, &s) == yes, "schema %s: \"%s\" %s", schema, show(s.p, s.n),
		      yes ? "refused" : "accepted");
	buf_free(&s);
}

/* Integers in [lo, hi]: every value near the bounds, and random ones,
 * taken exactly when inside; no leading zeros, no "-0", no fraction. */
static void integer_range(const char *kw_lo, int64_t lo, const char *kw_hi, int64_t hi, int64_t in_lo,
			  int64_t in_hi, struct rng *r)
{
	char schema[256], v[32];
	snprintf(schema, sizeof(schema), "{\"type\":\"integer\",\"%s\":%lld,\"%s\":%lld}", kw_lo,
		 (long long)lo, kw_hi, (long long)hi);
	struct outcome oc;
	struct ms_grammar *g = schema_grammar(schema, &oc);
	ensure_msg(g, "%s: %s", schema, oc.err.msg);
	for (int k = 0; k < 400; k++) {
		int64_t x = k < 100 ? in_lo - 50 + k : k < 200 ? in_hi - 150 + k
			  : in_lo + (int64_t)(rnext(r) % (uint64_t)(in_hi - in_lo + 1));
		snprintf(v, sizeof(v), "%lld", (long long)x);
		expect_json(g, schema, v, x >= in_lo && x <= in_hi);
		snprintf(v, sizeof(v), "%lld.0", (long long)x);
		expect_json(g, schema, v, false);
	}
	if (in_lo <= 0 && in_hi >= 0)
		expect_json(g, schema, "-0", false);
	snprintf(v, sizeof(v), "0%lld", (long long)(in_hi > 0 ? in_hi : 1));
	expect_json(g, schema, v, false);
	ms_grammar_free(g);
}

START_TEST(schema_integer_ranges)
{
	static const struct { int64_t lo, hi; } r[] = {
		{0, 0}, {-5, 0}, {0, 9}, {1, 10}, {-10, -1}, {7, 7}, {-123, 4567}, {99, 101},
		{0, 1000000}, {-1000000, 1000000}, {-3, 3}, {10, 99}, {-100, -10}, {123456, 9999999},
	};
	struct rng rr = {5000};
	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		integer_range("minimum", r[i].lo, "maximum", r[i].hi, r[i].lo, r[i].hi, &rr);
		integer_range("exclusiveMinimum", r[i].lo - 1, "exclusiveMaximum", r[i].hi + 1, r[i].lo,
			      r[i].hi, &rr);
	}
}
END_TEST

/* Lengths count code points, an escape one: 2..3 of them. */
START_TEST(schema_string_lengths)
{
	const char *schema = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}";
	static const char *const one[] = {"a", "\\n", "\\\"", "\\\\", "\\u0001", "é", "😀", "\\t", "/"};
	struct outcome oc;
	struct ms_grammar *g = schema_grammar(schema, &oc);
	ensure_msg(g, "%s", oc.err.msg);
	struct rng r = {5100};
	for (int k = 0; k < 300; k++) {
		struct buf s = {0};
		int n = (int)rbelow(&r, 6);
		buf_putc(&s, '"');
		for (int i = 0; i < n; i++)
			buf_puts(&s, one[rbelow(&r, 9)]);
		buf_putc(&s, '"');
		expect_json(g, schema, (const char *)s.p, n >= 2 && n <= 3);
		buf_free(&s);
	}
	ms_grammar_free(g);
}
END_TEST

static bool leap(int y)
{
	return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

/* Dates: every month and day of leap and common years, centuries too;
 * date-times and times at their edges. */
START_TEST(schema_formats)
{
	static const int years[] = {0, 4, 1896, 1900, 1996, 2000, 2023, 2024, 2100, 2400, 9996, 9999};
	static const int mdays[] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	struct outcome oc;
	struct ms_grammar *date = schema_grammar("{\"type\":\"string\",\"format\":\"date\"}", &oc);
	struct ms_grammar *dt = schema_grammar("{\"type\":\"string\",\"format\":\"date-time\"}", &oc);
	struct ms_grammar *tm = schema_grammar("{\"type\":\"string\",\"format\":\"time\"}", &oc);
	ensure(date && dt && tm);
	char s[64];
	for (size_t i = 0; i < sizeof(years) / sizeof(years[0]); i++)
		for (int m = 0; m <= 13; m++)
			for (int d = 0; d <= 32; d++) {
				bool ok = m >= 1 && m <= 12 && d >= 1 &&
					  d <= (m == 2 && leap(years[i]) ? 29 : mdays[m]);
				snprintf(s, sizeof(s), "\"%04d-%02d-%02d\"", years[i], m, d);
				expect_json(date, "date", s, ok);
				snprintf(s, sizeof(s), "\"%04d-%02d-%02dT23:59:59.999999+14:00\"", years[i], m, d);
				expect_json(dt, "date-time", s, ok);
			}
	static const struct { const char *t; bool ok; } times[] = {
		{"\"00:00:00Z\"", true}, {"\"23:59:59.5-05:30\"", true}, {"\"24:00:00Z\"", false},
		{"\"12:60:00Z\"", false}, {"\"12:00:60Z\"", false}, {"\"12:00:00\"", false},
		{"\"12:00:00.Z\"", false}, {"\"12:00:00z\"", false}, {"\"1:00:00Z\"", false},
	};
	for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++)
		expect_json(tm, "time", times[i].t, times[i].ok);
	ms_grammar_free(date);
	ms_grammar_free(dt);
	ms_grammar_free(tm);
}
END_TEST

/* The form the grammar writes: the schema's key order, whitespace of one
 * space or a newline and at most 20 spaces of indent between tokens. */
START_TEST(schema_layout)
{
	const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
			     "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}}},"
			     "\"required\":[\"a\"],\"additionalProperties\":false}";
	static const struct { const char *text; bool yes; } cases[] = {
		{"{\"a\":1,\"b\":[true]}", true}, {"{\"a\":1}", true}, {"{ \"a\" : 1 , \"b\" : [ ] }", true},
		{"{\n  \"a\": 1,\n  \"b\": [\n    false\n  ]\n}", true},
		{"{\n                    \"a\":1}", true}, {"{\n                     \"a\":1}", false},
		{"{  \"a\":1}", false}, {"{\"b\":[],\"a\":1}", false}, {"{\"b\":[]}", false},
		{"{\"a\":1,\"a\":1}", false}, {"{\"a\":1,\"c\":1}", false}, {"{\"a\":1}\n", false},
		{" {\"a\":1}", false}, {"{\"a\":01}", false}, {"{\"a\":1,}", false}, {"{\"a\":1,\"b\":[true,]}", false},
	};
	struct outcome oc;
	struct ms_grammar *g = schema_grammar(schema, &oc);
	ensure_msg(g, "%s", oc.err.msg);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_json(g, schema, cases[i].text, cases[i].yes);
	ms_grammar_free(g);
}
END_TEST

/* Members in the schema's order, each optional one skippable: every
 * subset of four properties against every set of required ones. */
START_TEST(schema_object_members)
{
	for (int req = 0; req < 16; req++) {
		char schema[512], text[128];
		int k = snprintf(schema, sizeof(schema), "{\"type\":\"object\",\"properties\":{\"p0\":{\"type\":"
				 "\"integer\"},\"p1\":{\"type\":\"null\"},\"p2\":{\"type\":\"boolean\"},\"p3\":"
				 "{\"type\":\"string\"}},\"additionalProperties\":false,\"required\":[");
		for (int i = 0, first = 1; i < 4; i++)
			if (req >> i & 1) {
				k += snprintf(schema + k, sizeof(schema) - (size_t)k, "%s\"p%d\"", first ? "" : ",", i);
				first = 0;
			}
		snprintf(schema + k, sizeof(schema) - (size_t)k, "]}");
		struct outcome oc;
		struct ms_grammar *g = schema_grammar(schema, &oc);
		ensure_msg(g, "%s: %s", schema, oc.err.msg);
		static const char *const vals[] = {"7", "null", "true", "\"s\""};
		for (int have = 0; have < 16; have++) {
			int n = snprintf(text, sizeof(text), "{");
			for (int i = 0; i < 4; i++)
				if (have >> i & 1)
					n += snprintf(text + n, sizeof(text) - (size_t)n, "%s\"p%d\":%s",
						      n > 1 ? "," : "", i, vals[i]);
			snprintf(text + n, sizeof(text) - (size_t)n, "}");
			expect_json(g, schema, text, (have & req) == req);
		}
		ms_grammar_free(g);
	}
}
END_TEST

/* Extra keys, where a schema allows them: plain identifiers, never one of
 * the declared names (whose values have schemas of their own). */
START_TEST(schema_extra_keys)
{
	const char *schema = "{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"},\"abc\":"
			     "{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"q\\\"\":{\"type\":\"integer\"}},"
			     "\"additionalProperties\":{\"type\":\"string\"}}";
	static const struct { const char *key; bool yes; } keys[] = {
		{"ab", false}, {"abc", false}, {"b", false}, {"q\\\"", false}, {"", false}, {"a", true},
		{"abcd", true}, {"ac", true}, {"x", true}, {"a-b", true}, {"a_b", true}, {"bb", true},
		{"abca", true}, {"Q", true}, {"q", true},
	};
	struct outcome oc;
	struct ms_grammar *g = schema_grammar(schema, &oc);
	ensure_msg(g, "%s", oc.err.msg);
	char text[64];
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		snprintf(text, sizeof(text), "{\"%s\":\"v\"}", keys[i].key);
		expect_json(g, "extra keys", text, keys[i].yes);
		snprintf(text, sizeof(text), "{\"ab\":1,\"%s\":\"v\"}", keys[i].key);
		expect_json(g, "extra keys", text, keys[i].yes);
	}
	expect_json(g, "extra keys", "{\"ab\":1,\"abc\":2,\"b\":3,\"q\\\"\":4,\"z\":\"v\",\"y\":\"w\"}", true);
	expect_json(g, "extra keys", "{\"z\":1}", false);
	ms_grammar_free(g);
}
END_TEST

/* Item counts: prefixItems, then items or none, within minItems and
 * maxItems; bounds that leave no array are refused. */
START_TEST(schema_array_counts)
{
	static const int bounds[][2] = {{0, -1}, {0, 0}, {1, 1}, {2, 4}, {3, -1}, {0, 2}};
	for (int np = 0; np <= 2; np++)
		for (int closed = 0; closed < 2; closed++)
			for (size_t b = 0; b < sizeof(bounds) / sizeof(bounds[0]); b++) {
				int mn = bounds[b][0], mx = bounds[b][1];
				char schema[256], text[64], max[32] = "";
				if (mx >= 0)
					snprintf(max, sizeof(max), ",\"maxItems\":%d", mx);
				snprintf(schema, sizeof(schema), "{\"type\":\"array\",\"prefixItems\":[%s],\"items\":%s,"
					 "\"minItems\":%d%s}", np == 0 ? "" : np == 1 ? "{\"type\":\"integer\"}"
					 : "{\"type\":\"integer\"},{\"const\":1}", closed ? "false" : "{\"type\":\"integer\"}",
					 mn, max);
				int hi = closed ? (mx >= 0 && mx < np ? mx : np) : mx;
				struct outcome oc;
				struct ms_grammar *g = schema_grammar(schema, &oc);
				ensure_msg(!g == (hi >= 0 && hi < mn), "%s: %s", schema, oc.err.msg);
				for (int len = 0; g && len <= 6; len++) {
					int n = snprintf(text, sizeof(text), "[");
					for (int i = 0; i < len; i++)
						n += snprintf(text + n, sizeof(text) - (size_t)n, "%s1", i ? "," : "");
					snprintf(text + n, sizeof(text) - (size_t)n, "]");
					expect_json(g, schema, text, len >= mn && (hi < 0 || len <= hi));
				}
				ms_grammar_free(g);
			}
}
END_TEST

/* Literals longer than the builder's pieces of 63 bytes, many of them. */
START_TEST(schema_long_literals)
{
	struct buf schema = {0}, v = {0};
	char word[400];
	for (int i = 0; i < 399; i++)
		word[i] = (char)('a' + i % 26);
	word[399] = 0;
	buf_puts(&schema, "{\"enum\":[");
	for (int n = 0; n < 120; n++) {
		snprintf(word + 300, 20, "%d", n);  /* 300 letters, then n */
		buf_puts(&schema, n ? ",\"" : "\"");
		buf_puts(&schema, word);
		buf_puts(&schema, "\"");
	}
	buf_puts(&schema, "]}");
	struct outcome oc;
	struct ms_grammar *g = schema_grammar((const char *)schema.p, &oc);
	ensure_msg(g, "%s", oc.err.msg);
	for (int n = 0; n < 130; n++) {
		snprintf(word + 300, 20, "%d", n);
		buf_set(&v, "\"", 1);
		buf_puts(&v, word);
		buf_puts(&v, "\"");
		expect_json(g, "a long enum", (const char *)v.p, n < 120);
		v.p[150] = 'A';
		expect_json(g, "a long enum", (const char *)v.p, false);
	}
	ms_grammar_free(g);
	buf_free(&schema);
	buf_free(&v);
}
END_TEST

/* json_object: any object, nothing else. */
START_TEST(schema_any_object)
{
	struct ms_grammar *g = NULL;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_json_schema_compile(NULL, &g, &err), 0);
	static const struct { const char *text; bool yes; } cases[] = {
		{"{}", true}, {"{\"a\":[1,{\"b\":null}],\"\":\"\\ud83d\\ude00\"}", true},
		{"{\"k\":-1.5e+3,\"t\":true,\"f\":false}", true}, {"[]", false}, {"1", false}, {"{", false},
		{"{\"a\"}", false}, {"{\"a\":1,}", false}, {"null", false}, {"{\"a\":\"\\ud800\"}", false},
		{"{\"a\":\"\\udc00\\ud800\"}", false}, {"{\"a\":\"\\x\"}", false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_json(g, "(json_object)", cases[i].text, cases[i].yes);
	ms_grammar_free(g);
}
END_TEST

/* oneOf branches that exclude each other (by type, by a required
 * property's const or enum, by additionalProperties: false) compile, as
 * anyOf would. */
START_TEST(schema_oneof_apart)
{
	static const char *const ok[] = {
		"{\"oneOf\":[{\"type\":\"string\"},{\"type\":[\"integer\",\"null\"]}]}",
		"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"a\"}},"
		"\"required\":[\"k\"]},{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"b\",\"c\"]}},"
		"\"required\":[\"k\"]}]}",
		"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"a\"],"
		"\"additionalProperties\":false},{\"type\":\"object\",\"properties\":{\"b\":{}},"
		"\"required\":[\"b\"],\"additionalProperties\":false}]}",
		"{\"$defs\":{\"n\":{\"type\":\"null\"}},\"oneOf\":[{\"$ref\":\"#/$defs/n\"},{\"enum\":[1,2]}]}",
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct outcome oc;
		struct ms_grammar *g = schema_grammar(ok[i], &oc);
		ensure_msg(g, "%s: %s", ok[i], oc.err.msg);
		ms_grammar_free(g);
	}
}
END_TEST

/* What the grammar cannot enforce is refused, naming the keyword and its
 * JSON pointer (RFC 6901: "~" as ~0, "/" as ~1). */
START_TEST(schema_refusals)
{
	static const struct { const char *schema, *kw, *at; } cases[] = {
		{"{\"not\":{}}", "\"not\"", " at / "},
		{"{\"type\":\"object\",\"properties\":{\"a\":{\"if\":{}}}}", "\"if\"", "/properties/a"},
		{"{\"type\":\"object\",\"patternProperties\":{\"^x\":{}}}", "\"patternProperties\"", " at / "},
		{"{\"type\":\"array\",\"uniqueItems\":true}", "\"uniqueItems\"", " at / "},
		{"{\"type\":\"integer\",\"multipleOf\":3}", "\"multipleOf\"", " at / "},
		{"{\"type\":\"number\",\"maximum\":3}", "\"maximum\"", " at / "},
		{"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"array\",\"items\":{\"minProperties\":1}}}}",
		 "\"minProperties\"", "/properties/x/items"},
		{"{\"type\":\"object\",\"maxProperties\":2}", "\"maxProperties\"", " at / "},
		{"{\"type\":\"string\",\"format\":\"hostname\"}", "\"hostname\"", " at / "},
		{"{\"anyOf\":[{\"type\":\"string\"},{\"contains\":{}}]}", "\"contains\"", "/anyOf/1"},
		{"{\"$defs\":{\"a\":{\"not\":{}}},\"$ref\":\"#/$defs/a\"}", "\"not\"", "/$defs/a"},
		{"{\"type\":\"object\",\"properties\":{\"a/b~c\":{\"dependentRequired\":{}}}}",
		 "\"dependentRequired\"", "/properties/a~1b~0c"},
		{"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"null\"},{\"propertyNames\":{}}]}",
		 "\"propertyNames\"", "/prefixItems/1"},
		{"{\"$ref\":\"http://example.com/s.json\"}", "http://example.com/s.json", " at / "},
		{"{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", "\"pattern\"", " at / "},
		{"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "\"pattern\"", " at /: "},
		/* oneOf whose branches can overlap (an integer is a number; an object
		 * without "type" also takes strings; optional keys tell nothing apart) */
		{"{\"oneOf\":[{\"type\":\"number\"},{\"type\":\"integer\"}]}", "branches 0 and 1", " at /: "},
		{"{\"type\":\"array\",\"items\":{\"oneOf\":[{\"type\":\"string\"},{\"enum\":[1]},"
		 "{\"properties\":{}}]}}", "branches 0 and 2", "/items"},
		{"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{}}},{\"type\":\"object\","
		 "\"properties\":{\"b\":{}}}]}", "\"oneOf\"", " at /: "},
		{"{\"oneOf\":[{\"enum\":[\"x\",2]},{\"enum\":[3,\"x\"]}]}", "\"oneOf\"", " at /: "},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct outcome oc;
		struct ms_grammar *g = schema_grammar(cases[i].schema, &oc);
		ensure_msg(!g, "%s compiled", cases[i].schema);
		ensure_msg((oc.rc == -ENOTSUP || oc.rc == -EINVAL) && strstr(oc.err.msg, cases[i].kw) &&
			      strstr(oc.err.msg, cases[i].at), "%s: %d \"%s\", wanted %s at %s",
			      cases[i].schema, oc.rc, oc.err.msg, cases[i].kw, cases[i].at);
		ensure_msg(oc.rc == -ENOTSUP || strstr(cases[i].schema, "(?="), "%s: %d, wanted -ENOTSUP",
			      cases[i].schema, oc.rc);
	}
}
END_TEST

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
	for (int i = 0; i < n_syn + 300; i++) {
		buf_set(&t, "", 0);
		if (i < n_syn)
			buf_puts(&t, syn_tokens[i]);
		for (int k = i < n_syn ? 0 : 2 + (int)rbelow(r, 5); k > 0; k--)
			if (rbelow(r, 6))
				buf_putc(&t, pieces[rbelow(r, sizeof(pieces) - 1)]);
			else
				buf_puts(&t, rbelow(r, 2) ? "é" : "\xce\xb1");
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
	ck_assert_int_eq(ms_grammar_cache_new(tok, vocab, 4, &c, &err), 0);
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
	ck_assert_int_eq(ms_grammar_cache_new(tok, ms_tokenizer_n_ids(tok), 0, &c, &err), 0);
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
	ck_assert_int_eq(ms_grammar_cache_new(tok, ms_tokenizer_n_ids(tok), 3, &sh.c, &err), 0);
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
	ck_assert_int_eq(ms_vocab_trie_new(tok, ms_tokenizer_n_ids(tok), &v, &err), 0);
	struct outcome oc;
	struct ms_tmask *t = NULL;
	ck_assert_int_eq(ms_tmask_new(schema_grammar(mask_grammars[0].text, &oc), v, 1, &t, &err), 0);
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

/* ============================================================ fuzz */

/* Random bytes (the pattern's own and any other) and raw mutations: the
 * grammar and PCRE2 agree, invalid UTF-8 included (no match for either). */
START_TEST(fuzz_regex)
{
	struct buf s = {0};
	for (int i = 0; i < N_FULL; i++) {
		const char *re = full_patterns[i];
		regex_vs_pcre(re, 7000 + (uint64_t)i, 50, 1000, true);
		struct ms_grammar *g = regex_ok(re, MS_REGEX_FULL);
		pcre2_code *pc = pcre_new(re, true, true);
		struct rng r = {7100 + (uint64_t)i};
		size_t rl = strlen(re);
		for (int k = 0; k < 3000; k++) {
			buf_set(&s, "", 0);
			for (int n = (int)rbelow(&r, 10); n > 0; n--)
				buf_putc(&s, rl && rbelow(&r, 3) ? re[rbelow(&r, (uint32_t)rl)] : (int)rbelow(&r, 256));
			agree(re, g, pc, &s, "random bytes");
		}
		pcre2_code_free(pc);
		ms_grammar_free(g);
	}
	buf_free(&s);
}
END_TEST

/* Mutations of sentences and of the valid instance: whatever the grammar
 * takes parses as JSON (ajv validates such texts: tests/grammar_ajv.sh),
 * and the matcher fed in pieces agrees with the whole-string test. */
START_TEST(fuzz_schemas)
{
	cJSON *all = load_fixture();
	const cJSON *item;
	struct rng r = {8000};
	struct buf base[5] = {{0}}, s = {0};
	int total = 0;
	cJSON_ArrayForEach(item, all) {
		const char *name;
		struct ms_grammar *g = fixture_grammar(item, &name);
		struct units u = {0};
		buf_set(&base[0], "", 0);
		put_json(cJSON_GetObjectItemCaseSensitive(item, "valid"), &base[0]);
		for (int i = 1; i < 5; i++) {
			buf_set(&base[i], "", 0);
			ensure(gen_sentence(g, &r, rbelow(&r, 120), 2, &base[i]));
		}
		for (int i = 0; i < 5; i++)
			units_add(&u, base[i].p, base[i].n);
		int taken = 0;
		for (int k = 0; k < 1500; k++) {
			mutate(&r, &u, &base[rbelow(&r, 5)], &s, true);
			bool yes = accepts(g, &s);
			ensure_msg(!yes || json_parses(&s), "schema %s: the grammar takes %s, which does not parse",
				      name, show(s.p, s.n));
			taken += yes;
			if (k % 4 == 0)
				check_pieces(g, &r, &s, yes);
		}
		total += taken;
		ms_grammar_free(g);
	}
	/* mutations the grammar takes exist (else this fuzz checks nothing) */
	ensure_msg(total > 100, "only %d mutations taken", total);
	for (int i = 0; i < 5; i++)
		buf_free(&base[i]);
	buf_free(&s);
	cJSON_Delete(all);
}
END_TEST

/* ============================================================ --generate */

static int generate_n;

static void emit(const cJSON *schema, const char *name, const struct buf *text)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "name", name);
	cJSON_AddItemToObject(o, "schema", schema ? cJSON_Duplicate(schema, true) : cJSON_CreateNull());
	cJSON_AddStringToObject(o, "text", (const char *)text->p);
	cJSON_AddStringToObject(o, "kind", schema ? "schema" : "object");
	char *line = cJSON_PrintUnformatted(o);
	ensure(line);
	puts(line);
	free(line);
	cJSON_Delete(o);
}

/* generate_n sentences of schema's grammar (NULL: json_object), short and
 * long, and the mutations of them that it takes, as requests. */
static void generate_for(const cJSON *schema, const char *name, struct rng *r)
{
	struct ms_grammar *g = NULL;
	struct ms_err err = {0};
	ensure_msg(ms_json_schema_compile(schema, &g, &err) == 0, "schema %s: %s", name, err.msg);
	struct buf s = {0}, m = {0};
	for (int i = 0; i < generate_n; i++) {
		struct units u = {0};
		buf_set(&s, "", 0);
		ensure(gen_sentence(g, r, rbelow(r, i % 2 ? 40 : 400), 2, &s));
		emit(schema, name, &s);
		units_add(&u, s.p, s.n);
		units_add(&u, "0-9\"\\ {}[]:,tfnue.", 18);
		for (int k = 0; k < 6; k++) {
			mutate(r, &u, &s, &m, false);
			if (accepts(g, &m) && (m.n != s.n || memcmp(m.p, s.p, s.n)))
				emit(schema, name, &m);
		}
	}
	buf_free(&s);
	buf_free(&m);
	ms_grammar_free(g);
}

START_TEST(generate_jsonl)
{
	cJSON *all = load_fixture();
	const cJSON *item;
	struct rng r = {9000};
	cJSON_ArrayForEach(item, all)
		generate_for(cJSON_GetObjectItemCaseSensitive(item, "schema"),
			     cJSON_GetObjectItemCaseSensitive(item, "name")->valuestring, &r);
	generate_for(NULL, "json_object", &r);
	cJSON_Delete(all);
	fflush(stdout);
}
END_TEST

/* ============================================================ main */

static Suite *suite_main(void)
{
	Suite *s = suite_create("grammar");
	TCase *tr = tcase_create("regex");
	tcase_add_test(tr, regex_full_vs_pcre2);
	tcase_add_test(tr, regex_utf8_edges);
	tcase_add_test(tr, regex_refusals);
	tcase_add_test(tr, regex_json_string_vs_pcre2);
	suite_add_tcase(s, tr);
	TCase *tg = tcase_create("gbnf");
	tcase_add_test(tg, gbnf_vs_oracles);
	tcase_add_test(tg, gbnf_errors);
	suite_add_tcase(s, tg);
	TCase *tb = tcase_create("matcher");
	tcase_add_test(tb, matcher_min_bytes);
	tcase_add_test(tb, matcher_states);
	tcase_add_test(tb, matcher_depth);
	tcase_add_test(tb, builder_errors);
	suite_add_tcase(s, tb);
	TCase *tj = tcase_create("schema");
	tcase_add_test(tj, schema_fixtures);
	tcase_add_test(tj, schema_integer_ranges);
	tcase_add_test(tj, schema_string_lengths);
	tcase_add_test(tj, schema_formats);
	tcase_add_test(tj, schema_layout);
	tcase_add_test(tj, schema_object_members);
	tcase_add_test(tj, schema_extra_keys);
	tcase_add_test(tj, schema_array_counts);
	tcase_add_test(tj, schema_long_literals);
	tcase_add_test(tj, schema_any_object);
	tcase_add_test(tj, schema_refusals);
	tcase_add_test(tj, schema_oneof_apart);
	suite_add_tcase(s, tj);
	TCase *tm = tcase_create("masks");
	tcase_add_test(tm, masks_synthetic);
	tcase_add_test(tm, masks_eviction);
	tcase_add_test(tm, masks_threads);
	tcase_add_test(tm, cache_refusals);
	suite_add_tcase(s, tm);
	TCase *tf = tcase_create("fuzz");
	tcase_add_test(tf, fuzz_regex);
	tcase_add_test(tf, fuzz_schemas);
	suite_add_tcase(s, tf);
	TCase *all[] = {tr, tg, tb, tj, tm, tf};
	for (int i = 0; i < 6; i++)
		tcase_set_timeout(all[i], 300);  /* the sanitizer build is ~10x slower */
	return s;
}

static Suite *suite_one(const char *name, const TTest *t)
{
	Suite *s = suite_create("grammar");
	TCase *tc = tcase_create(name);
	tcase_add_test(tc, t);
	tcase_set_timeout(tc, 600);
	suite_add_tcase(s, tc);
	return s;
}

/* --generate writes requests on stdout: Check stays silent, failures go
 * to stderr. */
static int run_quiet(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_SILENT);
	int nf = srunner_ntests_failed(sr);
	TestResult **tr = srunner_failures(sr);
	for (int i = 0; i < nf; i++)
		fprintf(stderr, "%s:%d: %s\n", tr_lfile(tr[i]), tr_lno(tr[i]), tr_msg(tr[i]));
	free(tr);
	srunner_free(sr);
	return nf ? 1 : 0;
}

int main(int argc, char **argv)
{
	if ((argc == 3 || argc == 4) && !strcmp(argv[1], "--generate")) {
		generate_n = atoi(argv[2]);
		if (argc == 4)
			schemas_path = argv[3];
		return run_quiet(suite_one("generate", generate_jsonl));
	}
	if (argc == 2 && !strcmp(argv[1], "--o200k")) {
		if (!o200k_path()) {
			printf("test-grammar --o200k: MS_O200K names no readable o200k_harmony.json: skipped\n");
			return 77;
		}
		return ms_check_run(suite_one("o200k", masks_o200k));
	}
	if (argc != 1) {
		fprintf(stderr, "usage: %s [--o200k | --generate N [SCHEMAS.json]]\n", argv[0]);
		return 2;
	}
	return ms_check_run(suite_main());
}
