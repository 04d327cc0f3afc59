/*
 * generate.c: `moeserve generate`, greedy decoding from token ids or a
 * text prompt: the prompt's forward pass (its logits written with
 * --logits-out), then one token at a time until --max-tokens or an eos
 * id. The ids are the last line of stdout; progress goes to stderr.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "cli.h"
#include "engine.h"
#include "load.h"
#include "ms-clock.h"
#include "ms-utf8.h"

/* A run: the options, and the model folder they name. */
struct gen {
	struct ms_cli_options *o;
	const struct ms_cli_generate *g;  /* &o->generate */
	const char *model;
};

/* "1,2,3" -> ids. Whitespace around commas is allowed. */
static int parse_tokens(const char *s, int32_t **out, int64_t *n)
{
	size_t cap = 16, cnt = 0;
	int32_t *ids = malloc(cap * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	const char *p = s;
	while (*p) {
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (end == p || errno || v < 0 || v > INT32_MAX) {
			free(ids);
			return -EINVAL;
		}
		if (cnt == cap) {
			int32_t *ni = realloc(ids, (cap *= 2) * sizeof(*ids));
			if (!ni) {
				free(ids);
				return -ENOMEM;
			}
			ids = ni;
		}
		ids[cnt++] = (int32_t)v;
		p = end;
		while (*p == ' ')
			p++;
		if (*p == ',')
			p++;
		else if (*p) {
			free(ids);
			return -EINVAL;
		}
	}
	if (!cnt) {
		free(ids);
		return -EINVAL;
	}
	*out = ids;
	*n = (int64_t)cnt;
	return 0;
}


static bool is_eos(const struct ms_model_config *c, int32_t id)
{
	for (int i = 0; i < c->n_eos; i++)
		if (c->eos_ids[i] == id)
			return true;
	return false;
}

static int32_t argmax(const float *v, int64_t n)
{
	int64_t best = 0;
	for (int64_t i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return (int32_t)best;
}

/* The prompt: --tokens, or --prompt encoded with the model's tokenizer
 * (kept in *tok to print the continuation as text). An exit status. */
static int generate_prompt(const struct gen *a, struct ms_tokenizer **tok, int32_t **prompt,
			   int64_t *n_prompt)
{
	*tok = NULL;
	if (!a->g->prompt && !a->g->prompt_file) {
		if (parse_tokens(a->g->tokens, prompt, n_prompt))
			return ms_cli_usage("generate",
					    "--tokens: \"%s\" is not a comma-separated list of ids",
					    a->g->tokens);
		return EX_OK;
	}
	/* The prompt is plain text: special tokens written in it are not
	 * recognised, as for raw completion prompts in the server. */
	char path[4096];
	struct ms_err err = {0};
	size_t n;
	snprintf(path, sizeof(path), "%s/tokenizer.json", a->model);
	if (ms_tokenizer_load(tok, path, &err))
		return ms_cli_fail(&err);
	const char *text = a->g->prompt;
	size_t tl = text ? strlen(text) : 0;
	char *file = text ? NULL : ms_cli_read_path(a->g->prompt_file, &tl);
	if (!text && !file) {
		ms_tokenizer_free(*tok);
		*tok = NULL;
		fprintf(stderr, "moeserve: error: --prompt-file: cannot read \"%s\"\n",
			a->g->prompt_file);
		return EX_NOINPUT;
	}
	int rc = ms_tokenizer_encode(*tok, text ? text : file, tl, false, prompt, &n, &err);
	free(file);
	if (rc) {
		ms_tokenizer_free(*tok);
		*tok = NULL;
		return ms_cli_fail(&err);
	}
	*n_prompt = (int64_t)n;
	if (!n) {
		ms_tokenizer_free(*tok);
		*tok = NULL;
		free(*prompt);
		*prompt = NULL;
		return ms_cli_usage("generate", "%s", "--prompt: the text encodes to no tokens");
	}
	return EX_OK;
}

static int write_logits(const char *path, const float *logits, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(logits, sizeof(float), n, f) != n || fclose(f) != 0) {
		fprintf(stderr, "moeserve: error: cannot write %s: %s\n", path, strerror(errno));
		return EX_IOERR;
	}
	return EX_OK;
}

/* The speeds on stderr: the prompt's from t0 to the first token (t1),
 * the generation's from there to t2. */
static void print_speeds(int64_t n_prompt, int64_t n_out, double t0, double t1, double t2)
{
	fprintf(stderr, "moeserve: prompt %lld tokens in %.3f s (%.1f tok/s), generated %lld in %.3f s (%.1f tok/s)\n",
		(long long)n_prompt, t1 - t0, (double)n_prompt / (t1 - t0 + 1e-12), (long long)n_out,
		t2 - t1, n_out > 1 ? (double)(n_out - 1) / (t2 - t1 + 1e-12) : 0.0);
}

/* The prompt's forward pass (every position's logits written with
 * --logits-out), then greedy decoding into out; the speeds on stderr. */
static int generate_steps(struct ms_seq *seq, const struct ms_model *m, const struct gen *a,
			  const int32_t *prompt, int64_t n_prompt, float *logits, int32_t *out,
			  int64_t *n_out)
{
	struct ms_err err = {0};
	int64_t V = m->cfg.vocab;
	double t0 = ms_now_s();
	if (ms_seq_forward(seq, prompt, n_prompt, logits, a->g->logits_out != NULL, &err))
		return ms_cli_fail(&err);
	double t1 = ms_now_s();
	const float *last = a->g->logits_out ? logits + (n_prompt - 1) * V : logits;
	if (a->g->logits_out &&
	    write_logits(a->g->logits_out, logits, (size_t)(n_prompt * V)))
		return EX_IOERR;
	int32_t next = argmax(last, V);
	while (*n_out < a->g->max_tokens) {
		out[(*n_out)++] = next;
		if (!a->g->ignore_eos && is_eos(&m->cfg, next))
			break;
		if (*n_out == a->g->max_tokens || seq->n_past >= seq->capacity)
			break;
		if (ms_seq_forward(seq, &next, 1, logits, false, &err))
			return ms_cli_fail(&err);
		next = argmax(logits, V);
	}
	print_speeds(n_prompt, *n_out, t0, t1, ms_now_s());
	return EX_OK;
}

/* The one request's events, gathered for generate_engine. */
struct collect {
	int32_t *out;
	int64_t n, cap;
	double t_first;     /* when the first token came */
	bool done;
	enum ms_finish finish;
	char error[200];
};

static void on_event(void *ctx, const struct ms_event *ev)
{
	struct collect *c = ctx;
	if (ev->kind == MS_EV_TOKEN) {
		if (!c->n)
			c->t_first = ms_now_s();
		if (c->n < c->cap)
			c->out[c->n++] = ev->token;
	} else if (ev->kind == MS_EV_FINISH) {
		c->done = true;
		c->finish = ev->finish;
		snprintf(c->error, sizeof(c->error), "%s", ev->error ? ev->error : "failed");
	}
}

/* Steps until the request finishes; an exit status. */
static int engine_drain(struct ms_engine *e, const struct collect *c)
{
	struct ms_err err = {0};
	while (!c->done) {
		int64_t rc = ms_engine_step(e, &err);
		if (rc < 0)
			return ms_cli_fail(&err);
		if (!rc && !c->done) {
			ms_err_set(&err, -EFAULT, "the engine went idle before the request finished");
			return ms_cli_fail(&err);
		}
	}
	if (c->finish == MS_FINISH_ERROR || c->finish == MS_FINISH_CANCELLED) {
		ms_err_set(&err, -EFAULT, "generation %s: %s", ms_finish_name(c->finish), c->error);
		return ms_cli_fail(&err);
	}
	return EX_OK;
}

/* Greedy decoding as generate_steps does it, but through a hand-stepped
 * engine running the one request, so that it drafts from n-gram matches
 * of its own tokens and verifies the drafts in the same pass. The engine's
 * greedy draw is generate_steps' argmax (tests/engine checks that the two
 * paths agree), and a draft only keeps what that draw would have chosen,
 * so the ids are the same. */
static int generate_engine(struct ms_model *m, const struct gen *a, const int32_t *prompt,
			   int64_t n_prompt, int32_t *out, int64_t *n_out)
{
	struct ms_err err = {0};
	int64_t n = n_prompt + a->g->max_tokens;
	struct ms_engine_config ec = {
		.kv_tokens = n, .max_queue = 1, .max_running = 1, .max_context = n,
		.no_prefix_cache = true,
		.spec_cache_bytes = -1, /* the shared cache only learns from finished requests */
	};
	struct ms_request_params p = {.max_tokens = a->g->max_tokens, .prompt_logprobs = -1};
	ms_sampling_defaults(&p.sampling);
	p.sampling.temperature = 0;
	int32_t eos[8];
	for (int i = 0; i < m->cfg.n_eos && i < 8 && !a->g->ignore_eos; i++)
		eos[p.n_stop_ids++] = (int32_t)m->cfg.eos_ids[i];
	p.stop_ids = eos;
	struct collect c = {.out = out, .cap = a->g->max_tokens};
	struct ms_engine *e;
	if (ms_engine_init(&e, &m->lm, NULL, &ec, &err))
		return ms_cli_fail(&err);
	double t0 = ms_now_s();
	int ex = ms_engine_submit(e, prompt, n_prompt, &p, on_event, &c, NULL, &err)
			 ? ms_cli_fail(&err) : engine_drain(e, &c);
	double t2 = ms_now_s(), t1 = c.n ? c.t_first : t2;
	struct ms_engine_stats st;
	ms_engine_get_stats(e, &st);
	ms_engine_free(e);
	if (ex)
		return ex;
	*n_out = c.n;
	print_speeds(n_prompt, c.n, t0, t1, t2);
	fprintf(stderr, "moeserve: speculation auto: %llu drafts, %llu drafted tokens, %llu "
		"accepted\n", (unsigned long long)st.spec.drafts,
		(unsigned long long)st.spec.draft_tokens, (unsigned long long)st.spec.accepted);
	return EX_OK;
}

/* Why this run takes the single-sequence path (what stderr says), or
 * NULL for the engine's. Under auto too where the engine's path would
 * differ: it gives no one every prompt position's logits, refuses a
 * request past the context (where generate_steps emits one last token)
 * and words a bad id its own way. */
static const char *single_path(const struct ms_model *m, const struct gen *a,
			       const int32_t *prompt, int64_t n_prompt)
{
	if (a->o->s.speculative == MS_SERVE_SPEC_OFF)
		return "speculation off";
	if (a->g->logits_out)
		return "speculation auto: not used with --logits-out";
	if (n_prompt + a->g->max_tokens > m->cfg.max_pos)
		return "speculation auto: not used past the model's context";
	for (int64_t i = 0; i < n_prompt; i++)
		if (prompt[i] < 0 || prompt[i] >= m->cfg.vocab)
			return "speculation auto: not used";
	return NULL;
}

/* Generate into *out (malloc'd, *n_out ids); an exit status. */
static int generate_run(struct ms_model *m, const struct gen *a, const int32_t *prompt,
			int64_t n_prompt, int32_t **out, int64_t *n_out)
{
	int64_t V = m->cfg.vocab, cap = n_prompt + a->g->max_tokens;
	if (cap > m->cfg.max_pos)
		cap = m->cfg.max_pos;
	struct ms_err err = {0};
	*out = malloc((size_t)(a->g->max_tokens + 1) * sizeof(int32_t));
	*n_out = 0;
	const char *why = single_path(m, a, prompt, n_prompt);
	if (!why && *out)
		return generate_engine(m, a, prompt, n_prompt, *out, n_out);
	float *logits = malloc((size_t)(n_prompt * V) * sizeof(float));
	int ex;
	struct ms_seq seq;
	if (why)
		fprintf(stderr, "moeserve: %s\n", why);
	if (!logits || !*out) {
		ms_err_set(&err, -ENOMEM, "out of memory for %lld x %lld logits", (long long)n_prompt,
			   (long long)V);
		ex = ms_cli_fail(&err);
	} else if (ms_seq_init(&seq, m, cap, &err)) {
		ex = ms_cli_fail(&err);
	} else {
		ex = generate_steps(&seq, m, a, prompt, n_prompt, logits, *out, n_out);
		ms_seq_free(&seq);
	}
	free(logits);
	return ex;
}

/* The continuation as text (with a tokenizer), then the ids as the last
 * line. */
static int generate_print(const struct ms_tokenizer *tok, const int32_t *out, int64_t n_out)
{
	struct ms_err err = {0};
	char *txt;
	size_t tl;
	if (tok && ms_tokenizer_decode(tok, out, (size_t)n_out, false, &txt, &tl, &err) == 0) {
		fwrite(txt, 1, ms_nul_uncarry(txt, tl), stdout);
		printf("\n");
		free(txt);
	}
	for (int64_t i = 0; i < n_out; i++)
		printf("%s%d", i ? " " : "", out[i]);
	printf("\n");
	return fflush(stdout) != 0 ? EX_IOERR : EX_OK;
}

/* --tokens, --prompt or --prompt-file: one of them. */
static int generate_check(const struct ms_cli_options *o)
{
	if ((o->generate.tokens != NULL) + (o->generate.prompt != NULL) +
	    (o->generate.prompt_file != NULL) != 1)
		return ms_cli_usage("generate", "%s",
				    "give --tokens, --prompt or --prompt-file (one of them)");
	return EX_OK;
}

/* The prompt, the model, the run; an exit status. */
static int generate(const struct gen *a)
{
	struct ms_tokenizer *tok;
	int32_t *prompt = NULL, *out = NULL;
	int64_t n_prompt = 0, n_out = 0;
	int ex;
	if ((ex = generate_prompt(a, &tok, &prompt, &n_prompt)))
		return ex;
	struct ms_cli_model lm;
	if ((ex = ms_cli_load(a->o, a->model, &lm))) {
		free(prompt);
		ms_tokenizer_free(tok);
		return ex;
	}
	struct ms_model *m = &lm.m;
	fprintf(stderr, "moeserve: loaded %s in %.2f s (%s kernels, %d threads; repacked %lld of "
		"%lld matrices, %.1f MiB, in %.2f s)\n", a->model, m->load_seconds, lm.be->kernels,
		lm.be->threads, (long long)m->pack_stats.packed, (long long)m->pack_stats.matrices,
		(double)m->pack_stats.packed_bytes / 1048576.0, m->pack_stats.seconds);
	ex = generate_run(m, a, prompt, n_prompt, &out, &n_out);
	if (ex == EX_OK)
		ex = generate_print(tok, out, n_out);
	free(out);
	free(prompt);
	ms_tokenizer_free(tok);
	ms_cli_model_free(&lm);
	return ex;
}

int ms_cmd_generate(int argc, char **argv)
{
	struct ms_cli_options o;
	int ex = ms_cli_parse(MS_CLI_GENERATE, argc, argv, &o);
	if (ex != MS_CLI_GO_ON)
		return ex;
	struct gen a = {.o = &o, .g = &o.generate, .model = o.s.model ? o.s.model : ms_cli_default_model()};
	ex = generate_check(&o);
	if (ex == EX_OK)
		ex = generate(&a);
	ms_cli_options_free(&o);
	return ex;
}
