/*
 * test-grammar.c: the structured-output grammar engine (engine/grammar/grammar.c,
 * grammar-text.c, grammar-json.c, token-mask.c, grammar-cache.c) against
 * independent matchers. Regexes against PCRE2 on strings the compiled
 * grammar generates (random walks of its matcher), random strings and
 * mutations, both ways; JSON-string patterns against PCRE2's search of the
 * decoded string; GBNF against equivalent regexes or small recognizers of
 * their own; JSON Schema on tests/grammar/structured_schemas.json's instances,
 * exhaustive integer ranges, string lengths and refusals; token masks
 * against brute force (every token fed to the state, then undone) on a
 * synthetic vocabulary and, with MS_O200K, the real o200k_harmony one; a
 * fuzz of random bytes and mutations.
 *
 *   test-grammar               the Check suite (the o200k case aside)
 *   test-grammar --o200k       the token-mask case on $MS_O200K (77 without)
 *   test-grammar --generate N [FILE]
 *                              N random sentences of the grammar of each
 *                              schema of FILE (tests/grammar/structured_schemas.json's
 *                              form; that file by default) and mutations of
 *                              them that it accepts, as json_validate.mjs
 *                              requests, one a line (tests/grammar/grammar_ajv.sh
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
#error "meson defines MS_TEST_SCHEMAS: the path of tests/grammar/structured_schemas.json"
#endif

#include "grammartest.h"
#include "test-grammar.h"

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
 * its sentences parse (ajv checks them: tests/grammar/grammar_ajv.sh). */
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

/* allOf (and the branches of anyOf beside other keywords) merge schema
 * objects: a branch that is not one, or properties / required of the
 * wrong JSON type, is refused as invalid (and nothing of the merge leaks:
 * the ASan build checks that); true adds nothing. */
START_TEST(schema_allof_shapes)
{
	static const struct { const char *schema, *want; } bad[] = {
		{"{\"allOf\":[[0]]}", "every branch must be a schema object"},
		{"{\"allOf\":[{\"type\":\"string\"},5]}", "every branch must be a schema object"},
		{"{\"type\":\"object\",\"anyOf\":[[0]]}", "\"anyOf\" at /anyOf/0"},
		{"{\"allOf\":[{\"properties\":{}},{\"properties\":[0]}]}", "must be an object"},
		{"{\"required\":{},\"allOf\":[{\"required\":[\"a\"]}]}", "list of property names"},
		{"{\"properties\":{},\"anyOf\":[{\"properties\":[1]}]}", "must be an object"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct outcome oc;
		struct ms_grammar *g = schema_grammar(bad[i].schema, &oc);
		ensure_msg(!g && oc.rc == -EINVAL && strstr(oc.err.msg, bad[i].want),
			      "%s: %d \"%s\", wanted -EINVAL with %s", bad[i].schema, oc.rc,
			      oc.err.msg, bad[i].want);
		ms_grammar_free(g);
	}
	struct outcome oc;
	struct ms_grammar *g = schema_grammar("{\"allOf\":[true,{\"type\":\"object\","
					      "\"properties\":{\"a\":{\"type\":\"integer\"}},"
					      "\"required\":[\"a\"]},{\"properties\":{\"b\":"
					      "{\"type\":\"string\"}},\"required\":[\"b\"]}]}", &oc);
	ensure_msg(g, "allOf with true: %s", oc.err.msg);
	expect_json(g, "allOf", "{\"a\":1,\"b\":\"x\"}", true);
	expect_json(g, "allOf", "{\"a\":1}", false);
	expect_json(g, "allOf", "\"x\"", false);
	ms_grammar_free(g);
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
 * takes parses as JSON (ajv validates such texts: tests/grammar/grammar_ajv.sh),
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
	TCase *tg = grammar_gbnf_tcase();
	suite_add_tcase(s, tg);
	TCase *tb = grammar_matcher_tcase();
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
	tcase_add_test(tj, schema_allof_shapes);
	tcase_add_test(tj, schema_oneof_apart);
	suite_add_tcase(s, tj);
	TCase *tm = grammar_masks_tcase();
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
		if (!grammar_o200k_available()) {
			printf("test-grammar --o200k: MS_O200K names no readable o200k_harmony.json: skipped\n");
			return 77;
		}
		return ms_check_run(suite_one("o200k", grammar_masks_o200k()));
	}
	if (argc != 1) {
		fprintf(stderr, "usage: %s [--o200k | --generate N [SCHEMAS.json]]\n", argv[0]);
		return 2;
	}
	return ms_check_run(suite_main());
}

