/*
 * cli.h: what the commands of the moeserve command line share: exit codes
 * and the way errors are printed (cli.c), reading a command's options, the
 * default model, and each command's entry point.
 *
 * The commands are the only code that prints errors and picks exit codes;
 * library code returns an error code and a message (config/ms-error.h).
 * Exit codes follow sysexits.h so scripts can tell failures apart:
 *   0 success, 64 usage error, 65 bad model data (config, checkpoint,
 *   quantization) or input (token ids), 66 model folder, file or tensor
 *   missing, 69 unsupported here (e.g. a kernel set this CPU lacks),
 *   70 internal error, 71 out of memory or another system error, 74 I/O
 *   error writing output.
 */
#ifndef MS_CLI_H
#define MS_CLI_H

#include <stdio.h>

#include "ms-error.h"
#include "options.h"

/* What ms_cli_parse returns to go on (otherwise: an exit status). */
#define MS_CLI_GO_ON (-1)

/* The exit status for a negative errno. */
int ms_cli_exit_code(int rc);
/* "moeserve: error: MSG" on stderr; the exit status for err->code. */
int ms_cli_fail(const struct ms_err *err);
/* "moeserve CMD: MSG" and "Try 'moeserve CMD --help'." on stderr (cmd
 * NULL: the top level); EX_USAGE. fmt takes one string, arg. */
int ms_cli_usage(const char *cmd, const char *fmt, const char *arg);

/* --model's default: $MOESERVE_MODEL when set and not empty, else the
 * built-in model. */
const char *ms_cli_default_model(void);

/* A stream, or the file at path ("-": stdin), whole into a malloc'd,
 * NUL-terminated buffer (*n bytes, NULs kept); NULL when it cannot be read. */
char *ms_cli_read_all(FILE *f, size_t *n);
char *ms_cli_read_path(const char *path, size_t *n);

/* Read cmd's options into o (any command but serve). Prints --help (exit
 * 0) or a usage error (64) itself and returns that status, o then holding
 * nothing; MS_CLI_GO_ON with o filled (free it with ms_cli_options_free). */
int ms_cli_parse(enum ms_cli_cmd cmd, int argc, char **argv, struct ms_cli_options *o);

/* The subcommands; argv[0] is the command's name. An exit status. */
int ms_cmd_generate(int argc, char **argv);
int ms_cmd_inspect(int argc, char **argv);
int ms_cmd_dequant(int argc, char **argv);
int ms_cmd_tokenize(int argc, char **argv);
int ms_cmd_bench_main(int argc, char **argv);  /* ms_cmd_bench: bench.h's engine */

#endif
