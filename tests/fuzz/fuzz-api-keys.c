/* api-keys: --api-key-file's text (server/http/auth.c) and the Bearer tokens
 * matched against it. Input: the file; optionally FUZZ_SEP and a token.
 * Every key line of a file that loads must match itself, and a token
 * that matches must be one of the key lines. */
#include "auth.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	(void)fuzz_dir();
	return 0;
}

/* Does a key line equal tok? With tok NULL: each key line must match in
 * ks (every stride-th line: each match reads 512 bytes of every key, and
 * all lines of a file of 2,000 keys would take seconds). The lines are
 * cut and trimmed by the file format as the README states it (one key a
 * line, blanks around it and lines starting with # ignored), written here
 * apart from auth.c's reader so that the two check each other. */
static bool lines_hold(const struct ms_keyset *ks, const uint8_t *text, size_t len,
		       const uint8_t *tok, size_t tok_len)
{
	int stride = ms_keyset_count(ks) / 64 + 1, line = 0;
	for (size_t pos = 0; pos < len;) {
		const uint8_t *p = text + pos, *nl = memchr(p, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - p) : len - pos;
		pos += n + 1;
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r'))
			n--;
		while (n && (*p == ' ' || *p == '\t')) {
			p++;
			n--;
		}
		if (!n || *p == '#')
			continue;
		if (tok && n == tok_len && !memcmp(p, tok, n))
			return true;
		if (!tok && line++ % stride == 0) {
			char *k = fuzz_dup(p, n, false);
			bool ok = ms_keyset_match(ks, k, n);
			free(k);
			FUZZ_CHECK(ok, "a key line of %zu bytes does not match", n);
		}
	}
	return !tok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *file, *tok = NULL;
	size_t n = size, file_len, tok_len = 0;
	fuzz_part(&p, &n, &file, &file_len);
	bool has_tok = fuzz_part(&p, &n, &tok, &tok_len);
	const char *path = fuzz_file("keys", file, file_len);
	struct ms_keyset *ks = NULL;
	struct ms_err err = {0};
	int rc = ms_keyset_load(NULL, path, &ks, &err);
	if (rc) {
		FUZZ_CHECK(!ks && err.msg[0], "refused (%d) without a message", rc);
		return 0;
	}
	FUZZ_CHECK(ms_keyset_count(ks) > 0, "a set without keys");
	lines_hold(ks, file, file_len, NULL, 0);
	if (has_tok) {
		char *t = fuzz_dup(tok, tok_len, false);
		if (ms_keyset_match(ks, t, tok_len))
			FUZZ_CHECK(lines_hold(ks, file, file_len, tok, tok_len),
				   "a token of %zu bytes matches no key line", tok_len);
		free(t);
	}
	ms_keyset_free(ks);
	return 0;
}
