/*
 * test-tokenizer.c: the tokenizer.json loader and BPE on small hand-made
 * byte-level tokenizers: both merge spellings, added tokens (special or not,
 * lstrip/rstrip), the White_Space meaning of \s, refusals that name the
 * unsupported part, invalid UTF-8, and the streaming decoder (held-back
 * bytes, U+FFFD, round trips on random UTF-8). Exactness against tiktoken on
 * the real o200k_harmony vocabulary is tests/models/tokenizer_npm.mjs's job.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-run.h"
#include "tokenizer.h"

static char tmpdir[] = "/tmp/ms-test-tok.XXXXXX";

/* GPT-2's byte -> code point mapping, written out independently. */
static void put_byte(char **p, int b)
{
	int cp;
	if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) {
		cp = b;
	} else {
		int n = 0;
		for (int x = 0; x < b; x++)
			if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174))
				n++;
		cp = 256 + n;
	}
	if (cp < 0x80) {
		*(*p)++ = (char)cp;
	} else {
		*(*p)++ = (char)(0xC0 | (cp >> 6));
		*(*p)++ = (char)(0x80 | (cp & 63));
	}
}

/* JSON string of the byte-level spelling of s, escaped for JSON. */
static void put_token(char **p, const char *s)
{
	*(*p)++ = '"';
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		char tmp[4], *q = tmp;
		put_byte(&q, *c);
		for (char *r = tmp; r < q; r++) {
			if (*r == '"' || *r == '\\')
				*(*p)++ = '\\';
			*(*p)++ = *r;
		}
	}
	*(*p)++ = '"';
}

/* A byte-level tokenizer: 256 byte tokens (ids 0..255), merged tokens from
 * `merges` (ids 256..), added tokens from `added` (JSON list text). */
static char *make_tokenizer(const char *const *merges, int n_merges, bool pair_form,
			    const char *pre, const char *added, const char *extra_model)
{
	char *json = malloc(1 << 20), *p = json;
	p += sprintf(p, "{\"version\":\"1.0\",\"normalizer\":null,\"pre_tokenizer\":%s,"
		     "\"decoder\":{\"type\":\"ByteLevel\"},\"added_tokens\":%s,"
		     "\"model\":{\"type\":\"BPE\"%s,\"vocab\":{", pre, added, extra_model);
	for (int b = 0; b < 256; b++) {
		char s[2] = {(char)b, 0};
		if (b)
			*p++ = ',';
		if (b == 0) { /* NUL cannot be in a C string: spell it directly */
			p += sprintf(p, "\"\\u0100\":0");
			continue;
		}
		put_token(&p, s);
		p += sprintf(p, ":%d", b);
	}
	for (int i = 0; i < n_merges; i++) {
		char joined[64];
		const char *sp = strchr(merges[i], '|');
		snprintf(joined, sizeof(joined), "%.*s%s", (int)(sp - merges[i]), merges[i], sp + 1);
		*p++ = ',';
		put_token(&p, joined);
		p += sprintf(p, ":%d", 256 + i);
	}
	p += sprintf(p, "},\"merges\":[");
	for (int i = 0; i < n_merges; i++) {
		char a[32], b[32];
		const char *sp = strchr(merges[i], '|');
		snprintf(a, sizeof(a), "%.*s", (int)(sp - merges[i]), merges[i]);
		snprintf(b, sizeof(b), "%s", sp + 1);
		if (i)
			*p++ = ',';
		if (pair_form) {
			*p++ = '[';
			put_token(&p, a);
			*p++ = ',';
			put_token(&p, b);
			*p++ = ']';
		} else {
			/* "a b" in one string: spell both halves, join with a space */
			char *q = p;
			put_token(&p, a);
			p--; /* drop the closing quote */
			*p++ = ' ';
			char *r = p;
			put_token(&p, b);
			memmove(r, r + 1, (size_t)(p - r - 1)); /* drop b's opening quote */
			p--;
			(void)q;
		}
	}
	p += sprintf(p, "]}}");
	return json;
}

static struct ms_tokenizer *load_text(const char *json, struct ms_err *err, int *rc)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/tokenizer.json", tmpdir);
	FILE *f = fopen(path, "w");
	fputs(json, f);
	fclose(f);
	struct ms_tokenizer *t = NULL;
	*rc = ms_tokenizer_load(&t, path, err);
	return t;
}

/* "left|right" (the test's own separator: a space is a real byte here) */
static const char *const merges[] = {"h|e", "l|l", "he|ll", "hell|o", "o|r", "w|or", " |w", " w|or",
				     "l|d", "'|s"};
#define O200K_LIKE                                                                              \
	"{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"  \
	"\"[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+(?i:'s|'t)?|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+" \
	"[\\\\r\\\\n/]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\","       \
	"\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}"
#define ADDED                                                                                   \
	"[{\"id\":300,\"content\":\"<|start|>\",\"special\":true},"                                \
	"{\"id\":301,\"content\":\"<|st\",\"special\":true},"                                      \
	"{\"id\":302,\"content\":\"[SEP]\",\"special\":false,\"lstrip\":true,\"rstrip\":true}]"

static struct ms_tokenizer *small(bool pair_form)
{
	struct ms_err err = {0};
	int rc;
	char *json = make_tokenizer(merges, 10, pair_form, O200K_LIKE, ADDED, "");
	struct ms_tokenizer *t = load_text(json, &err, &rc);
	free(json);
	ck_assert_msg(rc == 0, "%s", err.msg);
	return t;
}

static void expect_ids(struct ms_tokenizer *t, const char *text, bool special, const int32_t *want,
		       size_t n)
{
	struct ms_err err = {0};
	int32_t *ids;
	size_t m;
	ck_assert_msg(ms_tokenizer_encode(t, text, strlen(text), special, &ids, &m, &err) == 0, "%s",
		      err.msg);
	char got[512] = "", exp[512] = "";
	for (size_t i = 0; i < m; i++)
		snprintf(got + strlen(got), sizeof(got) - strlen(got), " %d", ids[i]);
	for (size_t i = 0; i < n; i++)
		snprintf(exp + strlen(exp), sizeof(exp) - strlen(exp), " %d", want[i]);
	ck_assert_msg(!strcmp(got, exp), "\"%s\": got%s want%s", text, got, exp);
	free(ids);
}

START_TEST(merges_both_forms)
{
	for (int form = 0; form < 2; form++) {
		struct ms_tokenizer *t = small(form);
		/* "hello" -> he, ll, hell, hello (merge ranks in order) */
		expect_ids(t, "hello", false, (int32_t[]){259}, 1);
		/* " world": "or" (260) first, then "wor" (261) outranks " w"
		 * (262); " wor" cannot form from " " + "wor"; "ld" (264) */
		expect_ids(t, "hello world", false, (int32_t[]){259, ' ', 261, 264}, 4);
		/* " w" + "x": " w" (262) */
		expect_ids(t, " wx", false, (int32_t[]){262, 'x'}, 2);
		/* no merge for "xyz": bytes */
		expect_ids(t, "xyz", false, (int32_t[]){'x', 'y', 'z'}, 3);
		ck_assert_int_eq(ms_tokenizer_n_ids(t), 303);
		ms_tokenizer_free(t);
	}
}
END_TEST

START_TEST(added_tokens)
{
	struct ms_tokenizer *t = small(true);
	/* special tokens only when allowed; longest match first */
	expect_ids(t, "<|start|>hello", true, (int32_t[]){300, 259}, 2);
	expect_ids(t, "<|stx", true, (int32_t[]){301, 'x'}, 2);
	/* not allowed: plain text ("<|" is punctuation, "start" letters, "|>") */
	expect_ids(t, "<|start|>", false, (int32_t[]){'<', '|', 's', 't', 'a', 'r', 't', '|', '>'}, 9);
	/* a non-special added token is always recognised; lstrip/rstrip eat
	 * the whitespace around it */
	expect_ids(t, "hello  [SEP]  hello", false, (int32_t[]){259, 302, 259}, 3);
	ck_assert_int_eq(ms_tokenizer_find(t, "<|start|>"), 300);
	ck_assert_int_eq(ms_tokenizer_find(t, "hello"), 259);
	ck_assert_int_eq(ms_tokenizer_find(t, "nope"), -1);
	ck_assert(ms_tokenizer_is_special(t, 300) && !ms_tokenizer_is_special(t, 302));
	ms_tokenizer_free(t);
}
END_TEST

/* \s is Unicode White_Space, as in the Rust and Oniguruma engines: U+0085
 * (NEL) is whitespace there though not in PCRE2's own \s. "a<NEL>b": with
 * NEL as whitespace it is its own piece; otherwise it would join "b" via
 * [^\r\n\p{L}\p{N}]?\p{L}+. */
START_TEST(white_space_is_unicode)
{
	struct ms_tokenizer *t = small(true);
	struct ms_err err = {0};
	int32_t *ids;
	size_t n;
	const char *s = "a\xc2\x85" "b";
	ck_assert_int_eq(ms_tokenizer_encode(t, s, strlen(s), false, &ids, &n, &err), 0);
	/* pieces: "a", "\u0085", "b" -> bytes a, C2, 85, b */
	ck_assert_int_eq(n, 4);
	ck_assert_int_eq(ids[1], 0xC2);
	free(ids);
	/* case-insensitive contraction group */
	expect_ids(t, "it'S", false, (int32_t[]){'i', 't', '\'', 'S'}, 4);
	ms_tokenizer_free(t);
}
END_TEST

START_TEST(refusals_name_the_part)
{
	struct ms_err err = {0};
	int rc;
	const struct {
		const char *pre, *model, *needle;
	} cases[] = {
		{"{\"type\":\"Whitespace\"}", "", "\"Whitespace\""},
		{"{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Contiguous\"}", "",
		 "\"Contiguous\""},
		{"{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}", "",
		 "does not compile"},
		{"null", ",\"byte_fallback\":true", "byte_fallback"},
		{"null", ",\"continuing_subword_prefix\":\"##\"", "continuing_subword_prefix"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *json = make_tokenizer(merges, 10, true, cases[i].pre, "[]", cases[i].model);
		struct ms_tokenizer *t = load_text(json, &err, &rc);
		free(json);
		ck_assert_msg(rc < 0 && !t, "case %zu accepted", i);
		ck_assert_msg(strstr(err.msg, cases[i].needle), "case %zu: %s", i, err.msg);
	}
	const char *docs[][2] = {
		{"{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", "\"WordPiece\""},
		{"{\"model\":{\"type\":\"BPE\",\"vocab\":{}},\"normalizer\":{\"type\":\"NFC\"}}", "\"NFC\""},
		{"{\"model\":{\"type\":\"BPE\",\"vocab\":{}},\"decoder\":{\"type\":\"WordPiece\"}}",
		 "decoder \"WordPiece\""},
		{"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"abc\\u4e2d\":0}}}", "byte-level"},
		{"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a c\"]}}",
		 "not in the vocab"},
		{"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a\"]}}", "not \"a b\""},
		{"[1,2]", "not a JSON object"},
		/* the tokenizer-load fuzzer's find: it loaded, with 0 ids */
		{"{\"model\":{\"type\":\"BPE\",\"vocab\":{}},\"added_tokens\":[]}", "no tokens"},
		/* held to RFC 8259 (config/ms-json.h): nothing after the object,
		 * no key twice (Python's json and serde keep the last, cJSON the
		 * first), no \u0000 that cJSON would cut a token at */
		{"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}} x", "nothing may follow"},
		{"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"a\":2}}}",
		 "the key \"a\" appears twice in model.vocab"},
		{"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\\u0000\":0}}}", "(NUL)"},
	};
	for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
		struct ms_tokenizer *t = load_text(docs[i][0], &err, &rc);
		ck_assert_msg(rc < 0 && !t, "doc %zu accepted", i);
		ck_assert_msg(strstr(err.msg, docs[i][1]), "doc %zu: %s", i, err.msg);
	}
}
END_TEST

START_TEST(invalid_utf8_is_an_error)
{
	struct ms_tokenizer *t = small(true);
	struct ms_err err = {0};
	int32_t *ids;
	size_t n;
	/* (C0 80, the overlong NUL, is how the process carries a NUL: ms-utf8.h) */
	const char *bad[] = {"a\xff", "\xc1\x81", "\xed\xa0\x80", "\xe2\x82", "\xf4\x90\x80\x80",
			     "\xc0\x81", "\xc0"};
	for (size_t i = 0; i < 7; i++) {
		ck_assert_int_eq(ms_tokenizer_encode(t, bad[i], strlen(bad[i]), false, &ids, &n, &err),
				 -EINVAL);
		ck_assert_ptr_nonnull(strstr(err.msg, "UTF-8"));
	}
	ms_tokenizer_free(t);
}
END_TEST

/* Token by token, the decoder never emits part of a character. */
START_TEST(streaming_decoder)
{
	struct ms_tokenizer *t = small(true);
	struct ms_detok d;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	ms_detok_init(&d, t, false);
	/* "é" = C3 A9 as two byte tokens, then "!" */
	ck_assert_int_eq(ms_detok_push(&d, 0xC3, &buf, &len, &cap), 0);
	ck_assert_uint_eq(len, 0); /* held back */
	ck_assert_int_eq(ms_detok_push(&d, 0xA9, &buf, &len, &cap), 0);
	ck_assert_uint_eq(len, 2);
	ck_assert_int_eq(ms_detok_push(&d, '!', &buf, &len, &cap), 0);
	ck_assert_str_eq(buf, "\xc3\xa9!");
	/* a 4-byte emoji split 1 + 3 */
	ck_assert_int_eq(ms_detok_push(&d, 0xF0, &buf, &len, &cap), 0);
	ck_assert_uint_eq(len, 3);
	for (int b = 0; b < 3; b++)
		ms_detok_push(&d, (int32_t[]){0x9F, 0x98, 0x80}[b], &buf, &len, &cap);
	ck_assert_str_eq(buf, "\xc3\xa9!\xf0\x9f\x98\x80");
	/* bytes that can never be valid become U+FFFD, and so does an
	 * incomplete tail at the end */
	ms_detok_push(&d, 0xFF, &buf, &len, &cap);
	ms_detok_push(&d, 'a', &buf, &len, &cap);
	ms_detok_push(&d, 0xE2, &buf, &len, &cap);
	ms_detok_push(&d, 'b', &buf, &len, &cap); /* E2 then 'b': E2 is invalid */
	ms_detok_push(&d, 0xE2, &buf, &len, &cap);
	ms_detok_flush(&d, &buf, &len, &cap);
	ck_assert_str_eq(buf, "\xc3\xa9!\xf0\x9f\x98\x80\xef\xbf\xbd" "a\xef\xbf\xbd" "b\xef\xbf\xbd");
	/* skip_special leaves special tokens out */
	free(buf);
	buf = NULL, len = cap = 0;
	ms_detok_init(&d, t, true);
	ms_detok_push(&d, 300, &buf, &len, &cap);
	ms_detok_push(&d, 259, &buf, &len, &cap);
	ms_detok_push(&d, 302, &buf, &len, &cap);
	ck_assert_str_eq(buf, "hello[SEP]");
	/* a character never spans a skipped special token: the held byte ends
	 * as U+FFFD with it, and the text after starts clean (a harmony
	 * header's role after <|end|><|start|>) */
	ms_detok_push(&d, 0xE2, &buf, &len, &cap);
	ck_assert_uint_eq(len, strlen("hello[SEP]"));
	ck_assert_int_eq(ms_detok_push(&d, 300, &buf, &len, &cap), 0);
	ck_assert_str_eq(buf, "hello[SEP]\xef\xbf\xbd");
	ms_detok_push(&d, 259, &buf, &len, &cap);
	ck_assert_str_eq(buf, "hello[SEP]\xef\xbf\xbdhello");
	ck_assert_int_eq(ms_detok_push(&d, 5000, &buf, &len, &cap), -EINVAL);
	free(buf);
	ms_tokenizer_free(t);
}
END_TEST

static uint32_t rs = 99;
static uint32_t rnd(void)
{
	rs = rs * 1103515245u + 12345u;
	return rs >> 4;
}

/* decode(encode(s)) == s for random valid UTF-8 (all planes), token by token. */
START_TEST(round_trip_random_utf8)
{
	struct ms_tokenizer *t = small(true);
	struct ms_err err = {0};
	for (int iter = 0; iter < 2000; iter++) {
		char s[512];
		size_t n = 0;
		int chars = (int)(rnd() % 60);
		for (int c = 0; c < chars; c++) {
			uint32_t cp;
			switch (rnd() % 5) {
			case 0: cp = 0x20 + rnd() % 0x5F; break;
			case 1: cp = (uint32_t[]){' ', '\n', '\t', 0x85, 0xA0, 0x3000}[rnd() % 6]; break;
			case 2: cp = 0x80 + rnd() % 0x780; break;
			case 3: cp = 0x800 + rnd() % 0xF800; break;
			default: cp = 0x10000 + rnd() % 0x100000; break;
			}
			if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0)
				continue;
			if (cp < 0x80) {
				s[n++] = (char)cp;
			} else if (cp < 0x800) {
				s[n++] = (char)(0xC0 | (cp >> 6)), s[n++] = (char)(0x80 | (cp & 63));
			} else if (cp < 0x10000) {
				s[n++] = (char)(0xE0 | (cp >> 12)), s[n++] = (char)(0x80 | ((cp >> 6) & 63));
				s[n++] = (char)(0x80 | (cp & 63));
			} else {
				s[n++] = (char)(0xF0 | (cp >> 18)), s[n++] = (char)(0x80 | ((cp >> 12) & 63));
				s[n++] = (char)(0x80 | ((cp >> 6) & 63)), s[n++] = (char)(0x80 | (cp & 63));
			}
		}
		int32_t *ids;
		size_t m;
		ck_assert_msg(ms_tokenizer_encode(t, s, n, false, &ids, &m, &err) == 0, "%s", err.msg);
		char *out;
		size_t ol;
		ck_assert_int_eq(ms_tokenizer_decode(t, ids, m, false, &out, &ol, &err), 0);
		ck_assert_uint_eq(ol, n);
		ck_assert(memcmp(out, s, n) == 0);
		free(out);
		free(ids);
	}
	ms_tokenizer_free(t);
}
END_TEST

/* A long run of one letter: one pre-token of 200k bytes; the heap keeps it
 * well under a second (a quadratic rescan would take minutes). */
START_TEST(long_pretoken)
{
	struct ms_tokenizer *t = small(true);
	struct ms_err err = {0};
	size_t n = 200000;
	char *s = malloc(n);
	for (size_t i = 0; i < n; i++)
		s[i] = "hel"[i % 3];
	int32_t *ids;
	size_t m;
	ck_assert_int_eq(ms_tokenizer_encode(t, s, n, false, &ids, &m, &err), 0);
	char *out;
	size_t ol;
	ck_assert_int_eq(ms_tokenizer_decode(t, ids, m, false, &out, &ol, &err), 0);
	ck_assert(ol == n && memcmp(out, s, n) == 0);
	free(out), free(ids), free(s);
	ms_tokenizer_free(t);
}
END_TEST

int main(void)
{
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	Suite *s = suite_create("tokenizer");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, merges_both_forms);
	tcase_add_test(tc, added_tokens);
	tcase_add_test(tc, white_space_is_unicode);
	tcase_add_test(tc, refusals_name_the_part);
	tcase_add_test(tc, invalid_utf8_is_an_error);
	tcase_add_test(tc, streaming_decoder);
	tcase_add_test(tc, round_trip_random_utf8);
	tcase_add_test(tc, long_pretoken);
	suite_add_tcase(s, tc);
	int failed = ms_check_run(s);
	char path[128];
	snprintf(path, sizeof(path), "%s/tokenizer.json", tmpdir);
	unlink(path);
	rmdir(tmpdir);
	return failed ? 1 : 0;
}
