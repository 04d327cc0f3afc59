/*
 * grammartest.h: what the grammar engine's tests (test-grammar.c,
 * test-grammar-masks.c) share: seeded randomness, byte buffers, random
 * sentences of a grammar (walks of its matcher), strings and mutations,
 * PCRE2 as the independent matcher (ECMAScript patterns rewritten for it),
 * JSON string helpers, compiling a pattern, grammar or schema. Include
 * once, in each test source, after its own includes.
 */
#ifndef MS_TEST_GRAMMARTEST_H
#define MS_TEST_GRAMMARTEST_H

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
#include "token-mask.h"
#include "tokenizer.h"

/* ============================================================ helpers */

/* ck_assert's test without its bookkeeping: Check writes the place of every
 * assertion that passes to a file (a system call each), too slow for a
 * check per token of a 201k vocabulary. A failure reports as Check's. */
#define ensure_msg(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)
#define ensure(cond) ensure_msg(cond, "%s", #cond)

struct rng { uint64_t s; };

static inline uint64_t rnext(struct rng *r)  /* splitmix64 */
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint32_t rbelow(struct rng *r, uint32_t n)
{
	return (uint32_t)(rnext(r) % n);
}

/* A growable byte string, always NUL-terminated. */
struct buf { uint8_t *p; size_t n, cap; };

static inline void buf_put(struct buf *b, const void *s, size_t n)
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

static inline void buf_putc(struct buf *b, int c)
{
	uint8_t x = (uint8_t)c;
	buf_put(b, &x, 1);
}

static inline void buf_puts(struct buf *b, const char *s)
{
	buf_put(b, s, strlen(s));
}

static inline void buf_set(struct buf *b, const void *s, size_t n)
{
	b->n = 0;
	buf_put(b, s, n);
}

static inline void buf_free(struct buf *b)
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
static inline size_t u8len(const uint8_t *s, size_t n)
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

static inline void snap_take(struct snap *s, const struct ms_gmatch *m)
{
	s->buf = realloc(s->buf, ((size_t)m->len + 1) * 4);
	ensure(s->buf);
	if (m->len)
		memcpy(s->buf, m->buf, (size_t)m->len * 4);
	s->len = m->len;
	s->n = m->n;
	s->accept = m->accept;
}

static inline void snap_put(const struct snap *s, struct ms_gmatch *m)
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

static inline void add_shuffled(struct rng *r, uint8_t *order, int *k, bool *taken, const uint8_t *cand,
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
static inline void byte_order(struct rng *r, uint8_t order[256])
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

static inline int feed_any(struct ms_gmatch *m, const uint8_t order[256])
{
	for (int i = 0; i < 256; i++)
		if (ms_gmatch_feed(m, &order[i], 1))
			return order[i];
	return -1;
}

/* A byte that brings ms_gmatch_min_bytes down by one: one must exist, and
 * none may bring it down further (the count is exact). */
static inline int feed_closer(struct ms_gmatch *m, const uint8_t order[256], struct snap *sn)
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
static inline bool gen_sentence(const struct ms_grammar *g, struct rng *r, size_t budget, int stop_in,
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

static inline void units_add(struct units *u, const void *s, size_t n)
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

static inline void put_unit(struct rng *r, const struct units *u, struct buf *o)
{
	const char *s = u->u[rbelow(r, (uint32_t)u->n)];
	buf_put(o, s, strlen(s) ? strlen(s) : 1);  /* "" is the unit NUL */
}

static inline void random_string(struct rng *r, const struct units *u, int maxlen, struct buf *o)
{
	o->n = 0;
	buf_put(o, "", 0);
	for (int k = (int)rbelow(r, (uint32_t)maxlen + 1); k > 0; k--)
		put_unit(r, u, o);
}

/* The unit boundaries of s: at[0..*n], at[0] = 0, at[*n] = len. */
static inline int unit_bounds(const uint8_t *s, size_t len, size_t *at, int cap)
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
static inline void mutate_once(struct rng *r, const struct units *u, struct buf *s, bool raw)
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

static inline void mutate(struct rng *r, const struct units *u, const struct buf *in, struct buf *o, bool raw)
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
static inline bool es_braces(const char *s)
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
static inline size_t es_escape(const char *s, bool in_class, struct buf *o)
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
static inline void es_to_pcre(const char *es, struct buf *o)
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
static inline pcre2_code *pcre_new(const char *pat, bool es, bool full)
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

static inline bool pcre_match(pcre2_code *re, const void *s, size_t n)
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

static inline int hexv(int c)
{
	int l = c | 0x20;
	return c >= '0' && c <= '9' ? c - '0' : l >= 'a' && l <= 'f' ? l - 'a' + 10 : -1;
}

static inline void put_cp(struct buf *o, uint32_t c)
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

static inline int64_t hex4(const uint8_t *s, size_t left)
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
static inline bool json_escape(const uint8_t *s, size_t n, size_t *i, struct buf *o)
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
static inline bool json_unquote(const uint8_t *s, size_t n, struct buf *o)
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
static inline void json_quote(const uint8_t *s, size_t n, struct buf *o)
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
static inline bool json_parses(const struct buf *s)
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

static inline struct ms_grammar *compile_root(struct ms_gb *b, int root, ms_gx x, struct outcome *oc)
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
static inline struct ms_grammar *regex_grammar(const char *re, enum ms_regex_mode mode, struct outcome *oc)
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

static inline struct ms_grammar *regex_ok(const char *re, enum ms_regex_mode mode)
{
	struct outcome oc;
	struct ms_grammar *g = regex_grammar(re, mode, &oc);
	ensure_msg(g, "regex /%s/ does not compile: %d %s", re, oc.rc, oc.err.msg);
	return g;
}

static inline struct ms_grammar *gbnf_grammar(const char *text, struct outcome *oc)
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

static inline struct ms_grammar *schema_grammar(const char *text, struct outcome *oc)
{
	memset(oc, 0, sizeof(*oc));
	cJSON *s = cJSON_Parse(text);
	ensure_msg(s, "the test's schema is not JSON: %s", text);
	struct ms_grammar *g = NULL;
	oc->rc = ms_json_schema_compile(s, &g, &oc->err);
	cJSON_Delete(s);
	return g;
}

static inline bool accepts(const struct ms_grammar *g, const struct buf *s)
{
	return ms_grammar_accepts(g, s->p, s->n);
}

/* The matcher fed s in random pieces ends where the whole-string test
 * does, and every prefix of a sentence is taken. */
static inline void check_pieces(const struct ms_grammar *g, struct rng *r, const struct buf *s, bool whole)
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


#endif
