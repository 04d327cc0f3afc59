/*
 * answer.h: the OpenAI response bodies and stream chunks (server/api).
 *
 * Builders return cJSON trees (printed and checked by the caller, see
 * ms-json.h); the job's writers append to the job's state, and a part they
 * cannot build marks the job failed (ms_job_failed), so that no answer goes
 * out without it.
 */
#ifndef MS_API_ANSWER_H
#define MS_API_ANSWER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api.h"
#include "job.h"

/* One event of choice i: into the choice's answer, and for a stream the
 * chunks it makes onto jb->out (completions: text and logprobs, echo
 * first; chat: the harmony parser's content, reasoning and tool-call
 * deltas, the role chunk first). */
void ms_answer_event(struct ms_job *jb, int i, const struct ms_ev *e);

/* A stream's end, every choice finished: the usage chunk when asked
 * (stream_options.include_usage), then "data: [DONE]". */
void ms_answer_stream_end(struct ms_job *jb);

/* The non-streamed answer, every choice finished (takes the choices' trees). */
cJSON *ms_answer_final(struct ms_job *jb);

/* {"error": {"message", "type", "param" (null when NULL), "code"}} */
cJSON *ms_answer_error(int status, const char *type, const char *param, const char *msg);
/* The same with a code string ("context_length_exceeded") for "code". */
cJSON *ms_answer_error_code(int status, const char *type, const char *param, const char *code,
			  const char *msg);

/* Anthropic's {"type": "error", "error": {"type", "message"}}. */
cJSON *ms_answer_anthropic_error(const char *type, const char *msg);

/* What is sent when even the error cannot be built: a 500's envelope, and
 * the SSE event that ends a stream which cannot go on, in the endpoint's
 * dialect. Static, so that sending them allocates nothing of ours. */
const char *ms_answer_oom_body(enum ms_dialect d);
const char *ms_answer_oom_event(enum ms_dialect d);

/* A streamed job's dialect, its idle keep-alive (an SSE comment, or
 * Anthropic's ping event), and the event that ends a failed stream
 * (malloc'd; NULL when out of memory). */
enum ms_dialect ms_answer_dialect(const struct ms_job *jb);
const char *ms_answer_keepalive(const struct ms_job *jb);
char *ms_answer_error_event(const struct ms_job *jb);

cJSON *ms_answer_status(const char *status, const char *reason);   /* /health, /live */
cJSON *ms_answer_model(const char *name, int64_t max_model_len);   /* /v1/models/{id} */
cJSON *ms_answer_models(const char *name, int64_t max_model_len);  /* /v1/models */
cJSON *ms_answer_tokens(const int32_t *ids, size_t n, int64_t max_model_len); /* /tokenize */
cJSON *ms_answer_text(const char *text);                            /* /detokenize */

#endif
