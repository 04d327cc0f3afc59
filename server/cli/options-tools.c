/*
 * options-tools.c: the options of generate, inspect, dequant, tokenize and
 * bench, read from the same table as serve's (options-table.c).
 *
 * These commands always read their flags with getopt_long, and their users
 * rely on what it does: a long option may be abbreviated, options and
 * arguments mix, getopt names an unknown option itself. So the flags the
 * table gives a command are handed to getopt_long, and each value is
 * stored through its row. Their environment variables are the ones their
 * rows name (tool_env), read below the flags as they always were: one only
 * counts for an option no flag set, an empty one is a value (except for a
 * switch, where only a value other than "", "0" and "false" turns it on).
 * The values of --device, --dense, --numa, --kv-dtype and --attn-products
 * are checked when the model loads (ms_cli_options_resolve), where these
 * commands always reported them.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options-int.h"

/* Per-parse state. */
struct tctx {
	struct ms_cli_options *o;
	enum ms_cli_cmd cmd;
	bool flagged[MS_CLI_MAX_ROWS];  /* a flag (or a flag that is its alias) set it */
};

static bool row_for(const struct opt_def *d, enum ms_cli_cmd cmd)
{
	return ms_opt_in(d, cmd) || ((d->tool_env >> cmd) & 1u);
}

/* The row an alias names, for this command. */
static const struct opt_def *alias_row(const struct opt_def *d, enum ms_cli_cmd cmd)
{
	for (int i = 0; i < ms_opt_n_rows; i++)
		if (row_for(&ms_opt_rows[i], cmd) && !strcmp(ms_opt_rows[i].name, d->tool.alias))
			return &ms_opt_rows[i];
	return d;  /* not reached: an alias names a row of the same commands */
}

/* A number in the tools' range, or their message. */
static int tool_number(void *field, const struct opt_def *d, const char *v, struct ms_err *err)
{
	int64_t lo = d->tool.hi ? d->tool.lo : d->lo, hi = d->tool.hi ? d->tool.hi : d->hi, x;
	if (!ms_opt_parse_i64(v, true, &x) || x < lo || x > hi)
		return ms_err_set(err, -EINVAL, "--%s: \"%s\" %s", d->name, v,
				  d->tool.bad ? d->tool.bad : "is out of range");
	if (d->type == T_INT)
		*(int *)field = (int)x;
	else
		*(int64_t *)field = x;
	return 0;
}

/* A value (a flag's, or an environment variable's) into o, the tools'
 * way; v is NULL for a switch. */
static int tool_value(struct tctx *c, const struct opt_def *d, const char *v, struct ms_err *err)
{
	int i = (int)(d - ms_opt_rows);
	void *field = (char *)c->o + d->off;
	if (d->tool.defer) {
		c->o->deferred[i] = v;
		return 0;
	}
	switch (d->type) {
	case T_STR: {
		/* as given, even empty: the command or the backend says what is wrong */
		char *s = strdup(v);
		if (!s)
			return ms_err_set(err, -ENOMEM, "--%s: out of memory", d->name);
		free(*(char **)field);
		*(char **)field = s;
		return 0;
	}
	case T_BOOL:
		*(bool *)field = true;
		return 0;
	case T_INT:
	case T_I64:
		return tool_number(field, d, v, err);
	case T_COUNTS:
		if (!ms_opt_parse_counts(v, d->lo, d->hi, field))
			return ms_err_set(err, -EINVAL, "--%s: \"%s\" %s", d->name, v, d->tool.bad);
		return 0;
	default: {
		char lab[80];
		snprintf(lab, sizeof(lab), "--%s", d->name);
		return ms_opt_set_text(c->o, d, v, lab, err);
	}
	}
}

/* A flag: its row, or the row its alias names. */
static int tool_flag(struct tctx *c, const struct opt_def *d, const char *v, struct ms_err *err)
{
	if (d->tool.alias) {
		v = d->tool.alias_value;
		d = alias_row(d, c->cmd);
	}
	c->flagged[d - ms_opt_rows] = true;
	return tool_value(c, d, v, err);
}

/* The getopt tables of cmd: long options (val: 256 + row), and the short
 * ones ("m:t:h"). */
static void getopt_tables(enum ms_cli_cmd cmd, struct option *lo, char *shorts)
{
	int n = 0, k = 0;
	for (int i = 0; i < ms_opt_n_rows; i++) {
		const struct opt_def *d = &ms_opt_rows[i];
		if (!ms_opt_in(d, cmd))
			continue;
		int arg = d->type == T_BOOL ? no_argument : required_argument;
		lo[n++] = (struct option){d->name, arg, NULL, 256 + i};
		if (d->short_name) {
			shorts[k++] = d->short_name;
			if (arg == required_argument)
				shorts[k++] = ':';
		}
	}
	lo[n++] = (struct option){"help", no_argument, NULL, 'h'};
	lo[n] = (struct option){0};
	shorts[k++] = 'h';
	shorts[k] = '\0';
}

/* The row of a short option. */
static const struct opt_def *short_row(enum ms_cli_cmd cmd, int ch)
{
	for (int i = 0; i < ms_opt_n_rows; i++)
		if (ms_opt_rows[i].short_name == ch && ms_opt_in(&ms_opt_rows[i], cmd))
			return &ms_opt_rows[i];
	return NULL;
}

/* argv through getopt_long: 1 at -h, or an error at the first bad flag. */
static int walk_argv(struct tctx *c, int argc, char **argv, struct ms_err *err)
{
	struct option lo[MS_CLI_MAX_ROWS + 2];
	char shorts[2 * MS_CLI_MAX_ROWS + 2];
	getopt_tables(c->cmd, lo, shorts);
	int ch;
	optind = 1;
	while ((ch = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
		if (ch == 'h')
			return 1;
		const struct opt_def *d = ch >= 256 ? &ms_opt_rows[ch - 256] : short_row(c->cmd, ch);
		if (!d)  /* getopt said why */
			return ms_err_set(err, -EINVAL, "invalid option");
		int rc = tool_flag(c, d, optarg, err);
		if (rc)
			return rc;
	}
	if (optind < argc)
		return ms_err_set(err, -EINVAL, "unexpected argument \"%s\"", argv[optind]);
	return 0;
}

/* A switch's variable is on unless unset, empty, "0" or "false". */
static bool env_on(const char *v)
{
	return v && *v && strcmp(v, "0") && strcmp(v, "false");
}

/* The environment, below the flags. */
static int read_env(struct tctx *c, char *const *envp, struct ms_err *err)
{
	for (int i = 0; i < ms_opt_n_rows; i++) {
		const struct opt_def *d = &ms_opt_rows[i], *t = d->tool.alias ? alias_row(d, c->cmd) : d;
		char name[64];
		if (!ms_opt_env_in(d, c->cmd) || c->flagged[t - ms_opt_rows])
			continue;
		ms_opt_env_name(d, name, sizeof(name));
		const char *v = ms_opt_env_get(envp, name, d->type != T_BOOL);
		if (d->type == T_BOOL && !env_on(v))
			continue;
		if (d->tool.alias) {
			/* below the target's own variable too */
			if (!c->o->deferred[t - ms_opt_rows])
				c->o->deferred[t - ms_opt_rows] = d->tool.alias_value;
			continue;
		}
		int rc = v ? tool_value(c, d, v, err) : 0;
		if (rc)
			return rc;
	}
	return 0;
}

int ms_cli_options_parse(struct ms_cli_options *o, enum ms_cli_cmd cmd, int argc, char **argv,
			 char *const *envp, struct ms_err *err)
{
	memset(o, 0, sizeof(*o));
	struct tctx *c = calloc(1, sizeof(*c));
	if (!c)
		return ms_err_set(err, -ENOMEM, "options: out of memory");
	c->o = o;
	c->cmd = cmd;
	int rc = 0;
	/* defaults; strings stay NULL (the backend's own default, as always) */
	for (int i = 0; i < ms_opt_n_rows && !rc; i++) {
		const struct opt_def *d = &ms_opt_rows[i];
		char lab[80];
		snprintf(lab, sizeof(lab), "default of --%s", d->name);
		if (row_for(d, cmd) && d->def && d->type != T_STR)
			rc = ms_opt_set_text(o, d, d->def, lab, err);
	}
	if (!rc)
		rc = walk_argv(c, argc, argv, err);
	if (!rc)
		rc = read_env(c, envp, err);
	free(c);
	if (rc)
		ms_cli_options_free(o);
	return rc;
}

int ms_cli_options_resolve(struct ms_cli_options *o, struct ms_err *err)
{
	for (int i = 0; i < ms_opt_n_rows; i++) {
		const struct opt_def *d = &ms_opt_rows[i];
		const char *v = o->deferred[i];
		if (!v)
			continue;
		if (!d->tool.defer(v, (char *)o + d->off))
			return ms_err_set(err, -EINVAL, "--%s \"%s\" %s", d->name, v, d->tool.bad);
		o->deferred[i] = NULL;
	}
	return 0;
}

void ms_cli_options_free(struct ms_cli_options *o)
{
	if (!o)
		return;
	ms_opt_free_strings(o, sizeof(o->s), sizeof(*o));
	ms_serve_options_free(&o->s);
	memset(o, 0, sizeof(*o));
}
