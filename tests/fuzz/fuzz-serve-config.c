/* serve-config: the daemon's options (server/cli/options.c): the JSON config
 * file given by --config, with flags after it and MOESERVE_* variables.
 * Input: the config file; optionally FUZZ_SEP and flags, one a line;
 * optionally FUZZ_SEP and environment entries, one a line. */
#include "fuzz.h"
#include "options.h"

#define MAX_ARGS 16

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	(void)fuzz_dir();
	return 0;
}

/* Lines of p[0..n) into out (at most max, NUL-terminated copies in buf). */
static int lines(const uint8_t *p, size_t n, char *buf, char **out, int max)
{
	int k = 0;
	if (!p)
		return 0;
	memcpy(buf, p, n);
	buf[n] = '\0';
	for (char *s = buf; k < max;) {
		out[k++] = s;
		char *nl = memchr(s, '\n', (size_t)(buf + n - s));
		if (!nl)
			break;
		*nl = '\0';
		s = nl + 1;
	}
	return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *file, *flags = NULL, *env = NULL;
	size_t n = size, file_len, flags_len = 0, env_len = 0;
	fuzz_part(&p, &n, &file, &file_len);
	fuzz_part(&p, &n, &flags, &flags_len);
	fuzz_part(&p, &n, &env, &env_len);
	const char *path = fuzz_file("config.json", file, file_len);
	char *argv[MAX_ARGS + 4] = {"serve", "--config", (char *)path};
	char *envp[MAX_ARGS + 1] = {0};
	char *fbuf = fuzz_dup(flags, flags_len, true), *ebuf = fuzz_dup(env, env_len, true);
	int argc = 3 + lines(flags, flags_len, fbuf, argv + 3, MAX_ARGS);
	lines(env, env_len, ebuf, envp, MAX_ARGS);
	struct ms_serve_options o;
	struct ms_err err = {0};
	int rc = ms_serve_options_parse(&o, argc, argv, envp, &err);
	if (rc < 0)
		FUZZ_CHECK(err.msg[0], "refused (%d) without a message", rc);
	ms_serve_options_free(&o); /* harmless after a refusal, says options.h */
	free(fbuf);
	free(ebuf);
	return 0;
}
