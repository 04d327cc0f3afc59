/*
 * engine.c: continuous batching; see engine.h for a request's life.
 *
 * Scheduling, per step: cancelled requests are finished; waiting requests
 * are admitted in arrival order while their worst-case KV reservation fits
 * (the head of the queue waits rather than be overtaken, so nobody starves);
 * the batch takes one token of every decoding request first, then prefill
 * chunks of admitted requests up to max_batch_tokens; one forward pass; then
 * sampling, text, stop checks and callbacks per request.
 *
 * Prefix reuse: each full page is published under a hash of its layer and
 * every token up to its end. A new request takes the longest run of
 * published blocks of its prompt (all layers), never the whole prompt (its
 * last token must run to give logits); when the run ends inside a block
 * that is also published, that page is copied (copy-on-write at the
 * boundary) and only the tokens after the copied part are computed.
 */
#include "engine.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ms-clock.h"
#include "ms-hash.h"
#include "ms-mapguard.h"

enum req_state { REQ_WAITING, REQ_RUNNING };

struct req {
	uint64_t id;
	struct req *next;             /* waiting queue link */
	enum req_state state;
	atomic_bool cancel;
	ms_engine_cb cb;
	void *ctx;
	/* parameters (owned copies) */
	struct ms_request_params p;
	int32_t *stop_ids;
	char **stop;
	struct ms_logit_bias *bias;
	struct ms_constraint con;     /* p.constraint's, copied; cstate its state */
	void *cstate;
	/* tokens: prompt then generated */
	int32_t *tokens;
	int64_t n_prompt, n_tokens, cap;
	int64_t n_cached;             /* prompt tokens taken from the prefix cache */
	int64_t n_generated;
	/* KV */
	struct ms_kv_seq kv;
	int64_t reserved;             /* pages */
	uint64_t *block_key;          /* chain hash of blocks 0..b */
	int64_t n_published;          /* blocks published */
	struct ms_spec_req spec;      /* this request's drafting */
	/* output */
	struct ms_sampler sampler;
	bool has_sampler, has_stopper;
	struct ms_stopper stopper;
	void *detok;                   /* the decoder's state (e->text), or NULL */
	char *text;                   /* scratch for the text of one step */
	size_t text_len, text_cap;
	double t_submit, t_admit, t_first;
};

/* One step's batch: allocated once for the engine's limits (the logits
 * grow to the most rows a step has kept), reused every step. */
struct step_batch {
	int64_t n, nl;                /* batch tokens, logit rows */
	int64_t n_prefill;            /* of which prompt tokens */
	int32_t *tokens, *seq;        /* [n] */
	int64_t *pos;                 /* [n] */
	int64_t *rows;                /* [nl]: batch token of each logit row */
	int64_t *take;                /* [n_batch]: tokens of each request */
	int64_t *first_row;           /* [n_batch]: its first logit row */
	struct ms_kv_seq **kv;        /* [n_batch] */
	struct req **batch_req;       /* [n_batch] */
	int n_batch;
	float *logits;                /* [nl][V], logits_cap rows */
	int64_t logits_cap;
};

struct ms_engine {
	struct step_batch sb;
	const struct ms_lm *m;
	struct ms_text text;           /* ops NULL: no text (token ids only) */
	struct ms_engine_config cfg;
	struct ms_kv_pool pool;
	int64_t P, V;
	/* shared with other threads, under mu */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct req *wait_head, *wait_tail;
	int n_waiting;
	int64_t waiting_pages;        /* the waiting requests' reservations */
	uint64_t next_id;
	bool stop;
	bool thread_started;
	pthread_t thread;
	struct ms_engine_stats stats;  /* published copy */
	/* engine thread only */
	struct ms_spec spec;           /* zeroed until init: ms_spec_free takes it either way */
	struct ms_spec_req **props;   /* [max_running] a step's drafting requests */
	struct req **running;
	int n_running;
	int64_t reserved;             /* pages reserved by running requests */
	float *work;                  /* sampler scratch [V] */
	float *row;                   /* a row with its stop ids masked (min_tokens) [V] */
	uint64_t seed_counter;
	uint64_t prompt_tokens, generation_tokens, cached_tokens, steps;
	double step_s;                /* a forward pass's time, moving average */
	unsigned long faults0;        /* ms_mapguard_faults() when the engine began */
};

const char *ms_finish_name(enum ms_finish f)
{
	switch (f) {
	case MS_FINISH_STOP: return "stop";
	case MS_FINISH_LENGTH: return "length";
	case MS_FINISH_CONTEXT: return "context";
	case MS_FINISH_CANCELLED: return "cancelled";
	case MS_FINISH_ERROR: return "error";
	default: return "none";
	}
}

void ms_engine_config_defaults(struct ms_engine_config *c, const struct ms_lm *m)
{
	if (!c->max_queue)
		c->max_queue = 256;
	if (!c->max_running)
		c->max_running = 64;
	if (!c->max_batch_tokens)
		c->max_batch_tokens = 256;
	if (!c->max_context || c->max_context > m->max_pos)
		c->max_context = m->max_pos < 8192 ? m->max_pos : 8192;
	if (!c->kv_cache_bytes && !c->kv_tokens)
		c->kv_tokens = 4 * c->max_context; /* four full contexts by default */
	if (!c->spec_max_tokens)
		c->spec_max_tokens = MS_SPEC_DEFAULT_TOKENS;
	/* a draft and its token are one pass of one sequence, which the
	 * reservation bounds by max_batch_tokens */
	if (c->spec_max_tokens > c->max_batch_tokens - 1)
		c->spec_max_tokens = (int)(c->max_batch_tokens - 1);
	if (c->spec_max_tokens < 1)
		c->spec_off = true, c->spec_max_tokens = 1;
	if (!c->spec_cache_bytes)
		c->spec_cache_bytes = (int64_t)MS_SPEC_DEFAULT_CACHE;
}

int64_t ms_engine_max_context(const struct ms_engine *e)
{
	return e->cfg.max_context;
}

int64_t ms_engine_pages_for(const struct ms_engine *e, int64_t positions)
{
	return ms_kv_geom_seq_pages(&e->m->kv, positions, e->cfg.max_batch_tokens);
}

/* ---- hashing blocks of tokens ---- */

static uint64_t block_hash(uint64_t prev, const int32_t *t, int64_t n)
{
	uint64_t h = ms_mix64(prev ^ 0x9e3779b97f4a7c15ull);
	for (int64_t i = 0; i < n; i++)
		h = ms_mix64(h ^ (uint64_t)(uint32_t)t[i]);
	return h;
}

static uint64_t layer_key(uint64_t block, int layer)
{
	return ms_mix64(block + 0x632be59bd9b4e019ull * (uint64_t)(layer + 1));
}

/* ---- request lifetime ---- */

static void req_free(struct ms_engine *e, struct req *r)
{
	if (!r)
		return;
	ms_kv_seq_free(&r->kv, &e->pool);
	ms_spec_req_free(&e->spec, &r->spec);
	if (r->has_sampler)
		ms_sampler_free(&r->sampler);
	if (r->has_stopper)
		ms_stopper_free(&r->stopper);
	for (int i = 0; r->stop && i < r->p.n_stop; i++)
		free(r->stop[i]);
	free(r->stop), free(r->stop_ids), free(r->bias), free(r->tokens), free(r->block_key);
	free(r->text);
	free(r->detok);
	if (r->cstate)
		r->con.free(r->cstate);
	free(r);
}

/* Deliver FINISH (with the held-back text, when the stop was not a stop
 * string) and free. The request must be out of the waiting queue and the
 * running array. */
static void finish(struct ms_engine *e, struct req *r, enum ms_finish why, const char *stop_string,
		   const char *error)
{
	r->text_len = 0;
	const char *tail = "";
	if ((why != MS_FINISH_STOP || !stop_string) && r->has_stopper) {
		ms_stopper_finish(&r->stopper, &r->text_len);
		tail = ms_stopper_text(&r->stopper);
	}
	if (r->state == REQ_RUNNING) {
		e->reserved -= r->reserved;
		ms_kv_seq_release(&r->kv, &e->pool);
		ms_spec_finished(&e->spec, r->tokens, r->n_prompt, r->n_tokens);
	}
	struct ms_event ev = {
		.kind = MS_EV_FINISH, .id = r->id, .token = -1, .text = tail ? tail : "",
		.text_len = r->text_len, .finish = why, .stop_string = stop_string, .error = error,
		.prompt_tokens = r->n_prompt, .cached_tokens = r->n_cached,
		.completion_tokens = r->n_generated,
		.queue_s = (r->t_admit ? r->t_admit : ms_now_s()) - r->t_submit,
		.ttft_s = r->t_first ? r->t_first - r->t_submit : 0,
		.e2e_s = ms_now_s() - r->t_submit,
	};
	r->cb(r->ctx, &ev);
	req_free(e, r);
}

/* ---- submission ---- */

/* A fault in the mapped checkpoint (its file shrank: config/ms-mapguard.h)
 * means every pass since computed with zeros in place of weights: nothing
 * the model gives can be trusted until it is loaded again. */
static int weights_lost(const struct ms_engine *e, struct ms_err *err)
{
	if (ms_mapguard_faults() == e->faults0)
		return 0;
	char d[MS_ERR_MSG_MAX / 2];
	if (!ms_mapguard_describe(d, sizeof(d)))
		snprintf(d, sizeof(d), "a mapped file shrank");
	return ms_err_set(err, -EIO, "the model's weights can no longer be read: %s; the server "
			  "must be restarted", d);
}

/* Under mu: may one more request of `need` pages wait? The queue holds at
 * most max_queue requests (-EBUSY, a 429) and at most one whole KV cache's
 * worth of reservations (-EAGAIN, a 503): so a request that is queued waits
 * only for the running requests and one cache's turnover ahead of it,
 * never for an unbounded backlog; beyond that the client is told to come
 * back (Retry-After) instead of hanging on. */
static int queue_refuses(const struct ms_engine *e, int64_t need, struct ms_err *err)
{
	if (e->n_waiting >= e->cfg.max_queue)
		return ms_err_set(err, -EBUSY, "the queue is full (%d requests waiting)",
				  e->cfg.max_queue);
	if (e->n_waiting && e->waiting_pages + need > e->pool.n_pages)
		return ms_err_set(err, -EAGAIN, "the KV cache is exhausted: %d requests already wait "
				  "for %lld of its %d pages and this one needs %lld",
				  e->n_waiting, (long long)e->waiting_pages, e->pool.n_pages,
				  (long long)need);
	return 0;
}

/* What submit refuses before taking anything: the weights, the prompt,
 * the context, the whole cache, the parameters. *pages: the reservation. */
static int submit_check(const struct ms_engine *e, const int32_t *prompt, int64_t n_prompt,
			const struct ms_request_params *p, int64_t *pages, struct ms_err *err)
{
	int rc = weights_lost(e, err);
	if (rc)
		return rc;
	if (n_prompt <= 0)
		return ms_err_set(err, -EINVAL, "the prompt is empty");
	for (int64_t i = 0; i < n_prompt; i++)
		if (prompt[i] < 0 || prompt[i] >= e->V)
			return ms_err_set(err, -EINVAL, "prompt token %lld is %d, outside the vocabulary "
					  "[0, %lld)", (long long)i, prompt[i], (long long)e->V);
	if (p->max_tokens < 0)
		return ms_err_set(err, -EINVAL, "max_tokens %lld is negative", (long long)p->max_tokens);
	if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
		return ms_err_set(err, -EINVAL, "min_tokens %lld is not in [0, max_tokens %lld]",
				  (long long)p->min_tokens, (long long)p->max_tokens);
	if (n_prompt + p->max_tokens > e->cfg.max_context)
		return ms_err_set(err, -E2BIG, "the prompt (%lld tokens) plus max_tokens (%lld) exceeds "
				  "the context of %lld tokens", (long long)n_prompt,
				  (long long)p->max_tokens, (long long)e->cfg.max_context);
	int64_t need = *pages = ms_engine_pages_for(e, n_prompt + p->max_tokens);
	if (need > e->pool.n_pages)
		return ms_err_set(err, -ENOSPC, "the request needs %lld KV pages (prompt %lld + "
				  "max_tokens %lld tokens) but the whole cache has %d",
				  (long long)need, (long long)n_prompt, (long long)p->max_tokens,
				  e->pool.n_pages);
	if (p->n_stop && !e->text.ops)
		return ms_err_set(err, -EINVAL, "stop strings need a tokenizer");
	for (int i = 0; i < p->n_stop_ids; i++)
		if (p->stop_ids[i] < 0 || p->stop_ids[i] >= e->V)
			return ms_err_set(err, -EINVAL, "stop token %d is outside the vocabulary", p->stop_ids[i]);
	if ((rc = ms_sampling_check(&p->sampling, e->V, err)))
		return rc;
	if (p->prompt_logprobs > 20)
		return ms_err_set(err, -EINVAL, "prompt_logprobs %d is more than 20", p->prompt_logprobs);
	return 0;
}

int ms_engine_submit(struct ms_engine *e, const int32_t *prompt, int64_t n_prompt,
		     const struct ms_request_params *p, ms_engine_cb cb, void *ctx, uint64_t *id,
		     struct ms_err *err)
{
	int64_t need = 0;
	int rc = submit_check(e, prompt, n_prompt, p, &need, err);
	if (rc)
		return rc;

	struct req *r = calloc(1, sizeof(*r));
	if (!r)
		return ms_err_set(err, -ENOMEM, "out of memory");
	r->p = *p;
	r->cb = cb;
	r->ctx = ctx;
	r->cap = n_prompt + p->max_tokens + 1;
	r->tokens = malloc((size_t)r->cap * sizeof(int32_t));
	r->block_key = calloc((size_t)(r->cap / e->P + 2), sizeof(uint64_t));
	r->stop_ids = malloc((size_t)(p->n_stop_ids + 1) * sizeof(int32_t));
	r->stop = calloc((size_t)p->n_stop + 1, sizeof(char *));
	r->bias = malloc((size_t)(p->sampling.n_logit_bias + 1) * sizeof(*r->bias));
	if (e->text.ops)
		r->detok = calloc(1, e->text.ops->state_size);
	rc = (!r->tokens || !r->block_key || !r->stop_ids || !r->stop || !r->bias ||
	      (e->text.ops && !r->detok) || ms_spec_req_init(&r->spec, &e->spec)) ? -ENOMEM : 0;
	for (int i = 0; !rc && i < p->n_stop; i++)
		if (!(r->stop[i] = strdup(p->stop[i])))
			rc = -ENOMEM;
	if (!rc && p->constraint) {
		r->con = *p->constraint;
		if (!(r->cstate = r->con.init(r->con.arg)))
			rc = -ENOMEM;
	}
	r->p.constraint = NULL; /* the caller's; r->con is ours */
	if (!rc)
		rc = ms_kv_seq_init(&r->kv, (int)e->m->kv.n_layers, r->cap, e->P, err);
	if (rc) {
		req_free(e, r);
		return rc == -ENOMEM ? ms_err_set(err, -ENOMEM, "out of memory") : rc;
	}
	memcpy(r->tokens, prompt, (size_t)n_prompt * sizeof(int32_t));
	if (p->n_stop_ids) /* (stop_ids may be NULL when there are none) */
		memcpy(r->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof(int32_t));
	if (p->sampling.n_logit_bias)
		memcpy(r->bias, p->sampling.logit_bias, (size_t)p->sampling.n_logit_bias * sizeof(*r->bias));
	r->p.stop_ids = r->stop_ids;
	r->p.stop = (const char *const *)r->stop;
	r->p.sampling.logit_bias = r->bias;
	r->n_prompt = r->n_tokens = n_prompt;
	r->reserved = need;
	r->t_submit = ms_now_s();

	pthread_mutex_lock(&e->mu);
	if ((rc = queue_refuses(e, need, err))) {
		pthread_mutex_unlock(&e->mu);
		req_free(e, r);
		return rc;
	}
	r->id = ++e->next_id;
	/* the fallback seed depends only on the request's number: reproducible
	 * runs of the same request order */
	uint64_t seed = ms_mix64(r->id ^ 0x5851f42d4c957f2dull);
	r->state = REQ_WAITING;
	pthread_mutex_unlock(&e->mu);

	rc = ms_sampler_init(&r->sampler, &r->p.sampling, e->V, prompt, (size_t)n_prompt, seed, err);
	if (!rc) {
		r->has_sampler = true;
		if (p->n_stop) {
			rc = ms_stopper_init(&r->stopper, (const char *const *)r->stop, (size_t)p->n_stop,
					     false, err);
			r->has_stopper = !rc;
		}
	}
	if (e->text.ops)
		e->text.ops->init(r->detok, e->text.tok, p->skip_special);
	if (rc) {
		req_free(e, r);
		return rc;
	}
	pthread_mutex_lock(&e->mu);
	if ((rc = queue_refuses(e, need, err))) { /* (re-checked: the lock was dropped) */
		pthread_mutex_unlock(&e->mu);
		req_free(e, r);
		return rc;
	}
	r->next = NULL;
	if (e->wait_tail)
		e->wait_tail->next = r;
	else
		e->wait_head = r;
	e->wait_tail = r;
	e->n_waiting++;
	e->waiting_pages += r->reserved;
	if (id)
		*id = r->id;
	pthread_cond_signal(&e->cv);
	pthread_mutex_unlock(&e->mu);
	return 0;
}

void ms_engine_cancel(struct ms_engine *e, uint64_t id)
{
	pthread_mutex_lock(&e->mu);
	for (struct req *r = e->wait_head; r; r = r->next)
		if (r->id == id)
			atomic_store(&r->cancel, true);
	for (int i = 0; i < e->n_running; i++)
		if (e->running[i]->id == id)
			atomic_store(&e->running[i]->cancel, true);
	pthread_cond_signal(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

/* ---- admission and prefix reuse ---- */

/* Attach the longest run of published blocks of r's prompt; returns the
 * prompt tokens covered. */
static int64_t take_prefix(struct ms_engine *e, struct req *r)
{
	int L = (int)e->m->kv.n_layers;
	int64_t P = e->P, usable = r->n_prompt - 1; /* the last token must run */
	int64_t b = 0;
	uint64_t key = 0;
	int32_t got[256];
	if (L > 256 || e->cfg.no_prefix_cache || r->p.prompt_logprobs >= 0)
		return 0; /* prompt logprobs need every position's logits */
	for (; (b + 1) * P <= r->n_prompt; b++) {
		key = block_hash(key, r->tokens + b * P, P);
		r->block_key[b] = key;
		if ((b + 1) * P > usable && b * P >= usable)
			break;
		int l;
		for (l = 0; l < L; l++)
			if ((got[l] = ms_kv_page_lookup(&e->pool, layer_key(key, l))) < 0)
				break;
		if (l < L) {
			while (l-- > 0)
				ms_kv_page_unref(&e->pool, got[l]);
			break;
		}
		if ((b + 1) * P <= usable) {
			for (l = 0; l < L; l++)
				r->kv.pages[l][b] = got[l];
			continue;
		}
		/* The block holds the last prompt token too: copy its pages so
		 * that token can be recomputed in a private page. */
		for (l = 0; l < L; l++) {
			int32_t mine = ms_kv_page_alloc(&e->pool);
			if (mine < 0) { /* (the reservation makes this impossible) */
				for (int k = l; k < L; k++)
					ms_kv_page_unref(&e->pool, got[k]);
				return b * P;
			}
			ms_kv_page_copy(&e->pool, mine, got[l]);
			ms_kv_page_unref(&e->pool, got[l]);
			r->kv.pages[l][b] = mine;
		}
		r->n_published = b; /* the copy is private, not published */
		return usable;
	}
	r->n_published = b;
	return b * P;
}

/* Publish r's blocks that are full now. */
static void publish_blocks(struct ms_engine *e, struct req *r)
{
	int L = (int)e->m->kv.n_layers;
	int64_t P = e->P;
	if (e->cfg.no_prefix_cache)
		return;
	for (int64_t b = r->n_published; (b + 1) * P <= r->kv.len; b++) {
		uint64_t prev = b ? r->block_key[b - 1] : 0;
		r->block_key[b] = block_hash(prev, r->tokens + b * P, P);
		for (int l = 0; l < L; l++)
			if (r->kv.pages[l][b] >= 0)
				ms_kv_page_publish(&e->pool, r->kv.pages[l][b], layer_key(r->block_key[b], l));
		r->n_published = b + 1;
	}
}

static void admit(struct ms_engine *e, struct req *r)
{
	r->state = REQ_RUNNING;
	r->t_admit = ms_now_s();
	e->reserved += r->reserved;
	r->n_cached = take_prefix(e, r);
	r->kv.len = r->n_cached;
	ms_kv_geom_trim(&e->m->kv, &r->kv, &e->pool, r->kv.len);
	e->cached_tokens += (uint64_t)r->n_cached;
}

/* ---- one step ---- */

/* Text storage for one step's output (r->text). */
static int set_text(struct req *r, const char *p, size_t n)
{
	r->text_len = 0;
	if (r->text_cap < n + 1) {
		char *nb = realloc(r->text, n + 1);
		if (!nb)
			return -ENOMEM;
		r->text = nb;
		r->text_cap = n + 1;
	}
	memcpy(r->text, p, n);
	r->text[n] = '\0';
	r->text_len = n;
	return 0;
}

/* The token's event; -ENOMEM (no event) when its text cannot be made: the
 * request then fails rather than answer with text missing. */
static int emit_token(struct ms_engine *e, struct req *r, int32_t tok, bool is_stop_tok,
		      const struct ms_token_logprobs *lp, const char **stop_hit)
{
	r->text_len = 0;
	*stop_hit = NULL;
	if (e->text.ops && !is_stop_tok) {
		char *piece = NULL;
		size_t pl = 0, pc = 0;
		/* an id the tokenizer lacks (a padded vocabulary) has no text */
		int rc = e->text.ops->push(r->detok, tok, &piece, &pl, &pc) == -ENOMEM ? -ENOMEM : 0;
		if (!rc && r->has_stopper) {
			size_t emit = 0;
			bool stopped = false;
			rc = ms_stopper_push(&r->stopper, piece ? piece : "", pl, &emit, &stopped);
			if (!rc)
				rc = set_text(r, ms_stopper_text(&r->stopper), emit);
			if (!rc && stopped)
				*stop_hit = ms_stopper_matched(&r->stopper);
		} else if (!rc) {
			rc = set_text(r, piece ? piece : "", pl);
		}
		free(piece);
		if (rc)
			return rc;
	}
	struct ms_event ev = {
		.kind = MS_EV_TOKEN, .id = r->id, .token = tok, .index = r->n_generated - 1,
		.text = r->text ? r->text : "", .text_len = r->text_len, .lp = lp,
		.prompt_tokens = r->n_prompt, .cached_tokens = r->n_cached,
		.completion_tokens = r->n_generated,
	};
	r->cb(r->ctx, &ev);
	return 0;
}

static bool is_stop_id(const struct req *r, int32_t t)
{
	for (int i = 0; i < r->p.n_stop_ids; i++)
		if (r->p.stop_ids[i] == t)
			return true;
	return false;
}

/* Remove running[i] (order kept: arrival order is the prefill order). */
static void drop_running(struct ms_engine *e, int i)
{
	pthread_mutex_lock(&e->mu);
	memmove(&e->running[i], &e->running[i + 1], (size_t)(e->n_running - i - 1) * sizeof(e->running[0]));
	e->n_running--;
	pthread_mutex_unlock(&e->mu);
}

/* When is a refused request likely to be taken? When the running request
 * nearest its max_tokens ends (its pages and its batch slot come back),
 * at the recent step rate: whole seconds in [1, 60]. An upper bound for
 * that request (a stop can end it sooner), a guess for the queue. */
static int retry_after(const struct ms_engine *e)
{
	int64_t steps = -1;
	for (int i = 0; i < e->n_running; i++) {
		const struct req *r = e->running[i];
		int64_t left = r->p.max_tokens - r->n_generated;
		if (steps < 0 || left < steps)
			steps = left;
	}
	double s = steps > 0 ? (double)steps * e->step_s : 1.0;
	return s < 1.0 ? 1 : s > 60.0 ? 60 : (int)ceil(s);
}

static void publish_stats(struct ms_engine *e)
{
	struct ms_engine_stats s = {0};
	s.running = e->n_running;
	s.kv_pages = e->pool.n_pages;
	s.kv_pages_held = e->pool.n_pages - ms_kv_pool_available(&e->pool);
	s.kv_pages_cached = e->pool.n_cached;
	s.kv_pages_reserved = (int32_t)e->reserved;
	s.prefix_hit_pages = e->pool.hits;
	s.evictions = e->pool.evictions;
	s.prompt_tokens = e->prompt_tokens;
	s.generation_tokens = e->generation_tokens;
	s.cached_tokens = e->cached_tokens;
	s.steps = e->steps;
	s.kv_usage = (double)s.kv_pages_held / (double)e->pool.n_pages;
	s.retry_after_s = retry_after(e);
	s.spec = e->spec.stats;
	pthread_mutex_lock(&e->mu);
	s.waiting = e->n_waiting;
	e->stats = s;
	pthread_mutex_unlock(&e->mu);
}

/* Phase 1 of a step: drop the cancelled waiting requests, then admit in
 * arrival order while the head's reservation fits (the head waits rather
 * than be overtaken, so nobody starves). */
static void step_admit(struct ms_engine *e)
{
	struct req *cancelled = NULL;
	pthread_mutex_lock(&e->mu);
	for (struct req **pp = &e->wait_head; *pp;) {
		struct req *r = *pp;
		if (atomic_load(&r->cancel)) {
			*pp = r->next;
			e->n_waiting--;
			e->waiting_pages -= r->reserved;
			r->next = cancelled;
			cancelled = r;
		} else {
			pp = &r->next;
		}
	}
	e->wait_tail = NULL;
	for (struct req *r = e->wait_head; r; r = r->next)
		e->wait_tail = r;
	while (e->wait_head && e->n_running < e->cfg.max_running &&
	       e->reserved + e->wait_head->reserved <= e->pool.n_pages) {
		struct req *r = e->wait_head;
		e->wait_head = r->next;
		if (!e->wait_head)
			e->wait_tail = NULL;
		e->n_waiting--;
		e->waiting_pages -= r->reserved;
		r->next = NULL;
		admit(e, r);
		e->running[e->n_running++] = r;
	}
	pthread_mutex_unlock(&e->mu);
	/* finish() runs the request's callback: outside mu */
	while (cancelled) {
		struct req *r = cancelled;
		cancelled = r->next;
		finish(e, r, MS_FINISH_CANCELLED, NULL, NULL);
	}
}

/* Phase 2: finish the cancelled running requests. */
static void step_drop_cancelled(struct ms_engine *e)
{
	for (int i = 0; i < e->n_running;) {
		struct req *r = e->running[i];
		if (atomic_load(&r->cancel)) {
			drop_running(e, i);
			finish(e, r, MS_FINISH_CANCELLED, NULL, NULL);
		} else {
			i++;
		}
	}
}

/* One step's batch. Per-request arrays are indexed by position in
 * `running` when the batch was built (batch_req keeps that order, since
 * finished requests leave `running` while the results are handed out). */
static void step_batch_free(struct step_batch *s)
{
	free(s->tokens), free(s->seq), free(s->pos), free(s->rows), free(s->take), free(s->first_row);
	free(s->kv), free(s->batch_req), free(s->logits);
}

/* For max_batch_tokens prefill tokens and max_running decodes, at init. */
static int step_batch_alloc(struct ms_engine *e, struct step_batch *s, struct ms_err *err)
{
	int64_t cap = e->cfg.max_batch_tokens + e->cfg.max_running;
	s->tokens = malloc((size_t)cap * sizeof(int32_t));
	s->seq = malloc((size_t)cap * sizeof(int32_t));
	s->pos = malloc((size_t)cap * sizeof(int64_t));
	s->rows = malloc((size_t)cap * sizeof(int64_t));
	s->take = calloc((size_t)e->cfg.max_running, sizeof(int64_t));
	s->first_row = malloc((size_t)e->cfg.max_running * sizeof(int64_t));
	s->kv = malloc((size_t)e->cfg.max_running * sizeof(*s->kv));
	s->batch_req = malloc((size_t)e->cfg.max_running * sizeof(*s->batch_req));
	if (!s->tokens || !s->seq || !s->pos || !s->rows || !s->take || !s->first_row || !s->kv ||
	    !s->batch_req)
		return ms_err_set(err, -ENOMEM, "engine: out of memory");
	return 0;
}

/* Phase 3a, drafts: each decoding request (take 1) proposes a draft,
 * spec.c chooses how much of each runs; the tokens they take. */
static int64_t step_drafts(struct ms_engine *e, struct step_batch *s, int64_t decodes,
			   int64_t budget)
{
	int np = 0;
	if (e->cfg.spec_off || budget <= 0)
		return 0;
	for (int i = 0; i < e->n_running; i++) {
		struct req *r = e->running[i];
		if (s->take[i] != 1 || r->kv.len < r->n_prompt)
			continue;
		/* every token the draft could give must fit max_tokens and the
		 * context: the reservation covers no more */
		int64_t max = r->p.max_tokens - r->n_generated - 1;
		int64_t room = e->cfg.max_context - r->n_tokens - 1;
		max = max < room ? max : room;
		ms_spec_propose(&e->spec, &r->spec, r->id, r->tokens, r->n_tokens,
				(int)(max < MS_SPEC_MAX_TOKENS ? max : MS_SPEC_MAX_TOKENS));
		if (r->spec.n_prop)
			e->props[np++] = &r->spec;
	}
	if (!np)
		return 0;
	ms_spec_choose(&e->spec, e->props, np, decodes, (double)decodes, budget);
	int64_t n = 0;
	for (int i = 0; i < e->n_running; i++) {
		struct req *r = e->running[i];
		if (s->take[i] == 1 && r->kv.len >= r->n_prompt) {
			s->take[i] += r->spec.n_draft;
			n += r->spec.n_draft;
		}
	}
	return n;
}

/* Phase 3a: how many tokens each request runs: decodes first (one token
 * each, and its draft), then prefill chunks in arrival order, up to
 * max_batch_tokens. */
static void step_plan(struct ms_engine *e, struct step_batch *s)
{
	int64_t budget = e->cfg.max_batch_tokens, decodes = 0;
	for (int i = 0; i < e->n_running && budget > 0; i++) {
		struct req *r = e->running[i];
		r->spec.n_draft = 0;
		if (r->kv.len >= r->n_prompt) {
			s->take[i] = 1;
			budget--, decodes++;
		}
	}
	budget -= step_drafts(e, s, decodes, budget);
	for (int i = 0; i < e->n_running && budget > 0; i++) {
		struct req *r = e->running[i];
		if (r->kv.len >= r->n_prompt)
			continue;
		int64_t want = r->n_prompt - r->kv.len;
		/* prompt logprobs: every row is kept, so smaller chunks */
		int64_t lim = r->p.prompt_logprobs >= 0 ? 64 : budget;
		s->take[i] = want < budget ? want : budget;
		s->take[i] = s->take[i] < lim ? s->take[i] : lim;
		budget -= s->take[i];
		s->n_prefill += s->take[i];
	}
}

/* Phase 3b: reserve the KV positions and lay out the batch's tokens and
 * the rows whose logits are kept. */
static void step_gather(struct ms_engine *e, struct step_batch *s)
{
	for (int i = 0; i < e->n_running; i++) {
		struct req *r = e->running[i];
		s->kv[i] = &r->kv;
		s->first_row[i] = s->nl;
		if (!s->take[i])
			continue;
		if (ms_kv_seq_reserve(&r->kv, &e->pool, s->take[i])) {
			/* cannot happen while reservations hold; fail this request, not the others */
			s->take[i] = 0;
			atomic_store(&r->cancel, true);
			continue;
		}
		bool all = r->p.prompt_logprobs >= 0 && r->kv.len < r->n_prompt;
		for (int64_t t = 0; t < s->take[i]; t++) {
			int64_t p = r->kv.len + t; /* past n_tokens: the draft */
			s->tokens[s->n] = p < r->n_tokens ? r->tokens[p] : r->spec.draft[p - r->n_tokens];
			s->pos[s->n] = p;
			s->seq[s->n] = i;
			if (all || p >= r->n_tokens - 1)
				s->rows[s->nl++] = s->n;
			s->n++;
		}
	}
}

/* Phase 3c: the forward pass over the batch, into s->logits. */
static int step_forward(struct ms_engine *e, struct step_batch *s, struct ms_err *err)
{
	const struct ms_lm *m = e->m;
	if (s->nl > s->logits_cap) {
		float *l = malloc((size_t)s->nl * (size_t)e->V * sizeof(float));
		if (!l)
			return ms_err_set(err, -ENOMEM, "engine: out of memory for %lld logit rows",
					  (long long)s->nl);
		free(s->logits);
		s->logits = l;
		s->logits_cap = s->nl;
	}
	struct ms_batch b = {.n = s->n, .tokens = s->tokens, .pos = s->pos, .seq = s->seq,
			     .kv = s->kv, .pool = &e->pool, .logit_rows = s->rows, .n_logits = s->nl};
	int rc = 0;
	double t0 = ms_now_s();
	if (s->n && (rc = m->forward(m->model, &b, s->logits, err)))
		return rc;
	if ((rc = weights_lost(e, err)))
		return rc;
	double dt = ms_now_s() - t0;
	e->step_s = e->steps ? 0.9 * e->step_s + 0.1 * dt : dt;
	e->steps++;
	return 0;
}

/* The prompt logprobs of the take tokens from p0 (row fr + t predicts
 * token p0 + t + 1; token 0 is sent without logprobs). */
static void step_prompt_logprobs(struct ms_engine *e, struct req *r, const float *logits,
				 int64_t p0, int64_t fr, int64_t take)
{
	for (int64_t t = 0; t < take; t++) {
		int64_t p = p0 + t; /* row p predicts token p + 1 */
		struct ms_token_logprobs lp;
		if (p == 0) {
			struct ms_event ev = {.kind = MS_EV_PROMPT_TOKEN, .id = r->id,
					      .token = r->tokens[0], .index = 0};
			r->cb(r->ctx, &ev);
		}
		if (p + 1 >= r->n_prompt)
			break;
		ms_logprobs_of(logits + (fr + t) * e->V, e->V, r->tokens[p + 1],
			       r->p.prompt_logprobs, &lp);
		struct ms_event ev = {.kind = MS_EV_PROMPT_TOKEN, .id = r->id,
				      .token = r->tokens[p + 1], .index = p + 1, .lp = &lp};
		r->cb(r->ctx, &ev);
	}
}

/* Sample the next token of r from its logit row, send it with its text,
 * and say why r finishes (MS_FINISH_NONE: it goes on). */
/* The row r draws from: its stop ids out of reach until min_tokens. */
static const float *draw_row(struct ms_engine *e, const struct req *r, const float *row_logits)
{
	if (r->n_generated >= r->p.min_tokens || !r->p.n_stop_ids)
		return row_logits;
	memcpy(e->row, row_logits, (size_t)e->V * sizeof(float));
	for (int i = 0; i < r->p.n_stop_ids; i++)
		e->row[r->p.stop_ids[i]] = -INFINITY;
	return e->row;
}

static enum ms_finish step_sample(struct ms_engine *e, struct req *r, const float *row_logits,
				  const char **stop_hit)
{
	struct ms_token_logprobs lp;
	bool want_lp = r->p.sampling.n_logprobs >= 0;
	row_logits = draw_row(e, r, row_logits);
	int32_t tok = ms_sampler_sample_masked(&r->sampler, row_logits, e->work, want_lp ? &lp : NULL,
					       r->cstate ? r->con.mask : NULL, r->cstate);
	if (r->cstate)
		r->con.accept(r->cstate, tok);
	/* out of memory for the penalties' counts: the next draws would not
	 * be the ones asked for */
	bool acc = ms_sampler_accept(&r->sampler, tok) == -ENOMEM;
	r->tokens[r->n_tokens++] = tok;
	r->n_generated++;
	e->generation_tokens++;
	if (!r->t_first)
		r->t_first = ms_now_s();
	bool stop_tok = is_stop_id(r, tok);
	if (acc || emit_token(e, r, tok, stop_tok, want_lp ? &lp : NULL, stop_hit))
		return MS_FINISH_ERROR;
	if (stop_tok || *stop_hit)
		return MS_FINISH_STOP;
	if (r->n_generated >= r->p.max_tokens)
		return MS_FINISH_LENGTH;
	if (r->n_tokens >= e->cfg.max_context)
		return MS_FINISH_CONTEXT;
	return MS_FINISH_NONE;
}

/* Sample r's next token from row 0 and, while each drawn token is the
 * drafted one, the next rows: a drafted token is kept when the draw equals
 * it, so every emitted token is one draw of the request's sampler, as
 * without a draft. Each kept draft token's KV becomes r's. */
static enum ms_finish step_verify(struct ms_engine *e, struct req *r, const float *rows,
				  int n_draft, const char **stop_hit)
{
	enum ms_finish why;
	int kept = 0;
	bool differed = false;
	for (int j = 0;; j++) {
		why = step_sample(e, r, rows + (int64_t)j * e->V, stop_hit);
		if (j == n_draft)
			break;
		if (r->tokens[r->n_tokens - 1] != r->spec.draft[j]) {
			differed = true;
			break;
		}
		r->kv.len++;
		kept++;
		if (why != MS_FINISH_NONE)
			break;
	}
	if (n_draft)
		ms_spec_verified(&e->spec, &r->spec, kept, kept + differed);
	return why;
}

/* Phase 4 for batch request i: prompt logprobs, sampling (and the draft's
 * verification), text, stops. Rejected draft positions leave no trace: kv.len
 * counts only kept ones, so later passes overwrite them and the prefix
 * cache publishes only full blocks below kv.len. */
static void step_result(struct ms_engine *e, const struct step_batch *s, int i)
{
	struct req *r = s->batch_req[i];
	int64_t take = s->take[i];
	int64_t p0 = r->kv.len, fr = s->first_row[i];
	bool was_prefill = p0 < r->n_prompt;
	int n_draft = was_prefill ? 0 : (int)(take - 1);
	r->kv.len += take - n_draft;
	if (was_prefill)
		e->prompt_tokens += (uint64_t)take;
	if (r->p.prompt_logprobs >= 0 && was_prefill)
		step_prompt_logprobs(e, r, s->logits, p0, fr, take);
	enum ms_finish why = MS_FINISH_NONE;
	const char *stop_hit = NULL;
	if (r->kv.len < r->n_tokens) {
		/* prefill continues next step */
	} else if (r->n_generated >= r->p.max_tokens) {
		why = MS_FINISH_LENGTH; /* max_tokens 0: prompt only */
	} else {
		int64_t row = r->p.prompt_logprobs >= 0 && was_prefill ? fr + take - 1 : fr;
		why = step_verify(e, r, s->logits + row * e->V, n_draft, &stop_hit);
	}
	publish_blocks(e, r);
	ms_kv_geom_trim(&e->m->kv, &r->kv, &e->pool, r->kv.len);
	if (why != MS_FINISH_NONE) {
		for (int k = 0; k < e->n_running; k++)
			if (e->running[k] == r) {
				drop_running(e, k);
				break;
			}
		finish(e, r, why, stop_hit, why == MS_FINISH_ERROR ? "out of memory" : NULL);
	}
}

int64_t ms_engine_step(struct ms_engine *e, struct ms_err *err)
{
	step_admit(e);
	step_drop_cancelled(e);
	if (!e->n_running) {
		publish_stats(e);
		return 0;
	}
	struct step_batch *s = &e->sb;
	memset(s->take, 0, (size_t)e->n_running * sizeof(*s->take));
	s->n = s->nl = s->n_prefill = 0;
	step_plan(e, s);
	step_gather(e, s);
	double t0 = ms_now_s();
	int64_t rc = step_forward(e, s, err);
	if (!rc) {
		/* finished requests leave `running` as the results are handed out */
		s->n_batch = e->n_running;
		for (int i = 0; i < s->n_batch; i++)
			s->batch_req[i] = e->running[i];
		for (int i = 0; i < s->n_batch; i++)
			if (s->take[i])
				step_result(e, s, i);
		/* what a step of n tokens costs, its rows' draws included */
		ms_spec_record(&e->spec, s->n, s->n_prefill > 0, ms_now_s() - t0);
		rc = s->n;
	}
	publish_stats(e);
	return rc;
}

/* ---- the thread ---- */

static void *engine_main(void *arg)
{
	struct ms_engine *e = arg;
	for (;;) {
		pthread_mutex_lock(&e->mu);
		while (!e->stop && !e->wait_head && !e->n_running)
			pthread_cond_wait(&e->cv, &e->mu);
		bool stop = e->stop;
		pthread_mutex_unlock(&e->mu);
		if (stop)
			break;
		struct ms_err err = {0};
		int64_t rc = ms_engine_step(e, &err);
		if (rc < 0) {
			/* A failed pass (out of memory) fails the requests of that
			 * pass; the engine goes on for the next ones. */
			while (e->n_running) {
				struct req *r = e->running[e->n_running - 1];
				drop_running(e, e->n_running - 1);
				finish(e, r, MS_FINISH_ERROR, NULL, err.msg);
			}
		}
	}
	return NULL;
}

int ms_engine_start(struct ms_engine *e, struct ms_err *err)
{
	int rc = pthread_create(&e->thread, NULL, engine_main, e);
	if (rc)
		return ms_err_set(err, -rc, "engine: cannot start its thread");
	e->thread_started = true;
	return 0;
}

int ms_engine_init(struct ms_engine **out, const struct ms_lm *m, const struct ms_text *text,
		   const struct ms_engine_config *cfg, struct ms_err *err)
{
	*out = NULL;
	struct ms_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return ms_err_set(err, -ENOMEM, "out of memory");
	e->m = m;
	if (text)
		e->text = *text;
	e->cfg = *cfg;
	ms_engine_config_defaults(&e->cfg, m);
	e->P = MS_KV_PAGE_TOKENS;
	e->V = m->vocab;
	e->faults0 = ms_mapguard_faults();
	int64_t kvd = m->kv.kv_dim;
	uint64_t page = ms_kv_page_bytes(e->P, kvd, m->kv.head_dim, m->kv.dtype);
	int64_t pages = e->cfg.kv_cache_bytes
				? (int64_t)(e->cfg.kv_cache_bytes / page)
				: ((e->cfg.kv_tokens + e->P - 1) / e->P) * m->kv.n_layers;
	if (pages > INT32_MAX / 2)
		pages = INT32_MAX / 2;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	int rc = ms_kv_dtype_check(m->be, m->kv.dtype, err);
	if (!rc)
		rc = ms_kv_pool_init(&e->pool, m->be, (int32_t)pages, e->P, kvd, m->kv.head_dim,
				     m->kv.dtype, err);
	if (!rc) {
		struct ms_spec_config sc = {
			.off = e->cfg.spec_off, .max_tokens = e->cfg.spec_max_tokens,
			.cache_bytes = e->cfg.spec_cache_bytes > 0 ? (uint64_t)e->cfg.spec_cache_bytes : 0,
			.drafter = e->cfg.drafter,
		};
		rc = ms_spec_init(&e->spec, &sc, e->cfg.max_batch_tokens + e->cfg.max_running,
				  e->cfg.max_running, err);
	}
	if (!rc) {
		e->running = calloc((size_t)e->cfg.max_running, sizeof(*e->running));
		e->props = calloc((size_t)e->cfg.max_running, sizeof(*e->props));
		e->work = malloc((size_t)e->V * sizeof(float));
		e->row = malloc((size_t)e->V * sizeof(float));
		if (!e->running || !e->props || !e->work || !e->row)
			rc = ms_err_set(err, -ENOMEM, "out of memory");
	}
	if (!rc)
		rc = step_batch_alloc(e, &e->sb, err);
	if (rc) {
		ms_engine_free(e);
		return rc;
	}
	publish_stats(e);
	*out = e;
	return 0;
}

void ms_engine_free(struct ms_engine *e)
{
	if (!e)
		return;
	if (e->thread_started) {
		pthread_mutex_lock(&e->mu);
		e->stop = true;
		pthread_cond_signal(&e->cv);
		pthread_mutex_unlock(&e->mu);
		pthread_join(e->thread, NULL);
	}
	while (e->wait_head) {
		struct req *r = e->wait_head;
		e->wait_head = r->next;
		e->n_waiting--;
		e->waiting_pages -= r->reserved;
		finish(e, r, MS_FINISH_CANCELLED, NULL, NULL);
	}
	while (e->n_running) {
		struct req *r = e->running[--e->n_running];
		finish(e, r, MS_FINISH_CANCELLED, NULL, NULL);
	}
	ms_kv_pool_free(&e->pool);
	ms_spec_free(&e->spec);
	free(e->running);
	free(e->props);
	step_batch_free(&e->sb);
	free(e->work);
	free(e->row);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e);
}

void ms_engine_get_stats(struct ms_engine *e, struct ms_engine_stats *s)
{
	pthread_mutex_lock(&e->mu);
	*s = e->stats;
	pthread_mutex_unlock(&e->mu);
}

int ms_engine_check(struct ms_engine *e, struct ms_err *err)
{
	int32_t *refs = calloc((size_t)e->pool.n_pages, sizeof(int32_t));
	if (!refs)
		return ms_err_set(err, -ENOMEM, "out of memory");
	int64_t reserved = 0;
	int rc = 0;
	for (int i = 0; i < e->n_running && !rc; i++) {
		struct req *r = e->running[i];
		reserved += r->reserved;
		int64_t held = 0;
		for (int l = 0; l < r->kv.n_layers; l++)
			for (int64_t b = 0; b < r->kv.cap_blocks; b++) {
				int32_t g = r->kv.pages[l][b];
				if (g < 0)
					continue;
				refs[g]++;
				held++;
				if (e->pool.ref[g] <= 0)
					rc = ms_err_set(err, -EFAULT, "request %llu holds page %d whose count is %d",
							(unsigned long long)r->id, g, e->pool.ref[g]);
			}
		if (!rc && held > r->reserved)
			rc = ms_err_set(err, -EFAULT, "request %llu holds %lld pages, reserved %lld",
					(unsigned long long)r->id, (long long)held, (long long)r->reserved);
		/* every position written so far still visible has its page */
		/* the next query (at kv.len) sees positions from kv.len - W + 1 on */
		int64_t lo = r->kv.len - e->m->kv.sliding_window + 1;
		for (int l = 0; l < r->kv.n_layers && !rc; l++)
			for (int64_t p = 0; p < r->kv.len; p += e->P) {
				bool needed = !e->m->kv.layer_sliding[l] || p + e->P > lo;
				if (needed && r->kv.pages[l][p / e->P] < 0)
					rc = ms_err_set(err, -EFAULT, "request %llu lost layer %d's page for "
							"position %lld", (unsigned long long)r->id, l,
							(long long)p);
			}
	}
	int32_t held = 0, cached = 0, free_n = 0;
	for (int32_t g = 0; g < e->pool.n_pages && !rc; g++) {
		if (refs[g] != e->pool.ref[g])
			rc = ms_err_set(err, -EFAULT, "page %d: count %d, but %d requests hold it", g,
					e->pool.ref[g], refs[g]);
		held += e->pool.ref[g] > 0;
		cached += e->pool.ref[g] == 0 && e->pool.key[g];
		free_n += e->pool.ref[g] == 0 && !e->pool.key[g];
	}
	if (!rc && reserved != e->reserved)
		rc = ms_err_set(err, -EFAULT, "reserved %lld, running requests add up to %lld",
				(long long)e->reserved, (long long)reserved);
	if (!rc && e->reserved > e->pool.n_pages)
		rc = ms_err_set(err, -EFAULT, "reserved %lld pages of %d", (long long)e->reserved,
				e->pool.n_pages);
	if (!rc && (cached != e->pool.n_cached || free_n != e->pool.n_free))
		rc = ms_err_set(err, -EFAULT, "pool counts: %d cached, %d free; pages say %d, %d",
				e->pool.n_cached, e->pool.n_free, cached, free_n);
	if (!rc && held + cached + free_n != e->pool.n_pages)
		rc = ms_err_set(err, -EFAULT, "pages do not add up");
	int64_t waiting = 0;
	pthread_mutex_lock(&e->mu);
	for (const struct req *r = e->wait_head; r; r = r->next)
		waiting += r->reserved;
	if (!rc && waiting != e->waiting_pages)
		rc = ms_err_set(err, -EFAULT, "waiting requests reserve %lld pages, counted %lld",
				(long long)waiting, (long long)e->waiting_pages);
	pthread_mutex_unlock(&e->mu);
	free(refs);
	return rc;
}
