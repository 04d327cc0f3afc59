/*
 * dequant.c: `moeserve dequant`, one loaded weight matrix decoded to
 * float32 as the kernels see it (for tests and audits): written to --out,
 * its shape the last line of stdout.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "cli.h"
#include "load.h"
#include "quant.h"

/* The matrix, row by row, to path; an exit status. */
static int write_matrix(const struct ms_qlinear *l, const char *path)
{
	FILE *f = fopen(path, "wb");
	float *row = malloc((size_t)l->lin.w.cols * sizeof(float) + 1);
	bool ok = f && row;
	for (int64_t r = 0; ok && r < l->lin.w.rows; r++) {
		ms_wmat_row_f32(&l->lin.w, r, row);
		size_t cols = (size_t)l->lin.w.cols;
		ok = fwrite(row, sizeof(float), cols, f) == cols;
	}
	if (f && fclose(f) != 0)
		ok = false;
	free(row);
	if (!ok) {
		fprintf(stderr, "moeserve: error: cannot write %s: %s\n", path, strerror(errno));
		return EX_IOERR;
	}
	return EX_OK;
}

/* --module in the loaded model, written, described; an exit status. */
static int dequant(const struct ms_model *m, const char *dir, const struct ms_cli_dequant *a)
{
	int ex = EX_OK;
	const struct ms_qlinear *l = ms_model_find_linear(m, a->module);
	if (!l) {
		fprintf(stderr, "moeserve: error: no module \"%s\" in %s\n", a->module, dir);
		return EX_USAGE;
	}
	if (a->out)
		ex = write_matrix(l, a->out);
	if (ex == EX_OK) {
		fprintf(stderr, "moeserve: %s: scheme %s, format %s, activations %s, kernel %s\n",
			a->module, l->scheme, ms_wfmt_name(l->lin.w.fmt), ms_actq_name(l->lin.act.kind),
			l->lin.kernel_name ? l->lin.kernel_name : "none");
		printf("%lld %lld\n", (long long)l->lin.w.rows, (long long)l->lin.w.cols);
	}
	return ex;
}

int ms_cmd_dequant(int argc, char **argv)
{
	struct ms_cli_options o;
	int ex = ms_cli_parse(MS_CLI_DEQUANT, argc, argv, &o);
	if (ex != MS_CLI_GO_ON)
		return ex;
	const char *dir = o.s.model ? o.s.model : ms_cli_default_model();
	struct ms_cli_model lm;
	if (!o.dequant.module) {
		ex = ms_cli_usage("dequant", "%s", "--module is required");
	} else {
		/* one thread: a matrix is decoded once, the threads would only
		 * cost their start */
		o.s.threads = 1;
		ex = ms_cli_load(&o, dir, &lm);
		if (ex == EX_OK) {
			ex = dequant(&lm.m, dir, &o.dequant);
			ms_cli_model_free(&lm);
		}
	}
	ms_cli_options_free(&o);
	return ex;
}
