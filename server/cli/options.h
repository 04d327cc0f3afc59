/*
 * options.h: the options of every moeserve command, from one table
 * (options-table.c): serve's configuration, and the flags of generate,
 * inspect, dequant, tokenize and bench. A row says which commands accept
 * it; the model-loading options (--model, --backend, --threads, ...) are
 * one row each, shared by every command that loads a model.
 *
 * `serve` reads every setting from, highest precedence first:, highest precedence first:
 *   1. a command-line flag        --max-queue 512   (or --max-queue=512)
 *   2. an environment variable    MOESERVE_MAX_QUEUE=512
 *   3. the JSON config file       {"max_queue": 512}
 *      named by --config FILE, else by $MOESERVE_CONFIG
 *   4. the default.
 * The environment name is MOESERVE_ + the option's name in upper case with
 * dashes as underscores; the JSON key is the option's name with dashes as
 * underscores. An empty environment variable counts as unset.
 *
 * Parsing is strict and names the culprit and where it came from: unknown
 * flags and unknown JSON keys are errors, so is a JSON value of the wrong
 * type, and every value is range-checked. Sizes (max_body_bytes,
 * kv_cache_bytes, spec_cache_bytes) take an integer number of bytes, or a
 * string with a binary suffix K, M, G, T (KiB... accepted too): "512K",
 * "8GiB".
 */
#ifndef MS_OPTIONS_H
#define MS_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h" /* enum ms_numa_mode */
#include "cpu.h"     /* ms_cpu_kernel_sets */
#include "kv-cache.h" /* enum ms_kv_dtype */
#include "ms-error.h"
#include "ms-strbuf.h"

enum ms_log_format {
	MS_LOG_FORMAT_TEXT,   /* one human-readable line per event */
	MS_LOG_FORMAT_JSON,   /* one JSON object per line */
};

enum ms_access_log { MS_ACCESS_LOG_ON, MS_ACCESS_LOG_OFF };

enum ms_log_level {
	MS_LOG_LEVEL_ERROR,
	MS_LOG_LEVEL_WARN,
	MS_LOG_LEVEL_INFO,
	MS_LOG_LEVEL_DEBUG,
};

/* Strings are owned (ms_serve_options_free) and, when set, non-empty. */
/* --kv-dtype: auto (bf16; f32 with --exact, ms_kv_dtype_auto) or one dtype */
enum ms_serve_kv {
	MS_SERVE_KV_AUTO,
	MS_SERVE_KV_F32,
	MS_SERVE_KV_BF16,
	MS_SERVE_KV_FP8,
};

/* --speculative: auto (drafts where they pay, engine/spec.h) or off */
enum ms_serve_spec {
	MS_SERVE_SPEC_AUTO,
	MS_SERVE_SPEC_OFF,
};

struct ms_serve_options {
	/* model */
	char *model;               /* checkpoint folder; NULL: the caller's default model */
	char *served_model_name;   /* name in the API and metrics; NULL: the model folder's name */
	/* HTTP */
	char *host;                /* listen address, "127.0.0.1" */
	int port;                  /* 8080, in [1, 65535] */
	int agent_port;            /* HAProxy's agent check; 0: off */
	char *api_key;             /* Bearer token the /v1 routes require; NULL: no auth */
	char *api_key_file;        /* file of keys, one a line (auth.h), reread on SIGHUP; with
	                              api_key, both are accepted */
	char *tls_cert;            /* PEM certificate (chain) file: HTTPS; NULL: plain HTTP */
	char *tls_key;             /* PEM private key file (set both or neither) */
	char *tls_key_password;    /* the key's passphrase, when it is encrypted */
	char *tls_priorities;      /* GnuTLS priority string; NULL: libmicrohttpd's "NORMAL" */
	char *tls_cert_pem;        /* tls_cert's and tls_key's contents, read by the parse */
	char *tls_key_pem;
	int max_connections;       /* open connections; beyond it new ones wait in the
	                              listen backlog; 1024 */
	int max_connections_per_ip; /* per client address; beyond it new ones are closed; 0: no
	                              limit */
	uint64_t max_body_bytes;   /* request bodies above this: 413; 1 MiB */
	char *cors_origin;         /* Access-Control-Allow-Origin value; NULL: CORS off */
	int keepalive_s;           /* SSE comment every N idle seconds; 0: off; 10 */
	int shutdown_timeout_s;    /* SIGTERM: seconds to let requests finish; 30 */
	int responses_store;       /* /v1/responses kept in memory (LRU); 1000; 0: none */
	int grammar_cache;         /* compiled grammars kept (LRU); 64 */
	/* logs */
	enum ms_log_format log_format;  /* text */
	enum ms_log_level log_level;    /* info */
	enum ms_access_log access_log;  /* on */
	/* the backend */
	char *backend;             /* registry name (ms_backend_names); "cpu" */
	int device;                /* which GPU on a device backend */
	int threads;               /* worker threads; 0: one per available CPU */
	char *kernels;             /* kernel set, "auto" (one of ms_cpu_kernel_sets; whether
	                              this CPU runs it is ms_cpu_init's to say) */
	enum ms_numa_mode numa;    /* auto */
	enum ms_serve_kv kv_dtype; /* auto (ms_serve_kv_dtype resolves it) */
	bool exact;                /* false: kernels may round activations */
	enum ms_dense_mode dense;  /* auto: the backend's choice (int8 on the CPU unless exact) */
	bool dense_int8;           /* --dense-int8: --dense int8 */
	enum ms_attn_products attn_products; /* auto: the backend's choice */
	/* engine (0: the engine's default, see ms_engine_config_defaults) */
	uint64_t kv_cache_bytes;   /* KV-cache pool size */
	int max_queue;             /* waiting requests beyond which submit is refused (429); 256 */
	int max_running;           /* sequences decoding together; 64 */
	int64_t max_batch_tokens;  /* tokens per forward pass; 256 */
	int64_t ctx_size;          /* context per request (prompt + generated) */
	int64_t max_tokens;        /* chat / responses requests that set no limit: at most
	                              this many tokens; 0: the rest of the context */
	bool no_prefix_cache;      /* turn prefix reuse off; false */
	enum ms_serve_spec speculative; /* auto (generate takes it too) */
	int spec_max_tokens;       /* a draft's length at most, 1..MS_SPEC_MAX_TOKENS; 32 */
	uint64_t spec_cache_bytes; /* the shared n-gram cache; 64 MiB; 0: none (not the engine's
	                              0, which is its default) */
	/* where the configuration came from (informational) */
	char *config;              /* the config file read, or NULL */
};

/* Fill o: defaults, then the config file, then envp, then argv.
 *   argv[0] is skipped (the subcommand's name, as getopt does); the rest are
 *     flags, `--name VALUE` or `--name=VALUE` (booleans: `--name`, or
 *     `--name=true|false`); -m is --model, -h is --help. No positional
 *     arguments.
 *   envp: "NAME=value" strings, NULL-terminated (pass `environ`), or NULL
 *     for none. Only MOESERVE_* names are read; others are ignored.
 * Returns 0 (o filled; free it with ms_serve_options_free), 1 when -h or
 * --help is among the arguments (nothing else is checked; print
 * ms_serve_options_help()), or a negative errno with err naming the option
 * and the source ("--port: ...", "MOESERVE_PORT: ...", "config file F: key
 * \"port\": ..."): -EINVAL for a bad flag or value, -ENOENT for a config or
 * key file that cannot be read, -EBADMSG for a config file that is not a
 * JSON object, -ENOMEM. The API key file is read and checked (auth.h) and
 * the TLS files read here, so their errors name the option too. After a non-zero return o owns nothing (freeing it
 * again is harmless). Reentrant: no global state. */
int ms_serve_options_parse(struct ms_serve_options *o, int argc, char *const *argv,
			   char *const *envp, struct ms_err *err);

/* Release the strings; o is zeroed. NULL is a no-op. */
void ms_serve_options_free(struct ms_serve_options *o);

/* The --help text: usage, precedence, and every option with its environment
 * variable and default. Built on the first call and kept for the process:
 * the same string every call, never freed. */
const char *ms_serve_options_help(void);

/* Names of enum values ("text", "json"; "error".."debug"; "auto", "off",
 * "interleave"), for logs and /props-like endpoints. */
const char *ms_log_format_name(enum ms_log_format f);
const char *ms_log_level_name(enum ms_log_level l);
const char *ms_serve_numa_name(enum ms_numa_mode n);
/* The KV cache's dtype these options ask for, "auto" resolved. */
enum ms_kv_dtype ms_serve_kv_dtype(const struct ms_serve_options *o);

/* ---- every command ---- */

/* The commands of the table; a row's cmds mask has bit 1u << cmd. */
enum ms_cli_cmd {
	MS_CLI_SERVE,
	MS_CLI_GENERATE,
	MS_CLI_INSPECT,
	MS_CLI_DEQUANT,
	MS_CLI_TOKENIZE,
	MS_CLI_BENCH,
	MS_CLI_N_CMDS,
};

/* The rows the table may hold (the tools' deferred values are kept per row). */
#define MS_CLI_MAX_ROWS 96

/* Up to four counts: bench --context N[,N...]. */
struct ms_cli_counts {
	int64_t v[4];
	int n;
};

/* The options of any command. serve's come first, the model-loading ones
 * among them (every command that loads a model reads those fields); then
 * the other commands' own. Strings are owned (ms_cli_options_free). */
struct ms_cli_options {
	struct ms_serve_options s;  /* first: serve's rows' offsets hold in both */
	struct ms_cli_generate {
		char *tokens;           /* --tokens IDS, parsed by generate */
		char *prompt, *prompt_file, *logits_out;
		int64_t max_tokens;     /* 16 */
		bool ignore_eos;
	} generate;
	struct ms_cli_dequant {
		char *module, *out;
	} dequant;
	struct ms_cli_tokenize {
		char *tokenizer, *bench;
		bool special, decode, jsonl, chat;
	} tokenize;
	struct ms_cli_bench {
		char *baseline, *tokenizer;
		int64_t prompt_tokens, decode_tokens, baseline_tokens;  /* 0: the backend's */
		bool json, structured, attention;
		bool speculative;       /* speculative decoding on and off instead */
		struct ms_cli_counts contexts;
	} bench;
	/* The commands other than serve check the values of --device, --dense,
	 * --numa, --kv-dtype and --attn-products when the model loads (where
	 * they always did): the text given (flag, else environment), per row,
	 * until ms_cli_options_resolve. Not owned. */
	const char *deferred[MS_CLI_MAX_ROWS];
};

/* Fill o for cmd, any command but serve (serve: ms_serve_options_parse).
 * argv[0] is the command's name; flags are read with getopt_long, as these
 * commands always were: long options may be abbreviated, getopt prints its
 * own complaint about an unknown option or a missing value (and err says
 * "invalid option"). A flag's value is checked as it is read (err:
 * "--threads: \"0\" is not in [1, 1024]"), except the deferred ones
 * above. The environment (envp: "NAME=value", NULL-terminated) is read for
 * the rows that say so, below the flags. Not reentrant (getopt).
 * Returns 0 (free o with ms_cli_options_free), 1 for -h or --help (o holds
 * nothing), or -EINVAL / -ENOMEM with err (o holds nothing). */
int ms_cli_options_parse(struct ms_cli_options *o, enum ms_cli_cmd cmd, int argc, char **argv,
			 char *const *envp, struct ms_err *err);

/* Check and store the deferred values; -EINVAL with err ("--numa \"x\"
 * (use auto, off or interleave)") for a bad one. */
int ms_cli_options_resolve(struct ms_cli_options *o, struct ms_err *err);

/* Release the strings; o is zeroed. NULL is a no-op. */
void ms_cli_options_free(struct ms_cli_options *o);

/* Append cmd's --help to b: usage, what the command does, every option the
 * table gives it (with its environment variable and default), the
 * epilogue. builtin_model: the built-in model's path to name, or NULL. */
void ms_cli_options_help(struct ms_strbuf *b, enum ms_cli_cmd cmd, const char *builtin_model);

/* The command's name ("generate"). */
const char *ms_cli_cmd_name(enum ms_cli_cmd cmd);

#endif
