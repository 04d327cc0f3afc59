/*
 * job.h: a parsed generation request run on the engine (server/api).
 *
 * A job is one HTTP request's generation: one engine request per choice
 * (n, times the prompts), each with its own queue of copied events. The
 * engine's callback (engine thread) appends to the queue and wakes the
 * connection; the connection thread waits (ms_job_advance), hands each
 * event to the response writer (answer.h) and checks every 100 ms that
 * its client is still there: a client that left cancels every call
 * (within one engine step). The calls' shared state is freed by whichever
 * of the engine and the connection lets go last; the rest of the job
 * belongs to the connection.
 */
#ifndef MS_API_JOB_H
#define MS_API_JOB_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "harmony.h"
#include "ms-error.h"
#include "ms-strbuf.h"
#include "sampler.h"

struct ms_api;
struct ms_req_gen;
struct ms_gen;   /* the calls and their queues (job.c) */
struct ms_rsp;
struct ms_msg;

/* One engine event, copied (the engine's lives only during its callback). */
struct ms_ev {
	enum ms_event_kind kind;
	int32_t token;
	char *text;                /* TOKEN, FINISH: len bytes, NUL-terminated; or NULL */
	size_t len;
	bool has_lp;
	struct ms_token_logprobs lp;
	enum ms_finish finish;
	char *error;               /* FINISH_ERROR: the engine's reason, or NULL */
	bool weights_gone;         /* FINISH_ERROR: the mapped weights were lost (503) */
	int64_t prompt_tokens, cached_tokens, completion_tokens;
};

/* What one choice has produced: kept for the final JSON, or for the
 * stream's deltas. */
struct ms_choice {
	int prompt;                          /* the prompt it continues */
	struct ms_strbuf text, reasoning;
	cJSON *lp_tokens, *lp_values, *lp_top, *lp_offset; /* completions' logprobs */
	int64_t offset;                      /* characters so far (text_offset) */
	cJSON *chat_lp;                      /* chat's logprobs.content */
	cJSON *tool_calls;                   /* chat */
	int n_calls;
	struct ms_harmony_parser hp;         /* chat */
	struct ms_stopper stop;              /* chat: the stop strings, on the content */
	bool stopped;                        /* one matched: the rest is dropped */
	bool started;                        /* completions: echo written; stream: role sent */
	const char *fin;                     /* finish_reason, once finished */
	int64_t prompt_tok, cached_tok, completion_tok;
};

struct ms_job {
	struct ms_api *api;
	struct ms_req_gen *rq;
	struct ms_gen *g;
	int n;                   /* choices */
	struct ms_choice *ch;
	char id[64];
	long created;
	struct ms_strbuf out;    /* stream: SSE text not sent yet, from out_pos */
	size_t out_pos;
	bool finished_all;       /* every call finished and its events consumed */
	int harmony_errors;
	unsigned long json0;     /* this thread's cJSON failures when the job began */
	bool failed;             /* an allocation failed or a step did: no answer */
	char error[256];         /* the engine's reason for the first failed step */
	bool weights_gone;       /* a step failed because the weights' file shrank */
	struct ms_rsp *rsp;      /* /v1/responses: the response being built (responses-answer.c) */
	struct ms_msg *msg;      /* /v1/messages: the message being built (messages-answer.c) */
};

/* A job for rq (taken: freed with the job, or now when this fails); NULL
 * when out of memory. On the connection's thread. */
struct ms_job *ms_job_new(struct ms_api *api, struct ms_req_gen *rq);

/* Queue every call; on a refusal the calls already queued are cancelled
 * and err says why (the engine's code). */
int ms_job_submit(struct ms_job *jb, struct ms_err *err);

/* Wait until an event arrived or every call finished, and consume what
 * arrived. gone(ctx) is asked every 100 ms: when the client is gone the
 * calls are cancelled and false is returned. With keepalive, it returns
 * once keepalive_at (ms_now_s) has passed with *keepalive set. */
bool ms_job_advance(struct ms_job *jb, bool (*gone)(void *ctx), void *ctx, double keepalive_at,
		    bool *keepalive);

void ms_job_cancel(struct ms_job *jb);

/* An allocation failed somewhere in the job, or an engine step did: its
 * answer is incomplete. */
bool ms_job_failed(const struct ms_job *jb);

/* Why a failed job failed, for the client: the engine's reason with its
 * status (503 when the weights are gone: the daemon needs a restart; 500
 * otherwise), or "out of memory" (500). */
const char *ms_job_error(const struct ms_job *jb, int *status);

void ms_job_free(struct ms_job *jb);  /* NULL is fine */

#endif
