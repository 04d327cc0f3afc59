/*
 * agent.h: HAProxy's agent check (`agent-check agent-port N` on a server
 * line): a TCP port that, on each connection, writes one line saying how
 * much work this replica wants, and closes.
 *
 *   ready:    "up ready W%"  W = 100 x free KV share / (1 + waiting
 *             requests), at least 1: a replica with a full cache or a
 *             queue gets fewer new connections
 *   draining: "drain"        (SIGTERM: finish what runs, take nothing new)
 *   loading, failed: "down"
 *
 * One thread accepts; a line costs a stats read (no lock the engine
 * holds for long).
 */
#ifndef MS_AGENT_H
#define MS_AGENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "ms-error.h"

struct ms_server;

struct ms_agent {
	bool running;          /* started: fd and th are set */
	int fd;                /* the listening socket */
	pthread_t th;
	atomic_bool stop;
	struct ms_server *srv;
};

/* Listen on host:port and answer from s's state; -EADDRINUSE (named). */
int ms_agent_start(struct ms_agent *a, struct ms_server *s, const char *host, int port,
		   struct ms_err *err);
/* Stop and join (a zeroed or never-started agent is fine). */
void ms_agent_stop(struct ms_agent *a);

/* The line for a state and the engine's load (tests). */
void ms_agent_line(int state, double kv_usage, int waiting, char *buf, size_t n);

#endif
