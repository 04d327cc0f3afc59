/*
 * cli.c: exit codes, error messages and option reading shared by the
 * moeserve commands (cli.h).
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#ifndef MS_DEFAULT_MODEL
#define MS_DEFAULT_MODEL "models/default"
#endif

extern char **environ;

int ms_cli_exit_code(int rc)
{
	switch (rc) {
	case 0: return EX_OK;
	case -ENOENT: return EX_NOINPUT;
	case -EINVAL:
	case -EBADMSG: return EX_DATAERR;
	case -ENOTSUP:
	case -ENODEV: return EX_UNAVAILABLE;
	case -ENOMEM: return EX_OSERR;
	case -EIO: return EX_IOERR;
	default: return rc < 0 ? EX_SOFTWARE : EX_OK;
	}
}

int ms_cli_fail(const struct ms_err *err)
{
	fprintf(stderr, "moeserve: error: %s\n", err->msg);
	return ms_cli_exit_code(err->code);
}

int ms_cli_usage(const char *cmd, const char *fmt, const char *arg)
{
	fprintf(stderr, "moeserve%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'moeserve %s%s--help'.\n", cmd ? cmd : "", cmd ? " " : "");
	return EX_USAGE;
}

const char *ms_cli_default_model(void)
{
	const char *e = getenv("MOESERVE_MODEL");
	return e && *e ? e : MS_DEFAULT_MODEL;
}

char *ms_cli_read_all(FILE *f, size_t *n)
{
	size_t cap = 1 << 16, len = 0;
	char *b = malloc(cap);
	while (b) {
		len += fread(b + len, 1, cap - len - 1, f);
		if (feof(f) || ferror(f))
			break;
		char *nb = realloc(b, cap *= 2);
		if (!nb) {
			free(b);
			return NULL;
		}
		b = nb;
	}
	if (b)
		b[len] = '\0';
	*n = len;
	return b;
}

char *ms_cli_read_path(const char *path, size_t *n)
{
	bool in = !strcmp(path, "-");
	FILE *f = in ? stdin : fopen(path, "rb");
	char *b = f ? ms_cli_read_all(f, n) : NULL;
	if (f && !in)
		fclose(f);
	return b;
}
/* cmd's --help, from the table, on stdout. */
static int print_help(enum ms_cli_cmd cmd)
{
	struct ms_strbuf b = {0};
	ms_cli_options_help(&b, cmd, MS_DEFAULT_MODEL);
	const char *h = ms_strbuf_cstr(&b);
	if (h)
		fputs(h, stdout);
	ms_strbuf_free(&b);
	return h ? EX_OK : EX_OSERR;
}

int ms_cli_parse(enum ms_cli_cmd cmd, int argc, char **argv, struct ms_cli_options *o)
{
	struct ms_err err = {0};
	int rc = ms_cli_options_parse(o, cmd, argc, argv, environ, &err);
	if (rc == 1)
		return print_help(cmd);
	if (rc == -ENOMEM)
		return ms_cli_fail(&err);
	if (rc)
		return ms_cli_usage(ms_cli_cmd_name(cmd), "%s", err.msg);
	return MS_CLI_GO_ON;
}
