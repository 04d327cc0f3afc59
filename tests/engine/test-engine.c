/*
 * test-engine.c: continuous batching over the paged KV cache, on the small
 * random model (MS_FIXTURE_RANDOM: 4 layers, 2 sliding with a 32-token
 * window, vocab 512) and the sharded fixture (MS_FIXTURE_BF16).
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check-run.h"
#include "backend.h"
#include "engine.h"
#include "model.h"
#include "tokenizer.h"

struct fixture {
	struct ms_backend *be;
	struct ms_model m;
};

/* The model on MS_TEST_BACKEND (default the CPU's best kernels): the
 * "any backend" case runs on rocm-sim too (tests/meson.build). */
static void load(struct fixture *f, const char *env)
{
	struct ms_err err = {0};
	const char *dir = getenv(env);
	ck_assert_msg(dir != NULL, "%s not set", env);
	struct ms_backend_opts o = {.backend = getenv("MS_TEST_BACKEND"), .threads = 2};
	ck_assert_msg(ms_backend_open(&o, &f->be, &err) == 0, "%s", err.msg);
	ck_assert_msg(ms_model_load(&f->m, dir, f->be, &err) == 0, "%s", err.msg);
}

static void unload(struct fixture *f)
{
	ms_model_free(&f->m);
	ms_backend_close(f->be);
}

/* What a callback saw of one request. */
struct seen {
	int32_t tokens[4096];
	float lps[4096][6];     /* chosen logprob + top 5 */
	int n;
	char text[65536];
	size_t text_len;
	bool finished;
	enum ms_finish why;
	char stop[64];
	int64_t cached, prompt_tokens, completion_tokens;
	int prompt_events;
	float prompt_lp[4096];
};

static void on_event(void *ctx, const struct ms_event *ev)
{
	struct seen *s = ctx;
	if (ev->kind == MS_EV_PROMPT_TOKEN) {
		s->prompt_lp[ev->index] = ev->lp ? ev->lp->logprob : NAN;
		s->prompt_events++;
		return;
	}
	if (ev->text_len && s->text_len + ev->text_len < sizeof(s->text)) {
		memcpy(s->text + s->text_len, ev->text, ev->text_len);
		s->text_len += ev->text_len;
	}
	if (ev->kind == MS_EV_TOKEN) {
		ck_assert(!s->finished);
		s->tokens[s->n] = ev->token;
		if (ev->lp) {
			s->lps[s->n][0] = ev->lp->logprob;
			for (int i = 0; i < 5 && i < ev->lp->n_top; i++)
				s->lps[s->n][1 + i] = ev->lp->top[i].logprob;
		}
		s->n++;
		return;
	}
	s->finished = true;
	s->why = ev->finish;
	s->cached = ev->cached_tokens;
	s->prompt_tokens = ev->prompt_tokens;
	s->completion_tokens = ev->completion_tokens;
	if (ev->stop_string)
		snprintf(s->stop, sizeof(s->stop), "%s", ev->stop_string);
}

static struct ms_request_params greedy(int64_t max_tokens)
{
	struct ms_request_params p = {0};
	ms_sampling_defaults(&p.sampling);
	p.sampling.temperature = 0;
	p.sampling.n_logprobs = 5;
	p.max_tokens = max_tokens;
	p.prompt_logprobs = -1;
	return p;
}

static void random_prompt(int32_t *t, int64_t n, int64_t vocab, uint32_t seed)
{
	for (int64_t i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		t[i] = (int32_t)((seed >> 8) % (uint32_t)vocab);
	}
}

static void run_until_idle(struct ms_engine *e)
{
	struct ms_err err = {0};
	for (int guard = 0; guard < 100000; guard++) {
		int64_t rc = ms_engine_step(e, &err);
		ck_assert_msg(rc >= 0, "%s", err.msg);
		ck_assert_msg(ms_engine_check(e, &err) == 0, "%s", err.msg);
		struct ms_engine_stats st;
		ms_engine_get_stats(e, &st);
		if (!st.running && !st.waiting)
			return;
	}
	ck_abort_msg("engine did not go idle");
}

/* A greedy request gives the same tokens and logprobs alone and in a batch
 * of 16 with other requests (sampled ones, other lengths). */
START_TEST(batch_invariance)
{
	struct fixture f;
	load(&f, "MS_FIXTURE_RANDOM");
	struct ms_err err = {0};
	struct ms_engine_config cfg = {0};
	struct ms_engine *e;
	int32_t prompt[300];
	random_prompt(prompt, 45, f.m.cfg.vocab, 11);
	static struct seen alone, together, others[15];
	memset(&alone, 0, sizeof(alone));
	memset(&together, 0, sizeof(together));
	struct ms_request_params g = greedy(24);
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	ck_assert_int_eq(ms_engine_submit(e, prompt, 45, &g, on_event, &alone, NULL, &err), 0);
	run_until_idle(e);
	ms_engine_free(e);

	cfg.no_prefix_cache = true;
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	for (int i = 0; i < 15; i++) {
		int32_t op[300];
		memset(&others[i], 0, sizeof(others[i]));
		int64_t n = 5 + 17 * i;
		random_prompt(op, n, f.m.cfg.vocab, 100 + (uint32_t)i);
		struct ms_request_params q = greedy(10 + i);
		q.sampling.temperature = 0.8f;
		q.sampling.top_p = 0.9f;
		ck_assert_int_eq(ms_engine_submit(e, op, n, &q, on_event, &others[i], NULL, &err), 0);
		if (i == 7) /* ours arrives in the middle */
			ck_assert_int_eq(ms_engine_submit(e, prompt, 45, &g, on_event, &together, NULL, &err), 0);
	}
	run_until_idle(e);
	ms_engine_free(e);
	ck_assert(alone.finished && together.finished);
	ck_assert_int_eq(alone.n, 24);
	ck_assert_int_eq(together.n, alone.n);
	for (int i = 0; i < alone.n; i++) {
		ck_assert_int_eq(together.tokens[i], alone.tokens[i]);
		for (int j = 0; j < 6; j++)
			ck_assert_msg(fabsf(together.lps[i][j] - alone.lps[i][j]) <= 1e-5f,
				      "step %d lp %d: %g vs %g", i, j, together.lps[i][j], alone.lps[i][j]);
	}
	for (int i = 0; i < 15; i++)
		ck_assert(others[i].finished && others[i].why == MS_FINISH_LENGTH);
	unload(&f);
}
END_TEST

/* On any backend (MS_TEST_BACKEND; small, so that the GPU's host model
 * runs it): a greedy request's tokens and logprobs are the same alone and
 * as one of 16 requests that start together, bit for bit on a device
 * backend (its kernels sum in an order that ignores the batch). */
START_TEST(batch_of_16_any_backend)
{
	struct fixture f;
	load(&f, "MS_FIXTURE_RANDOM");
	bool exact = getenv("MS_TEST_BACKEND") != NULL;
	struct ms_err err = {0};
	struct ms_engine_config cfg = {.no_prefix_cache = true};
	struct ms_engine *e;
	int32_t prompt[8];
	random_prompt(prompt, 8, f.m.cfg.vocab, 21);
	static struct seen alone, together, others[15];
	memset(&alone, 0, sizeof(alone));
	memset(&together, 0, sizeof(together));
	struct ms_request_params g = greedy(5);
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	ck_assert_int_eq(ms_engine_submit(e, prompt, 8, &g, on_event, &alone, NULL, &err), 0);
	run_until_idle(e);
	ms_engine_free(e);
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	for (int i = 0; i < 15; i++) {
		int32_t op[20];
		memset(&others[i], 0, sizeof(others[i]));
		random_prompt(op, 3 + i, f.m.cfg.vocab, 200 + (uint32_t)i);
		struct ms_request_params q = greedy(3 + i % 4);
		ck_assert_int_eq(ms_engine_submit(e, op, 3 + i, &q, on_event, &others[i], NULL, &err), 0);
		if (i == 6)
			ck_assert_int_eq(ms_engine_submit(e, prompt, 8, &g, on_event, &together, NULL, &err), 0);
	}
	run_until_idle(e);
	ms_engine_free(e);
	ck_assert(alone.finished && together.finished);
	ck_assert_int_eq(together.n, alone.n);
	for (int i = 0; i < alone.n; i++) {
		ck_assert_int_eq(together.tokens[i], alone.tokens[i]);
		for (int j = 0; j < 6; j++) {
			float a = alone.lps[i][j], b = together.lps[i][j];
			ck_assert_msg(exact ? memcmp(&a, &b, sizeof(a)) == 0 : fabsf(a - b) <= 1e-5f,
				      "step %d lp %d: %.9g alone, %.9g in the batch", i, j, a, b);
		}
	}
	unload(&f);
}
END_TEST

/* The engine's tokens equal ms_seq's greedy decoding (an independent path:
 * one sequence, its own pool, no scheduler). */
START_TEST(matches_single_sequence)
{
	struct fixture f;
	load(&f, "MS_FIXTURE_RANDOM");
	struct ms_err err = {0};
	int32_t prompt[100];
	random_prompt(prompt, 70, f.m.cfg.vocab, 5);
	struct ms_seq s;
	int64_t V = f.m.cfg.vocab;
	float *lg = malloc((size_t)V * sizeof(float));
	int32_t want[20];
	ck_assert_int_eq(ms_seq_init(&s, &f.m, 100, &err), 0);
	ck_assert_int_eq(ms_seq_forward(&s, prompt, 70, lg, false, &err), 0);
	for (int i = 0; i < 20; i++) {
		int32_t best = 0;
		for (int64_t v = 1; v < V; v++)
			best = lg[v] > lg[best] ? (int32_t)v : best;
		want[i] = best;
		ck_assert_int_eq(ms_seq_forward(&s, &best, 1, lg, false, &err), 0);
	}
	ms_seq_free(&s);
	free(lg);
	struct ms_engine_config cfg = {.max_batch_tokens = 32}; /* several prefill chunks */
	struct ms_engine *e;
	static struct seen got;
	memset(&got, 0, sizeof(got));
	struct ms_request_params g = greedy(20);
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	ck_assert_int_eq(ms_engine_submit(e, prompt, 70, &g, on_event, &got, NULL, &err), 0);
	run_until_idle(e);
	ms_engine_free(e);
	ck_assert_int_eq(got.n, 20);
	for (int i = 0; i < 20; i++)
		ck_assert_int_eq(got.tokens[i], want[i]);
	unload(&f);
}
END_TEST

/* The same prompt again reuses its pages: cached tokens reported, the
 * output unchanged, fewer tokens computed; a prompt that is a whole number
 * of pages takes the copy-on-write path (all but its last token). */
START_TEST(prefix_reuse)
{
	struct fixture f;
	load(&f, "MS_FIXTURE_RANDOM");
	struct ms_err err = {0};
	struct ms_engine_config cfg = {0};
	struct ms_engine *e;
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	const int64_t lens[] = {40, 48};
	const int64_t want_cached[] = {32, 47};
	for (int k = 0; k < 2; k++) {
		int32_t prompt[64];
		random_prompt(prompt, lens[k], f.m.cfg.vocab, 77 + (uint32_t)k);
		static struct seen a, b;
		memset(&a, 0, sizeof(a));
		memset(&b, 0, sizeof(b));
		struct ms_request_params g = greedy(12);
		ck_assert_int_eq(ms_engine_submit(e, prompt, lens[k], &g, on_event, &a, NULL, &err), 0);
		run_until_idle(e);
		struct ms_engine_stats s1, s2;
		ms_engine_get_stats(e, &s1);
		ck_assert_int_eq(ms_engine_submit(e, prompt, lens[k], &g, on_event, &b, NULL, &err), 0);
		run_until_idle(e);
		ms_engine_get_stats(e, &s2);
		ck_assert_int_eq(a.cached, 0);
		ck_assert_int_eq(b.cached, want_cached[k]);
		/* computed prompt tokens: only the uncached ones */
		ck_assert_int_eq((int64_t)(s2.prompt_tokens - s1.prompt_tokens), lens[k] - want_cached[k]);
		ck_assert_int_eq(a.n, b.n);
		for (int i = 0; i < a.n; i++) {
			ck_assert_int_eq(a.tokens[i], b.tokens[i]);
			ck_assert(fabsf(a.lps[i][0] - b.lps[i][0]) <= 1e-5f);
		}
		/* a shared prefix, a different tail: the shared pages only */
		static struct seen c;
		memset(&c, 0, sizeof(c));
		prompt[lens[k] - 3] ^= 1;
		ck_assert_int_eq(ms_engine_submit(e, prompt, lens[k], &g, on_event, &c, NULL, &err), 0);
		run_until_idle(e);
		ck_assert_int_eq(c.cached, ((lens[k] - 3) / 16) * 16);
	}
	struct ms_engine_stats st;
	ms_engine_get_stats(e, &st);
	ck_assert_int_eq(st.kv_pages_held, 0); /* cached pages are not held */
	ck_assert(st.kv_pages_cached > 0);
	ms_engine_free(e);
	unload(&f);
}
END_TEST

/* A pool too small to keep everything evicts the least recently used
 * cached pages, and results stay right. */
START_TEST(eviction)
{
	struct fixture f;
	load(&f, "MS_FIXTURE_RANDOM");
	struct ms_err err = {0};
	int64_t kvd = f.m.cfg.n_kv_heads * f.m.cfg.head_dim;
	/* room for about two requests of 80 positions */
	struct ms_engine_config cfg = {.kv_cache_bytes = ms_kv_page_bytes(16, kvd, kvd, MS_KV_F32) * 48,
				       .max_context = 128};
	struct ms_engine *e;
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	int32_t prompt[80];
	static struct seen first, again;
	memset(&first, 0, sizeof(first));
	memset(&again, 0, sizeof(again));
	random_prompt(prompt, 64, f.m.cfg.vocab, 1);
	struct ms_request_params g = greedy(8);
	ck_assert_int_eq(ms_engine_submit(e, prompt, 64, &g, on_event, &first, NULL, &err), 0);
	run_until_idle(e);
	for (uint32_t k = 0; k < 6; k++) { /* other prompts push it out */
		static struct seen o;
		memset(&o, 0, sizeof(o));
		int32_t other[80];
		random_prompt(other, 64, f.m.cfg.vocab, 1000 + k);
		ck_assert_int_eq(ms_engine_submit(e, other, 64, &g, on_event, &o, NULL, &err), 0);
		run_until_idle(e);
	}
	struct ms_engine_stats st;
	ms_engine_get_stats(e, &st);
	ck_assert(st.evictions > 0);
	ck_assert_int_eq(ms_engine_submit(e, prompt, 64, &g, on_event, &again, NULL, &err), 0);
	run_until_idle(e);
	ck_assert_int_eq(again.cached, 0); /* evicted */
	ck_assert_int_eq(again.n, first.n);
	for (int i = 0; i < first.n; i++)
		ck_assert_int_eq(again.tokens[i], first.tokens[i]);
	ms_engine_free(e);
	unload(&f);
}
END_TEST

START_TEST(refusals)
{
	struct fixture f;
	load(&f, "MS_FIXTURE_RANDOM");
	struct ms_err err = {0};
	int64_t kvd = f.m.cfg.n_kv_heads * f.m.cfg.head_dim;
	struct ms_engine_config cfg = {.max_queue = 2, .max_context = 256,
				       .kv_cache_bytes = ms_kv_page_bytes(16, kvd, kvd, MS_KV_F32) * 40};
	struct ms_engine *e;
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	int32_t prompt[300];
	random_prompt(prompt, 300, f.m.cfg.vocab, 3);
	static struct seen s[3];
	memset(s, 0, sizeof(s));
	struct ms_request_params g = greedy(4);
	/* longer than the context */
	ck_assert_int_eq(ms_engine_submit(e, prompt, 255, &g, on_event, &s[0], NULL, &err), -E2BIG);
	ck_assert_ptr_nonnull(strstr(err.msg, "context of 256"));
	/* more pages than the whole cache */
	ck_assert_int_eq(ms_engine_submit(e, prompt, 200, &g, on_event, &s[0], NULL, &err), -ENOSPC);
	ck_assert_ptr_nonnull(strstr(err.msg, "KV pages"));
	/* bad ids, bad sampling */
	int32_t bad = (int32_t)f.m.cfg.vocab;
	ck_assert_int_eq(ms_engine_submit(e, &bad, 1, &g, on_event, &s[0], NULL, &err), -EINVAL);
	struct ms_request_params q = g;
	q.sampling.top_p = 1.5f;
	ck_assert_int_eq(ms_engine_submit(e, prompt, 4, &q, on_event, &s[0], NULL, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "top_p"));
	/* a full queue */
	ck_assert_int_eq(ms_engine_submit(e, prompt, 4, &g, on_event, &s[0], NULL, &err), 0);
	ck_assert_int_eq(ms_engine_submit(e, prompt, 4, &g, on_event, &s[1], NULL, &err), 0);
	ck_assert_int_eq(ms_engine_submit(e, prompt, 4, &g, on_event, &s[2], NULL, &err), -EBUSY);
	ck_assert_ptr_nonnull(strstr(err.msg, "queue is full"));
	run_until_idle(e);
	ck_assert(s[0].finished && s[1].finished && !s[2].finished);
	ms_engine_free(e);
	unload(&f);
}
END_TEST

/* Random arrivals, lengths and cancellations over thousands of steps:
 * accounting holds at every step, every request finishes exactly once,
 * and nothing is held once all have ended. */
START_TEST(scheduler_property)
{
	struct fixture f;
	load(&f, "MS_FIXTURE_RANDOM");
	struct ms_err err = {0};
	int64_t kvd = f.m.cfg.n_kv_heads * f.m.cfg.head_dim;
	struct ms_engine_config cfg = {.max_queue = 12, .max_running = 6, .max_batch_tokens = 40,
				       .max_context = 160,
				       .kv_cache_bytes = ms_kv_page_bytes(16, kvd, kvd, MS_KV_F32) * 90};
	struct ms_engine *e;
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	enum { N = 300 };
	static struct seen s[N];
	static uint64_t ids[N];
	memset(s, 0, sizeof(s));
	uint32_t rng = 12345;
	int submitted = 0, refused = 0;
	int64_t steps = 0;
	int32_t base[160];
	random_prompt(base, 160, f.m.cfg.vocab, 9);
	while (submitted < N || true) {
		rng = rng * 1103515245u + 12345u;
		uint32_t r = rng >> 8;
		if (submitted < N && r % 8 == 0) {
			int i = submitted++;
			int64_t n = 1 + (int64_t)(r % 90);
			struct ms_request_params g = greedy((int64_t)(r / 90 % 40));
			g.sampling.temperature = (r & 1) ? 0.0f : 1.0f;
			/* a third share a prefix with the others */
			int32_t prompt[160];
			memcpy(prompt, base, sizeof(prompt));
			if (r % 3)
				random_prompt(prompt, n, f.m.cfg.vocab, r);
			if (ms_engine_submit(e, prompt, n, &g, on_event, &s[i], &ids[i], &err)) {
				/* the queue's two bounds: requests, and a cache's worth of pages */
				ck_assert_msg(err.code == -EBUSY || err.code == -EAGAIN, "%s", err.msg);
				s[i].finished = true; /* refused: never runs */
				refused++;
			}
		}
		if (submitted && r % 7 == 0) { /* cancel someone, maybe finished */
			int i = (int)((r / 7) % (uint32_t)submitted);
			ms_engine_cancel(e, ids[i]);
		}
		int64_t rc = ms_engine_step(e, &err);
		ck_assert_msg(rc >= 0, "%s", err.msg);
		ck_assert_msg(ms_engine_check(e, &err) == 0, "step %lld: %s", (long long)steps, err.msg);
		steps++;
		struct ms_engine_stats st;
		ms_engine_get_stats(e, &st);
		ck_assert(st.kv_pages_reserved <= st.kv_pages);
		ck_assert(st.waiting <= cfg.max_queue && st.running <= cfg.max_running);
		if (submitted == N && !st.running && !st.waiting)
			break;
	}
	for (int i = 0; i < N; i++)
		ck_assert_msg(s[i].finished, "request %d never finished", i);
	struct ms_engine_stats st;
	ms_engine_get_stats(e, &st);
	ck_assert_int_eq(st.kv_pages_held, 0);
	ck_assert_int_eq(st.kv_pages_reserved, 0);
	ck_assert(steps > 1000);
	ck_assert_msg(refused < N / 2, "%d of %d refused", refused, N);
	ms_engine_free(e);
	unload(&f);
}
END_TEST

/* Cancellation from another thread stops a running request within a step
 * and gives its pages back. */
struct waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct seen s;
};

static void on_event_locked(void *ctx, const struct ms_event *ev)
{
	struct waiter *w = ctx;
	pthread_mutex_lock(&w->mu);
	on_event(&w->s, ev);
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

START_TEST(cancel_from_another_thread)
{
	struct fixture f;
	load(&f, "MS_FIXTURE_RANDOM");
	struct ms_err err = {0};
	struct ms_engine_config cfg = {0};
	struct ms_engine *e;
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	ck_assert_int_eq(ms_engine_start(e, &err), 0);
	static struct waiter w;
	memset(&w, 0, sizeof(w));
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	int32_t prompt[20];
	random_prompt(prompt, 20, f.m.cfg.vocab, 4);
	struct ms_request_params g = greedy(4000);
	uint64_t id;
	ck_assert_int_eq(ms_engine_submit(e, prompt, 20, &g, on_event_locked, &w, &id, &err), 0);
	pthread_mutex_lock(&w.mu);
	while (w.s.n < 5)
		pthread_cond_wait(&w.cv, &w.mu);
	pthread_mutex_unlock(&w.mu);
	ms_engine_cancel(e, id);
	pthread_mutex_lock(&w.mu);
	while (!w.s.finished)
		pthread_cond_wait(&w.cv, &w.mu);
	int n_at_finish = w.s.n;
	pthread_mutex_unlock(&w.mu);
	ck_assert_int_eq(w.s.why, MS_FINISH_CANCELLED);
	ck_assert(n_at_finish < 4000);
	struct ms_engine_stats st;
	for (int i = 0; i < 1000; i++) { /* stats are published after the step */
		ms_engine_get_stats(e, &st);
		if (!st.running)
			break;
		usleep(1000);
	}
	ck_assert_int_eq(st.running, 0);
	ck_assert_int_eq(st.kv_pages_held, 0);
	ms_engine_free(e);
	unload(&f);
}
END_TEST

/* Echo: prompt logprobs equal those computed from ms_seq's logits. */
START_TEST(prompt_logprobs)
{
	struct fixture f;
	load(&f, "MS_FIXTURE_RANDOM");
	struct ms_err err = {0};
	int64_t n = 150, V = f.m.cfg.vocab;
	int32_t prompt[150];
	random_prompt(prompt, n, V, 21);
	struct ms_seq s;
	float *lg = malloc((size_t)(n * V) * sizeof(float));
	ck_assert_int_eq(ms_seq_init(&s, &f.m, n, &err), 0);
	ck_assert_int_eq(ms_seq_forward(&s, prompt, n, lg, true, &err), 0);
	ms_seq_free(&s);
	struct ms_engine_config cfg = {0};
	struct ms_engine *e;
	static struct seen got;
	memset(&got, 0, sizeof(got));
	struct ms_request_params g = greedy(0);
	g.prompt_logprobs = 3;
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, NULL, &cfg, &err), 0);
	ck_assert_int_eq(ms_engine_submit(e, prompt, n, &g, on_event, &got, NULL, &err), 0);
	run_until_idle(e);
	ms_engine_free(e);
	ck_assert_int_eq(got.prompt_events, n);
	ck_assert(isnan(got.prompt_lp[0]));
	ck_assert_int_eq(got.n, 0);
	ck_assert_int_eq(got.why, MS_FINISH_LENGTH);
	for (int64_t p = 1; p < n; p++) {
		const float *row = lg + (p - 1) * V;
		double mx = row[0], sum = 0;
		for (int64_t v = 1; v < V; v++)
			mx = row[v] > mx ? row[v] : mx;
		for (int64_t v = 0; v < V; v++)
			sum += exp(row[v] - mx);
		double want = row[prompt[p]] - mx - log(sum);
		ck_assert_msg(fabs(got.prompt_lp[p] - want) < 1e-4, "pos %lld: %g vs %g", (long long)p,
			      got.prompt_lp[p], want);
	}
	free(lg);
	unload(&f);
}
END_TEST

/* Sliding layers keep only the pages inside their window: 100k positions
 * through a model whose layers all slide hold a few pages per layer. */
START_TEST(sliding_memory_is_bounded)
{
	struct fixture f;
	load(&f, "MS_FIXTURE_SLIDING");
	struct ms_err err = {0};
	int64_t n = 100000, chunk = 4096, W = f.m.cfg.sliding_window;
	for (int64_t l = 0; l < f.m.cfg.n_layers; l++)
		ck_assert(f.m.cfg.layer_sliding[l]);
	struct ms_seq s;
	ck_assert_int_eq(ms_seq_init(&s, &f.m, n, &err), 0);
	/* the pool itself is sized by the window, not the context */
	int64_t bound = (W + MS_SEQ_CHUNK + MS_KV_PAGE_TOKENS - 1) / MS_KV_PAGE_TOKENS + 1;
	ck_assert_int_le(s.pool.n_pages, bound * f.m.cfg.n_layers);
	int32_t *t = malloc((size_t)chunk * sizeof(int32_t));
	float *lg = malloc((size_t)f.m.cfg.vocab * sizeof(float));
	for (int64_t done = 0; done < n; done += chunk) {
		int64_t c = n - done < chunk ? n - done : chunk;
		random_prompt(t, c, f.m.cfg.vocab, (uint32_t)done);
		ck_assert_msg(ms_seq_forward(&s, t, c, lg, false, &err) == 0, "%s", err.msg);
		for (int l = 0; l < (int)f.m.cfg.n_layers; l++)
			ck_assert_int_le(ms_kv_seq_pages_held(&s.kv, l), (W + MS_KV_PAGE_TOKENS - 1) /
										 MS_KV_PAGE_TOKENS + 1);
	}
	ck_assert_int_eq(s.n_past, n);
	ms_seq_free(&s);
	free(t), free(lg);
	unload(&f);
}
END_TEST

/* A byte-level tokenizer for the default model's 512 ids: 256 bytes plus
 * 256 merges of two letters a..p. */
static struct ms_tokenizer *letters_tokenizer(void)
{
	char path[] = "/tmp/ms-test-engine-tok.XXXXXX";
	int fd = mkstemp(path);
	ck_assert(fd >= 0);
	FILE *f = fdopen(fd, "w");
	fputs("{\"model\":{\"type\":\"BPE\",\"vocab\":{", f);
	/* GPT-2's byte alphabet: printable bytes map to themselves */
	for (int b = 0; b < 256; b++) {
		int cp = b, n = 0;
		if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
			for (int x = 0; x < b; x++)
				n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
			cp = 256 + n;
		}
		fprintf(f, "%s\"\\u%04x\":%d", b ? "," : "", cp, b);
	}
	for (int i = 0; i < 256; i++)
		fprintf(f, ",\"%c%c\":%d", 'a' + i / 16, 'a' + i % 16, 256 + i);
	fputs("},\"merges\":[", f);
	for (int i = 0; i < 256; i++)
		fprintf(f, "%s\"%c %c\"", i ? "," : "", 'a' + i / 16, 'a' + i % 16);
	fputs("]},\"decoder\":{\"type\":\"ByteLevel\"}}", f);
	fclose(f);
	struct ms_tokenizer *t = NULL;
	struct ms_err err = {0};
	ck_assert_msg(ms_tokenizer_load(&t, path, &err) == 0, "%s", err.msg);
	unlink(path);
	return t;
}

/* Stop strings through the engine: the text ends right before the first
 * occurrence, even when the stop string spans tokens; finish is STOP and
 * names the string; nothing after it is emitted. */
START_TEST(stop_strings_in_the_engine)
{
	struct fixture f;
	load(&f, "MS_FIXTURE_RANDOM");
	struct ms_tokenizer *tok = letters_tokenizer();
	struct ms_err err = {0};
	struct ms_engine_config cfg = {0};
	struct ms_engine *e;
	struct ms_text text = ms_tokenizer_text(tok);
	ck_assert_int_eq(ms_engine_init(&e, &f.m.lm, &text, &cfg, &err), 0);
	int32_t prompt[32];
	static struct seen a;
	/* find a prompt whose greedy text has a clean window spanning tokens */
	int found = -1;
	size_t at = 0;
	for (uint32_t seed = 0; seed < 50 && found < 0; seed++) {
		memset(&a, 0, sizeof(a));
		random_prompt(prompt, 20, 256, 300 + seed);
		struct ms_request_params g = greedy(40);
		g.n_stop_ids = 0;
		ck_assert_int_eq(ms_engine_submit(e, prompt, 20, &g, on_event, &a, NULL, &err), 0);
		run_until_idle(e);
		/* a 5-byte window of printable ASCII after at least 4 bytes, whose
		 * first occurrence is there */
		for (size_t i = 4; i + 5 <= a.text_len && found < 0; i++) {
			bool ok = true;
			for (size_t j = 0; j < 5; j++)
				ok &= a.text[i + j] >= 0x21 && a.text[i + j] < 0x7f;
			if (ok && !memmem(a.text, i + 4, a.text + i, 5)) {
				found = (int)seed;
				at = i;
			}
		}
	}
	ck_assert_msg(found >= 0, "no usable generation");
	char stop[6];
	memcpy(stop, a.text + at, 5);
	stop[5] = '\0';
	static struct seen b;
	memset(&b, 0, sizeof(b));
	struct ms_request_params g = greedy(40);
	const char *stops[2] = {"zzzzzzzz", stop};
	g.stop = stops;
	g.n_stop = 2;
	ck_assert_int_eq(ms_engine_submit(e, prompt, 20, &g, on_event, &b, NULL, &err), 0);
	run_until_idle(e);
	ck_assert_int_eq(b.why, MS_FINISH_STOP);
	ck_assert_str_eq(b.stop, stop);
	ck_assert_uint_eq(b.text_len, at);
	ck_assert(memcmp(b.text, a.text, at) == 0);
	ck_assert(b.n < a.n); /* generation stopped early */
	ms_engine_free(e);
	ms_tokenizer_free(tok);
	unload(&f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("engine");
	/* what holds on any backend (MS_TEST_BACKEND) */
	TCase *any = tcase_create("any-backend");
	tcase_set_timeout(any, 900);
	tcase_add_test(any, batch_of_16_any_backend);
	suite_add_tcase(s, any);
	TCase *tc = tcase_create("engine");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, batch_invariance);
	tcase_add_test(tc, matches_single_sequence);
	tcase_add_test(tc, prefix_reuse);
	tcase_add_test(tc, eviction);
	tcase_add_test(tc, refusals);
	tcase_add_test(tc, scheduler_property);
	tcase_add_test(tc, cancel_from_another_thread);
	tcase_add_test(tc, prompt_logprobs);
	tcase_add_test(tc, sliding_memory_is_bounded);
	tcase_add_test(tc, stop_strings_in_the_engine);
	suite_add_tcase(s, tc);
	return ms_check_run(s);
}
