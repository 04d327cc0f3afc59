/*
 * test-faults.c: every allocation failed in turn (config/ms-fault.h).
 *
 * Scenarios: loading each format of the embedded default model (backend,
 * checkpoint, repacking, then a short request whose prompt logprobs show
 * the weights are right), loading the tokenizer and encoding/decoding, one
 * request through the engine (init, prefill, decode, finish, free), and the
 * server answering POST /v1/completions, a streamed /v1/chat/completions,
 * /v1/responses and /v1/messages plain and streamed (in process, over a
 * socket, HTTP/1.0).
 *
 * Each scenario runs first without a failure: its result is the reference
 * and K its allocations. Then for N in the plan (every N up to --dense,
 * then a stride so that at most --max-iters runs are made; --full: every N
 * up to K plus a margin) it runs with the Nth allocation failing. It must
 * give an error with a message (load, engine) or a 500/503 with the
 * error envelope, an error event in a stream, a response that says it
 * failed (server) -- or, where the
 * code could do without the block, exactly the reference; never a crash, a
 * silently different result or a block left allocated (live blocks counted
 * by the wrapper before and after). Right after, the same scenario without
 * a failure must give the reference exactly again.
 *
 *   test-faults [--scenario NAME]... [--full] [--dense D] [--max-iters M] [--n N] [--list]
 *
 * MS_FAULT_FULL=1 is --full. Failures print N and the failing call's site
 * as exe+offset (addr2line -f -e test-faults OFFSET).
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "engine.h"
#include "http.h"
#include "ms-json.h"
#include "metrics.h"
#include "model.h"
#include "ms-clock.h"
#include "ms-fault.h"
#include "tokenizer.h"

#ifndef MS_MODELS_DIR
#error "MS_MODELS_DIR: the embedded default models (tests/server/meson.build)"
#endif

#define RES_MAX (1 << 16)

/* What a scenario produced: bytes compared whole. */
struct result {
	size_t len;
	char b[RES_MAX];
};

static void res_add(struct result *r, const void *p, size_t n)
{
	if (n > RES_MAX - r->len)
		n = RES_MAX - r->len;
	memcpy(r->b + r->len, p, n);
	r->len += n;
}

/* A scenario: 0 and a result, or a negative code and err's message. */
struct scenario {
	const char *name;
	int (*run)(const struct scenario *sc, struct result *out, struct ms_err *err);
	const char *arg;
};

/* ---- shared state: what the engine and server scenarios run on ---- */

static struct {
	struct ms_backend *be;
	struct ms_model m;
	struct ms_tokenizer *tok;
	bool loaded;
	struct ms_engine *eng;     /* the server's */
	struct ms_metrics *metrics;
	struct ms_server srv;
	int port;
} G;

/* ---- one request through an engine ---- */

struct seen {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	struct result *out;
	enum ms_finish why;
	char error[512];
};

static void on_event(void *ctx, const struct ms_event *ev)
{
	struct seen *s = ctx;
	pthread_mutex_lock(&s->mu);
	if (ev->kind == MS_EV_PROMPT_TOKEN || ev->kind == MS_EV_TOKEN) {
		res_add(s->out, &ev->kind, sizeof(ev->kind));
		res_add(s->out, &ev->token, sizeof(ev->token));
		if (ev->lp) {
			res_add(s->out, &ev->lp->logprob, sizeof(ev->lp->logprob));
			res_add(s->out, ev->lp->top, (size_t)ev->lp->n_top * sizeof(*ev->lp->top));
		}
	}
	if (ev->text_len)
		res_add(s->out, ev->text, ev->text_len);
	if (ev->kind == MS_EV_FINISH) {
		s->why = ev->finish;
		res_add(s->out, &ev->finish, sizeof(ev->finish));
		if (ev->error)
			snprintf(s->error, sizeof(s->error), "%s", ev->error);
		s->done = true;
		pthread_cond_signal(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
}

/* Engine made, one request (prompt logprobs, sampled decode with logprobs,
 * a stop string that never matches), engine freed. */
static int run_request(const struct ms_model *m, const struct ms_tokenizer *tok, int64_t max_tokens,
		       struct result *out, struct ms_err *err)
{
	static const int32_t prompt[] = {12, 345, 67, 890, 1234, 56, 789, 10, 2000, 42, 7, 99};
	struct ms_engine_config ec = {.kv_tokens = 256, .max_context = 128, .max_batch_tokens = 8};
	struct ms_engine *e = NULL;
	struct ms_text text = ms_tokenizer_text(tok);
	int rc;
	if ((rc = ms_engine_init(&e, &m->lm, &text, &ec, err)))
		return rc;
	if ((rc = ms_engine_start(e, err))) {
		ms_engine_free(e);
		return rc;
	}
	static const char *const stop[] = {"never-said-in-the-bible"};
	struct ms_request_params p = {.max_tokens = max_tokens, .stop = tok ? stop : NULL,
				      .n_stop = tok ? 1 : 0, .prompt_logprobs = 2};
	ms_sampling_defaults(&p.sampling);
	p.sampling.temperature = 0.8f;
	p.sampling.seed = 7;
	p.sampling.has_seed = true;
	p.sampling.n_logprobs = 2;
	p.sampling.presence_penalty = 0.5f; /* the sampler's counts allocate */
	struct seen s = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .out = out};
	uint64_t id;
	rc = ms_engine_submit(e, prompt, (int64_t)(sizeof(prompt) / sizeof(*prompt)), &p, on_event, &s,
			      &id, err);
	if (!rc) {
		pthread_mutex_lock(&s.mu);
		while (!s.done)
			pthread_cond_wait(&s.cv, &s.mu);
		pthread_mutex_unlock(&s.mu);
		if (s.why == MS_FINISH_ERROR)
			rc = ms_err_set(err, -EIO, "request failed: %s", s.error);
	}
	ms_engine_free(e);
	return rc;
}

/* ---- scenarios: loading ---- */

static int open_backend(struct ms_backend **be, struct ms_err *err)
{
	struct ms_backend_opts o = {.threads = 2};
	return ms_backend_open(&o, be, err);
}

static int sc_load(const struct scenario *sc, struct result *out, struct ms_err *err)
{
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/%s", MS_MODELS_DIR, sc->arg);
	struct ms_backend *be = NULL;
	int rc = open_backend(&be, err);
	if (rc)
		return rc;
	struct ms_model m;
	if (!(rc = ms_model_load(&m, dir, be, err))) {
		rc = run_request(&m, NULL, 2, out, err);
		ms_model_free(&m);
	}
	ms_backend_close(be);
	return rc;
}

static int sc_tokenizer(const struct scenario *sc, struct result *out, struct ms_err *err)
{
	(void)sc;
	static const char text[] = "And the LORD said unto Moses, <|start|>user<|message|>Who is "
				   "the king of Israel? \xc3\xa9\xe2\x82\xac<|end|>";
	struct ms_tokenizer *t = NULL;
	int rc = ms_tokenizer_load(&t, MS_MODELS_DIR "/bf16/tokenizer.json", err);
	if (rc)
		return rc;
	int32_t *ids = NULL;
	size_t n = 0, len = 0;
	char *back = NULL;
	if (!(rc = ms_tokenizer_encode(t, text, sizeof(text) - 1, true, &ids, &n, err))) {
		res_add(out, ids, n * sizeof(*ids));
		if (!(rc = ms_tokenizer_decode(t, ids, n, false, &back, &len, err)))
			res_add(out, back, len);
	}
	free(ids);
	free(back);
	ms_tokenizer_free(t);
	return rc;
}

/* ---- scenarios: the engine on the loaded model ---- */

static int sc_engine(const struct scenario *sc, struct result *out, struct ms_err *err)
{
	(void)sc;
	return run_request(&G.m, G.tok, 6, out, err);
}

/* ---- scenarios: the server, in process ---- */

/* POST over HTTP/1.0 (the end of the answer is the end of the connection,
 * no chunks to undo); the status and the body. The test's own side
 * neither counts nor fails. */
static int http_post(const char *path, const char *body, int *status, struct result *out)
{
	ms_fault_exempt_thread(true);
	int rc = -EIO, fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)G.port)};
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	struct timeval tv = {.tv_sec = 120};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	static char buf[RES_MAX];
	size_t n = 0;
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
		int hl = snprintf(buf, sizeof(buf), "POST %s HTTP/1.0\r\nHost: 127.0.0.1\r\n"
				  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
				  path, strlen(body), body);
		if (send(fd, buf, (size_t)hl, MSG_NOSIGNAL) == hl) {
			ssize_t r;
			while (n < sizeof(buf) - 1 && (r = recv(fd, buf + n, sizeof(buf) - 1 - n, 0)) > 0)
				n += (size_t)r;
			rc = r == 0 || n == sizeof(buf) - 1 ? 0 : -EIO; /* a timeout: an error */
		}
	}
	if (fd >= 0)
		close(fd);
	buf[n] = '\0';
	char *b = strstr(buf, "\r\n\r\n");
	*status = 0;
	if (rc == 0 && (!b || sscanf(buf, "HTTP/1.%*d %d", status) != 1))
		rc = -EPROTO;
	if (rc == 0)
		res_add(out, b + 4, n - (size_t)(b + 4 - buf));
	ms_fault_exempt_thread(false);
	return rc;
}

/* The fields that differ between two identical answers become constants:
 * a key ending in a quote has a string value, the others a number. */
static void normalize(struct result *r)
{
	static const char *const keys[] = {"\"id\":\"", "\"item_id\":\"", "\"created\":",
					   "\"created_at\":"};
	enum { N_KEYS = sizeof(keys) / sizeof(*keys) };
	char tmp[RES_MAX];
	size_t o = 0;
	for (size_t i = 0; i < r->len;) {
		size_t k = 0, kl = 0;
		for (; k < N_KEYS; k++)
			if (r->len - i >= (kl = strlen(keys[k])) && !memcmp(r->b + i, keys[k], kl))
				break;
		if (k == N_KEYS) {
			tmp[o++] = r->b[i++];
			continue;
		}
		bool str = keys[k][kl - 1] == '"';
		memcpy(tmp + o, keys[k], kl), o += kl, i += kl;
		while (i < r->len && (str ? r->b[i] != '"' : (r->b[i] >= '0' && r->b[i] <= '9')))
			i++;
		tmp[o++] = 'X';
	}
	memcpy(r->b, tmp, o);
	r->len = o;
}

static bool res_has(const struct result *r, const char *s)
{
	return memmem(r->b, r->len, s, strlen(s)) != NULL;
}

/* A 200's answer is whole (0), failed (-ENOMEM: a stream's error event,
 * a response that says "failed") or cut (-EPROTO). The Responses API ends
 * its stream with a response.* event of the final status, not [DONE]. */
static int answer_state(const struct result *out, bool stream, bool responses, bool messages)
{
	if (stream && (res_has(out, "data: {\"error\"") || res_has(out, "event: response.failed") ||
		       res_has(out, "event: error")))
		return -ENOMEM;
	if (messages && stream) /* Anthropic's stream ends with message_stop */
		return res_has(out, "event: message_stop") ? 0 : -EPROTO;
	if (responses && !stream && res_has(out, "\"created_at\":X,\"status\":\"failed\""))
		return -ENOMEM;
	if (responses && stream)
		return res_has(out, "event: response.completed") ||
		       res_has(out, "event: response.incomplete") ? 0 : -EPROTO;
	if (responses) /* the response's own status comes first, before its items' */
		return res_has(out, "\"created_at\":X,\"status\":\"completed\"") ||
		       res_has(out, "\"created_at\":X,\"status\":\"incomplete\"") ? 0 : -EPROTO;
	return (stream ? res_has(out, "data: [DONE]") : !res_has(out, "\"error\"")) ? 0 : -EPROTO;
}

/* 200 and the answer, or the request's error: a 500/503 with the error
 * envelope, or a 200 that says it failed (answer_state). */
static int sc_server(const struct scenario *sc, struct result *out, struct ms_err *err)
{
	bool stream = strstr(sc->arg, "\"stream\":true") != NULL;
	bool responses = strstr(sc->arg, "\"input\"") != NULL;
	bool messages = !strncmp(sc->name, "server-messages", 15);
	const char *path = responses ? "/v1/responses" : messages ? "/v1/messages"
			   : strstr(sc->arg, "\"messages\"") ? "/v1/chat/completions" : "/v1/completions";
	int status = 0;
	int rc = http_post(path, sc->arg, &status, out);
	if (rc)
		return ms_err_set(err, rc, "no answer (connection dropped or timed out), status %d",
				  status);
	normalize(out);
	if ((status == 500 || status == 503) && res_has(out, "\"error\""))
		return ms_err_set(err, -ENOMEM, "%d: %.*s", status, (int)out->len, out->b);
	if (status != 200)
		return ms_err_set(err, -EPROTO, "unexpected status %d: %.*s", status, (int)out->len,
				  out->b);
	rc = answer_state(out, stream, responses, messages);
	if (rc == -ENOMEM)
		return ms_err_set(err, rc, "200 that failed: %.*s", (int)out->len, out->b);
	if (rc)
		return ms_err_set(err, rc, "200 without a whole answer: %.*s", (int)out->len, out->b);
	return 0;
}

static int setup_model(struct ms_err *err)
{
	int rc;
	if ((rc = open_backend(&G.be, err)) ||
	    (rc = ms_model_load(&G.m, MS_MODELS_DIR "/bf16", G.be, err)))
		return rc;
	G.loaded = true;
	return ms_tokenizer_load(&G.tok, MS_MODELS_DIR "/bf16/tokenizer.json", err);
}

static int setup_server(struct ms_err *err)
{
	struct ms_engine_config ec = {.kv_tokens = 2048};
	struct ms_text text = ms_tokenizer_text(G.tok);
	int rc;
	if ((rc = ms_engine_init(&G.eng, &G.m.lm, &text, &ec, err)) ||
	    (rc = ms_engine_start(G.eng, err)) || (rc = ms_metrics_init(&G.metrics, "bf16", err)))
		return rc;
	struct ms_server_config sc = {.host = "127.0.0.1", .port = 0, .max_body_bytes = 1 << 20,
				      .api = {.model_name = "bf16", .keepalive_s = 1000000}};
	if ((rc = ms_server_start(&G.srv, &sc, G.metrics, err)))
		return rc;
	ms_server_set_ready(&G.srv, &G.m, G.tok, G.eng);
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(G.srv.daemon, MHD_DAEMON_INFO_BIND_PORT);
	G.port = di ? di->port : 0;
	return G.port ? 0 : ms_err_set(err, -EIO, "no port");
}

static void teardown(void)
{
	if (G.srv.daemon) {
		ms_server_quiesce(&G.srv);
		ms_engine_free(G.eng);
		ms_server_stop(&G.srv);
	} else if (G.eng) {
		ms_engine_free(G.eng);
	}
	ms_metrics_free(G.metrics);
	ms_tokenizer_free(G.tok);
	if (G.loaded)
		ms_model_free(&G.m);
	if (G.be)
		ms_backend_close(G.be);
}

/* ---- the sweep ---- */

static const struct scenario scenarios[] = {
	{"load-bf16", sc_load, "bf16"},
	{"load-mxfp4", sc_load, "mxfp4"},
	{"load-gptq-int4", sc_load, "gptq-int4"},
	{"load-awq-int4", sc_load, "awq-int4"},
	{"load-quark-w4a8", sc_load, "quark-w4a8"},
	{"tokenizer", sc_tokenizer, NULL},
	{"engine", sc_engine, NULL},
	{"server-completion", sc_server,
	 "{\"prompt\":\"And the LORD said unto Moses\",\"max_tokens\":6,\"temperature\":0.8,"
	 "\"seed\":7,\"logprobs\":2,\"frequency_penalty\":0.5,\"stop\":[\"never\"]}"},
	{"server-chat-stream", sc_server,
	 "{\"messages\":[{\"role\":\"user\",\"content\":\"Who is the king of Israel?\"}],"
	 "\"max_tokens\":6,\"temperature\":0.8,\"seed\":7,\"stream\":true,"
	 "\"stream_options\":{\"include_usage\":true}}"},
	{"server-responses", sc_server,
	 "{\"input\":[{\"role\":\"user\",\"content\":\"Who is the king of Israel?\"}],"
	 "\"instructions\":\"Answer briefly.\",\"max_output_tokens\":6,\"temperature\":0,"
	 "\"top_p\":0.9}"},
	{"server-responses-stream", sc_server,
	 "{\"input\":\"And the LORD said unto Moses\",\"max_output_tokens\":6,\"temperature\":0,"
	 "\"stream\":true}"},
	{"server-messages", sc_server,
	 "{\"model\":\"claude-x\",\"max_tokens\":6,\"system\":[{\"type\":\"text\",\"text\":"
	 "\"Answer briefly.\"}],\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
	 "\"text\",\"text\":\"Who is the king of Israel?\"}]}],\"thinking\":{\"type\":"
	 "\"enabled\",\"budget_tokens\":2048},\"stop_sequences\":[\"never\"],\"temperature\":0}"},
	{"server-messages-stream", sc_server,
	 "{\"max_tokens\":6,\"messages\":[{\"role\":\"user\",\"content\":\"And the LORD "
	 "said\"}],\"thinking\":{\"type\":\"adaptive\",\"display\":\"omitted\"},"
	 "\"temperature\":0,\"stream\":true}"},
};
#define N_SCENARIOS (sizeof(scenarios) / sizeof(*scenarios))

struct opts {
	bool full;
	uint64_t dense, max_iters;
	uint64_t just;      /* --n: this N only, its result printed */
	const char *only[N_SCENARIOS];
	int n_only;
};

static void site_name(void *site, char *buf, size_t len)
{
	Dl_info di;
	if (site && dladdr(site, &di) && di.dli_fbase)
		snprintf(buf, len, "%s+0x%lx", di.dli_fname ? di.dli_fname : "?",
			 (unsigned long)((char *)site - (char *)di.dli_fbase));
	else
		snprintf(buf, len, "%p", site);
}

/* Blocks return to `want` once the threads that hold them are done (an
 * HTTP connection frees its state after the answer has gone out). */
/* Live blocks once they are down to want (5 s at most): a connection's
 * thread frees its blocks after the client has its answer. Fewer than
 * want is no leak: blocks of an earlier run were still being freed when
 * want was counted (a loaded machine), and the count starts again there. */
static int64_t settle_live(int64_t want)
{
	int64_t live = ms_fault_live();
	for (double end = ms_now_s() + 5.0; live > want && ms_now_s() < end; live = ms_fault_live())
		usleep(2000);
	return live;
}

static struct result ref, got;
static bool o_verbose; /* --n: a different result is printed */

static bool res_same(const struct result *a, const struct result *b)
{
	return a->len == b->len && !memcmp(a->b, b->b, a->len);
}

struct tally {
	uint64_t runs, errors, same, not_fired, bad;
	int64_t live0;
};

/* Run sc with the nth allocation failing, then once without. */
static void one(const struct scenario *sc, uint64_t n, struct tally *t)
{
	struct ms_err err = {0};
	got.len = 0;
	ms_fault_arm(n);
	int rc = sc->run(sc, &got, &err);
	bool fired = ms_fault_fired();
	char where[512];
	site_name(ms_fault_site(), where, sizeof(where));
	ms_fault_arm(0);
	t->runs++;
	const char *why = NULL;
	if (rc == 0 && !res_same(&got, &ref)) {
		why = "a different result without an error";
		if (o_verbose)
			printf("got:\n%.*s\nwant:\n%.*s\n", (int)got.len, got.b, (int)ref.len, ref.b);
	}
	else if (rc && !fired)
		why = "an error without a failed allocation";
	else if (rc && !err.msg[0])
		why = "an error without a message";
	t->errors += rc != 0;
	t->same += !why && rc == 0 && fired;
	t->not_fired += !fired;
	int64_t live = settle_live(t->live0);
	if (!why && live > t->live0)
		why = "blocks left allocated";
	if (why) {
		printf("FAIL %s N=%" PRIu64 " (%s): %s (rc %d: %.300s; live %+lld)\n", sc->name, n,
		       where, why, rc, err.msg, (long long)(live - t->live0));
		t->bad++;
	}
	t->live0 = live;
	got.len = 0;
	ms_err_clear(&err);
	rc = sc->run(sc, &got, &err);
	live = settle_live(t->live0);
	if (rc || !res_same(&got, &ref) || live > t->live0) {
		printf("FAIL %s N=%" PRIu64 " (%s): the run after it %s (rc %d: %.300s; live %+lld)\n",
		       sc->name, n, where, rc ? "failed" : !res_same(&got, &ref) ? "differs" : "leaked",
		       rc, err.msg, (long long)(live - t->live0));
		t->bad++;
		t->live0 = live;
	}
}

/* The process's CPU time: what a sweep costs, whatever else the machine runs. */
static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool sweep(const struct scenario *sc, const struct opts *o)
{
	struct ms_err err = {0};
	double t0 = ms_now_s(), c0 = cpu_s();
	ref.len = 0;
	ms_fault_arm(0);
	/* twice: the first run makes what lives for the process (lazy tables) */
	if (sc->run(sc, &ref, &err)) {
		printf("FAIL %s: the run without a failure fails: %s\n", sc->name, err.msg);
		return false;
	}
	struct tally t = {.live0 = settle_live(ms_fault_live())};
	ref.len = 0;
	ms_fault_arm(0);
	if (sc->run(sc, &ref, &err)) {
		printf("FAIL %s: the second run without a failure fails: %s\n", sc->name, err.msg);
		return false;
	}
	uint64_t k = ms_fault_count();
	t.live0 = settle_live(t.live0);
	double t_ref = ms_now_s() - t0;
	uint64_t last = o->full ? k + k / 10 + 10 : k, stride = 1;
	if (!o->full && k > o->dense)
		stride = o->max_iters > o->dense ? (k - o->dense + (o->max_iters - o->dense) - 1) /
							   (o->max_iters - o->dense)
						 : k;
	if (o->just) {
		one(sc, o->just, &t);
	}
	for (uint64_t n = 1; !o->just && n <= last; n += n < o->dense ? 1 : stride)
		one(sc, n, &t);
	if (!o->just && stride > 1 && (k - o->dense) % stride)
		one(sc, k, &t); /* the last allocation too */
	printf("%-20s K %6" PRIu64 "  runs %5" PRIu64 " (stride %" PRIu64 ")  errors %5" PRIu64
	       "  same result %4" PRIu64 "  not reached %4" PRIu64 "  bad %" PRIu64
	       "  %.1f s (CPU %.1f s)\n",
	       sc->name, k, t.runs, stride, t.errors, t.same, t.not_fired, t.bad,
	       ms_now_s() - t0 - t_ref / 2, cpu_s() - c0);
	fflush(stdout);
	return t.bad == 0;
}

static bool wanted(const struct opts *o, const char *name)
{
	for (int i = 0; i < o->n_only; i++)
		if (!strcmp(o->only[i], name))
			return true;
	return o->n_only == 0;
}

int main(int argc, char **argv)
{
	struct opts o = {.dense = 100, .max_iters = 250};
	const char *full = getenv("MS_FAULT_FULL");
	o.full = full && !strcmp(full, "1");
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--full")) {
			o.full = true;
		} else if (!strcmp(argv[i], "--list")) {
			for (size_t s = 0; s < N_SCENARIOS; s++)
				puts(scenarios[s].name);
			return 0;
		} else if (i + 1 < argc && !strcmp(argv[i], "--scenario") && o.n_only < (int)N_SCENARIOS) {
			o.only[o.n_only++] = argv[++i];
		} else if (i + 1 < argc && !strcmp(argv[i], "--n")) {
			o.just = strtoull(argv[++i], NULL, 10);
			o_verbose = true;
		} else if (i + 1 < argc && !strcmp(argv[i], "--dense")) {
			o.dense = strtoull(argv[++i], NULL, 10);
		} else if (i + 1 < argc && !strcmp(argv[i], "--max-iters")) {
			o.max_iters = strtoull(argv[++i], NULL, 10);
		} else {
			fprintf(stderr, "usage: %s [--scenario NAME]... [--full] [--dense D] "
				"[--max-iters M] [--n N] [--list]\n", argv[0]);
			return 2;
		}
	}
	/* cJSON's allocations count too, as in the daemon (whose server
	 * installs the hook before the model loads) */
	ms_json_init();
	struct ms_err err = {0};
	bool ok = true, need_server = false;
	for (size_t s = 0; s < N_SCENARIOS; s++)
		need_server |= scenarios[s].run == sc_server && wanted(&o, scenarios[s].name);
	if (setup_model(&err) || (need_server && setup_server(&err))) {
		printf("FAIL setup: %s\n", err.msg);
		teardown();
		return 1;
	}
	for (size_t s = 0; s < N_SCENARIOS; s++)
		if (wanted(&o, scenarios[s].name))
			ok &= sweep(&scenarios[s], &o);
	teardown();
	return ok ? 0 : 1;
}
