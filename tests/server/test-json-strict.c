/*
 * test-json-strict.c: config/ms-json.c's strict RFC 8259 parser and the
 * carried NUL (config/ms-utf8.h).
 *
 * accepts: valid texts give the tree cJSON gives (printed alike), numbers,
 * escapes, surrogate pairs, deep-but-allowed nesting, RFC whitespace.
 * refuses: every non-RFC form cJSON lets through or that a reader could
 * take two ways (raw NUL and control bytes, trailing data, comments, NaN,
 * leading zeros, invalid UTF-8, lone surrogates, duplicate keys at any
 * depth and in large objects), each with a message naming the fault's
 * line/column/byte or the key's path.
 * nul: \u0000 arrives carried, prints back as \u0000, and the tokenizer's
 * round trip keeps it (the default model's tokenizer).
 * random: mutations of valid texts; whatever the strict parser accepts
 * cJSON also accepts, with the same tree.
 * files: a checkpoint's JSON files (config/ms-json.c's ms_json_read_file)
 * are held to the same rules, a \u0000 refused rather than cut, and every
 * error names the file and the position.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-run.h"
#include "ms-json.h"
#include "ms-utf8.h"
#include "tokenizer.h"

static int parse(const char *t, size_t n, cJSON **j, char *msg)
{
	return ms_json_parse_strict(t, n, j, msg, 512);
}

/* t parses strictly, and to what cJSON makes of it. */
static void accepted(const char *t)
{
	cJSON *j = NULL;
	char msg[512] = "";
	ck_assert_msg(parse(t, strlen(t), &j, msg) == 0, "refused %s: %s", t, msg);
	cJSON *ref = cJSON_Parse(t);
	ck_assert_ptr_nonnull(ref);
	char *a = cJSON_PrintUnformatted(j), *b = cJSON_PrintUnformatted(ref);
	ck_assert_str_eq(a, b);
	free(a), free(b);
	cJSON_Delete(j), cJSON_Delete(ref);
}

/* t (n bytes) is refused, its message holding want. */
static void refused_n(const char *t, size_t n, const char *want)
{
	cJSON *j = NULL;
	char msg[512] = "";
	ck_assert_msg(parse(t, n, &j, msg) == -EINVAL, "accepted %.*s", (int)n, t);
	ck_assert_ptr_null(j);
	ck_assert_msg(strstr(msg, want), "%.*s: message \"%s\" lacks \"%s\"", (int)n, t, msg, want);
}

static void refused(const char *t, const char *want)
{
	refused_n(t, strlen(t), want);
}

START_TEST(accepts)
{
	static const char *const ok[] = {
		"{}", "[]", "0", "-0", "1.5e-3", "-12.25E+10", "1E2", "\"\"", "true", "false", "null",
		" \t\r\n{ \"a\" : [1, 2, {\"b\": null}] }\n",
		"{\"s\": \"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\uD83D\\uDE00\"}",
		"{\"u\": \"h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"}",
		"{\"a\": 1, \"A\": 2, \"a \": 3}", /* keys differ by case and space */
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(*ok); i++)
		accepted(ok[i]);
	/* nesting up to the bound */
	char deep[1100];
	memset(deep, '[', 511), deep[511] = '1', memset(deep + 512, ']', 511);
	deep[1023] = '\0';
	accepted(deep);
}
END_TEST

START_TEST(refuses)
{
	refused_n("{\"prompt\": [1, 2]\0, \"max_tokens\": 1}", 36, "not the byte 0x00, at line 1, column 18 (byte 17)");
	refused_n("{\"p\": \"a\0b\"}", 12, "control character inside a string must be escaped");
	refused("{\"p\": \"a\tb\"}", "control character");
	refused("{\"p\": \"a\nb\"}", "control character");
	refused("{\"p\": 1}\n{}", "nothing may follow the JSON value, not '{', at line 2, column 1 (byte 9)");
	refused("{} x", "nothing may follow");
	refused("{\"a\": 1,}", "expected a key");
	refused("[1, 2,]", "expected a JSON value");
	refused("[1 2]", "expected ',' or ']'");
	refused("{\"a\" 1}", "expected ':'");
	refused("{'a': 1}", "expected a key");
	refused("{\"a\": 01}", "expected ',' or '}', not '1'");
	refused("{\"a\": 1.}", "digit after '.'");
	refused("{\"a\": .5}", "expected a JSON value");
	refused("{\"a\": +1}", "expected a JSON value");
	refused("{\"a\": 1e}", "exponent");
	refused("{\"a\": NaN}", "expected a JSON value");
	refused("{\"a\": Infinity}", "expected a JSON value");
	refused("{\"a\": tru}", "expected a JSON value");
	refused("{\"a\": 1} // c", "nothing may follow");
	refused("/* c */ {}", "expected a JSON value");
	refused("\xEF\xBB\xBF{}", "expected a JSON value"); /* a BOM */
	refused("{\"a\": \"\\x41\"}", "an escape must be one of");
	refused("{\"a\": \"\\u12G4\"}", "four hex digits");
	refused("{\"a\": \"\\uDC00\"}", "lone low surrogate");
	refused("{\"a\": \"\\uD800x\"}", "without its low half");
	refused("{\"a\": \"\\uD800\\u0041\"}", "without its low half");
	refused("{\"a\": \"\xC0\x80\"}", "not valid UTF-8"); /* the carrier itself */
	refused("{\"a\": \"\xED\xA0\x80\"}", "not valid UTF-8");
	refused("{\"a\": \"\xF5\x80\x80\x80\"}", "not valid UTF-8");
	refused("{\"a\": \"\xC3\"}", "not valid UTF-8");
	refused("{\"a\": \"abc", "ends inside a string");
	refused("{\"a\": ", "ends where a JSON value should be");
	refused("", "ends where a JSON value should be");
	refused("  \n ", "ends where a JSON value should be");
	char deep[1100];
	memset(deep, '[', 513), memset(deep + 513, ']', 513);
	deep[1026] = '\0';
	refused(deep, "nest deeper than 512");
}
END_TEST

START_TEST(duplicate_keys)
{
	refused("{\"model\": \"a\", \"model\": \"b\"}", "the key \"model\" appears twice in the top-level object");
	refused("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"role\": \"system\"}]}",
		"the key \"role\" appears twice in messages[0]");
	refused("{\"a\": \"\\u0061\", \"\\u0061\": 2}", "appears twice"); /* same key once decoded */
	refused("{\"tools\": [{\"function\": {\"parameters\": {\"properties\": {\"x\": {}, \"x\": {}}}}}]}",
		"appears twice in tools[0].function.parameters.properties");
	/* a large object: the sorted path */
	char big[4096];
	size_t n = (size_t)snprintf(big, sizeof(big), "{");
	for (int i = 0; i < 200; i++)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "\"k%d\": %d, ", i == 150 ? 7 : i, i);
	snprintf(big + n, sizeof(big) - n, "\"end\": 0}");
	refused(big, "the key \"k7\" appears twice");
	big[n] = '\0';
	snprintf(big + 1, sizeof(big) - 1, "\"k\": 1, \"z\": {\"k\": 1}}");
	accepted(big); /* the same key in two objects is fine */
}
END_TEST

START_TEST(nul_carried)
{
	const char *t = "{\"prompt\": \"ab\\u0000cd\", \"k\\u0000\": \"\\\\u0000\"}";
	cJSON *j = NULL;
	char msg[512];
	ck_assert_int_eq(parse(t, strlen(t), &j, msg), 0);
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
	ck_assert_str_eq(p->valuestring, "ab" MS_NUL_CARRIER "cd");
	/* an escaped backslash before u0000 is text, not a NUL */
	ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "k" MS_NUL_CARRIER)->valuestring, "\\u0000");
	char *back = ms_json_text(j);
	ck_assert_str_eq(back, "{\"prompt\":\"ab\\u0000cd\",\"k\\u0000\":\"\\\\u0000\"}");
	free(back);
	char raw[] = "x" MS_NUL_CARRIER "y" MS_NUL_CARRIER;
	ck_assert(ms_nul_carried(raw, 6));
	ck_assert_uint_eq(ms_nul_uncarry(raw, 6), 4);
	ck_assert(!memcmp(raw, "x\0y\0", 4));
	cJSON_Delete(j);
}
END_TEST

/* The tokenizer reads a carried NUL as the byte 0x00 and its decoder gives
 * it back carried: "ab\0cd" is never "ab". */
START_TEST(nul_tokenized)
{
	struct ms_tokenizer *tok;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_tokenizer_load(&tok, MS_DEFAULT_MODEL "/tokenizer.json", &err), 0);
	int32_t *a, *b, *c;
	size_t na, nb, nc;
	ck_assert_int_eq(ms_tokenizer_encode(tok, "ab" MS_NUL_CARRIER "cd", 6, false, &a, &na, &err), 0);
	ck_assert_int_eq(ms_tokenizer_encode(tok, "ab\0cd", 5, false, &b, &nb, &err), 0);
	ck_assert_int_eq(ms_tokenizer_encode(tok, "ab", 2, false, &c, &nc, &err), 0);
	ck_assert_uint_eq(na, nb);
	ck_assert(!memcmp(a, b, na * sizeof(*a)));
	ck_assert_uint_gt(na, nc);
	char *text;
	size_t tl;
	ck_assert_int_eq(ms_tokenizer_decode(tok, a, na, false, &text, &tl, &err), 0);
	ck_assert_uint_eq(tl, 6);
	ck_assert(!memcmp(text, "ab" MS_NUL_CARRIER "cd", 6));
	free(text), free(a), free(b), free(c);
	ms_tokenizer_free(tok);
}
END_TEST

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static unsigned rnd(unsigned n)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (unsigned)(rng % n);
}

/* Random edits of valid texts: accepted ones parse alike in cJSON. */
START_TEST(random_mutations)
{
	static const char *const seeds[] = {
		"{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi \\u00e9\"}], \"n\": 1}",
		"{\"prompt\": [1, 2, 3], \"max_tokens\": 16, \"stop\": [\"\\n\", \"x\"], \"t\": -1.5e3}",
		"[true, false, null, {\"a\": {\"b\": [\"\\uD83D\\uDE00\"]}}]",
	};
	static const char alphabet[] = "{}[]:,\"\\ -+.eE0123456789abntrfu\x00\x01\x1f\x7f\xc0\x80\xff";
	int accepted_n = 0;
	for (int it = 0; it < 20000; it++) {
		char t[256];
		size_t n = strlen(seeds[it % 3]);
		memcpy(t, seeds[it % 3], n);
		for (int e = 1 + (int)rnd(3); e > 0; e--) {
			size_t at = rnd((unsigned)n);
			int op = (int)rnd(3);
			char ch = alphabet[rnd(sizeof(alphabet) - 1)];
			if (op == 0)
				t[at] = ch;
			else if (op == 1 && n > 1)
				memmove(t + at, t + at + 1, n-- - at - 1);
			else if (n < sizeof(t) - 1)
				memmove(t + at + 1, t + at, n++ - at), t[at] = ch;
		}
		cJSON *j = NULL;
		char msg[512];
		int rc = parse(t, n, &j, msg);
		ck_assert(rc == 0 || rc == -EINVAL);
		if (rc)
			continue;
		accepted_n++;
		cJSON *ref = cJSON_ParseWithLength(t, n);
		ck_assert_msg(ref != NULL, "cJSON refuses what was accepted: %.*s", (int)n, t);
		char *a = cJSON_PrintUnformatted(j), *b = cJSON_PrintUnformatted(ref);
		if (!memchr(t, '\\', n)) /* without escapes (\u0000 is carried) */
			ck_assert_str_eq(a, b);
		free(a), free(b);
		cJSON_Delete(j), cJSON_Delete(ref);
	}
	ck_assert_int_gt(accepted_n, 100); /* the test saw both sides */
}
END_TEST

/* path holds n bytes of t; reading it as JSON fails with code, the message
 * naming the path and holding want. */
static void file_refused(const char *path, const char *t, size_t n, int code, const char *want)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(t, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
	cJSON *j = (cJSON *)1;
	struct ms_err err = {0};
	ck_assert_msg(ms_json_read_file(path, &j, &err) == code, "%.*s: %d %s", (int)n, t, err.code,
		      err.msg);
	ck_assert_ptr_null(j);
	ck_assert_int_eq(err.code, code);
	ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, want), "\"%s\" lacks \"%s\"", err.msg,
		      want);
}

START_TEST(files)
{
	char dir[] = "/tmp/ms-json-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char path[64];
	snprintf(path, sizeof(path), "%s/config.json", dir);
	static const struct {
		const char *t;
		size_t n; /* 0: strlen */
		const char *want;
	} bad[] = {
		{"{\"a\": 1}\n{\"b\": 2}\n", 0, "nothing may follow the JSON value, not '{', at line 2, column 1"},
		{"{\"a\": 1}\0garbage", 17, "not the byte 0x00, at line 1, column 9 (byte 8)"},
		{"{\"a\":\0 1}", 9, "expected a JSON value, not the byte 0x00"},
		{"{\"a\": \"x\\u0000y\"}", 0, "\\u0000 (NUL) in a string is not accepted here, at line 1, column 9 (byte 8)"},
		{"{\"a\": [1, 2", 0, "the file ends"},
		{"{\"a\": 1, \"b\": {\"c\": 1, \"c\": 2}}", 0, "the key \"c\" appears twice in b"},
		{"{\"a\": 1} // comment", 0, "nothing may follow"},
		{"", 0, "the file ends where a JSON value should be"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		file_refused(path, bad[i].t, bad[i].n ? bad[i].n : strlen(bad[i].t), -EINVAL, bad[i].want);
	/* the same text as a body: carried, and "the body" */
	cJSON *j = NULL;
	char msg[512];
	ck_assert_int_eq(ms_json_parse_rfc("[1", 2, MS_JSON_BODY, &j, msg, sizeof(msg)), -EINVAL);
	ck_assert_msg(strstr(msg, "the body ends"), "%s", msg);
	ck_assert_int_eq(ms_json_parse_rfc("\"\\u0000\"", 8, MS_JSON_CARRY_NUL, &j, msg, sizeof(msg)), 0);
	ck_assert_str_eq(j->valuestring, MS_NUL_CARRIER);
	cJSON_Delete(j);
	/* a valid file */
	FILE *f = fopen(path, "wb");
	fputs("{\"a\": [1, 2.5e3, \"\\u00e9\"]}\r\n", f);
	fclose(f);
	struct ms_err err = {0};
	ck_assert_msg(ms_json_read_file(path, &j, &err) == 0, "%s", err.msg);
	ck_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "a"), 2)->valuestring, "\xc3\xa9");
	cJSON_Delete(j);
	remove(path);
	ck_assert_int_eq(ms_json_read_file(path, &j, &err), -ENOENT);
	ck_assert_ptr_null(j);
	ck_assert(strstr(err.msg, path));
	rmdir(dir);
}
END_TEST

int main(void)
{
	ms_json_init();
	Suite *s = suite_create("json-strict");
	TCase *tc = tcase_create("parse");
	tcase_add_test(tc, accepts);
	tcase_add_test(tc, refuses);
	tcase_add_test(tc, duplicate_keys);
	tcase_add_test(tc, nul_carried);
	tcase_add_test(tc, nul_tokenized);
	tcase_add_test(tc, random_mutations);
	tcase_add_test(tc, files);
	suite_add_tcase(s, tc);
	return ms_check_run(s);
}
