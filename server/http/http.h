/*
 * http.h: the HTTP daemon (libmicrohttpd, one thread per connection): the
 * transport of the API (api.h), with health, metrics, TLS and API keys.
 *
 * It listens before the model is loaded (/health answers 503 with the
 * reason until ms_server_set_ready), so orchestrators can tell "starting"
 * from "dead".
 */
#ifndef MS_HTTP_H
#define MS_HTTP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "api.h"
#include "auth.h"
#include "engine.h"
#include "metrics.h"
#include "ms-error.h"
#include "tokenizer.h"

/* A client's X-Request-Id, at most this long (longer: one is made). */
#define MS_REQUEST_ID_MAX 128

struct ms_server_config {
	const char *host;
	int port;
	const char *api_key;            /* NULL: no auth (unless api_key_file) */
	const char *api_key_file;       /* more keys, reread by ms_server_reload_keys; NULL: none */
	const char *tls_cert, *tls_key; /* their files' names, for messages */
	const char *tls_cert_pem;       /* HTTPS with this certificate and key (PEM text, kept
	                                   by the caller until ms_server_stop); NULL: HTTP */
	const char *tls_key_pem;
	const char *tls_key_password;   /* NULL: the key is not encrypted */
	const char *tls_priorities;     /* NULL: libmicrohttpd's default, "NORMAL" */
	int max_connections;            /* 0: 1024 */
	int max_connections_per_ip;     /* 0: no limit */
	size_t max_body_bytes;
	const char *cors_origin;        /* NULL: no CORS headers */
	bool log_json;
	bool no_access_log;             /* --access-log off */
	int agent_port;                 /* HAProxy's agent check (agent.h); 0: none */
	struct ms_api_config api;       /* what the API is told (api.h) */
};

enum ms_server_state {
	MS_SERVER_LOADING,
	MS_SERVER_READY,
	MS_SERVER_FAILED,
	MS_SERVER_DRAINING,
};

/* The daemon: the transport's state; what it serves is api's. */
struct ms_server {
	struct ms_server_config cfg;
	struct MHD_Daemon *daemon;
	atomic_int state;
	/* Why not ready; state and reason change together under reason_mu, and
	 * readers take both under it (read_status), so a reader never sees a
	 * state with another state's reason or a half-written one. */
	pthread_mutex_t reason_mu;
	char reason[512];
	struct ms_metrics *metrics;
	struct ms_auth auth;            /* the API keys (auth.h) */
	struct ms_api api;              /* the model, the engine and what answers need */
	struct ms_agent agent;          /* --agent-port (agent.h) */
};

/* Listen (the model may load afterwards). Errors: -EINVAL a bad API key
 * file or TLS certificate, key, password or priority string (named);
 * -ENOTSUP TLS asked of a libmicrohttpd built without it; -ENOENT a key
 * file that cannot be read; -EADDRINUSE. */
int ms_server_start(struct ms_server *s, const struct ms_server_config *cfg,
		    struct ms_metrics *metrics, struct ms_err *err);
/* The model is ready: requests are accepted from now on. */
void ms_server_set_ready(struct ms_server *s, struct ms_model *m, struct ms_tokenizer *tok,
			 struct ms_engine *e);
void ms_server_set_failed(struct ms_server *s, const char *reason);
/* SIGHUP: reread --api-key-file; the new keys replace the old only when
 * the file reads correctly (*n_keys: how many now). -ENOENT: no file. */
int ms_server_reload_keys(struct ms_server *s, int *n_keys, struct ms_err *err);
/* SIGHUP: reread --tls-cert and --tls-key; the next handshakes get the new
 * pair only when both read and match (else the old one stays). -ENOENT:
 * no TLS. */
int ms_server_reload_tls(struct ms_server *s, struct ms_err *err);
/* Stop accepting connections (requests in flight go on). */
/* Draining: /health says so (503) while /live stays 200 and the socket
 * keeps listening; new work is refused with 503 and Retry-After, so that a
 * balancer sends it elsewhere, while what runs finishes. */
void ms_server_set_draining(struct ms_server *s);
void ms_server_quiesce(struct ms_server *s);
void ms_server_stop(struct ms_server *s);

#endif
