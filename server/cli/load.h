/*
 * load.h: the one way the moeserve commands load a model (load.c): the
 * backend the options ask for, the model on it with the KV cache's dtype
 * checked, and, for serve, the tokenizer when the model folder has one.
 *
 * serve opens the backend before it listens (a machine without the device
 * asked for exits at once) and loads the model after (so /health can say
 * "loading"): the two steps are separate functions. The other commands
 * call ms_cli_load, both steps with their messages and exit codes.
 */
#ifndef MS_CLI_LOAD_H
#define MS_CLI_LOAD_H

#include <stdbool.h>

#include "model.h"
#include "options.h"
#include "tokenizer.h"

/* What was loaded (each part only when it loaded). */
struct ms_cli_model {
	struct ms_backend *be;
	struct ms_model m;
	bool have_m;
	struct ms_tokenizer *tok;   /* MS_CLI_LOAD_TOKENIZER, when the folder has one */
};

enum {
	/* load DIR/tokenizer.json when it exists; without one, say on stderr
	 * that serve's prompts must be token ids */
	MS_CLI_LOAD_TOKENIZER = 1,
};

/* The backend o asks for into lm->be (lm zeroed first). ms_backend_open's
 * errors: -EINVAL for a backend or kernel set that does not exist, -ENODEV
 * or -ENOTSUP for one this machine lacks. */
int ms_cli_backend_open(const struct ms_serve_options *o, struct ms_cli_model *lm,
			struct ms_err *err);

/* The model in dir on lm->be, its KV cache at o's dtype (checked against
 * the backend), then what flags ask for. On an error, what did load stays
 * in lm for ms_cli_model_free. */
int ms_cli_model_load(const struct ms_serve_options *o, const char *dir, unsigned flags,
		      struct ms_cli_model *lm, struct ms_err *err);

/* Release what lm holds; lm is zeroed. */
void ms_cli_model_free(struct ms_cli_model *lm);

/* The other commands: o's deferred values checked, the backend, the model
 * in dir. Prints what went wrong; returns 0 or an exit status (lm then
 * holds nothing). */
int ms_cli_load(struct ms_cli_options *o, const char *dir, struct ms_cli_model *lm);

#endif
