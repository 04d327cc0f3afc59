/*
 * serve.c: `moeserve serve`, the daemon: listen first (so /health can say
 * "loading"), load the model, serve; on SIGTERM or SIGINT stop accepting,
 * let running requests finish up to --shutdown-timeout, cancel the rest,
 * exit 0. SIGHUP rereads --api-key-file and the TLS certificate and key.
 * The backend and the model load as every command's do (load.c).
 */
#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "http.h"
#include "kv-plan.h"
#include "load.h"
#include "model.h"
#include "options.h"
#include "serve.h"
#include "ms-clock.h"

extern char **environ;

/* What the daemon loaded (each part only when it loaded). */
struct served {
	struct ms_cli_model lm;     /* backend, model, tokenizer (load.h) */
	struct ms_engine *eng;
	struct ms_kv_plan kv;       /* the context and KV pool it was given */
};

/* The engine's configuration from the options (0 where the engine's
 * default is meant). */
static void engine_config(const struct ms_serve_options *o, struct ms_engine_config *ec)
{
	*ec = (struct ms_engine_config){
		.kv_cache_bytes = o->kv_cache_bytes, .max_queue = o->max_queue,
		.max_running = o->max_running, .max_batch_tokens = o->max_batch_tokens,
		.max_context = o->ctx_size, .no_prefix_cache = o->no_prefix_cache,
		.spec_off = o->speculative == MS_SERVE_SPEC_OFF, .spec_max_tokens = o->spec_max_tokens,
		/* an operator's 0 is no shared cache; the engine's 0 is its default */
		.spec_cache_bytes = o->spec_cache_bytes ? (int64_t)o->spec_cache_bytes : -1,
	};
}

/* What the engine does about speculation, for the start-up line: its
 * values after its defaults and clamps (--spec-max-tokens below
 * --max-batch-tokens), and the cache it allocated. */
static void spec_words(const struct ms_serve_options *o, const struct served *sv, char *buf,
		       size_t n)
{
	struct ms_engine_config ec;
	struct ms_engine_stats st;
	engine_config(o, &ec);
	ms_engine_config_defaults(&ec, &sv->lm.m.lm);
	ms_engine_get_stats(sv->eng, &st);
	if (ec.spec_off) {
		snprintf(buf, n, "speculation off");
		return;
	}
	int k = snprintf(buf, n, "speculation auto (drafts up to %d tokens, ", ec.spec_max_tokens);
	if (st.spec.cache_bytes)
		snprintf(buf + k, n - (size_t)k, "%.1f MiB shared cache)",
			 (double)st.spec.cache_bytes / 1048576.0);
	else
		snprintf(buf + k, n - (size_t)k, "no shared cache)");
}

/* Model, tokenizer (optional: without one, prompts are ids and chat is
 * off), engine, on the open backend. */
static int serve_load(const struct ms_serve_options *o, const char *model_dir, struct served *sv,
		      struct ms_err *err)
{
	int rc = ms_cli_model_load(o, model_dir, MS_CLI_LOAD_TOKENIZER, &sv->lm, err);
	if (rc)
		return rc;
	/* the context and pool from what the weights left (kv-plan.h) */
	const struct ms_lm *lm = &sv->lm.m.lm;
	struct ms_kv_plan_in pi = {
		.max_pos = lm->max_pos, .page_tokens = MS_KV_PAGE_TOKENS, .ctx_size = o->ctx_size,
		.kv_cache_bytes = o->kv_cache_bytes, .host = sv->lm.be->host,
		.token_bytes = ms_kv_page_bytes(MS_KV_PAGE_TOKENS, lm->kv.kv_dim, lm->kv.head_dim,
						lm->kv.dtype) * (uint64_t)lm->kv.n_layers / MS_KV_PAGE_TOKENS,
		.available = ms_kv_plan_available(),
	};
	if ((rc = ms_kv_plan_make(&pi, &sv->kv, err)))
		return rc;
	struct ms_engine_config ec;
	engine_config(o, &ec);
	ec.max_context = sv->kv.context;
	ec.kv_cache_bytes = sv->kv.pool_bytes;
	struct ms_text text = ms_tokenizer_text(sv->lm.tok);
	if ((rc = ms_engine_init(&sv->eng, &sv->lm.m.lm, &text, &ec, err)))
		return rc;
	if ((rc = ms_engine_start(sv->eng, err))) {
		ms_engine_free(sv->eng);
		sv->eng = NULL;
	}
	return rc;
}

/* Load and serve, or stay up and say why on /health (an orchestrator sees
 * the reason); an exit status. */
static int serve_model(const struct ms_serve_options *o, const char *model_dir, const char *name,
		       struct ms_server *srv, struct served *sv)
{
	struct ms_err err = {0};
	double t0 = ms_now_s();
	if (serve_load(o, model_dir, sv, &err)) {
		fprintf(stderr, "moeserve: error: %s\n", err.msg);
		ms_server_set_failed(srv, err.msg);
		return EX_DATAERR;
	}
	struct ms_model *m = &sv->lm.m;
	struct ms_backend *be = sv->lm.be;
	char spec[128];
	spec_words(o, sv, spec, sizeof(spec));
	ms_server_set_ready(srv, m, sv->lm.tok, sv->eng);
	fprintf(stderr, "moeserve: ready in %.2f s: %s (%s backend, %s kernels, %d threads, %s KV "
		"cache, %s attention products; repacked %lld of %lld matrices, %.1f MiB, in %.2f s); "
		"%s; %s\n", ms_now_s() - t0, name, be->name, be->kernels, be->threads,
		ms_kv_dtype_name(m->lm.kv.dtype), ms_attn_products_name(be, m->lm.kv.dtype),
		(long long)m->pack_stats.packed, (long long)m->pack_stats.matrices,
		(double)m->pack_stats.packed_bytes / 1048576.0, m->pack_stats.seconds, sv->kv.why, spec);
	return EX_OK;
}

/* After the signal: not ready (/health 503 draining, /live 200, new work
 * 503 with Retry-After: a balancer retries it elsewhere), running requests
 * finish up to the timeout; then stop accepting, cancel the rest, close. */
static void serve_drain(const struct ms_serve_options *o, struct ms_server *srv, struct served *sv)
{
	ms_server_set_draining(srv);
	double deadline = ms_now_s() + o->shutdown_timeout_s;
	while (atomic_load(&srv->api.in_flight) > 0 && ms_now_s() < deadline)
		usleep(20000);
	ms_server_quiesce(srv);
	/* what is left is cancelled: its clients get the end of their stream,
	 * so give the connections a moment to write it before closing them */
	if (sv->eng)
		ms_engine_free(sv->eng);
	for (double end = ms_now_s() + 1.0; atomic_load(&srv->api.in_flight) > 0 && ms_now_s() < end;)
		usleep(10000);
	ms_server_stop(srv);
	ms_cli_model_free(&sv->lm);
}

/* SIGHUP: reread the API key file and the TLS certificate and key, each
 * kept as it was when its new files are bad. */
static void reload(struct ms_server *srv)
{
	struct ms_err err = {0};
	int n = 0;
	if (!srv->auth.file && !srv->cfg.tls_cert)
		fprintf(stderr, "moeserve: SIGHUP: nothing to reload (no --api-key-file, no --tls-cert)\n");
	if (srv->auth.file && ms_server_reload_keys(srv, &n, &err))
		fprintf(stderr, "moeserve: SIGHUP: API keys NOT reloaded, the old ones stay: "
			"--api-key-file: %s\n", err.msg);
	else if (srv->auth.file)
		fprintf(stderr, "moeserve: SIGHUP: API keys reloaded from %s: %d accepted\n",
			srv->auth.file, n);
	if (srv->cfg.tls_cert && ms_server_reload_tls(srv, &err))
		fprintf(stderr, "moeserve: SIGHUP: TLS certificate NOT reloaded, the old one stays: "
			"%s\n", err.msg);
	else if (srv->cfg.tls_cert)
		fprintf(stderr, "moeserve: SIGHUP: TLS certificate reloaded from %s and %s\n",
			srv->cfg.tls_cert, srv->cfg.tls_key);
}

/* Wait for SIGTERM or SIGINT (returned); SIGHUP meanwhile reloads. */
static int wait_signal(const sigset_t *sigs, struct ms_server *srv)
{
	for (;;) {
		int sig = 0;
		sigwait(sigs, &sig);
		if (sig != SIGHUP)
			return sig;
		reload(srv);
	}
}

int ms_cmd_serve(int argc, char **argv, const char *default_model)
{
	struct ms_serve_options o;
	struct ms_err err = {0};
	int rc = ms_serve_options_parse(&o, argc, argv, environ, &err);
	if (rc == 1) {
		fputs(ms_serve_options_help(), stdout);
		return EX_OK;
	}
	if (rc) {
		fprintf(stderr, "moeserve serve: %s\n", err.msg);
		return rc == -ENOENT ? EX_NOINPUT : EX_USAGE;
	}
	const char *model_dir = o.model ? o.model : default_model;
	char name[256], tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s", model_dir);
	snprintf(name, sizeof(name), "%s", o.served_model_name ? o.served_model_name : basename(tmp));

	/* Signals are taken by sigwait below; block them before any thread
	 * starts so that every thread inherits the mask. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct served sv = {0};
	/* The backend, before the server listens: a machine without the device
	 * asked for is not going to get one by waiting, so the daemon exits (69)
	 * rather than report it on /health forever. */
	if ((rc = ms_cli_backend_open(&o, &sv.lm, &err))) {
		fprintf(stderr, "moeserve: error: %s\n", err.msg);
		ms_serve_options_free(&o);
		return rc == -EINVAL ? EX_USAGE : (rc == -ENODEV || rc == -ENOTSUP ? EX_UNAVAILABLE
										   : EX_SOFTWARE);
	}
	struct ms_metrics *metrics = NULL;
	if ((rc = ms_metrics_init(&metrics, name, &err))) {
		fprintf(stderr, "moeserve: error: %s\n", err.msg);
		ms_cli_model_free(&sv.lm);
		ms_serve_options_free(&o);
		return EX_SOFTWARE;
	}
	struct ms_server_config sc = {
		.host = o.host, .port = o.port, .api_key = o.api_key, .api_key_file = o.api_key_file,
		.tls_cert = o.tls_cert, .tls_key = o.tls_key, .tls_cert_pem = o.tls_cert_pem,
		.tls_key_pem = o.tls_key_pem, .tls_key_password = o.tls_key_password,
		.tls_priorities = o.tls_priorities, .max_connections = o.max_connections,
		.max_connections_per_ip = o.max_connections_per_ip,
		.max_body_bytes = (size_t)o.max_body_bytes, .cors_origin = o.cors_origin,
		.log_json = o.log_format == MS_LOG_FORMAT_JSON,
		.no_access_log = o.access_log == MS_ACCESS_LOG_OFF,
		.agent_port = o.agent_port,
		.api = {.model_name = name, .keepalive_s = o.keepalive_s ? o.keepalive_s : 1000000,
			.responses_store = o.responses_store, .max_tokens = o.max_tokens,
			.grammar_cache = o.grammar_cache},
	};
	static struct ms_server srv;
	if ((rc = ms_server_start(&srv, &sc, metrics, &err))) {
		fprintf(stderr, "moeserve: error: %s\n", err.msg);
		ms_metrics_free(metrics);
		ms_cli_model_free(&sv.lm);
		ms_serve_options_free(&o);
		/* a bad certificate, key or key file is the options' fault */
		return rc == -EINVAL ? EX_USAGE : rc == -ENOENT ? EX_NOINPUT : EX_UNAVAILABLE;
	}
	fprintf(stderr, "moeserve: listening on %s://%s:%d (model %s loading)\n",
		o.tls_cert ? "https" : "http", o.host, o.port, name);
	int ex = serve_model(&o, model_dir, name, &srv, &sv);
	int sig = wait_signal(&sigs, &srv);
	fprintf(stderr, "moeserve: %s: stopping (up to %d s for running requests)\n",
		sig == SIGTERM ? "SIGTERM" : "SIGINT", o.shutdown_timeout_s);
	serve_drain(&o, &srv, &sv);
	ms_metrics_free(metrics);
	ms_serve_options_free(&o);
	return ex;
}
