/*
 * serve.c: `moeserve serve`, the daemon: listen first (so /health can say
 * "loading"), load the model, serve; on SIGTERM or SIGINT stop accepting,
 * let running requests finish up to --shutdown-timeout, cancel the rest,
 * exit 0.
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
#include "options.h"
#include "serve.h"
#include "ms-clock.h"
#include "ms-malloc.h"

extern char **environ;

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
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct ms_metrics *metrics = NULL;
	if ((rc = ms_metrics_init(&metrics, name, &err))) {
		fprintf(stderr, "moeserve: error: %s\n", err.msg);
		ms_serve_options_free(&o);
		return EX_SOFTWARE;
	}
	struct ms_server_config sc = {
		.host = o.host, .port = o.port, .api_key = o.api_key, .model_name = name,
		.max_body_bytes = (size_t)o.max_body_bytes, .cors_origin = o.cors_origin,
		.keepalive_s = o.keepalive_s ? o.keepalive_s : 1000000,
		.log_json = o.log_format == MS_LOG_FORMAT_JSON,
	};
	static struct ms_server srv;
	if ((rc = ms_server_start(&srv, &sc, metrics, &err))) {
		fprintf(stderr, "moeserve: error: %s\n", err.msg);
		ms_metrics_free(metrics);
		ms_serve_options_free(&o);
		return EX_UNAVAILABLE;
	}
	fprintf(stderr, "moeserve: listening on http://%s:%d (model %s loading)\n", o.host, o.port, name);

	struct ms_backend be;
	struct ms_model m;
	struct ms_tokenizer *tok = NULL;
	struct ms_engine *eng = NULL;
	int ex = EX_OK;
	bool have_be = false, have_m = false;
	double t0 = ms_now_s();
	struct ms_backend_opts bo = {.kernels = o.kernels, .threads = o.threads, .exact = o.exact,
				     .dense_int8 = o.dense_int8};
	rc = ms_backend_init_opts(&be, &bo, &err);
	if (!rc) {
		have_be = true;
		ms_backend_set_numa(&be, o.numa);
		rc = ms_model_load(&m, model_dir, &be, &err);
		have_m = !rc;
		if (have_m)
			ms_keep_freed_memory();
	}
	if (!rc) {
		char tp[4096];
		snprintf(tp, sizeof(tp), "%s/tokenizer.json", model_dir);
		if (access(tp, F_OK) == 0)
			rc = ms_tokenizer_load(&tok, tp, &err);
		else
			fprintf(stderr, "moeserve: note: %s has no tokenizer.json: prompts must be token ids, "
				"and /v1/chat/completions is off\n", model_dir);
	}
	if (!rc) {
		struct ms_engine_config ec = {
			.kv_cache_bytes = o.kv_cache_bytes, .max_queue = o.max_queue,
			.max_running = o.max_running, .max_batch_tokens = o.max_batch_tokens,
			.max_context = o.ctx_size, .no_prefix_cache = o.no_prefix_cache,
		};
		rc = ms_engine_init(&eng, &m, tok, &ec, &err);
		if (!rc && (rc = ms_engine_start(eng, &err))) {
			ms_engine_free(eng);
			eng = NULL;
		}
	}
	if (rc) {
		/* stay up and say why on /health: an orchestrator sees the reason */
		fprintf(stderr, "moeserve: error: %s\n", err.msg);
		ms_server_set_failed(&srv, err.msg);
		ex = EX_DATAERR;
	} else {
		ms_server_set_ready(&srv, &m, tok, eng);
		/* the context the server advertises is the engine's */
		srv.max_model_len = o.ctx_size && o.ctx_size < m.cfg.max_pos ? o.ctx_size
					: (m.cfg.max_pos < 8192 ? m.cfg.max_pos : 8192);
		fprintf(stderr, "moeserve: ready in %.2f s: %s (%s kernels, %d threads; repacked %lld "
			"of %lld matrices, %.1f MiB, in %.2f s)\n", ms_now_s() - t0, name, be.isa,
			be.pool.n_threads, (long long)m.pack_stats.packed,
			(long long)m.pack_stats.matrices,
			(double)m.pack_stats.packed_bytes / 1048576.0, m.pack_stats.seconds);
	}
	int sig = 0;
	sigwait(&sigs, &sig);
	fprintf(stderr, "moeserve: %s: stopping (up to %d s for running requests)\n",
		sig == SIGTERM ? "SIGTERM" : "SIGINT", o.shutdown_timeout_s);
	ms_server_quiesce(&srv);
	double deadline = ms_now_s() + o.shutdown_timeout_s;
	while (atomic_load(&srv.in_flight) > 0 && ms_now_s() < deadline)
		usleep(20000);
	/* what is left is cancelled: its clients get the end of their stream,
	 * so give the connections a moment to write it before closing them */
	if (eng)
		ms_engine_free(eng);
	for (double end = ms_now_s() + 1.0; atomic_load(&srv.in_flight) > 0 && ms_now_s() < end;)
		usleep(10000);
	ms_server_stop(&srv);
	ms_tokenizer_free(tok);
	if (have_m)
		ms_model_free(&m);
	if (have_be)
		ms_backend_free(&be);
	ms_metrics_free(metrics);
	ms_serve_options_free(&o);
	return ex == EX_OK ? EX_OK : ex;
}
