/*
 * load.c: the one model-loading path of every moeserve command (load.h):
 * the options into the backend's, the model, its KV cache's dtype, the
 * tokenizer.
 */
#include "load.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "cli.h"
#include "kv-cache.h"
#include "ms-malloc.h"

int ms_cli_backend_open(const struct ms_serve_options *o, struct ms_cli_model *lm,
			struct ms_err *err)
{
	*lm = (struct ms_cli_model){0};
	struct ms_backend_opts bo = {
		.backend = o->backend, .kernels = o->kernels, .threads = o->threads,
		.exact = o->exact, .dense = o->dense_int8 ? MS_DENSE_INT8 : o->dense,
		.numa = o->numa, .attn_products = o->attn_products, .device = o->device,
	};
	return ms_backend_open(&bo, &lm->be, err);
}

/* DIR/tokenizer.json, when there is one. */
static int load_tokenizer(const char *dir, struct ms_cli_model *lm, struct ms_err *err)
{
	char tp[4096];
	snprintf(tp, sizeof(tp), "%s/tokenizer.json", dir);
	if (access(tp, F_OK) == 0)
		return ms_tokenizer_load(&lm->tok, tp, err);
	fprintf(stderr, "moeserve: note: %s has no tokenizer.json: prompts must be token ids, "
		"and /v1/chat/completions is off\n", dir);
	return 0;
}

int ms_cli_model_load(const struct ms_serve_options *o, const char *dir, unsigned flags,
		      struct ms_cli_model *lm, struct ms_err *err)
{
	int rc = ms_model_load(&lm->m, dir, lm->be, err);
	if (rc)
		return rc;
	lm->have_m = true;
	/* the dtype is the model's to carry; the backend must read it */
	lm->m.lm.kv.dtype = ms_serve_kv_dtype(o);
	if ((rc = ms_kv_dtype_check(lm->be, lm->m.lm.kv.dtype, err)))
		return rc;
	ms_keep_freed_memory();
	if (flags & MS_CLI_LOAD_TOKENIZER)
		rc = load_tokenizer(dir, lm, err);
	return rc;
}

void ms_cli_model_free(struct ms_cli_model *lm)
{
	ms_tokenizer_free(lm->tok);
	if (lm->have_m)
		ms_model_free(&lm->m);
	ms_backend_close(lm->be);
	*lm = (struct ms_cli_model){0};
}

int ms_cli_load(struct ms_cli_options *o, const char *dir, struct ms_cli_model *lm)
{
	struct ms_err err = {0};
	*lm = (struct ms_cli_model){0};
	/* a bad --numa and the like: the caller's mistake */
	if (ms_cli_options_resolve(o, &err)) {
		fprintf(stderr, "moeserve: error: %s\n", err.msg);
		return EX_USAGE;
	}
	int rc = ms_cli_backend_open(&o->s, lm, &err);
	if (rc) {
		/* An unknown kernel set is the caller's mistake, not the model's. */
		fprintf(stderr, "moeserve: error: %s\n", err.msg);
		return rc == -EINVAL ? EX_USAGE : ms_cli_exit_code(rc);
	}
	if (ms_cli_model_load(&o->s, dir, 0, lm, &err)) {
		ms_cli_model_free(lm);
		return ms_cli_fail(&err);
	}
	return 0;
}
