/*
 * options-help.c: every command's --help, generated from the option table
 * (options-table.c): the command's usage and words, then each option it
 * accepts with the environment variable it reads and its default, so that
 * the help cannot drift from what is parsed.
 */
#include <pthread.h>
#include <stdio.h>

#include "options-int.h"

/* The flag column: "  %-28s". */
#define COL 28

/* One option: the flag, its help (a '\n' continues under the same
 * column), the environment variable, the default. */
static void help_row(struct ms_strbuf *b, const struct opt_def *d, enum ms_cli_cmd cmd)
{
	char flag[64], env[64];
	bool serve = cmd == MS_CLI_SERVE;
	int k = d->short_name ? snprintf(flag, sizeof(flag), "-%c, ", d->short_name) : 0;
	snprintf(flag + k, sizeof(flag) - (size_t)k, "--%s%s%s", d->name, d->metavar ? " " : "",
		 d->metavar ? d->metavar : "");
	ms_strbuf_printf(b, "  %-*s", COL, flag);
	for (const char *p = d->help; *p; p++) {
		ms_strbuf_add(b, p, 1);
		if (*p == '\n')
			ms_strbuf_printf(b, "  %-*s", COL, "");
	}
	ms_strbuf_str(b, "\n");
	if (ms_opt_env_in(d, cmd)) {
		ms_opt_env_name(d, env, sizeof(env));
		ms_strbuf_printf(b, "  %-*senv: %s\n", COL, "", env);
	}
	/* serve names every default; the others where there is one to name */
	const char *def = !serve && d->tool.shown ? d->tool.shown : d->shown ? d->shown : d->def;
	if (def || serve)
		ms_strbuf_printf(b, "  %-*sdefault: %s\n", COL, "", def ? def : "none");
}

/* The lines after the options: the names an option's value is one of. */
static void help_epilogue(struct ms_strbuf *b, enum ms_cli_cmd cmd, const char *builtin_model)
{
	bool kernels = false, backend = false, model = false;
	for (int i = 0; i < ms_opt_n_rows; i++) {
		const struct opt_def *d = &ms_opt_rows[i];
		if (!ms_opt_in(d, cmd))
			continue;
		kernels |= d->off == offsetof(struct ms_cli_options, s.kernels);
		backend |= d->off == offsetof(struct ms_cli_options, s.backend);
		model |= d->off == offsetof(struct ms_cli_options, s.model);
	}
	if (kernels)
		ms_strbuf_printf(b, "Kernel sets: %s.\n", ms_cpu_kernel_sets);
	if (cmd == MS_CLI_SERVE)
		return;  /* serve's words say the rest */
	if (backend)
		ms_strbuf_printf(b, "Backends: %s.\n", ms_backend_names());
	if (model && builtin_model)
		ms_strbuf_printf(b, "The built-in model: %s.\n", builtin_model);
}

void ms_cli_options_help(struct ms_strbuf *b, enum ms_cli_cmd cmd, const char *builtin_model)
{
	const struct cmd_text *t = &ms_opt_cmds[cmd];
	ms_strbuf_printf(b, "Usage: %s\n\n%s\n", t->usage, t->about);
	if (cmd == MS_CLI_SERVE)  /* not a row: it says where the rows' values come from */
		ms_strbuf_printf(b, "  %-*s%s\n  %-*senv: MOESERVE_CONFIG\n  %-*sdefault: none\n", COL,
				 "--config FILE", "JSON config file", COL, "", COL, "");
	for (int i = 0; i < ms_opt_n_rows; i++)
		if (ms_opt_in(&ms_opt_rows[i], cmd))
			help_row(b, &ms_opt_rows[i], cmd);
	ms_strbuf_printf(b, "  %-*s%s\n\n", COL, "-h, --help", "this help");
	help_epilogue(b, cmd, builtin_model);
}

/* serve's, built once and kept for the process (the pointer is the same
 * every call). */
static struct ms_strbuf serve_help;
static pthread_once_t serve_help_once = PTHREAD_ONCE_INIT;

static void serve_help_build(void)
{
	ms_cli_options_help(&serve_help, MS_CLI_SERVE, NULL);
}

const char *ms_serve_options_help(void)
{
	pthread_once(&serve_help_once, serve_help_build);
	const char *h = ms_strbuf_cstr(&serve_help);
	return h ? h : "moeserve serve: out of memory for the --help text\n";
}
