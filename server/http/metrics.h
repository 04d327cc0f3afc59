/*
 * metrics.h: the server's Prometheus metrics: thread-safe counters and
 * histograms, and their rendering in the text exposition format 0.0.4
 * (what GET /metrics serves, with MS_METRICS_CONTENT_TYPE).
 *
 * Names follow vLLM's with the prefix `moeserve:` instead of `vllm:`, so a
 * vLLM dashboard ports by renaming the prefix (inter-token latency keeps the
 * older name time_per_output_token_seconds, which SGLang uses too). Every
 * sample carries model_name="<served model name>". Gauges, the token
 * counters and speculative decoding's are read from the engine's stats at
 * render time; the rest is recorded by the HTTP layer through the calls
 * below.
 *
 * README table (copy as is):
 *
 * | Metric | Type | Labels | Meaning |
 * |---|---|---|---|
 * | `moeserve:model_loaded` | gauge | `model_name` | 1 once the model is loaded and requests are served, 0 while loading |
 * | `moeserve:num_requests_running` | gauge | `model_name` | Requests in the running batch (prefilling or decoding) |
 * | `moeserve:num_requests_waiting` | gauge | `model_name` | Requests admitted and waiting for a batch slot |
 * | `moeserve:kv_cache_usage_perc` | gauge | `model_name` | Fraction of KV-cache pages held by requests, 0..1 (cached prefix pages nobody holds are free) |
 * | `moeserve:kv_cache_pages_total` | gauge | `model_name` | KV-cache pages in the pool |
 * | `moeserve:prompt_tokens_total` | counter | `model_name` | Prompt tokens prefilled (computed); prefix-cache hits are counted apart |
 * | `moeserve:prompt_tokens_cached_total` | counter | `model_name` | Prompt tokens served from the prefix cache instead of being computed |
 * | `moeserve:generation_tokens_total` | counter | `model_name` | Tokens generated |
 * | `moeserve:request_success_total` | counter | `model_name`, `finished_reason` | Finished requests by reason: `stop`, `length`, `tool_calls`, `cancelled`, `error` (others as reported, `other` past 16 distinct reasons) |
 * | `moeserve:http_requests_total` | counter | `model_name`, `method`, `status` | HTTP responses by method (`GET`, `POST`, ..., `other`) and status code |
 * | `moeserve:harmony_parse_errors_total` | counter | `model_name` | Malformed harmony output from the model, recovered as plain content |
 * | `moeserve:spec_decode_num_drafts_total` | counter | `model_name` | Speculative decoding: drafts verified (a request's step that ran drafted tokens) |
 * | `moeserve:spec_decode_num_draft_tokens_total` | counter | `model_name` | Drafted tokens verified |
 * | `moeserve:spec_decode_num_accepted_tokens_total` | counter | `model_name` | Drafted tokens accepted (the model's own draw at that position) |
 * | `moeserve:spec_decode_num_accepted_tokens_per_pos_total` | counter | `model_name`, `position` | Drafts whose token at `position` (0: the first) was accepted; positions 0 up to the last that ever counted |
 * | `moeserve:spec_decode_cache_bytes` | gauge | `model_name` | Bytes of the shared n-gram cache of recent answers (at most `--spec-cache-bytes`; 0: none, or `--speculative off`) |
 * | `moeserve:spec_decode_index_bytes` | gauge | `model_name` | Bytes of the running requests' own n-gram indexes |
 * | `moeserve:tls_enabled` | gauge | `model_name` | 1 when the server speaks HTTPS only (`--tls-cert`) |
 * | `moeserve:api_keys` | gauge | `model_name` | API keys accepted now (`--api-key` and `--api-key-file`; 0: no authentication) |
 * | `moeserve:http_connections` | gauge | `model_name` | Open HTTP connections (at `--max-connections`, new ones wait) |
 * | `moeserve:auth_failures_total` | counter | `model_name` | Requests refused with 401 (no valid API key) |
 * | `moeserve:api_key_reloads_total` | counter | `model_name`, `result` | SIGHUP rereadings of `--api-key-file`: `ok`, or `error` (the old keys kept) |
 * | `moeserve:tls_certificate_reloads_total` | counter | `model_name`, `result` | SIGHUP rereadings of `--tls-cert` and `--tls-key`: `ok`, or `error` (the old pair served) |
 * | `moeserve:tls_certificate_expiry_timestamp_seconds` | gauge | `model_name` | When the served certificate expires (Unix time; 0: no TLS) |
 * | `moeserve:time_to_first_token_seconds` | histogram | `model_name` | Arrival to first generated token (s), 0.001..2560 |
 * | `moeserve:time_per_output_token_seconds` | histogram | `model_name` | Inter-token latency: time between two generated tokens of a request (s), 0.01..80 |
 * | `moeserve:e2e_request_latency_seconds` | histogram | `model_name` | Arrival to the last token (s), 0.3..7680 |
 * | `moeserve:request_queue_time_seconds` | histogram | `model_name` | Arrival to first scheduling (s), 0.3..7680 |
 * | `moeserve:request_prompt_tokens` | histogram | `model_name` | Prompt length per finished request (tokens, cached ones included), 1-2-5 steps 1..100000 |
 * | `moeserve:request_generation_tokens` | histogram | `model_name` | Generated tokens per finished request, 1-2-5 steps 1..100000 |
 *
 * Histograms expose `_bucket{le="..."}` (cumulative, ending with `le="+Inf"`),
 * `_sum` and `_count`, like every Prometheus client.
 */
#ifndef MS_METRICS_H
#define MS_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "ms-error.h"

/* The Content-Type of what ms_metrics_render produces. */
#define MS_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct ms_metrics;

/* model_name: the value of every sample's model_name label (copied; any
 * bytes, escaped on output; must be non-empty). -EINVAL or -ENOMEM. */
int ms_metrics_init(struct ms_metrics **out, const char *model_name, struct ms_err *err);
/* NULL is a no-op. No other thread may be using m. */
void ms_metrics_free(struct ms_metrics *m);

/* Every call below is safe from any thread, and a no-op when m is NULL. */

/* One finished request (its FINISH event), whatever its end:
 *   reason         finished_reason label: "stop", "length", "tool_calls",
 *                  "cancelled", "error" or another short name (NULL or
 *                  over 31 bytes: "other"); at most 16 distinct ones are
 *                  kept, later ones count as "other"
 *   e2e_s          arrival to finish (seconds)
 *   queue_s        arrival to first scheduling (seconds)
 *   ttft_s         arrival to first token; < 0 when no token came (a
 *                  cancelled or failed request): no observation
 *   prompt_tokens  the whole prompt, cached tokens included
 *   cached_tokens  of which served from the prefix cache (not recorded:
 *                  the engine's counter is rendered instead; kept so that
 *                  the call site passes the FINISH event's numbers as is)
 *   generation_tokens  tokens generated
 * Negative or non-finite times and negative counts are not observed. */
void ms_metrics_request_finished(struct ms_metrics *m, const char *reason, double e2e_s,
				 double queue_s, double ttft_s, int64_t prompt_tokens,
				 int64_t cached_tokens, int64_t generation_tokens);

/* The time between two consecutive generated tokens of one request (s). */
void ms_metrics_inter_token(struct ms_metrics *m, double s);

/* One HTTP response: method ("GET", "POST", ...; anything else counts as
 * "other") and status code (100..599; others count as status="0"). */
void ms_metrics_http(struct ms_metrics *m, const char *method, int status);

/* n more pieces of malformed model output recovered as content. */
void ms_metrics_harmony_error(struct ms_metrics *m, uint64_t n);

/* Structured outputs' grammar cache, as read at a scrape. */
struct ms_metrics_grammars {
	uint64_t compiles, hits;
	double compile_s;
};

void ms_metrics_set_grammars(struct ms_metrics *m, const struct ms_metrics_grammars *g);

/* One request refused for want of a valid API key (401). */
void ms_metrics_auth_failure(struct ms_metrics *m);
/* One SIGHUP reload of the key file: ok (api_keys: the new set's size) or
 * not (the old keys kept). */
void ms_metrics_key_reload(struct ms_metrics *m, bool ok, int api_keys);
/* One SIGHUP reload of the TLS certificate and key: ok or not (the old
 * pair served). */
void ms_metrics_tls_reload(struct ms_metrics *m, bool ok);
/* The served certificate's expiry (Unix time), at start and each reload. */
void ms_metrics_tls_cert(struct ms_metrics *m, long long not_after);
/* At start: HTTPS or not, and the keys accepted (0: no authentication). */
void ms_metrics_set_transport(struct ms_metrics *m, bool tls, int api_keys);
/* Open connections, as read at a scrape. */
void ms_metrics_set_connections(struct ms_metrics *m, unsigned open);

/* The model_loaded gauge. */
void ms_metrics_set_loaded(struct ms_metrics *m, bool loaded);

/* Render everything in the text format. st: the engine's stats, or NULL
 * while there is no engine (gauges and token counters read 0). On success
 * *out is a NUL-terminated malloc'd string of *len bytes that the caller
 * frees with free(). -ENOMEM otherwise (nothing to free). */
int ms_metrics_render(struct ms_metrics *m, const struct ms_engine_stats *st, char **out,
		      size_t *len, struct ms_err *err);

#endif
