/*
 * test-grammar-gbnf.c: GBNF grammars against equivalent regexes and small
 * recognizers of their own (balanced brackets, arithmetic), GBNF's errors,
 * and the matcher's own properties (minimum bytes, states, depth, the
 * builder's refusals), as test-grammar's main runs them (test-grammar.h).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "grammar-json.h"
#include "grammar-text.h"
#include "grammar.h"

#include "grammartest.h"
#include "test-grammar.h"
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

/* A DFA state with more rule calls than byte edges: a rule repeated
 * under nested + and * calls "item" from many NFA states at once (the
 * grammar fuzzer's find: the compiler wrote the calls' return points past
 * a buffer sized by the byte edges; the ASan build checks it). */
START_TEST(gbnf_many_calls_in_one_state)
{
	static const char *const texts[] = {
		"root ::= (item++++++++++++)* item\nitem ::= [6-9]+",
		"root ::= (a+++ | b+++ | a b+ | b a+)* a\na ::= \"x\"\nb ::= a+",
	};
	static const struct { const char *s; bool yes[2]; } sents[] = {
		{"6", {true, false}}, {"6789", {true, false}}, {"", {false, false}},
		{"5", {false, false}}, {"x", {false, true}}, {"xxx", {false, true}},
	};
	for (int t = 0; t < 2; t++) {
		struct outcome oc;
		struct ms_grammar *g = gbnf_grammar(texts[t], &oc);
		ensure_msg(g, "%s: %s", texts[t], oc.err.msg);
		for (size_t i = 0; i < sizeof(sents) / sizeof(sents[0]); i++) {
			struct buf b = {0};
			buf_set(&b, sents[i].s, strlen(sents[i].s));
			ensure_msg(accepts(g, &b) == sents[i].yes[t], "%s: \"%s\" %s", texts[t],
				      sents[i].s, sents[i].yes[t] ? "refused" : "accepted");
			buf_free(&b);
		}
		ms_grammar_free(g);
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

/* The fewest bytes to a sentence, counted by hand; a grammar with none is
 * refused when compiled. */
START_TEST(matcher_min_bytes)
{
	struct outcome none;
	ensure_msg(!regex_grammar("a[]", MS_REGEX_FULL, &none) && none.rc == -EINVAL &&
		   strstr(none.err.msg, "matches no text"), "a[]: %d %s", none.rc, none.err.msg);
	static const char *const obj = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},"
				       "\"required\":[\"a\"]}";
	static const struct { int kind; const char *text, *prefix; int64_t want; } cases[] = {
		{0, "abc", "", 3}, {0, "abc", "ab", 1}, {0, "abc", "abc", 0}, {0, "a{5}|b{2}", "", 2},
		{0, "a{5}|b{2}", "a", 4}, {0, "a[]|bcd", "", 3},
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

TCase *grammar_gbnf_tcase(void)
{
	TCase *tg = tcase_create("gbnf");
	tcase_add_test(tg, gbnf_vs_oracles);
	tcase_add_test(tg, gbnf_errors);
	tcase_add_test(tg, gbnf_many_calls_in_one_state);
	return tg;
}

TCase *grammar_matcher_tcase(void)
{
	TCase *tb = tcase_create("matcher");
	tcase_add_test(tb, matcher_min_bytes);
	tcase_add_test(tb, matcher_states);
	tcase_add_test(tb, matcher_depth);
	tcase_add_test(tb, builder_errors);
	return tb;
}
