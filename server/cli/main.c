/*
 * main.c: the moeserve command line: `moeserve <command> [options]`.
 *
 * This is the only place that prints errors and picks exit codes; library
 * code returns an error code and a message (config/ms-error.h).
 * Exit codes follow sysexits.h so scripts can tell failures apart:
 *   0 success, 64 usage error, 65 bad model data (config, checkpoint,
 *   quantization) or input (token ids), 66 model folder, file or tensor
 *   missing, 69 unsupported here
 *   (e.g. a kernel set this CPU lacks), 70 internal error, 71 out of memory
 *   or another system error, 74 I/O error writing output.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include "cpu.h"
#include "model.h"
#include "quant.h"
#include "tokenizer.h"
#include "bench.h"
#include "ms-json.h"
#include "request.h"
#include "serve.h"
#include "ms-clock.h"
#include "ms-malloc.h"
#include "ms-utf8.h"

#ifndef MS_VERSION
#define MS_VERSION "0.0.0"
#endif
#ifndef MS_DEFAULT_MODEL
#define MS_DEFAULT_MODEL "models/default"
#endif

static int exit_code_for(int rc)
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

static int fail(const struct ms_err *err)
{
	fprintf(stderr, "moeserve: error: %s\n", err->msg);
	return exit_code_for(err->code);
}

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
	fprintf(stderr, "moeserve%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'moeserve %s%s--help'.\n", cmd ? cmd : "", cmd ? " " : "");
	return EX_USAGE;
}

static const char *default_model(void)
{
	const char *e = getenv("MOESERVE_MODEL");
	return e && *e ? e : MS_DEFAULT_MODEL;
}

/* Strict integer parse: the whole string, within [lo, hi]. */
static bool parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

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

/* ---- common options ---- */

struct common_opts {
	const char *model;
	const char *backend;
	const char *kernels;
	long threads;
	const char *numa;   /* auto, off, interleave */
	const char *device; /* which GPU, on a device backend (a number) */
	bool exact;         /* kernels keep fp32 activations */
	const char *dense;  /* dense weights: auto, bf16, int8 */
	const char *attn_products; /* attention's products: auto, f32, bf16 */
	const char *kv_dtype; /* the KV cache's dtype: auto, f32, bf16 */
};

enum { OPT_KERNELS = 1000, OPT_BACKEND, OPT_THREADS, OPT_LOGITS, OPT_IGNORE_EOS, OPT_PROMPT, OPT_PROMPT_FILE, OPT_NUMA, OPT_EXACT,
       OPT_DENSE_INT8, OPT_DEVICE, OPT_KV_DTYPE, OPT_DENSE, OPT_ATTN_PRODUCTS };

static int load(const struct common_opts *o, struct ms_backend **be, struct ms_model *m)
{
	struct ms_err err = {0};
	/* --exact, or MOESERVE_EXACT=1 (tests that compare logits with the
	 * float64 reference set it for every subcommand). */
	const char *ex = getenv("MOESERVE_EXACT");
	/* --dense, or MOESERVE_DENSE (MOESERVE_DENSE_INT8=1: int8) */
	const char *d8 = getenv("MOESERVE_DENSE_INT8");
	const char *dn = o->dense ? o->dense : getenv("MOESERVE_DENSE");
	if (!dn && d8 && *d8 && strcmp(d8, "0") && strcmp(d8, "false"))
		dn = "int8";
	enum ms_dense_mode dense = MS_DENSE_AUTO;
	if (dn && ms_dense_mode_parse(dn, &dense)) {
		fprintf(stderr, "moeserve: error: --dense \"%s\" (use auto, bf16 or int8)\n", dn);
		return EX_USAGE;
	}
	const char *ap = o->attn_products ? o->attn_products : getenv("MOESERVE_ATTN_PRODUCTS");
	enum ms_attn_products products = MS_ATTN_PRODUCTS_AUTO;
	if (ap && ms_attn_products_parse(ap, &products)) {
		fprintf(stderr, "moeserve: error: --attn-products \"%s\" (use auto, f32 or bf16)\n", ap);
		return EX_USAGE;
	}
	const char *numa = o->numa ? o->numa : getenv("MOESERVE_NUMA");
	if (numa && strcmp(numa, "auto") && strcmp(numa, "off") && strcmp(numa, "interleave")) {
		fprintf(stderr, "moeserve: error: --numa \"%s\" (use auto, off or interleave)\n", numa);
		return EX_USAGE;
	}
	const char *dev = o->device ? o->device : getenv("MOESERVE_DEVICE");
	long device = 0;
	if (dev && !parse_long(dev, 0, 255, &device)) {
		fprintf(stderr, "moeserve: error: --device \"%s\" (a GPU number, 0 to 255)\n", dev);
		return EX_USAGE;
	}
	struct ms_backend_opts bo = {
		.device = (int)device,
		.backend = o->backend ? o->backend : getenv("MOESERVE_BACKEND"),
		.kernels = o->kernels ? o->kernels : getenv("MOESERVE_KERNELS"),
		.threads = (int)o->threads,
		.exact = o->exact || (ex && *ex && strcmp(ex, "0") && strcmp(ex, "false")),
		.dense = dense,
		.attn_products = products,
		.numa = !numa || !strcmp(numa, "auto") ? MS_NUMA_AUTO
			: !strcmp(numa, "off")         ? MS_NUMA_OFF
						       : MS_NUMA_INTERLEAVE,
	};
	const char *kvt = o->kv_dtype ? o->kv_dtype : getenv("MOESERVE_KV_DTYPE");
	enum ms_kv_dtype kv_dtype = ms_kv_dtype_auto(bo.exact);
	if (kvt && strcmp(kvt, "auto") && ms_kv_dtype_parse(kvt, &kv_dtype)) {
		fprintf(stderr, "moeserve: error: --kv-dtype \"%s\" (use auto, bf16, f32 or fp8)\n", kvt);
		return EX_USAGE;
	}
	int rc = ms_backend_open(&bo, be, &err);
	if (rc) {
		/* An unknown kernel set is the caller's mistake, not the model's. */
		fprintf(stderr, "moeserve: error: %s\n", err.msg);
		return rc == -EINVAL ? EX_USAGE : exit_code_for(rc);
	}
	rc = ms_model_load(m, o->model, *be, &err);
	if (rc) {
		ms_backend_close(*be);
		return fail(&err);
	}
	m->lm.kv.dtype = kv_dtype;
	if ((rc = ms_kv_dtype_check(*be, kv_dtype, &err))) {
		ms_model_free(m);
		ms_backend_close(*be);
		return fail(&err);
	}
	ms_keep_freed_memory();
	return 0;
}

/* ---- generate ---- */

static void generate_help(void)
{
	printf("Usage: moeserve generate [--model DIR] (--tokens IDS | --prompt TEXT) [options]\n"
	       "Greedy decoding. The generated ids are printed space-separated as the last\n"
	       "line of stdout (after the generated text, with --prompt); progress goes to\n"
	       "stderr.\n\n"
	       "  --model DIR        checkpoint folder (default: $MOESERVE_MODEL or\n"
	       "                     %s)\n"
	       "  --tokens IDS       prompt token ids, comma-separated (e.g. 1,2,3)\n"
	       "  --prompt TEXT      prompt text, encoded with DIR/tokenizer.json (special\n"
	       "                     tokens in it are plain text)\n"
	       "  --prompt-file FILE the prompt text from FILE (- for stdin), every byte\n"
	       "                     kept (a NUL is the byte 0x00 token)\n"
	       "  --max-tokens N     tokens to generate (default 16; 0 = prompt only)\n"
	       "  --ignore-eos       keep generating after an eos_token_id\n"
	       "  --logits-out FILE  write the logits of every prompt position as\n"
	       "                     little-endian float32 [prompt tokens x vocab]\n"
	       "  --threads N        worker threads (default: available CPUs)\n"
	       "  --backend NAME     compute backend: %s (default the first,\n"
	       "                     or $MOESERVE_BACKEND)\n"
	       "  --device N         which GPU, with --backend rocm (default 0, or\n"
	       "                     $MOESERVE_DEVICE)\n"
	       "  --kernels SET      kernel set: %s (default auto,\n"
	       "                     or $MOESERVE_KERNELS)\n"
	       "  --exact            only kernels that keep fp32 activations: logits match\n"
	       "                     the reference to fp32 rounding (or $MOESERVE_EXACT=1)\n"
	       "  --dense TYPE       attention projections and lm_head: int8 (a scale per\n"
	       "                     32 columns, requantized at load) or bf16 (as stored);\n"
	       "                     default auto: int8 on the CPU unless --exact (or\n"
	       "                     $MOESERVE_DENSE; --dense-int8 is --dense int8)\n"
	       "  --kv-dtype TYPE    the KV cache's values: bf16 (attention accumulates in fp32),\n"
	       "                     f32 (twice the bytes) or fp8 (e4m3, a scale per position\n"
	       "                     and kv head); default auto: bf16, f32 with --exact\n"
	       "                     (or $MOESERVE_KV_DTYPE)\n"
	       "  --attn-products P  on a bf16 cache, bf16: q and the probabilities rounded\n"
	       "                     to bf16 before their products (as GPU flash attention;\n"
	       "                     2x the multiply-adds with AVX512-BF16), or f32; default\n"
	       "                     auto: bf16 where the CPU has AVX512-BF16, unless --exact\n"
	       "                     (or $MOESERVE_ATTN_PRODUCTS)\n"
	       "  --numa MODE        auto (interleave weights when there are several NUMA\n"
	       "                     nodes), off, interleave (default auto, or $MOESERVE_NUMA)\n"
	       "  -h, --help         this help\n",
	       MS_DEFAULT_MODEL, ms_backend_names(), ms_cpu_kernel_sets);
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

/* What an argument parser returns to go on (otherwise: an exit status). */
#define GO_ON (-1)

struct gen_args {
	struct common_opts co;
	const char *tokens, *logits_out, *text, *text_file;
	long max_tokens;
	bool ignore_eos;
};

static int generate_args(int argc, char **argv, struct gen_args *a)
{
	static const struct option opts[] = {
		{"model", required_argument, NULL, 'm'},
		{"tokens", required_argument, NULL, 't'},
		{"prompt", required_argument, NULL, OPT_PROMPT},
		{"prompt-file", required_argument, NULL, OPT_PROMPT_FILE},
		{"max-tokens", required_argument, NULL, 'n'},
		{"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
		{"logits-out", required_argument, NULL, OPT_LOGITS},
		{"threads", required_argument, NULL, OPT_THREADS},
		{"backend", required_argument, NULL, OPT_BACKEND},
		{"device", required_argument, NULL, OPT_DEVICE},
		{"kernels", required_argument, NULL, OPT_KERNELS},
		{"numa", required_argument, NULL, OPT_NUMA},
		{"exact", no_argument, NULL, OPT_EXACT},
		{"dense-int8", no_argument, NULL, OPT_DENSE_INT8},
		{"dense", required_argument, NULL, OPT_DENSE},
		{"attn-products", required_argument, NULL, OPT_ATTN_PRODUCTS},
		{"kv-dtype", required_argument, NULL, OPT_KV_DTYPE},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	*a = (struct gen_args){.co = {.model = default_model()}, .max_tokens = 16};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:t:n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm': a->co.model = optarg; break;
		case 't': a->tokens = optarg; break;
		case 'n':
			if (!parse_long(optarg, 0, 1L << 30, &a->max_tokens))
				return usage_error("generate", "--max-tokens: \"%s\" is not a count >= 0", optarg);
			break;
		case OPT_IGNORE_EOS: a->ignore_eos = true; break;
		case OPT_LOGITS: a->logits_out = optarg; break;
		case OPT_THREADS:
			if (!parse_long(optarg, 1, 1024, &a->co.threads))
				return usage_error("generate", "--threads: \"%s\" is not in [1, 1024]", optarg);
			break;
		case OPT_BACKEND: a->co.backend = optarg; break;
		case OPT_DEVICE: a->co.device = optarg; break;
		case OPT_KERNELS: a->co.kernels = optarg; break;
		case OPT_NUMA: a->co.numa = optarg; break;
		case OPT_EXACT: a->co.exact = true; break;
		case OPT_DENSE_INT8: a->co.dense = "int8"; break;
		case OPT_DENSE: a->co.dense = optarg; break;
		case OPT_ATTN_PRODUCTS: a->co.attn_products = optarg; break;
		case OPT_KV_DTYPE: a->co.kv_dtype = optarg; break;
		case OPT_PROMPT: a->text = optarg; break;
		case OPT_PROMPT_FILE: a->text_file = optarg; break;
		case 'h': generate_help(); return EX_OK;
		default: return usage_error("generate", "%s", "invalid option");
		}
	}
	if (optind < argc)
		return usage_error("generate", "unexpected argument \"%s\"", argv[optind]);
	if ((a->tokens != NULL) + (a->text != NULL) + (a->text_file != NULL) != 1)
		return usage_error("generate", "%s", "give --tokens, --prompt or --prompt-file (one of them)");
	return GO_ON;
}

static char *read_path(const char *path, size_t *n);

/* The prompt: --tokens, or --prompt encoded with the model's tokenizer
 * (kept in *tok to print the continuation as text). An exit status. */
static int generate_prompt(const struct gen_args *a, struct ms_tokenizer **tok, int32_t **prompt,
			   int64_t *n_prompt)
{
	*tok = NULL;
	if (!a->text && !a->text_file) {
		if (parse_tokens(a->tokens, prompt, n_prompt))
			return usage_error("generate", "--tokens: \"%s\" is not a comma-separated list of ids",
					   a->tokens);
		return EX_OK;
	}
	/* The prompt is plain text: special tokens written in it are not
	 * recognised, as for raw completion prompts in the server. */
	char path[4096];
	struct ms_err err = {0};
	size_t n;
	snprintf(path, sizeof(path), "%s/tokenizer.json", a->co.model);
	if (ms_tokenizer_load(tok, path, &err))
		return fail(&err);
	size_t tl = a->text ? strlen(a->text) : 0;
	char *file = a->text ? NULL : read_path(a->text_file, &tl);
	if (!a->text && !file) {
		ms_tokenizer_free(*tok);
		*tok = NULL;
		fprintf(stderr, "moeserve: error: --prompt-file: cannot read \"%s\"\n", a->text_file);
		return EX_NOINPUT;
	}
	int rc = ms_tokenizer_encode(*tok, a->text ? a->text : file, tl, false, prompt, &n, &err);
	free(file);
	if (rc) {
		ms_tokenizer_free(*tok);
		*tok = NULL;
		return fail(&err);
	}
	*n_prompt = (int64_t)n;
	if (!n) {
		ms_tokenizer_free(*tok);
		*tok = NULL;
		free(*prompt);
		*prompt = NULL;
		return usage_error("generate", "%s", "--prompt: the text encodes to no tokens");
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

/* The prompt's forward pass (every position's logits written with
 * --logits-out), then greedy decoding into out; the speeds on stderr. */
static int generate_steps(struct ms_seq *seq, const struct ms_model *m, const struct gen_args *a,
			  const int32_t *prompt, int64_t n_prompt, float *logits, int32_t *out,
			  int64_t *n_out)
{
	struct ms_err err = {0};
	int64_t V = m->cfg.vocab;
	double t0 = ms_now_s();
	if (ms_seq_forward(seq, prompt, n_prompt, logits, a->logits_out != NULL, &err))
		return fail(&err);
	double t1 = ms_now_s();
	const float *last = a->logits_out ? logits + (n_prompt - 1) * V : logits;
	if (a->logits_out && write_logits(a->logits_out, logits, (size_t)(n_prompt * V)))
		return EX_IOERR;
	int32_t next = argmax(last, V);
	while (*n_out < a->max_tokens) {
		out[(*n_out)++] = next;
		if (!a->ignore_eos && is_eos(&m->cfg, next))
			break;
		if (*n_out == a->max_tokens || seq->n_past >= seq->capacity)
			break;
		if (ms_seq_forward(seq, &next, 1, logits, false, &err))
			return fail(&err);
		next = argmax(logits, V);
	}
	double t2 = ms_now_s();
	fprintf(stderr, "moeserve: prompt %lld tokens in %.3f s (%.1f tok/s), generated %lld in %.3f s (%.1f tok/s)\n",
		(long long)n_prompt, t1 - t0, (double)n_prompt / (t1 - t0 + 1e-12), (long long)*n_out,
		t2 - t1, *n_out > 1 ? (double)(*n_out - 1) / (t2 - t1 + 1e-12) : 0.0);
	return EX_OK;
}

/* Generate into *out (malloc'd, *n_out ids); an exit status. */
static int generate_run(struct ms_model *m, const struct gen_args *a, const int32_t *prompt,
			int64_t n_prompt, int32_t **out, int64_t *n_out)
{
	int64_t V = m->cfg.vocab, cap = n_prompt + a->max_tokens;
	if (cap > m->cfg.max_pos)
		cap = m->cfg.max_pos;
	struct ms_err err = {0};
	float *logits = malloc((size_t)(n_prompt * V) * sizeof(float));
	*out = malloc((size_t)(a->max_tokens + 1) * sizeof(int32_t));
	*n_out = 0;
	int ex;
	struct ms_seq seq;
	if (!logits || !*out) {
		ms_err_set(&err, -ENOMEM, "out of memory for %lld x %lld logits", (long long)n_prompt,
			   (long long)V);
		ex = fail(&err);
	} else if (ms_seq_init(&seq, m, cap, &err)) {
		ex = fail(&err);
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

static int cmd_generate(int argc, char **argv)
{
	struct gen_args a;
	int ex = generate_args(argc, argv, &a);
	if (ex != GO_ON)
		return ex;
	struct ms_tokenizer *tok;
	int32_t *prompt = NULL, *out = NULL;
	int64_t n_prompt = 0, n_out = 0;
	if ((ex = generate_prompt(&a, &tok, &prompt, &n_prompt)))
		return ex;
	struct ms_backend *be;
	struct ms_model m;
	if ((ex = load(&a.co, &be, &m))) {
		free(prompt);
		ms_tokenizer_free(tok);
		return ex;
	}
	fprintf(stderr, "moeserve: loaded %s in %.2f s (%s kernels, %d threads; repacked %lld of "
		"%lld matrices, %.1f MiB, in %.2f s)\n", a.co.model, m.load_seconds, be->kernels,
		be->threads, (long long)m.pack_stats.packed, (long long)m.pack_stats.matrices,
		(double)m.pack_stats.packed_bytes / 1048576.0, m.pack_stats.seconds);
	ex = generate_run(&m, &a, prompt, n_prompt, &out, &n_out);
	if (ex == EX_OK)
		ex = generate_print(tok, out, n_out);
	free(out);
	free(prompt);
	ms_tokenizer_free(tok);
	ms_model_free(&m);
	ms_backend_close(be);
	return ex;
}

/* ---- inspect ---- */

static void inspect_help(void)
{
	printf("Usage: moeserve inspect [--model DIR] [--backend NAME] [--device N] [--kernels SET]\n"
	       "                        [--threads N] [--exact] [--dense TYPE]\n"
	       "                        [--kv-dtype TYPE] [--attn-products P]\n"
	       "Load a checkpoint and describe it: architecture and sizes, the quantization\n"
	       "scheme of each tensor group, the kernel chosen for each, and the weight bytes.\n");
}

static void print_bytes(uint64_t b)
{
	if (b >= (1ull << 30))
		printf("%.2f GiB", (double)b / (double)(1ull << 30));
	else if (b >= (1ull << 20))
		printf("%.2f MiB", (double)b / (double)(1ull << 20));
	else
		printf("%.1f KiB", (double)b / 1024.0);
}

/* What the KV cache costs at its dtype: a token in one layer; a token of
 * a long context (full layers: a sliding layer keeps its window only); the
 * tokens a GiB holds; the model's whole context. */
static void print_kv(const struct ms_model *m, int64_t n_sliding)
{
	const struct ms_kv_geom *g = &m->lm.kv;
	int64_t full = g->n_layers - n_sliding, ctx = m->cfg.max_pos;
	double layer = ms_kv_geom_bytes(g, 1) / g->n_layers;
	double per_token = ms_kv_geom_bytes_per_position(g);
	double whole = ms_kv_geom_bytes(g, ctx), windows = whole - per_token * (double)ctx;
	printf("kv cache:      %s, %.0f bytes a token a layer", ms_kv_dtype_name(g->dtype), layer);
	if (full)
		printf("; %.0f a token of context (%lld full layer%s), %.0f tokens per GiB", per_token,
		       (long long)full, full == 1 ? "" : "s", 1073741824.0 / per_token);
	if (n_sliding)
		printf("; %.1f MiB for the windows of %lld sliding layer%s", windows / 1048576.0,
		       (long long)n_sliding, n_sliding == 1 ? "" : "s");
	printf("; the whole context: %.2f GiB\n", whole / 1073741824.0);
	const char *ap = ms_attn_products_name(m->be, g->dtype);
	printf("attn products: %s%s\n", ap,
	       strcmp(ap, "bf16") ? ""
				  : " (q and the probabilities rounded to bf16; --attn-products f32 keeps f32)");
}

static int cmd_inspect(int argc, char **argv)
{
	static const struct option opts[] = {
		{"model", required_argument, NULL, 'm'},
		{"threads", required_argument, NULL, OPT_THREADS},
		{"backend", required_argument, NULL, OPT_BACKEND},
		{"device", required_argument, NULL, OPT_DEVICE},
		{"kernels", required_argument, NULL, OPT_KERNELS},
		{"numa", required_argument, NULL, OPT_NUMA},
		{"exact", no_argument, NULL, OPT_EXACT},
		{"dense-int8", no_argument, NULL, OPT_DENSE_INT8},
		{"dense", required_argument, NULL, OPT_DENSE},
		{"attn-products", required_argument, NULL, OPT_ATTN_PRODUCTS},
		{"kv-dtype", required_argument, NULL, OPT_KV_DTYPE},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct common_opts co = {.model = default_model()};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm': co.model = optarg; break;
		case OPT_NUMA: co.numa = optarg; break;
		case OPT_EXACT: co.exact = true; break;
		case OPT_DENSE_INT8: co.dense = "int8"; break;
		case OPT_DENSE: co.dense = optarg; break;
		case OPT_ATTN_PRODUCTS: co.attn_products = optarg; break;
		case OPT_KV_DTYPE: co.kv_dtype = optarg; break;
		case OPT_THREADS:
			if (!parse_long(optarg, 1, 1024, &co.threads))
				return usage_error("inspect", "--threads: \"%s\" is not in [1, 1024]", optarg);
			break;
		case OPT_BACKEND: co.backend = optarg; break;
		case OPT_DEVICE: co.device = optarg; break;
		case OPT_KERNELS: co.kernels = optarg; break;
		case 'h': inspect_help(); return EX_OK;
		default: return usage_error("inspect", "%s", "invalid option");
		}
	}
	if (optind < argc)
		return usage_error("inspect", "unexpected argument \"%s\"", argv[optind]);
	struct ms_backend *be;
	struct ms_model m;
	int rc = load(&co, &be, &m);
	if (rc)
		return rc;
	const struct ms_model_config *cf = &m.cfg;
	char flags[256];
	int64_t n_sliding = 0;
	for (int64_t i = 0; i < cf->n_layers; i++)
		n_sliding += cf->layer_sliding[i];
	printf("model:         %s\n", co.model);
	printf("architecture:  %s\n", cf->arch);
	printf("layers:        %lld (%lld sliding, window %lld; %lld full)\n", (long long)cf->n_layers,
	       (long long)n_sliding, (long long)cf->sliding_window, (long long)(cf->n_layers - n_sliding));
	printf("hidden:        %lld\n", (long long)cf->hidden);
	printf("attention:     %lld heads x %lld, %lld kv heads, sinks\n", (long long)cf->n_heads,
	       (long long)cf->head_dim, (long long)cf->n_kv_heads);
	printf("experts:       %lld, top-%lld, intermediate %lld, swiglu limit %g\n",
	       (long long)cf->n_experts, (long long)cf->top_k, (long long)cf->intermediate,
	       cf->swiglu_limit);
	printf("vocab:         %lld\n", (long long)cf->vocab);
	if (cf->rope.type == MS_ROPE_YARN)
		printf("rope:          yarn, theta %g, factor %g, original context %lld, beta %g/%g, "
		       "truncate %s, attention factor %.6f\n",
		       cf->rope.theta, cf->rope.factor, (long long)cf->rope.original_max_pos,
		       cf->rope.beta_fast, cf->rope.beta_slow, cf->rope.truncate ? "true" : "false",
		       cf->rope.attention_factor);
	else
		printf("rope:          default, theta %g\n", cf->rope.theta);
	printf("context:       %lld (max_position_embeddings)\n", (long long)cf->max_pos);
	print_kv(&m, n_sliding);
	printf("quantization:  %s (from %s)\n", m.qcfg.method->name, m.qcfg.source);
	printf("expert layout: %s\n", m.moe_layout ? m.moe_layout : "?");
	printf("checkpoint:    %d file%s, %zu tensors\n", m.ck.n_files, m.ck.n_files == 1 ? "" : "s",
	       m.ck.n_tensors);
	printf("backend:       %s, kernels %s, %d threads (pinned)\n", be->name, be->kernels,
	       be->threads);
	const struct ms_cpu *cpu = ms_cpu_from(be);
	if (cpu) {
		printf("numa:          %d node%s%s\n", cpu->numa_nodes, cpu->numa_nodes == 1 ? "" : "s",
		       cpu->numa_interleave ? ", weights interleaved" : "");
		printf("cpu features:  %s\n", ms_cpu_flags_str(cpu->cpu_flags, flags, sizeof(flags)));
	}
	printf("\n%-18s %-19s %-6s %-13s %-10s %5s %12s  %s\n", "tensor group", "scheme", "format",
	       "activations", "kernel", "count", "bytes", "why this kernel");
	uint64_t total = 0;
	for (int i = 0; i < m.n_groups; i++) {
		const struct ms_tensor_group *g = &m.groups[i];
		printf("%-18s %-19s %-6s %-13s %-10s %5d %12llu  %s\n", g->name, g->scheme, g->format,
		       g->act, g->kernel, g->count, (unsigned long long)g->bytes, g->why ? g->why : "");
		total += g->bytes;
	}
	printf("\ntotal weight bytes: %llu (", (unsigned long long)total);
	print_bytes(total);
	printf(")\nload time: %.3f s\n", m.load_seconds);
	ms_model_free(&m);
	ms_backend_close(be);
	return fflush(stdout) == 0 ? EX_OK : EX_IOERR;
}

/* ---- dequant ---- */

static void dequant_help(void)
{
	printf("Usage: moeserve dequant [--model DIR] --module NAME [--out FILE]\n"
	       "Write one loaded weight matrix, decoded to float32, as the kernels see it:\n"
	       "little-endian [rows x cols], row-major, to FILE; print \"rows cols\" as the last\n"
	       "line of stdout. NAME is a projection (model.layers.0.self_attn.q_proj,\n"
	       "model.layers.0.mlp.router, lm_head, model.embed_tokens) or an expert's\n"
	       "model.layers.L.mlp.experts.E.gate_up (gate on even rows, up on odd rows)\n"
	       "or ...experts.E.down, whatever the checkpoint's layout. For tests and audits.\n");
}

static int cmd_dequant(int argc, char **argv)
{
	static const struct option opts[] = {
		{"model", required_argument, NULL, 'm'},
		{"module", required_argument, NULL, 'M'},
		{"out", required_argument, NULL, 'o'},
		{"backend", required_argument, NULL, OPT_BACKEND},
		{"device", required_argument, NULL, OPT_DEVICE},
		{"kernels", required_argument, NULL, OPT_KERNELS},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct common_opts co = {.model = default_model(), .threads = 1};
	const char *module = NULL, *out = NULL;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm': co.model = optarg; break;
		case 'M': module = optarg; break;
		case 'o': out = optarg; break;
		case OPT_BACKEND: co.backend = optarg; break;
		case OPT_DEVICE: co.device = optarg; break;
		case OPT_KERNELS: co.kernels = optarg; break;
		case 'h': dequant_help(); return EX_OK;
		default: return usage_error("dequant", "%s", "invalid option");
		}
	}
	if (optind < argc)
		return usage_error("dequant", "unexpected argument \"%s\"", argv[optind]);
	if (!module)
		return usage_error("dequant", "%s", "--module is required");
	struct ms_backend *be;
	struct ms_model m;
	int rc = load(&co, &be, &m);
	if (rc)
		return rc;
	int ex = EX_OK;
	const struct ms_qlinear *l = ms_model_find_linear(&m, module);
	if (!l) {
		fprintf(stderr, "moeserve: error: no module \"%s\" in %s\n", module, co.model);
		ex = EX_USAGE;
	} else if (out) {
		FILE *f = fopen(out, "wb");
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
			fprintf(stderr, "moeserve: error: cannot write %s: %s\n", out, strerror(errno));
			ex = EX_IOERR;
		}
	}
	if (l && ex == EX_OK) {
		fprintf(stderr, "moeserve: %s: scheme %s, format %s, activations %s, kernel %s\n", module,
			l->scheme, ms_wfmt_name(l->lin.w.fmt), ms_actq_name(l->lin.act.kind),
			l->lin.kernel_name ? l->lin.kernel_name : "none");
		printf("%lld %lld\n", (long long)l->lin.w.rows, (long long)l->lin.w.cols);
	}
	ms_model_free(&m);
	ms_backend_close(be);
	return ex;
}

/* ---- tokenize ---- */

static void tokenize_help(void)
{
	printf("Usage: moeserve tokenize (--model DIR | --tokenizer FILE) [options]\n"
	       "Encode UTF-8 from stdin and print the ids, space-separated, as the last line of\n"
	       "stdout; with --decode, read ids (space- or comma-separated) and print the text.\n\n"
	       "  --model DIR       use DIR/tokenizer.json (default: $MOESERVE_MODEL or the\n"
	       "                    embedded default model)\n"
	       "  --tokenizer FILE  a tokenizer.json\n"
	       "  --special         recognise special tokens written in the text (off by\n"
	       "                    default, as for raw completion prompts)\n"
	       "  --decode          ids in, text out\n"
	       "  --jsonl           one case per line: a JSON string in, a line of ids out\n"
	       "                    (with --decode: a line of ids in, a JSON string out)\n"
	       "  --bench FILE      encode FILE repeatedly and print \"encode: X MB/s\"\n"
	       "  --chat            stdin is a chat completions body (messages, tools,\n"
	       "                    reasoning_effort; with --jsonl one per line): print the\n"
	       "                    harmony prompt `serve` renders for it, as a JSON string\n");
}

/* Slurp a stream into a malloc'd buffer. */
static char *read_all(FILE *f, size_t *n)
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

/* The whole file at path ("-": stdin), or NULL. */
static char *read_path(const char *path, size_t *n)
{
	bool in = !strcmp(path, "-");
	FILE *f = in ? stdin : fopen(path, "rb");
	char *b = f ? read_all(f, n) : NULL;
	if (f && !in)
		fclose(f);
	return b;
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1;
}

/* A JSON string literal (the whole line) -> bytes, embedded NULs kept.
 * Returns the length, or -1 when the line is not one JSON string. */
static long json_unquote(const char *s, size_t n, char *o)
{
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
		n--;
	if (n < 2 || s[0] != '"' || s[n - 1] != '"')
		return -1;
	size_t k = 0;
	for (size_t i = 1; i + 1 < n; i++) {
		if (s[i] != '\\') {
			o[k++] = s[i];
			continue;
		}
		if (++i + 1 >= n)
			return -1;
		switch (s[i]) {
		case '"': o[k++] = '"'; break;
		case '\\': o[k++] = '\\'; break;
		case '/': o[k++] = '/'; break;
		case 'b': o[k++] = '\b'; break;
		case 'f': o[k++] = '\f'; break;
		case 'n': o[k++] = '\n'; break;
		case 'r': o[k++] = '\r'; break;
		case 't': o[k++] = '\t'; break;
		case 'u': {
			uint32_t cp = 0;
			for (int j = 0; j < 4; j++) {
				int h = i + 1 + (size_t)j < n ? hexval(s[i + 1 + j]) : -1;
				if (h < 0)
					return -1;
				cp = cp * 16 + (uint32_t)h;
			}
			i += 4;
			if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < n && s[i + 1] == '\\' && s[i + 2] == 'u') {
				uint32_t lo = 0;
				for (int j = 0; j < 4; j++) {
					int h = hexval(s[i + 3 + j]);
					if (h < 0)
						return -1;
					lo = lo * 16 + (uint32_t)h;
				}
				if (lo >= 0xDC00 && lo <= 0xDFFF) {
					cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					i += 6;
				}
			}
			k += ms_utf8_encode(cp, o + k);
			break;
		}
		default: return -1;
		}
	}
	return (long)k;
}

static void print_json_string(const char *s, size_t n)
{
	putchar('"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else if (c == 0xC0 && i + 1 < n && (unsigned char)s[i + 1] == 0x80)
			printf("\\u0000"), i++; /* a carried NUL (ms-utf8.h) */
		else
			putchar(c);
	}
	printf("\"\n");
}

static void print_ids(const int32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%s%d", i ? " " : "", ids[i]);
	printf("\n");
}

/* Parse whitespace/comma separated ids; returns count or -1. */
static long parse_id_list(const char *s, int32_t *out, size_t cap)
{
	size_t n = 0;
	while (*s) {
		while (*s == ' ' || *s == ',' || *s == '\n' || *s == '\r' || *s == '\t')
			s++;
		if (!*s)
			break;
		char *end;
		long v = strtol(s, &end, 10);
		if (end == s || v < 0 || v > INT32_MAX || n == cap)
			return -1;
		out[n++] = (int32_t)v;
		s = end;
	}
	return (long)n;
}

struct tok_args {
	const char *model, *file, *bench;
	bool special, decode, jsonl, chat;
};

static int tokenize_args(int argc, char **argv, struct tok_args *a)
{
	static const struct option opts[] = {
		{"model", required_argument, NULL, 'm'},
		{"tokenizer", required_argument, NULL, 't'},
		{"special", no_argument, NULL, 's'},
		{"decode", no_argument, NULL, 'd'},
		{"jsonl", no_argument, NULL, 'j'},
		{"bench", required_argument, NULL, 'b'},
		{"chat", no_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	*a = (struct tok_args){0};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:t:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm': a->model = optarg; break;
		case 't': a->file = optarg; break;
		case 's': a->special = true; break;
		case 'd': a->decode = true; break;
		case 'j': a->jsonl = true; break;
		case 'b': a->bench = optarg; break;
		case 'c': a->chat = true; break;
		case 'h': tokenize_help(); return EX_OK;
		default: return usage_error("tokenize", "%s", "invalid option");
		}
	}
	if (optind < argc)
		return usage_error("tokenize", "unexpected argument \"%s\"", argv[optind]);
	if (a->model && a->file)
		return usage_error("tokenize", "%s", "give --model or --tokenizer, not both");
	return GO_ON;
}

/* --bench FILE: encode it again and again for a second. */
static int tokenize_bench(const struct ms_tokenizer *t, const char *path)
{
	struct ms_err err = {0};
	size_t n;
	FILE *f = fopen(path, "rb");
	char *in = f ? read_all(f, &n) : NULL;
	if (f)
		fclose(f);
	if (!in) {
		fprintf(stderr, "moeserve: error: cannot read %s\n", path);
		return EX_NOINPUT;
	}
	int ex = EX_OK;
	double t0 = ms_now_s(), el = 0;
	size_t bytes = 0, toks = 0;
	do {
		int32_t *ids;
		size_t m;
		if (ms_tokenizer_encode(t, in, n, false, &ids, &m, &err)) {
			ex = fail(&err);
			break;
		}
		free(ids);
		bytes += n;
		toks += m;
		el = ms_now_s() - t0;
	} while (el < 1.0);
	if (ex == EX_OK)
		printf("%zu bytes -> %zu tokens per pass\nencode: %.2f MB/s\n", n, toks * n / bytes,
		       (double)bytes / el / 1e6);
	free(in);
	return ex;
}

/* One input (a line with --jsonl) of ids to text; idbuf holds cap ids. */
static int decode_line(const struct ms_tokenizer *t, bool jsonl, char *line, size_t ll,
		       int32_t *idbuf, size_t cap)
{
	struct ms_err err = {0};
	char save = line[ll];
	line[ll] = '\0';
	long m = parse_id_list(line, idbuf, cap);
	line[ll] = save;
	char *text;
	size_t tl;
	if (m < 0) {
		fprintf(stderr, "moeserve: error: input is not a list of token ids\n");
		return EX_DATAERR;
	}
	if (ms_tokenizer_decode(t, idbuf, (size_t)m, false, &text, &tl, &err))
		return fail(&err);
	if (jsonl)
		print_json_string(text, tl);
	else
		fwrite(text, 1, ms_nul_uncarry(text, tl), stdout);
	free(text);
	return EX_OK;
}

/* One input (a JSON string line with --jsonl) of text to ids; buf: room
 * for the unquoted line. */
static int encode_line(const struct ms_tokenizer *t, const struct tok_args *a, const char *line,
		       size_t ll, char *buf)
{
	struct ms_err err = {0};
	long tl = a->jsonl ? json_unquote(line, ll, buf) : (long)ll;
	int32_t *ids;
	size_t m;
	if (tl < 0) {
		fprintf(stderr, "moeserve: error: line is not a JSON string\n");
		return EX_DATAERR;
	}
	if (ms_tokenizer_encode(t, a->jsonl ? buf : line, (size_t)tl, a->special, &ids, &m, &err))
		return fail(&err);
	print_ids(ids, m);
	free(ids);
	return EX_OK;
}

/* --chat: one chat body to its rendered prompt (the chat endpoint's
 * renderer and message parser, so the text is the daemon's). */
static int render_line(const char *line, size_t ll)
{
	cJSON *req;
	struct ms_req_chat c;
	struct ms_req_error e = {0};
	struct ms_err err = {0};
	char *text = NULL;
	size_t tl = 0;
	if (ms_json_parse_strict(line, ll, &req, e.msg, sizeof(e.msg))) {
		fprintf(stderr, "moeserve: error: --chat: %s\n", e.msg);
		return EX_DATAERR;
	}
	int rc = ms_req_chat_messages(req, &c, &e);
	if (rc)
		fprintf(stderr, "moeserve: error: --chat: %s (%s)\n", e.msg, e.param ? e.param : "body");
	else if ((rc = ms_harmony_render(&c.cr, &text, &tl, &err)))
		fprintf(stderr, "moeserve: error: --chat: %s\n", err.msg);
	else
		print_json_string(text, tl);
	free(text);
	ms_req_chat_free(&c);
	cJSON_Delete(req);
	return rc ? EX_DATAERR : EX_OK;
}

/* stdin, whole or line by line (--jsonl), encoded or decoded. */
static int tokenize_input(const struct ms_tokenizer *t, const struct tok_args *a)
{
	size_t n;
	char *in = read_all(stdin, &n);
	if (!in)
		return EX_OSERR;
	int ex = EX_OK;
	char *line = in, *end = in + n;
	char *buf = malloc(n + 1);
	int32_t *idbuf = malloc((n / 2 + 2) * sizeof(int32_t));
	while (buf && idbuf && ex == EX_OK && (a->jsonl ? line < end : line == in)) {
		char *nl = a->jsonl ? memchr(line, '\n', (size_t)(end - line)) : NULL;
		size_t ll = (size_t)((nl ? nl : end) - line);
		ex = a->chat ? render_line(line, ll)
		     : a->decode ? decode_line(t, a->jsonl, line, ll, idbuf, n / 2 + 2)
				 : encode_line(t, a, line, ll, buf);
		line += ll + 1;
	}
	if (!buf || !idbuf)
		ex = EX_OSERR;
	free(buf);
	free(idbuf);
	free(in);
	if (fflush(stdout) != 0)
		ex = EX_IOERR;
	return ex;
}

static int cmd_tokenize(int argc, char **argv)
{
	struct tok_args a;
	int ex = tokenize_args(argc, argv, &a);
	if (ex != GO_ON)
		return ex;
	char path[4096];
	const char *file = a.file;
	if (!file) {
		snprintf(path, sizeof(path), "%s/tokenizer.json", a.model ? a.model : default_model());
		file = path;
	}
	struct ms_err err = {0};
	struct ms_tokenizer *t;
	if (ms_tokenizer_load(&t, file, &err))
		return fail(&err);
	ex = a.bench ? tokenize_bench(t, a.bench) : tokenize_input(t, &a);
	ms_tokenizer_free(t);
	return ex;
}

/* ---- bench ---- */

static void bench_help(void)
{
	printf("Usage: moeserve bench [--model DIR] [--threads N] [--kernels SET]\n"
	       "                      [--backend NAME] [--device N]\n"
	       "                      [--prompt-tokens N] [--decode-tokens N] [--json]\n"
	       "                      [--baseline SET] [--baseline-tokens N]\n"
	       "                      [--context N[,N...] [--attention]]\n"
	       "                      [--structured [--tokenizer FILE]]\n"
	       "Measure load time and memory, prefill speed against oneDNN's bf16 matmul,\n"
	       "decode speed at batch 1, 4, 8 and 16 against the memory-bandwidth roofline\n"
	       "(weight bytes the backend counts per step over the bandwidth measured in\n"
	       "the same run), and print the issue-7 targets with PASS/BELOW. Prints a\n"
	       "table and, last, one JSON line.\n\n"
	       "On a GPU backend (--backend rocm, rocm-sim): load time, prefill, decode at\n"
	       "batch 1, 8 and 32 (rocm-sim: 1, 2, 4), and each decode step's weight bytes\n"
	       "over its time as a share of the bandwidth the device's copy kernel reaches\n"
	       "in the same run.\n\n"
	       "  --prompt-tokens N    prefill prompt length (default 512, rocm-sim 8; the\n"
	       "                       decode runs' prompts are 16 tokens, or N when smaller)\n"
	       "  --decode-tokens N    tokens per decode run (default 32, rocm-sim 3)\n"
	       "  --baseline SET       also load the model on kernel set SET (e.g. ref) and\n"
	       "                       print the decode speedups over it\n"
	       "  --baseline-tokens N  tokens per baseline decode run (default half of\n"
	       "                       --decode-tokens, at least 3)\n"
	       "  --context N[,N...]   also at depth (up to 4 depths, CPU): prefill an N-token\n"
	       "                       prompt, then decode at batch 1 and 8 on that context\n"
	       "                       (shared through the prefix cache, a token of their own\n"
	       "                       each); rates against the short-context runs, bytes per\n"
	       "                       step (weights + the KV read) and the roofline share\n"
	       "  --attention          with --context, instead: one full layer's attention\n"
	       "                       alone as a decode step at each depth calls it (batch 1\n"
	       "                       and 8), KV in f32, bf16 (with f32 and with bf16\n"
	       "                       products) and fp8 alternating; per call its time, KV\n"
	       "                       GB/s and share of the bandwidth beside it; then a\n"
	       "                       prefill chunk at that depth, f32 and bf16 products\n"
	       "  --structured         structured outputs instead: per JSON Schema of a fixed\n"
	       "                       set, the grammar's compile time and each token's mask\n"
	       "                       time (median, p99) in constrained generation over the\n"
	       "                       vocabulary, then decode at batch 1 and 8 with and\n"
	       "                       without a grammar (--decode-tokens each) and the ratio\n"
	       "  --tokenizer FILE     --structured: the vocabulary's tokenizer.json (default:\n"
	       "                       the model's)\n"
	       "  --json               only the JSON line\n"
	       "--exact, --dense, --kv-dtype, --attn-products and --numa as for generate.\n");
}

/* "N[,N...]" into o->contexts. */
static bool parse_contexts(const char *s, struct ms_bench_opts *o)
{
	o->n_contexts = 0;
	for (;;) {
		char *end;
		errno = 0;
		long long v = strtoll(s, &end, 10);
		if (end == s || errno || v < 1 || v > (1 << 24) || o->n_contexts == MS_BENCH_MAX_CONTEXTS)
			return false;
		o->contexts[o->n_contexts++] = v;
		if (!*end)
			return true;
		if (*end != ',')
			return false;
		s = end + 1;
	}
}

/* The bench options that do not go together. */
static int bench_opts_check(const struct ms_bench_opts *bo)
{
	if (bo->tokenizer && !bo->structured)
		return usage_error("bench", "%s", "--tokenizer goes with --structured");
	if (bo->structured && bo->baseline)
		return usage_error("bench", "%s", "--baseline does not go with --structured");
	if (bo->structured && bo->n_contexts)
		return usage_error("bench", "%s", "--context does not go with --structured");
	if (bo->attention && (!bo->n_contexts || bo->structured || bo->baseline))
		return usage_error("bench", "%s", "--attention needs --context and goes with neither "
				   "--structured nor --baseline");
	return 0;
}

static int cmd_bench(int argc, char **argv)
{
	static const struct option opts[] = {
		{"model", required_argument, NULL, 'm'},
		{"threads", required_argument, NULL, OPT_THREADS},
		{"backend", required_argument, NULL, OPT_BACKEND},
		{"device", required_argument, NULL, OPT_DEVICE},
		{"kernels", required_argument, NULL, OPT_KERNELS},
		{"prompt-tokens", required_argument, NULL, 'p'},
		{"numa", required_argument, NULL, OPT_NUMA},
		{"exact", no_argument, NULL, OPT_EXACT},
		{"dense-int8", no_argument, NULL, OPT_DENSE_INT8},
		{"dense", required_argument, NULL, OPT_DENSE},
		{"attn-products", required_argument, NULL, OPT_ATTN_PRODUCTS},
		{"kv-dtype", required_argument, NULL, OPT_KV_DTYPE},
		{"decode-tokens", required_argument, NULL, 'n'},
		{"json", no_argument, NULL, 'j'},
		{"baseline", required_argument, NULL, 'b'},
		{"baseline-tokens", required_argument, NULL, 'B'},
		{"structured", no_argument, NULL, 's'},
		{"tokenizer", required_argument, NULL, 't'},
		{"context", required_argument, NULL, 'c'},
		{"attention", no_argument, NULL, 'a'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct common_opts co = {.model = default_model()};
	/* 0: the backend's default, chosen once it is open */
	struct ms_bench_opts bo = {0};
	long v;
	int c, rc;
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm': co.model = optarg; break;
		case OPT_THREADS:
			if (!parse_long(optarg, 1, 1024, &co.threads))
				return usage_error("bench", "--threads: \"%s\" is not in [1, 1024]", optarg);
			break;
		case OPT_BACKEND: co.backend = optarg; break;
		case OPT_DEVICE: co.device = optarg; break;
		case OPT_KERNELS: co.kernels = optarg; break;
		case 'p':
			if (!parse_long(optarg, 1, 1 << 20, &v))
				return usage_error("bench", "--prompt-tokens: \"%s\" is not a count", optarg);
			bo.prompt_tokens = v;
			break;
		case 'n':
			if (!parse_long(optarg, 2, 1 << 20, &v))
				return usage_error("bench", "--decode-tokens: \"%s\" is not a count >= 2", optarg);
			bo.decode_tokens = v;
			break;
		case 'j': bo.json_only = true; break;
		case 'b': bo.baseline = optarg; break;
		case 'B':
			if (!parse_long(optarg, 3, 1 << 20, &v))
				return usage_error("bench", "--baseline-tokens: \"%s\" is not a count >= 3", optarg);
			bo.baseline_tokens = v;
			break;
		case 's': bo.structured = true; break;
		case 'a': bo.attention = true; break;
		case 't': bo.tokenizer = optarg; break;
		case 'c':
			if (!parse_contexts(optarg, &bo))
				return usage_error("bench", "--context: \"%s\" is not up to 4 counts in "
						   "[1, 16777216] separated by commas", optarg);
			break;
		case OPT_NUMA: co.numa = optarg; break;
		case OPT_EXACT: co.exact = true; break;
		case OPT_DENSE_INT8: co.dense = "int8"; break;
		case OPT_DENSE: co.dense = optarg; break;
		case OPT_ATTN_PRODUCTS: co.attn_products = optarg; break;
		case OPT_KV_DTYPE: co.kv_dtype = optarg; break;
		case 'h':
			bench_help();
			return EX_OK;
		default: return usage_error("bench", "%s", "invalid option");
		}
	}
	if (optind < argc)
		return usage_error("bench", "unexpected argument \"%s\"", argv[optind]);
	if ((rc = bench_opts_check(&bo)))
		return rc;
	struct ms_backend *be;
	struct ms_model m;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = load(&co, &be, &m);
	if (rc)
		return rc;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	bo.load_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	bo.model = co.model;
	/* rocm-sim runs the kernels on a host model of the GPU, thousands of
	 * times slower than one: defaults that finish in seconds */
	bool sim = !strcmp(be->name, "rocm-sim");
	if (!bo.prompt_tokens)
		bo.prompt_tokens = sim ? 8 : 512;
	if (!bo.decode_tokens)
		bo.decode_tokens = sim ? 3 : 32;
	if (bo.prompt_tokens + 2 > m.cfg.max_pos)
		bo.prompt_tokens = m.cfg.max_pos - 2;
	for (int i = 0; i < bo.n_contexts; i++)
		if (bo.contexts[i] + bo.decode_tokens + 2 > m.cfg.max_pos) {
			fprintf(stderr, "moeserve: error: bench --context %lld: with %lld decode tokens "
				"it passes the model's context of %lld positions\n",
				(long long)bo.contexts[i], (long long)bo.decode_tokens,
				(long long)m.cfg.max_pos);
			ms_model_free(&m);
			ms_backend_close(be);
			return EX_USAGE;
		}
	int ex = ms_cmd_bench(&m, be, &bo);
	ms_model_free(&m);
	ms_backend_close(be);
	return ex;
}

/* ---- dispatch ---- */

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

int main(int argc, char **argv)
{
	if (argc < 2) {
		main_help();
		return EX_USAGE;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "generate"))
		return cmd_generate(argc - 1, argv + 1);
	if (!strcmp(cmd, "inspect"))
		return cmd_inspect(argc - 1, argv + 1);
	if (!strcmp(cmd, "dequant"))
		return cmd_dequant(argc - 1, argv + 1);
	if (!strcmp(cmd, "tokenize"))
		return cmd_tokenize(argc - 1, argv + 1);
	if (!strcmp(cmd, "bench"))
		return cmd_bench(argc - 1, argv + 1);
	if (!strcmp(cmd, "serve"))
		return ms_cmd_serve(argc - 1, argv + 1, default_model());
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		main_help();
		return EX_OK;
	}
	if (!strcmp(cmd, "--version")) {
		printf("moeserve %s\n", MS_VERSION);
		return EX_OK;
	}
	return usage_error(NULL, "unknown command \"%s\"", cmd);
}
