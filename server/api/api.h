/*
 * api.h: the API's state and its endpoints, apart from any transport.
 *
 * struct ms_api is what answering a request needs: the model, tokenizer
 * and engine once loaded, the compiled grammars, the Responses store and
 * the counters that name answers. Each endpoint takes a parsed body (or a
 * path's argument) and fills a struct ms_api_reply: a JSON answer, an
 * error envelope already printed, or a submitted job whose answer the
 * transport streams or waits for (job.h). Nothing here knows of
 * libmicrohttpd (tests/tree/layering.py), so the endpoints run on JSON text in
 * tests, and another transport could serve them.
 */
#ifndef MS_API_H
#define MS_API_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "harmony.h"
#include "metrics.h"
#include "model.h"
#include "request.h"
#include "responses-bg.h"
#include "responses-store.h"
#include "tokenizer.h"

struct ms_job;

#define MS_API_NOTED 32   /* unknown field names remembered for their log line */

/* What serve's options say of the API. */
struct ms_api_config {
	const char *model_name;         /* the served model id */
	int keepalive_s;                /* SSE comment interval while waiting */
	int responses_store;            /* responses kept (responses-answer.h); 0: none */
	int64_t max_tokens;             /* chat/responses without a limit; 0: the context */
	int grammar_cache;              /* compiled grammars kept (grammar-cache.h; 0: 64) */
};

struct ms_api {
	struct ms_api_config cfg;
	struct ms_metrics *metrics;     /* or NULL */
	/* set once by ms_api_set_model, before any request reaches an endpoint */
	struct ms_model *model;
	struct ms_tokenizer *tok;       /* NULL: token prompts only */
	struct ms_grammar_cache *grammars; /* structured outputs (with tok) */
	struct ms_engine *engine;
	int64_t max_model_len;
	bool harmony;                   /* the tokenizer has the harmony tokens */
	struct ms_harmony_ids hids;
	int32_t eos[8];
	int n_eos;
	atomic_int in_flight;           /* requests being generated or answered */
	atomic_ullong counter;          /* ids */
	/* unknown request fields logged, each at most once a minute */
	pthread_mutex_t noted_mu;
	struct { char name[64]; double at; } noted[MS_API_NOTED];
	atomic_bool warned_tool;        /* a hosted tool type ignored (logged once) */
	struct ms_responses_store rstore;     /* /v1/responses kept for previous_response_id */
	struct ms_bg_list bgs;                /* background responses (responses-bg.h) */
	/* the weights are gone (a step faulted on their file): the
	 * transport's health says so, so that the daemon is restarted */
	void (*failed)(void *ctx, const char *reason);
	void *failed_ctx;
};

/* The wire dialect of an endpoint's errors and stream events: OpenAI's
 * envelope {"error": {"message", "type", "param", "code"}}, or
 * Anthropic's {"type": "error", "error": {"type", "message"}} with its
 * statuses (an overloaded engine is its 529). */
enum ms_dialect { MS_DIALECT_OPENAI, MS_DIALECT_ANTHROPIC };

/* What an endpoint answers: exactly one of json, text, oom, job and bg. */
struct ms_api_reply {
	enum ms_dialect dialect; /* set by the caller: how errors are written */
	int status;
	cJSON *json;        /* the answer; the transport prints it against the request's
			       count of failed allocations (ms-json.h) */
	char *text;         /* or an error envelope, printed (malloc'd) */
	bool oom;           /* or not even that could be built: ms_answer_oom_body, a 500 */
	struct ms_job *job; /* or a submitted job, to stream or wait for */
	struct ms_bg *bg;   /* or a background run's stream (a reference) from bg_pos */
	long bg_pos;
	const char *allow;  /* a 405's Allow header, or NULL */
	int retry_after;    /* a 429/503's Retry-After (s); 0: 1 */
};

void ms_api_init(struct ms_api *a, const struct ms_api_config *cfg, struct ms_metrics *metrics);
/* The model is loaded: builds the grammar cache (structured outputs are
 * off, said on stderr, when it cannot be). */
void ms_api_set_model(struct ms_api *a, struct ms_model *m, struct ms_tokenizer *tok,
		      struct ms_engine *e);
void ms_api_free(struct ms_api *a);

/* The OpenAI error envelope as r's answer; code: its "code" (NULL: the
 * status). */
void ms_api_error_code(struct ms_api_reply *r, int status, const char *type, const char *param,
		       const char *code, const char *msg);
void ms_api_error(struct ms_api_reply *r, int status, const char *type, const char *param,
		  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void ms_api_verror(struct ms_api_reply *r, int status, const char *type, const char *param,
		   const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

/* A POST body parsed (*req set, true); else false with r the refusal. */
bool ms_api_body(struct ms_api *a, const char *body, size_t len, cJSON **req,
		 struct ms_api_reply *r);

/* The endpoints; each takes req. */
void ms_api_generate(struct ms_api *a, cJSON *req, bool chat, struct ms_api_reply *r);
void ms_api_responses(struct ms_api *a, cJSON *req, struct ms_api_reply *r);
/* POST /v1/responses/input_tokens: {"object": "response.input_tokens",
 * "input_tokens": N} for a Responses body */
void ms_api_response_input_tokens(struct ms_api *a, cJSON *req, struct ms_api_reply *r);
/* POST /v1/messages and /v1/messages/count_tokens (r->dialect Anthropic) */
void ms_api_messages(struct ms_api *a, cJSON *req, struct ms_api_reply *r);
void ms_api_count_tokens(struct ms_api *a, cJSON *req, struct ms_api_reply *r);
void ms_api_tokenize(struct ms_api *a, cJSON *req, struct ms_api_reply *r);
void ms_api_detokenize(struct ms_api *a, cJSON *req, struct ms_api_reply *r);
/* GET or DELETE /v1/responses/{id}; a GET with stream reads a background
 * response's stream from the event after starting_after (-1: all). */
void ms_api_response_id(struct ms_api *a, const char *id, bool del, bool stream,
			long starting_after, struct ms_api_reply *r);
/* POST /v1/responses/{id}/cancel, GET /v1/responses/{id}/input_items */
void ms_api_response_cancel(struct ms_api *a, const char *id, struct ms_api_reply *r);
void ms_api_response_input_items(struct ms_api *a, const char *id, struct ms_api_reply *r);
/* GET /v1/models (one NULL) and /v1/models/{one} */
void ms_api_models(struct ms_api *a, const char *one, struct ms_api_reply *r);

/* The answer of a job run to its end, or its error (jb freed either way). */
void ms_api_job_answer(struct ms_job *jb, struct ms_api_reply *r);

#endif
