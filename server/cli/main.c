/*
 * main.c: the moeserve command line, `moeserve <command> [options]`: the
 * dispatcher. Each command is a file of its own (generate.c, inspect.c,
 * dequant.c, tokenize.c, bench-cmd.c, serve.c); their options are one
 * table (options-table.c) and they load a model one way (load.c). Exit
 * codes are in cli.h.
 */
#include <stdio.h>
#include <string.h>
#include <sysexits.h>

#include "cli.h"
#include "serve.h"

#ifndef MS_VERSION
#define MS_VERSION "0.0.0"
#endif

static void main_help(void)
{
	printf("moeserve %s: serves GPT-OSS-style mixture-of-experts models.\n\n"
	       "Usage: moeserve <command> [options]\n\n"
	       "Commands:\n"
	       "  serve      the OpenAI-compatible HTTP daemon (see 'moeserve serve --help')\n"
	       "  generate   greedy decoding from token ids (see 'moeserve generate --help')\n"
	       "  inspect    describe a checkpoint: sizes, schemes, kernels, bytes\n"
	       "  dequant    write one loaded weight matrix as float32 (tests, audits)\n"
	       "  tokenize   text to token ids and back with a tokenizer.json\n"
	       "  bench      prefill/decode speed, batching, roofline share (JSON line last)\n"
	       "  help       this help\n\n"
	       "Exit codes: 0 ok, 64 usage, 65 bad model data or input, 66 missing model,\n"
	       "file or tensor, 69 unsupported here, 70 internal, 71 system error,\n"
	       "74 I/O error.\n",
	       MS_VERSION);
}

static int serve(int argc, char **argv)
{
	return ms_cmd_serve(argc, argv, ms_cli_default_model());
}

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} commands[] = {
	{"generate", ms_cmd_generate}, {"inspect", ms_cmd_inspect},
	{"dequant", ms_cmd_dequant},   {"tokenize", ms_cmd_tokenize},
	{"bench", ms_cmd_bench_main},  {"serve", serve},
};

int main(int argc, char **argv)
{
	if (argc < 2) {
		main_help();
		return EX_USAGE;
	}
	const char *cmd = argv[1];
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(cmd, commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		main_help();
		return EX_OK;
	}
	if (!strcmp(cmd, "--version")) {
		printf("moeserve %s\n", MS_VERSION);
		return EX_OK;
	}
	return ms_cli_usage(NULL, "unknown command \"%s\"", cmd);
}
