/*
 * fuzz.h: what the libFuzzer targets of tests/fuzz share: the default
 * model's tokenizer and the request model the server would parse for,
 * a private scratch folder for parsers that read files, splitting an input
 * into parts, and a check that fails loudly (abort: libFuzzer keeps the
 * input as a crash). Include once, in the target's one source file.
 *
 * Inputs are copied into buffers of exactly their size, never
 * NUL-terminated unless the parser's contract is a C string, so ASan sees
 * a read past the end.
 */
#ifndef MS_TEST_FUZZ_H
#define MS_TEST_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ms-error.h"
#include "tokenizer.h"

#ifndef MS_DEFAULT_MODEL
#define MS_DEFAULT_MODEL "models/default/bf16"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A property that must hold: print and abort (libFuzzer saves the input). */
#define FUZZ_CHECK(cond, ...)                                                        \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "fuzz: %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                \
			fputc('\n', stderr);                                         \
			abort();                                                     \
		}                                                                    \
	} while (0)

/* The separator of an input's parts ("a\n@@\nb"): readable in the seeds,
 * and cheap for libFuzzer to find (its memmem hook learns it). */
#define FUZZ_SEP "\n@@\n"

/* The part of [*p, *p + *n) before the first separator (all of it when
 * there is none); *p, *n advance past it. false when nothing is left. */
static inline bool fuzz_part(const uint8_t **p, size_t *n, const uint8_t **part, size_t *len)
{
	if (!*p)
		return false;
	const uint8_t *s = *n ? memmem(*p, *n, FUZZ_SEP, 4) : NULL;
	*part = *p;
	*len = s ? (size_t)(s - *p) : *n;
	if (s) {
		*n -= *len + 4;
		*p = s + 4;
	} else {
		*p = NULL;
		*n = 0;
	}
	return true;
}

/* A malloc'd copy of exactly n bytes (plus a NUL when cstr): ASan guards
 * its end. */
static inline char *fuzz_dup(const void *p, size_t n, bool cstr)
{
	char *s = malloc(n + (cstr ? 1 : 0) + (n == 0 && !cstr));
	if (!s)
		abort();
	if (n)
		memcpy(s, p, n);
	if (cstr)
		s[n] = '\0';
	return s;
}

/* ---- a private folder for the parsers that read files ---- */

static char fuzz_dir_path[256];

static void fuzz_dir_clean(void)
{
	char cmd[300];
	if (!fuzz_dir_path[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fuzz_dir_path);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir_path);
}

/* The folder, made at the first call (on tmpfs where there is one: a file
 * is written per input) and removed at exit. */
static inline const char *fuzz_dir(void)
{
	if (fuzz_dir_path[0])
		return fuzz_dir_path;
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
	snprintf(fuzz_dir_path, sizeof(fuzz_dir_path), "%s/ms-fuzz-XXXXXX", base ? base : "/tmp");
	if (!mkdtemp(fuzz_dir_path)) {
		perror("fuzz: mkdtemp");
		abort();
	}
	atexit(fuzz_dir_clean);
	return fuzz_dir_path;
}

/* name in the folder holds exactly p[0..n) (n 0 with p NULL: removed);
 * its path. */
static inline const char *fuzz_file(const char *name, const void *p, size_t n)
{
	static char path[512];
	snprintf(path, sizeof(path), "%s/%s", fuzz_dir(), name);
	if (!p) {
		unlink(path);
		return path;
	}
	FILE *f = fopen(path, "wb");
	if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) {
		perror(path);
		abort();
	}
	return path;
}

/* ---- the default model's tokenizer (models/default/bf16) ---- */

static struct ms_tokenizer *fuzz_tok;

static void fuzz_tok_free(void)
{
	ms_tokenizer_free(fuzz_tok);
	fuzz_tok = NULL;
}

static inline struct ms_tokenizer *fuzz_tokenizer(void)
{
	if (fuzz_tok)
		return fuzz_tok;
	char path[4096];
	struct ms_err err = {0};
	snprintf(path, sizeof(path), "%s/tokenizer.json", MS_DEFAULT_MODEL);
	if (ms_tokenizer_load(&fuzz_tok, path, &err)) {
		fprintf(stderr, "fuzz: the default model's tokenizer: %s\n", err.msg);
		exit(1);
	}
	atexit(fuzz_tok_free);
	return fuzz_tok;
}

#endif
