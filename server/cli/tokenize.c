/*
 * tokenize.c: `moeserve tokenize`, a tokenizer.json on stdin: text to ids,
 * ids to text (--decode), one case a line (--jsonl), a chat body to the
 * harmony prompt serve renders for it (--chat), or the encoder's speed
 * (--bench). For tests and for seeing what a model is given.
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "cli.h"
#include "harmony.h"
#include "ms-clock.h"
#include "ms-json.h"
#include "ms-utf8.h"
#include "request.h"
#include "tokenizer.h"

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1;
}

/* A JSON string literal (the whole line) -> bytes, embedded NULs kept.
 * Returns the length, or -1 when the line is not one JSON string. */
static long json_unquote(const char *s, size_t n, char *o)
{
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
		n--;
	if (n < 2 || s[0] != '"' || s[n - 1] != '"')
		return -1;
	size_t k = 0;
	for (size_t i = 1; i + 1 < n; i++) {
		if (s[i] != '\\') {
			o[k++] = s[i];
			continue;
		}
		if (++i + 1 >= n)
			return -1;
		switch (s[i]) {
		case '"': o[k++] = '"'; break;
		case '\\': o[k++] = '\\'; break;
		case '/': o[k++] = '/'; break;
		case 'b': o[k++] = '\b'; break;
		case 'f': o[k++] = '\f'; break;
		case 'n': o[k++] = '\n'; break;
		case 'r': o[k++] = '\r'; break;
		case 't': o[k++] = '\t'; break;
		case 'u': {
			uint32_t cp = 0;
			for (int j = 0; j < 4; j++) {
				int h = i + 1 + (size_t)j < n ? hexval(s[i + 1 + j]) : -1;
				if (h < 0)
					return -1;
				cp = cp * 16 + (uint32_t)h;
			}
			i += 4;
			if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < n && s[i + 1] == '\\' && s[i + 2] == 'u') {
				uint32_t lo = 0;
				for (int j = 0; j < 4; j++) {
					int h = hexval(s[i + 3 + j]);
					if (h < 0)
						return -1;
					lo = lo * 16 + (uint32_t)h;
				}
				if (lo >= 0xDC00 && lo <= 0xDFFF) {
					cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					i += 6;
				}
			}
			k += ms_utf8_encode(cp, o + k);
			break;
		}
		default: return -1;
		}
	}
	return (long)k;
}

static void print_json_string(const char *s, size_t n)
{
	putchar('"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else if (c == 0xC0 && i + 1 < n && (unsigned char)s[i + 1] == 0x80)
			printf("\\u0000"), i++; /* a carried NUL (ms-utf8.h) */
		else
			putchar(c);
	}
	printf("\"\n");
}

static void print_ids(const int32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%s%d", i ? " " : "", ids[i]);
	printf("\n");
}

/* Parse whitespace/comma separated ids; returns count or -1. */
static long parse_id_list(const char *s, int32_t *out, size_t cap)
{
	size_t n = 0;
	while (*s) {
		while (*s == ' ' || *s == ',' || *s == '\n' || *s == '\r' || *s == '\t')
			s++;
		if (!*s)
			break;
		char *end;
		long v = strtol(s, &end, 10);
		if (end == s || v < 0 || v > INT32_MAX || n == cap)
			return -1;
		out[n++] = (int32_t)v;
		s = end;
	}
	return (long)n;
}

/* --bench FILE: encode it again and again for a second. */
static int tokenize_bench(const struct ms_tokenizer *t, const char *path)
{
	struct ms_err err = {0};
	size_t n;
	FILE *f = fopen(path, "rb");
	char *in = f ? ms_cli_read_all(f, &n) : NULL;
	if (f)
		fclose(f);
	if (!in) {
		fprintf(stderr, "moeserve: error: cannot read %s\n", path);
		return EX_NOINPUT;
	}
	int ex = EX_OK;
	double t0 = ms_now_s(), el = 0;
	size_t bytes = 0, toks = 0;
	do {
		int32_t *ids;
		size_t m;
		if (ms_tokenizer_encode(t, in, n, false, &ids, &m, &err)) {
			ex = ms_cli_fail(&err);
			break;
		}
		free(ids);
		bytes += n;
		toks += m;
		el = ms_now_s() - t0;
	} while (el < 1.0);
	if (ex == EX_OK)
		printf("%zu bytes -> %zu tokens per pass\nencode: %.2f MB/s\n", n, toks * n / bytes,
		       (double)bytes / el / 1e6);
	free(in);
	return ex;
}

/* One input (a line with --jsonl) of ids to text; idbuf holds cap ids. */
static int decode_line(const struct ms_tokenizer *t, bool jsonl, char *line, size_t ll,
		       int32_t *idbuf, size_t cap)
{
	struct ms_err err = {0};
	char save = line[ll];
	line[ll] = '\0';
	long m = parse_id_list(line, idbuf, cap);
	line[ll] = save;
	char *text;
	size_t tl;
	if (m < 0) {
		fprintf(stderr, "moeserve: error: input is not a list of token ids\n");
		return EX_DATAERR;
	}
	if (ms_tokenizer_decode(t, idbuf, (size_t)m, false, &text, &tl, &err))
		return ms_cli_fail(&err);
	if (jsonl)
		print_json_string(text, tl);
	else
		fwrite(text, 1, ms_nul_uncarry(text, tl), stdout);
	free(text);
	return EX_OK;
}

/* One input (a JSON string line with --jsonl) of text to ids; buf: room
 * for the unquoted line. */
static int encode_line(const struct ms_tokenizer *t, const struct ms_cli_tokenize *a, const char *line,
		       size_t ll, char *buf)
{
	struct ms_err err = {0};
	long tl = a->jsonl ? json_unquote(line, ll, buf) : (long)ll;
	int32_t *ids;
	size_t m;
	if (tl < 0) {
		fprintf(stderr, "moeserve: error: line is not a JSON string\n");
		return EX_DATAERR;
	}
	if (ms_tokenizer_encode(t, a->jsonl ? buf : line, (size_t)tl, a->special, &ids, &m, &err))
		return ms_cli_fail(&err);
	print_ids(ids, m);
	free(ids);
	return EX_OK;
}

/* --chat: one chat body to its rendered prompt (the chat endpoint's
 * renderer and message parser, so the text is the daemon's). */
static int render_line(const char *line, size_t ll)
{
	cJSON *req;
	struct ms_req_chat c;
	struct ms_req_error e = {0};
	struct ms_err err = {0};
	char *text = NULL;
	size_t tl = 0;
	if (ms_json_parse_strict(line, ll, &req, e.msg, sizeof(e.msg))) {
		fprintf(stderr, "moeserve: error: --chat: %s\n", e.msg);
		return EX_DATAERR;
	}
	int rc = ms_req_chat_messages(req, &c, &e);
	if (rc)
		fprintf(stderr, "moeserve: error: --chat: %s (%s)\n", e.msg, e.param ? e.param : "body");
	else if ((rc = ms_harmony_render(&c.cr, &text, &tl, &err)))
		fprintf(stderr, "moeserve: error: --chat: %s\n", err.msg);
	else
		print_json_string(text, tl);
	free(text);
	ms_req_chat_free(&c);
	cJSON_Delete(req);
	return rc ? EX_DATAERR : EX_OK;
}

/* stdin, whole or line by line (--jsonl), encoded or decoded. */
static int tokenize_input(const struct ms_tokenizer *t, const struct ms_cli_tokenize *a)
{
	size_t n;
	char *in = ms_cli_read_all(stdin, &n);
	if (!in)
		return EX_OSERR;
	int ex = EX_OK;
	char *line = in, *end = in + n;
	char *buf = malloc(n + 1);
	int32_t *idbuf = malloc((n / 2 + 2) * sizeof(int32_t));
	while (buf && idbuf && ex == EX_OK && (a->jsonl ? line < end : line == in)) {
		char *nl = a->jsonl ? memchr(line, '\n', (size_t)(end - line)) : NULL;
		size_t ll = (size_t)((nl ? nl : end) - line);
		ex = a->chat ? render_line(line, ll)
		     : a->decode ? decode_line(t, a->jsonl, line, ll, idbuf, n / 2 + 2)
				 : encode_line(t, a, line, ll, buf);
		line += ll + 1;
	}
	if (!buf || !idbuf)
		ex = EX_OSERR;
	free(buf);
	free(idbuf);
	free(in);
	if (fflush(stdout) != 0)
		ex = EX_IOERR;
	return ex;
}

int ms_cmd_tokenize(int argc, char **argv)
{
	struct ms_cli_options o;
	int ex = ms_cli_parse(MS_CLI_TOKENIZE, argc, argv, &o);
	if (ex != MS_CLI_GO_ON)
		return ex;
	const struct ms_cli_tokenize *a = &o.tokenize;
	char path[4096];
	const char *file = a->tokenizer;
	if (!file) {
		snprintf(path, sizeof(path), "%s/tokenizer.json",
			 o.s.model ? o.s.model : ms_cli_default_model());
		file = path;
	}
	struct ms_err err = {0};
	struct ms_tokenizer *t;
	if (o.s.model && a->tokenizer)
		ex = ms_cli_usage("tokenize", "%s", "give --model or --tokenizer, not both");
	else if (ms_tokenizer_load(&t, file, &err))
		ex = ms_cli_fail(&err);
	else {
		ex = a->bench ? tokenize_bench(t, a->bench) : tokenize_input(t, a);
		ms_tokenizer_free(t);
	}
	ms_cli_options_free(&o);
	return ex;
}
