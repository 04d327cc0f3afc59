/*
 * options-int.h: the option table's rows and what its readers share
 * (options.c: values and serve's layers; options-tools.c: the other
 * commands' getopt reading; options-help.c: --help; options-table.c: the
 * rows). Not for the commands: they see options.h.
 */
#ifndef MS_OPTIONS_INT_H
#define MS_OPTIONS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "options.h"

enum opt_type {
	T_STR,    /* char *, owned; serve: non-empty */
	T_INT,    /* int in [lo, hi] */
	T_I64,    /* int64_t in [lo, hi] */
	T_SIZE,   /* uint64_t bytes in [lo, hi]; text may carry K/M/G/T */
	T_BOOL,   /* bool */
	T_ENUM,   /* an enum stored as int: the index of the value in choices */
	T_COUNTS, /* struct ms_cli_counts: up to 4 integers in [lo, hi], "N,N" */
};

#define CMD(c) (1u << MS_CLI_##c)
/* the commands that load a model, serve aside */
#define TOOLS_LOADING (CMD(GENERATE) | CMD(INSPECT) | CMD(DEQUANT) | CMD(BENCH))

/* How the commands other than serve take a row, where they differ from
 * serve: they were written apart, and keep their words and ranges. */
struct tool_rule {
	int64_t lo, hi;       /* numbers: their range (when hi > 0), else [lo, hi] of the row */
	const char *bad;      /* a bad value's message: "--name: \"v\" <bad>" (a usage error) or,
	                         deferred, "--name \"v\" <bad>" when the model loads */
	/* deferred (checked when the model loads): the value into the field,
	 * false when it is not one */
	bool (*defer)(const char *v, void *field);
	const char *alias;    /* T_BOOL: the flag is --<alias> <alias_value> */
	const char *alias_value;
	const char *shown;    /* the default their --help shows, when not the row's */
};

struct opt_def {
	const char *name;       /* flag --name; env MOESERVE_NAME; JSON "name" (dashes as _) */
	char short_name;        /* -x, or 0 */
	enum opt_type type;
	size_t off;             /* of the field in struct ms_cli_options */
	int64_t lo, hi;         /* T_INT, T_I64, T_SIZE, T_COUNTS */
	const char *const *choices;  /* T_ENUM: NULL-terminated, in the enum's order */
	const char *def;        /* default, parsed like a flag's value; NULL: unset */
	const char *shown;      /* default as --help shows it, when not def */
	const char *metavar;    /* --help: --name METAVAR (none for T_BOOL) */
	const char *help;       /* --help: what it does; '\n' continues the line */
	unsigned cmds;          /* CMD() bits: the commands that accept the flag */
	unsigned tool_env;      /* CMD() bits: the commands other than serve that read
	                           MOESERVE_NAME (serve reads it for every row of its) */
	struct tool_rule tool;
};

extern const struct opt_def ms_opt_rows[];
extern const int ms_opt_n_rows;

/* A command's --help around its options. */
struct cmd_text {
	const char *name;
	const char *usage;      /* the line(s) after "Usage: " */
	const char *about;      /* paragraphs before the options */
};
extern const struct cmd_text ms_opt_cmds[MS_CLI_N_CMDS];

static inline bool ms_opt_in(const struct opt_def *d, enum ms_cli_cmd cmd)
{
	return (d->cmds >> cmd) & 1u;
}

/* Does cmd read this row's environment variable? */
static inline bool ms_opt_env_in(const struct opt_def *d, enum ms_cli_cmd cmd)
{
	return cmd == MS_CLI_SERVE ? ms_opt_in(d, cmd) : (d->tool_env >> cmd) & 1u;
}

/* ---- shared by the readers (options.c) ---- */

/* "max-body-bytes" -> "MOESERVE_MAX_BODY_BYTES". */
void ms_opt_env_name(const struct opt_def *d, char *o, size_t n);
/* The value of name in envp; an empty one is unset unless empty_is_value. */
const char *ms_opt_env_get(char *const *envp, const char *name, bool empty_is_value);
/* A whole-string integer; lax: leading blanks allowed (strtoll's way). */
bool ms_opt_parse_i64(const char *s, bool lax, int64_t *out);
/* "a, b or c" */
void ms_opt_list_choices(const char *const *ch, char *o, size_t n);
/* Store v (a flag's, the environment's or the default's text) as serve
 * does; lab names the option and its source in messages. */
int ms_opt_set_text(void *o, const struct opt_def *d, const char *v, const char *lab,
		    struct ms_err *err);
/* "N[,N...]": up to 4 counts in [lo, hi]. */
bool ms_opt_parse_counts(const char *s, int64_t lo, int64_t hi, struct ms_cli_counts *out);
/* Free the T_STR fields in [from, to) of o. */
void ms_opt_free_strings(void *o, size_t from, size_t to);

#endif
