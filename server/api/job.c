/* job.c: jobs on the engine (see job.h). */
#include "job.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "ms-json.h"
#include "ms-clock.h"
#include "ms-mapguard.h"
#include "request.h"
#include "answer.h"
#include "messages-answer.h"
#include "responses-answer.h"

struct ms_call {
	struct ms_gen *g;
	uint64_t id;           /* the engine's */
	bool submitted, finished;
	bool lost;             /* an event could not be kept (out of memory) */
	struct ms_ev *q;
	size_t nq, capq, done; /* done: events the connection consumed */
	double t_last;         /* last token's time (inter-token latency) */
};

/* Shared by the engine (one reference per running call) and the job. */
struct ms_gen {
	struct ms_api *api;
	pthread_mutex_t mu;    /* the queues, finished, lost, refs */
	pthread_cond_t cv;
	int refs;
	int n;
	struct ms_call *calls;
};

static void ev_free(struct ms_ev *e)
{
	free(e->text);
	free(e->error);
}

static void gen_unref(struct ms_gen *g)
{
	pthread_mutex_lock(&g->mu);
	bool last = --g->refs == 0;
	pthread_mutex_unlock(&g->mu);
	if (!last)
		return;
	for (int i = 0; i < g->n; i++) {
		for (size_t j = 0; j < g->calls[i].nq; j++)
			ev_free(&g->calls[i].q[j]);
		free(g->calls[i].q);
	}
	free(g->calls);
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
	free(g);
}

static struct ms_gen *gen_new(struct ms_api *api, int n)
{
	struct ms_gen *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->calls = calloc((size_t)n, sizeof(*g->calls));
	if (!g->calls) {
		free(g);
		return NULL;
	}
	g->api = api;
	g->n = n;
	g->refs = 1;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	for (int i = 0; i < n; i++)
		g->calls[i].g = g;
	return g;
}

/* ---- the engine's side ---- */

/* Append v to the call's queue (under the lock); false when it cannot grow. */
static bool enqueue(struct ms_call *cl, struct ms_ev *v)
{
	if (cl->nq == cl->capq) {
		size_t nc = cl->capq ? cl->capq * 2 : 32;
		struct ms_ev *nq = realloc(cl->q, nc * sizeof(*nq));
		if (!nq)
			return false;
		cl->q = nq;
		cl->capq = nc;
	}
	cl->q[cl->nq++] = *v;
	return true;
}

static void finished(struct ms_gen *g, const struct ms_event *e)
{
	if (g->api->metrics)
		ms_metrics_request_finished(g->api->metrics,
					    e->finish == MS_FINISH_CONTEXT ? "length" : ms_finish_name(e->finish),
					    e->e2e_s, e->queue_s, e->ttft_s > 0 ? e->ttft_s : -1,
					    e->prompt_tokens, e->cached_tokens, e->completion_tokens);
	atomic_fetch_sub(&g->api->in_flight, 1);
	gen_unref(g);
}

/* Engine thread: copy the event, wake the connection. An event that cannot
 * be copied marks the call lost (its answer becomes an error), never the
 * daemon. */
static void on_engine_event(void *ctx, const struct ms_event *e)
{
	struct ms_call *cl = ctx;
	struct ms_gen *g = cl->g;
	struct ms_ev v = {
		.kind = e->kind, .token = e->token, .len = e->text_len, .finish = e->finish,
		.prompt_tokens = e->prompt_tokens, .cached_tokens = e->cached_tokens,
		.completion_tokens = e->completion_tokens,
	};
	bool lost = false;
	if (e->text_len) {
		if ((v.text = malloc(e->text_len + 1))) {
			memcpy(v.text, e->text, e->text_len);
			v.text[e->text_len] = '\0';
		} else {
			v.len = 0;
			lost = true;
		}
	}
	/* without its reason (out of memory) the answer says "out of memory" */
	if (e->kind == MS_EV_FINISH && e->finish == MS_FINISH_ERROR && e->error) {
		v.error = strdup(e->error);
		/* the weights' file shrank under the engine (its message says
		 * so): /health tells the orchestrator to restart us, set before
		 * the connection wakes so that its answer agrees (a 503) */
		if ((v.weights_gone = ms_mapguard_faults()))
			g->api->failed(g->api->failed_ctx, e->error);
	}
	if (e->lp) {
		v.has_lp = true;
		v.lp = *e->lp;
	}
	if (e->kind == MS_EV_TOKEN && g->api->metrics) {
		double t = ms_now_s();
		if (cl->t_last > 0)
			ms_metrics_inter_token(g->api->metrics, t - cl->t_last);
		cl->t_last = t;
	}
	pthread_mutex_lock(&g->mu);
	if (!enqueue(cl, &v)) {
		ev_free(&v);
		lost = true;
	}
	cl->lost |= lost;
	bool fin = e->kind == MS_EV_FINISH;
	if (fin)
		cl->finished = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	if (fin)
		finished(g, e);
}

/* ---- the connection's side ---- */

static void gen_cancel(struct ms_gen *g)
{
	for (int i = 0; i < g->n; i++)
		if (g->calls[i].submitted && !g->calls[i].finished)
			ms_engine_cancel(g->api->engine, g->calls[i].id);
}

static bool all_finished(const struct ms_gen *g)
{
	for (int i = 0; i < g->n; i++)
		if (g->calls[i].submitted && !g->calls[i].finished)
			return false;
	return true;
}

/* Per choice: its prompt, logprob arrays, harmony parser, stop strings. */
static bool choices_init(struct ms_job *jb)
{
	const struct ms_req_gen *rq = jb->rq;
	for (int i = 0; i < jb->n; i++) {
		struct ms_choice *ch = &jb->ch[i];
		ch->prompt = i / rq->n;
		if (!rq->chat && rq->logprobs >= 0) {
			ch->lp_tokens = cJSON_CreateArray(), ch->lp_values = cJSON_CreateArray();
			ch->lp_top = cJSON_CreateArray(), ch->lp_offset = cJSON_CreateArray();
			if (!ch->lp_tokens || !ch->lp_values || !ch->lp_top || !ch->lp_offset)
				return false;
		}
		if (!rq->chat)
			continue;
		ms_harmony_parser_init(&ch->hp, &jb->api->hids, NULL, NULL);
		struct ms_err err = {0};
		if (rq->n_stops && ms_stopper_init(&ch->stop, rq->stops, (size_t)rq->n_stops, false, &err))
			return false;
	}
	return true;
}

struct ms_job *ms_job_new(struct ms_api *api, struct ms_req_gen *rq)
{
	struct ms_job *jb = calloc(1, sizeof(*jb));
	if (!jb) {
		ms_req_gen_free(rq);
		return NULL;
	}
	jb->api = api;
	jb->rq = rq;
	jb->json0 = ms_json_failures();
	jb->created = (long)time(NULL);
	uint64_t rid = ((uint64_t)atomic_fetch_add(&api->counter, 1) + 1) * 0x9e3779b97f4a7c15ull;
	if (rq->responses)
		snprintf(jb->id, sizeof(jb->id), "resp_%016" PRIx64, rid);
	else if (rq->messages)
		snprintf(jb->id, sizeof(jb->id), "msg_%016" PRIx64, rid);
	else
		snprintf(jb->id, sizeof(jb->id), "%s-%016" PRIx64, rq->chat ? "chatcmpl" : "cmpl", rid);
	jb->n = rq->n_prompts * rq->n;
	jb->g = gen_new(api, jb->n);
	jb->ch = calloc((size_t)jb->n, sizeof(*jb->ch));
	if (!jb->g || !jb->ch || !choices_init(jb)) {
		ms_job_free(jb);
		return NULL;
	}
	return jb;
}

int ms_job_submit(struct ms_job *jb, struct ms_err *err)
{
	struct ms_gen *g = jb->g;
	for (int i = 0; i < g->n; i++) {
		struct ms_call *cl = &g->calls[i];
		int prompt = jb->ch[i].prompt;
		/* with a seed, choice j of a prompt (n > 1) draws with seed + j: the
		 * n choices differ, and the response is reproducible as a whole (the
		 * engine copies the parameters) */
		struct ms_request_params pc = jb->rq->params;
		if (pc.sampling.has_seed)
			for (int q = 0; q < i; q++)
				pc.sampling.seed += jb->ch[q].prompt == prompt;
		pthread_mutex_lock(&g->mu);
		g->refs++; /* the engine's reference, dropped at FINISH */
		pthread_mutex_unlock(&g->mu);
		atomic_fetch_add(&g->api->in_flight, 1);
		int rc = ms_engine_submit(g->api->engine, jb->rq->prompts[prompt], jb->rq->n_prompt[prompt],
					  &pc, on_engine_event, cl, &cl->id, err);
		if (rc) {
			atomic_fetch_sub(&g->api->in_flight, 1);
			pthread_mutex_lock(&g->mu);
			g->refs--;
			pthread_mutex_unlock(&g->mu);
			gen_cancel(g);
			return rc;
		}
		cl->submitted = true;
	}
	return 0;
}

/* Wait until something new arrived (or everything finished), checking the
 * client every 100 ms. False when the client left (the calls are
 * cancelled); with the lock held when true. */
static bool gen_wait(struct ms_gen *g, bool (*gone)(void *), void *ctx, double keepalive_at,
		     bool *keepalive)
{
	pthread_mutex_lock(&g->mu);
	for (;;) {
		bool news = false;
		for (int i = 0; i < g->n; i++)
			news |= g->calls[i].done < g->calls[i].nq;
		if (news || all_finished(g))
			return true;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&g->cv, &g->mu, &ts);
		pthread_mutex_unlock(&g->mu);
		if (gone(ctx)) {
			gen_cancel(g);
			return false;
		}
		if (keepalive && keepalive_at > 0 && ms_now_s() >= keepalive_at) {
			*keepalive = true;
			pthread_mutex_lock(&g->mu);
			return true;
		}
		pthread_mutex_lock(&g->mu);
	}
}

/* Consume every event that arrived; with the gen's lock held. */
static void pump(struct ms_job *jb)
{
	struct ms_gen *g = jb->g;
	for (int i = 0; i < g->n; i++) {
		struct ms_call *cl = &g->calls[i];
		jb->failed |= cl->lost;
		while (cl->done < cl->nq) {
			bool was = jb->ch[i].stopped;
			const struct ms_ev *ev = &cl->q[cl->done++];
			/* chat and completions have no finish_reason for a failed
			 * engine step (out of memory): the answer becomes an error
			 * (a 500, or a stream's error event); /v1/responses says
			 * "failed" itself */
			if (ev->kind == MS_EV_FINISH && ev->finish == MS_FINISH_ERROR && !jb->rq->responses) {
				jb->failed = true;
				jb->weights_gone |= ev->weights_gone;
				if (!jb->error[0] && ev->error)
					snprintf(jb->error, sizeof(jb->error), "%s", ev->error);
			}
			ms_answer_event(jb, i, ev);
			/* a chat stop string matched in the answer: nothing more is wanted */
			if (!was && jb->ch[i].stopped && !cl->finished)
				ms_engine_cancel(jb->api->engine, cl->id);
		}
	}
	if (!jb->finished_all && all_finished(g)) {
		jb->finished_all = true;
		if (jb->rq->stream)
			ms_answer_stream_end(jb);
		if (jb->harmony_errors && jb->api->metrics)
			ms_metrics_harmony_error(jb->api->metrics, (uint64_t)jb->harmony_errors);
	}
}

bool ms_job_advance(struct ms_job *jb, bool (*gone)(void *ctx), void *ctx, double keepalive_at,
		    bool *keepalive)
{
	if (!gen_wait(jb->g, gone, ctx, keepalive_at, keepalive))
		return false;
	pump(jb);
	pthread_mutex_unlock(&jb->g->mu);
	return true;
}

void ms_job_cancel(struct ms_job *jb)
{
	gen_cancel(jb->g);
}

bool ms_job_failed(const struct ms_job *jb)
{
	bool oom = jb->failed || jb->out.oom || ms_json_failures() != jb->json0;
	for (int i = 0; i < jb->n && !oom; i++)
		oom = jb->ch[i].text.oom || jb->ch[i].reasoning.oom;
	return oom;
}

const char *ms_job_error(const struct ms_job *jb, int *status)
{
	*status = jb->weights_gone ? 503 : 500;
	return jb->error[0] ? jb->error : "out of memory";
}

void ms_job_free(struct ms_job *jb)
{
	if (!jb)
		return;
	for (int i = 0; jb->ch && i < jb->n; i++) {
		struct ms_choice *ch = &jb->ch[i];
		ms_strbuf_free(&ch->text);
		ms_strbuf_free(&ch->reasoning);
		cJSON_Delete(ch->lp_tokens), cJSON_Delete(ch->lp_values);
		cJSON_Delete(ch->lp_top), cJSON_Delete(ch->lp_offset);
		cJSON_Delete(ch->chat_lp), cJSON_Delete(ch->tool_calls);
		ms_stopper_free(&ch->stop);
		if (jb->rq->chat)
			ms_harmony_parser_free(&ch->hp);
	}
	free(jb->ch);
	ms_strbuf_free(&jb->out);
	ms_responses_free(jb->rsp);
	ms_messages_free(jb->msg);
	ms_req_gen_free(jb->rq);
	if (jb->g)
		gen_unref(jb->g);
	free(jb);
}
