/*
 * options-table.c: the option table of every moeserve command, and each
 * command's --help words around it.
 *
 * One row per option: its flag, type, field, range or choices, default,
 * help, and which commands accept it (cmds). serve reads every one of its
 * rows from flags, MOESERVE_* environment variables and its config file;
 * the other commands read flags, and the environment variables their rows
 * name (tool_env), as they always did. The model-loading options (--model,
 * --backend, --device, --threads, --kernels, --exact, --dense, --numa,
 * --kv-dtype, --attn-products) are one row each, shared by every command
 * that loads a model. Where the other commands took such an option in
 * words or a range of their own (generate --threads refuses 0; --numa is
 * checked when the model loads), the row's tool rule says so, so that
 * nothing changed for their users when the tables became one.
 *
 * To add an option: its field in struct ms_cli_options (options.h), then
 * one row here; parsing, the environment, the config file, the defaults
 * and --help follow from the row.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "options-int.h"
#include "spec.h"

#define F(field) offsetof(struct ms_cli_options, s.field)
#define T(field) offsetof(struct ms_cli_options, field)
#define KIB 1024LL
#define GIB (1024LL * 1024 * 1024)

#define SERVE CMD(SERVE)
#define ALL ((1u << MS_CLI_N_CMDS) - 1)
#define LOADING (CMD(SERVE) | TOOLS_LOADING)
/* what tunes a model's kernels: every loading command but dequant (which
 * decodes one matrix on one thread) */
#define TUNING (CMD(SERVE) | CMD(GENERATE) | CMD(INSPECT) | CMD(BENCH))

static const char *const log_formats[] = {"text", "json", NULL};
static const char *const log_levels[] = {"error", "warn", "info", "debug", NULL};
static const char *const on_off[] = {"on", "off", NULL};
static const char *const numa_modes[] = {"auto", "off", "interleave", NULL};
static const char *const kv_dtypes[] = {"auto", "f32", "bf16", "fp8", NULL};
static const char *const dense_modes[] = {"auto", "bf16", "int8", NULL};
static const char *const attn_products[] = {"auto", "f32", "bf16", NULL};
static const char *const spec_modes[] = {"auto", "off", NULL};

_Static_assert(sizeof(enum ms_log_format) == sizeof(int), "enums are stored through int *");
_Static_assert(sizeof(enum ms_log_level) == sizeof(int), "enums are stored through int *");
_Static_assert(sizeof(enum ms_access_log) == sizeof(int), "enums are stored through int *");
_Static_assert(MS_ACCESS_LOG_ON == 0 && MS_ACCESS_LOG_OFF == 1, "on_off[] follows enum ms_access_log");
_Static_assert(sizeof(enum ms_numa_mode) == sizeof(int), "enums are stored through int *");
_Static_assert(MS_NUMA_AUTO == 0 && MS_NUMA_OFF == 1 && MS_NUMA_INTERLEAVE == 2,
	       "numa_modes[] follows enum ms_numa_mode");
_Static_assert(sizeof(enum ms_serve_kv) == sizeof(int), "enums are stored through int *");
_Static_assert(sizeof(enum ms_dense_mode) == sizeof(int), "enums are stored through int *");
_Static_assert(MS_DENSE_AUTO == 0 && MS_DENSE_KEEP == 1 && MS_DENSE_INT8 == 2,
	       "dense_modes[] follows enum ms_dense_mode");
_Static_assert(sizeof(enum ms_attn_products) == sizeof(int), "enums are stored through int *");
_Static_assert(MS_ATTN_PRODUCTS_AUTO == 0 && MS_ATTN_PRODUCTS_F32 == 1 && MS_ATTN_PRODUCTS_BF16 == 2,
	       "attn_products[] follows enum ms_attn_products");
_Static_assert(sizeof(enum ms_serve_spec) == sizeof(int), "enums are stored through int *");
_Static_assert(MS_SERVE_SPEC_AUTO == 0 && MS_SERVE_SPEC_OFF == 1, "spec_modes[] follows enum ms_serve_spec");
/* the defaults the rows give as text are the engine's */
_Static_assert(MS_SPEC_DEFAULT_TOKENS == 32, "--spec-max-tokens' default is \"32\"");
_Static_assert(MS_SPEC_DEFAULT_CACHE == 64ull << 20, "--spec-cache-bytes' default is \"64M\"");
_Static_assert(MS_SERVE_KV_AUTO == 0 && MS_SERVE_KV_F32 == 1 && MS_SERVE_KV_BF16 == 2 &&
	       MS_SERVE_KV_FP8 == 3,
	       "kv_dtypes[] follows enum ms_serve_kv");

/* ---- the other commands' deferred values, read as they always were
 * (the engine's own parsers: their aliases, such as fp32, kept) ---- */

static bool defer_device(const char *v, void *field)
{
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || end == v || *end || x < 0 || x > 255)
		return false;
	*(int *)field = (int)x;
	return true;
}

static bool defer_dense(const char *v, void *field)
{
	return ms_dense_mode_parse(v, (enum ms_dense_mode *)field) == 0;
}

static bool defer_attn_products(const char *v, void *field)
{
	return ms_attn_products_parse(v, (enum ms_attn_products *)field) == 0;
}

static bool defer_numa(const char *v, void *field)
{
	for (int i = 0; numa_modes[i]; i++)
		if (!strcmp(v, numa_modes[i])) {
			*(int *)field = i;
			return true;
		}
	return false;
}

static bool defer_kv_dtype(const char *v, void *field)
{
	static const enum ms_serve_kv of[] = {
		[MS_KV_F32] = MS_SERVE_KV_F32, [MS_KV_BF16] = MS_SERVE_KV_BF16,
		[MS_KV_FP8] = MS_SERVE_KV_FP8,
	};
	enum ms_kv_dtype t;
	if (!strcmp(v, "auto"))
		*(int *)field = MS_SERVE_KV_AUTO;
	else if (ms_kv_dtype_parse(v, &t) == 0)
		*(int *)field = (int)of[t];
	else
		return false;
	return true;
}

/* serve's rows first, in its --help's order; generate's, dequant's,
 * tokenize's and bench's own after --model (their --help lists them
 * first). Two rows may share a name when no command takes both. */
const struct opt_def ms_opt_rows[] = {
	{"model", 'm', T_STR, F(model), 0, 0, NULL, NULL, "the built-in model", "DIR",
	 "checkpoint folder", ALL, 0, {.shown = "$MOESERVE_MODEL, else the built-in model"}},
	/* generate */
	{"tokens", 't', T_STR, T(generate.tokens), 0, 0, NULL, NULL, NULL, "IDS",
	 "prompt token ids, comma-separated (e.g. 1,2,3)", CMD(GENERATE), 0, {0}},
	{"prompt", 0, T_STR, T(generate.prompt), 0, 0, NULL, NULL, NULL, "TEXT",
	 "prompt text, encoded with DIR/tokenizer.json\n(special tokens in it are plain text)",
	 CMD(GENERATE), 0, {0}},
	{"prompt-file", 0, T_STR, T(generate.prompt_file), 0, 0, NULL, NULL, NULL, "FILE",
	 "the prompt text from FILE (- for stdin), every\nbyte kept (a NUL is the byte 0x00 token)",
	 CMD(GENERATE), 0, {0}},
	{"max-tokens", 'n', T_I64, T(generate.max_tokens), 0, 1 << 30, NULL, "16", NULL, "N",
	 "tokens to generate (0: the prompt only)", CMD(GENERATE), 0,
	 {.bad = "is not a count >= 0"}},
	{"ignore-eos", 0, T_BOOL, T(generate.ignore_eos), 0, 0, NULL, NULL, NULL, NULL,
	 "keep generating after an eos_token_id", CMD(GENERATE), 0, {0}},
	{"logits-out", 0, T_STR, T(generate.logits_out), 0, 0, NULL, NULL, NULL, "FILE",
	 "write the logits of every prompt position as\nlittle-endian float32 [prompt tokens x vocab]",
	 CMD(GENERATE), 0, {0}},
	{"speculative", 0, T_ENUM, F(speculative), 0, 0, spec_modes, "auto", NULL, "MODE",
	 "auto: decode through the engine, drafting\nfrom n-gram matches of the tokens so far and\n"
	 "verifying the drafts in the same pass (the\nsame ids as off); off: one token a pass, as\n"
	 "with --logits-out", CMD(GENERATE), CMD(GENERATE), {0}},
	/* dequant */
	{"module", 0, T_STR, T(dequant.module), 0, 0, NULL, NULL, NULL, "NAME",
	 "the weight matrix (required; see above)", CMD(DEQUANT), 0, {0}},
	{"out", 0, T_STR, T(dequant.out), 0, 0, NULL, NULL, NULL, "FILE",
	 "write it to FILE, float32 [rows x cols]", CMD(DEQUANT), 0, {0}},
	/* tokenize */
	{"tokenizer", 't', T_STR, T(tokenize.tokenizer), 0, 0, NULL, NULL, NULL, "FILE",
	 "a tokenizer.json (instead of --model's)", CMD(TOKENIZE), 0, {0}},
	{"special", 0, T_BOOL, T(tokenize.special), 0, 0, NULL, NULL, NULL, NULL,
	 "recognise special tokens written in the text\n(off by default, as for raw completion\n"
	 "prompts)", CMD(TOKENIZE), 0, {0}},
	{"decode", 0, T_BOOL, T(tokenize.decode), 0, 0, NULL, NULL, NULL, NULL,
	 "ids in, text out", CMD(TOKENIZE), 0, {0}},
	{"jsonl", 0, T_BOOL, T(tokenize.jsonl), 0, 0, NULL, NULL, NULL, NULL,
	 "one case per line: a JSON string in, a line of\nids out (with --decode: a line of ids in, a\n"
	 "JSON string out)", CMD(TOKENIZE), 0, {0}},
	{"bench", 0, T_STR, T(tokenize.bench), 0, 0, NULL, NULL, NULL, "FILE",
	 "encode FILE repeatedly and print\n\"encode: X MB/s\"", CMD(TOKENIZE), 0, {0}},
	{"chat", 0, T_BOOL, T(tokenize.chat), 0, 0, NULL, NULL, NULL, NULL,
	 "stdin is a chat completions body (messages,\ntools, reasoning_effort; with --jsonl one per\n"
	 "line): print the harmony prompt `serve`\nrenders for it, as a JSON string",
	 CMD(TOKENIZE), 0, {0}},
	/* bench */
	{"prompt-tokens", 0, T_I64, T(bench.prompt_tokens), 1, 1 << 20, NULL, NULL,
	 "512, rocm-sim 8", "N", "prefill prompt length (the decode runs'\nprompts are 16 tokens, "
	 "or N when smaller)", CMD(BENCH), 0, {.bad = "is not a count"}},
	{"decode-tokens", 0, T_I64, T(bench.decode_tokens), 2, 1 << 20, NULL, NULL,
	 "32, rocm-sim 3", "N", "tokens per decode run", CMD(BENCH), 0,
	 {.bad = "is not a count >= 2"}},
	{"json", 0, T_BOOL, T(bench.json), 0, 0, NULL, NULL, NULL, NULL, "only the JSON line",
	 CMD(BENCH), 0, {0}},
	{"baseline", 0, T_STR, T(bench.baseline), 0, 0, NULL, NULL, NULL, "SET",
	 "also load the model on kernel set SET (e.g.\nref) and print the decode speedups over it",
	 CMD(BENCH), 0, {0}},
	{"baseline-tokens", 0, T_I64, T(bench.baseline_tokens), 3, 1 << 20, NULL, NULL,
	 "half of --decode-tokens, at least 3", "N", "tokens per baseline decode run", CMD(BENCH), 0,
	 {.bad = "is not a count >= 3"}},
	{"context", 0, T_COUNTS, T(bench.contexts), 1, 1 << 24, NULL, NULL, NULL, "N[,N...]",
	 "also at depth (up to 4 depths, CPU): prefill an\nN-token prompt, then decode at batch 1 and 8\n"
	 "on that context (shared through the prefix\ncache, a token of their own each); rates\n"
	 "against the short-context runs, bytes per step\n(weights + the KV read) and the roofline "
	 "share", CMD(BENCH), 0,
	 {.bad = "is not up to 4 counts in [1, 16777216] separated by commas"}},
	{"attention", 0, T_BOOL, T(bench.attention), 0, 0, NULL, NULL, NULL, NULL,
	 "with --context, instead: one full layer's\nattention alone as a decode step at each depth\n"
	 "calls it (batch 1 and 8), KV in f32, bf16\n(with f32 and with bf16 products) and fp8\n"
	 "alternating; per call its time, KV GB/s and\nshare of the bandwidth beside it; then a\n"
	 "prefill chunk at that depth, f32 and bf16\nproducts", CMD(BENCH), 0, {0}},
	{"structured", 0, T_BOOL, T(bench.structured), 0, 0, NULL, NULL, NULL, NULL,
	 "structured outputs instead: per JSON Schema of\na fixed set, the grammar's compile time and\n"
	 "each token's mask time (median, p99) in\nconstrained generation over the vocabulary,\n"
	 "then decode at batch 1 and 8 with and without\na grammar (--decode-tokens each) and the ratio",
	 CMD(BENCH), 0, {0}},
	{"speculative", 0, T_BOOL, T(bench.speculative), 0, 0, NULL, NULL, NULL, NULL,
	 "speculative decoding on and off instead: a\nrepeating text, an acceptance sweep (drafts\n"
	 "right at set rates) and text with no match",
	 CMD(BENCH), 0, {0}},
	{"tokenizer", 0, T_STR, T(bench.tokenizer), 0, 0, NULL, NULL, "the model's", "FILE",
	 "--structured: the vocabulary's tokenizer.json", CMD(BENCH), 0, {0}},
	{"served-model-name", 0, T_STR, F(served_model_name), 0, 0, NULL, NULL,
	 "the model folder's name", "NAME", "model name in the API and in metrics",
	 SERVE, 0, {0}},
	{"host", 0, T_STR, F(host), 0, 0, NULL, "127.0.0.1", NULL, "ADDR",
	 "address to listen on (0.0.0.0: all IPv4)",
	 SERVE, 0, {0}},
	{"port", 0, T_INT, F(port), 1, 65535, NULL, "8080", NULL, "N", "TCP port",
	 SERVE, 0, {0}},
	{"agent-port", 0, T_INT, F(agent_port), 0, 65535, NULL, "0", "0 (off)", "N",
	 "HAProxy's agent check on this TCP port: a line\nsaying ready with a weight from the free KV\n"
	 "cache and the queue, drain, or down",
	 SERVE, 0, {0}},
	{"api-key", 0, T_STR, F(api_key), 0, 0, NULL, NULL, "none (no authentication)", "KEY",
	 "require \"Authorization: Bearer KEY\" on /v1/*\nand /tokenize, /detokenize (/health, /live,\n"
	 "/metrics stay open)",
	 SERVE, 0, {0}},
	{"api-key-file", 0, T_STR, F(api_key_file), 0, 0, NULL, NULL, "none", "FILE",
	 "API keys, one a line (blank and # lines\nignored), each accepted (with --api-key's);\n"
	 "SIGHUP rereads it (a bad file keeps the old\nkeys)",
	 SERVE, 0, {0}},
	{"tls-cert", 0, T_STR, F(tls_cert), 0, 0, NULL, NULL, "none (plain HTTP)", "FILE",
	 "PEM certificate (chain): serve HTTPS only\n(with --tls-key; both reread on SIGHUP)",
	 SERVE, 0, {0}},
	{"tls-key", 0, T_STR, F(tls_key), 0, 0, NULL, NULL, "none", "FILE",
	 "PEM private key of --tls-cert",
	 SERVE, 0, {0}},
	{"tls-key-password", 0, T_STR, F(tls_key_password), 0, 0, NULL, NULL, "none", "PASS",
	 "passphrase of an encrypted --tls-key (prefer\nthe environment variable to the flag)",
	 SERVE, 0, {0}},
	{"tls-priorities", 0, T_STR, F(tls_priorities), 0, 0, NULL, NULL, "NORMAL", "STR",
	 "GnuTLS priority string (ciphers, versions),\ne.g. SECURE256:-VERS-TLS1.2",
	 SERVE, 0, {0}},
	{"max-connections", 0, T_INT, F(max_connections), 1, 65536, NULL, "1024", NULL, "N",
	 "open connections; more wait in the kernel's\nlisten queue until one closes",
	 SERVE, 0, {0}},
	{"max-connections-per-ip", 0, T_INT, F(max_connections_per_ip), 0, 65536, NULL, "0",
	 "0 (no limit)", "N", "open connections from one address; more are\nclosed at once",
	 SERVE, 0, {0}},
	{"max-body-bytes", 0, T_SIZE, F(max_body_bytes), KIB, GIB, NULL, "1M", NULL, "SIZE",
	 "largest request body (bigger: 413), e.g. 4M",
	 SERVE, 0, {0}},
	{"cors-origin", 0, T_STR, F(cors_origin), 0, 0, NULL, NULL, "none (CORS off)", "ORIGIN",
	 "allowed browser origin, or * for any",
	 SERVE, 0, {0}},
	{"keepalive-s", 0, T_INT, F(keepalive_s), 0, 3600, NULL, "10", NULL, "N",
	 "SSE comment after N idle seconds (0: never)",
	 SERVE, 0, {0}},
	{"shutdown-timeout-s", 0, T_INT, F(shutdown_timeout_s), 0, 86400, NULL, "30", NULL, "N",
	 "on SIGTERM, seconds running requests may take",
	 SERVE, 0, {0}},
	{"responses-store", 0, T_INT, F(responses_store), 0, 1000000, NULL, "1000", NULL, "N",
	 "/v1/responses kept in memory for\nprevious_response_id and GET (least recently\nused "
	 "evicted; 0: none)",
	 SERVE, 0, {0}},
	{"grammar-cache", 0, T_INT, F(grammar_cache), 1, 100000, NULL, "64", NULL, "N",
	 "structured outputs: compiled grammars kept,\nwith their token masks (least recently used\n"
	 "evicted)",
	 SERVE, 0, {0}},
	{"log-format", 0, T_ENUM, F(log_format), 0, 0, log_formats, "text", NULL, "FMT",
	 "text or json (one object per line)",
	 SERVE, 0, {0}},
	{"access-log", 0, T_ENUM, F(access_log), 0, 0, on_off, "on", NULL, "on|off",
	 "a line per request on stderr: time, method,\npath, status, tokens, latency, request id",
	 SERVE, 0, {0}},
	{"log-level", 0, T_ENUM, F(log_level), 0, 0, log_levels, "info", NULL, "LEVEL",
	 "error, warn, info or debug",
	 SERVE, 0, {0}},
	{"backend", 0, T_STR, F(backend), 0, 0, NULL, "cpu", NULL, "NAME",
	 "compute backend: cpu, rocm (a GPU), rocm-sim\n(the GPU kernels on a host model; tests)",
	 LOADING, TOOLS_LOADING, {0}},
	{"device", 0, T_INT, F(device), 0, 255, NULL, "0", NULL, "N",
	 "which GPU, with --backend rocm (one per daemon)", LOADING, TOOLS_LOADING,
	 {.defer = defer_device, .bad = "(a GPU number, 0 to 255)"}},
	{"threads", 0, T_INT, F(threads), 0, 1024, NULL, "0", "0 (one per available CPU)", "N",
	 "worker threads", TUNING, 0,
	 {.lo = 1, .hi = 1024, .bad = "is not in [1, 1024]", .shown = "one per available CPU"}},
	{"kernels", 0, T_STR, F(kernels), 0, 0, NULL, "auto", NULL, "SET", "kernel set (see below)",
	 LOADING, TOOLS_LOADING, {0}},
	{"exact", 0, T_BOOL, F(exact), 0, 0, NULL, "false", NULL, NULL,
	 "only kernels that keep fp32 activations (no\nint8/bf16 rounding of activations): logits\n"
	 "match the reference to fp32 rounding", TUNING, TOOLS_LOADING, {0}},
	{"dense", 0, T_ENUM, F(dense), 0, 0, dense_modes, "auto", NULL, "TYPE",
	 "attention projections and lm_head: int8 (a\n"
	 "scale per 32 columns, requantized at load)\n"
	 "or bf16 (as stored); auto: int8 on the CPU\n"
	 "unless --exact",
	 TUNING, TOOLS_LOADING, {.defer = defer_dense, .bad = "(use auto, bf16 or int8)"}},
	{"dense-int8", 0, T_BOOL, F(dense_int8), 0, 0, NULL, "false", NULL, NULL,
	 "the same as --dense int8", TUNING, TOOLS_LOADING,
	 {.alias = "dense", .alias_value = "int8"}},
	{"numa", 0, T_ENUM, F(numa), 0, 0, numa_modes, "auto", NULL, "MODE",
	 "auto (interleave weights over several NUMA\nnodes), off or interleave", TUNING, TOOLS_LOADING,
	 {.defer = defer_numa, .bad = "(use auto, off or interleave)"}},
	{"kv-dtype", 0, T_ENUM, F(kv_dtype), 0, 0, kv_dtypes, "auto", NULL, "TYPE",
	 "how the KV cache stores keys and values: bf16\n"
	 "(attention accumulates in fp32), f32 (twice the\n"
	 "bytes), fp8 (e4m3, a scale per position and\n"
	 "kv head: about half bf16's bytes), auto: bf16,\n"
	 "f32 with --exact",
	 TUNING, TOOLS_LOADING, {.defer = defer_kv_dtype, .bad = "(use auto, bf16, f32 or fp8)"}},
	{"attn-products", 0, T_ENUM, F(attn_products), 0, 0, attn_products, "auto", NULL, "P",
	 "on a bf16 cache, bf16: q and the probabilities\n"
	 "rounded to bf16 before their products (as GPU\n"
	 "flash attention; 2x the multiply-adds with\n"
	 "AVX512-BF16), or f32; auto: bf16 where the CPU\n"
	 "has AVX512-BF16, unless --exact",
	 TUNING, TOOLS_LOADING, {.defer = defer_attn_products, .bad = "(use auto, f32 or bf16)"}},
	{"kv-cache-bytes", 0, T_SIZE, F(kv_cache_bytes), 0, 1024 * 1024 * GIB, NULL, "0",
	 "0 (half the free memory; <= 4 contexts)", "SIZE",
	 "KV-cache size, e.g. 8G (the default: half\nthe memory free after loading, at most four\nfull contexts)",
	 SERVE, 0, {0}},
	{"max-queue", 0, T_INT, F(max_queue), 1, 1000000, NULL, "256", NULL, "N",
	 "waiting requests beyond which new ones get 429",
	 SERVE, 0, {0}},
	{"max-running", 0, T_INT, F(max_running), 1, 4096, NULL, "64", NULL, "N",
	 "requests decoding together",
	 SERVE, 0, {0}},
	{"max-batch-tokens", 0, T_I64, F(max_batch_tokens), 1, 1 << 20, NULL, "256", NULL, "N",
	 "tokens per forward pass (decodes + prefill)",
	 SERVE, 0, {0}},
	{"ctx-size", 0, T_I64, F(ctx_size), 0, 1 << 24, NULL, "0",
	 "0 (the model's, or what the pool holds)", "N",
	 "context per request (prompt + generated), at\nmost the model's",
	 SERVE, 0, {0}},
	{"max-tokens", 0, T_I64, F(max_tokens), 0, 1 << 24, NULL, "0",
	 "0 (the rest of the context)", "N", "tokens a chat or responses request may generate\n"
	 "when it sets no limit (agents such as Codex\nsend none); the most a messages request gets\n"
	 "(Claude Code asks for 32000)",
	 SERVE, 0, {0}},
	{"no-prefix-cache", 0, T_BOOL, F(no_prefix_cache), 0, 0, NULL, "false", NULL, NULL,
	 "turn prefix-cache reuse off",
	 SERVE, 0, {0}},
	{"speculative", 0, T_ENUM, F(speculative), 0, 0, spec_modes, "auto", NULL, "MODE",
	 "auto: draft tokens from n-gram matches of the\nrequest's own tokens and of a shared cache of\n"
	 "recent answers, verified in the same batched\npass (output identical to off); each draft's\n"
	 "length follows the measured cost of a pass\nand the acceptance seen; off: none",
	 SERVE, 0, {0}},
	{"spec-max-tokens", 0, T_INT, F(spec_max_tokens), 1, MS_SPEC_MAX_TOKENS, NULL, "32", NULL,
	 "N", "a draft's length at most (and below\n--max-batch-tokens)",
	 SERVE, 0, {0}},
	{"spec-cache-bytes", 0, T_SIZE, F(spec_cache_bytes), 0, 1024 * GIB, NULL, "64M", NULL,
	 "SIZE", "the shared cache of recent prompts' tails\nand answers that drafts come from (0: none;\n"
	 "a request still drafts from its own tokens)",
	 SERVE, 0, {0}},
};

const int ms_opt_n_rows = (int)(sizeof(ms_opt_rows) / sizeof(ms_opt_rows[0]));
_Static_assert(sizeof(ms_opt_rows) / sizeof(ms_opt_rows[0]) <= MS_CLI_MAX_ROWS,
	       "MS_CLI_MAX_ROWS holds the table");

const struct cmd_text ms_opt_cmds[MS_CLI_N_CMDS] = {
	[MS_CLI_SERVE] = {"serve", "moeserve serve [OPTIONS]",
	    "Serve a model over HTTP: the OpenAI-compatible API, /health and /metrics.\n\n"
	    "Every option can also be set by the environment variable shown under it,\n"
	    "or by a JSON config file. Precedence, highest first: flag > environment\n"
	    "variable > config file > default. The config file (--config FILE, or\n"
	    "$MOESERVE_CONFIG) holds one object whose keys are the option names with\n"
	    "underscores: {\"port\": 9000, \"api_key\": \"...\", \"max_body_bytes\": \"4M\"}.\n"
	    "Unknown keys are errors. SIZE is bytes or a number with K, M, G or T.\n"},
	[MS_CLI_GENERATE] = {"generate",
	    "moeserve generate [--model DIR] (--tokens IDS | --prompt TEXT) [options]",
	    "Greedy decoding. The generated ids are printed space-separated as the last\n"
	    "line of stdout (after the generated text, with --prompt); progress goes to\n"
	    "stderr. An environment variable shown under an option is read when the\n"
	    "flag is not given.\n"},
	[MS_CLI_INSPECT] = {"inspect", "moeserve inspect [--model DIR] [options]",
	    "Load a checkpoint and describe it: architecture and sizes, the quantization\n"
	    "scheme of each tensor group, the kernel chosen for each, and the weight bytes.\n"},
	[MS_CLI_DEQUANT] = {"dequant", "moeserve dequant [--model DIR] --module NAME [--out FILE]",
	    "Write one loaded weight matrix, decoded to float32, as the kernels see it:\n"
	    "little-endian [rows x cols], row-major, to FILE; print \"rows cols\" as the last\n"
	    "line of stdout. NAME is a projection (model.layers.0.self_attn.q_proj,\n"
	    "model.layers.0.mlp.router, lm_head, model.embed_tokens) or an expert's\n"
	    "model.layers.L.mlp.experts.E.gate_up (gate on even rows, up on odd rows)\n"
	    "or ...experts.E.down, whatever the checkpoint's layout. For tests and audits.\n"},
	[MS_CLI_TOKENIZE] = {"tokenize", "moeserve tokenize (--model DIR | --tokenizer FILE) [options]",
	    "Encode UTF-8 from stdin and print the ids, space-separated, as the last line of\n"
	    "stdout; with --decode, read ids (space- or comma-separated) and print the text.\n"
	    "With --model DIR (default: $MOESERVE_MODEL, else the built-in model), the\n"
	    "tokenizer is DIR/tokenizer.json.\n"},
	[MS_CLI_BENCH] = {"bench",
	    "moeserve bench [--model DIR] [--threads N] [--kernels SET]\n"
	    "                      [--backend NAME] [--device N]\n"
	    "                      [--prompt-tokens N] [--decode-tokens N] [--json]\n"
	    "                      [--baseline SET] [--baseline-tokens N]\n"
	    "                      [--context N[,N...] [--attention]]\n"
	    "                      [--structured [--tokenizer FILE]] [--speculative]",
	    "Measure load time and memory, prefill speed against oneDNN's bf16 matmul,\n"
	    "decode speed at batch 1, 4, 8 and 16 against the memory-bandwidth roofline\n"
	    "(weight bytes the backend counts per step over the bandwidth measured in\n"
	    "the same run), and print the speed targets with PASS/BELOW. Prints a\n"
	    "table and, last, one JSON line.\n\n"
	    "On a GPU backend (--backend rocm, rocm-sim): load time, prefill, decode at\n"
	    "batch 1, 8 and 32 (rocm-sim: 1, 2, 4), and each decode step's weight bytes\n"
	    "over its time as a share of the bandwidth the device's copy kernel reaches\n"
	    "in the same run.\n"},
};

const char *ms_cli_cmd_name(enum ms_cli_cmd cmd)
{
	return (unsigned)cmd < MS_CLI_N_CMDS ? ms_opt_cmds[cmd].name : "?";
}

/* ---- enum names ---- */

const char *ms_log_format_name(enum ms_log_format f)
{
	return (unsigned)f < 2 ? log_formats[f] : "?";
}

const char *ms_log_level_name(enum ms_log_level l)
{
	return (unsigned)l < 4 ? log_levels[l] : "?";
}

const char *ms_serve_numa_name(enum ms_numa_mode n)
{
	return (unsigned)n < 3 ? numa_modes[n] : "?";
}

enum ms_kv_dtype ms_serve_kv_dtype(const struct ms_serve_options *o)
{
	switch (o->kv_dtype) {
	case MS_SERVE_KV_F32: return MS_KV_F32;
	case MS_SERVE_KV_BF16: return MS_KV_BF16;
	case MS_SERVE_KV_FP8: return MS_KV_FP8;
	default: return ms_kv_dtype_auto(o->exact);
	}
}
