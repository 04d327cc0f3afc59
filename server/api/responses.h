/*
 * responses.h: the Responses API's answers (POST /v1/responses), and the
 * store that keeps them for previous_response_id and GET / DELETE
 * /v1/responses/{id} (server/ only).
 *
 * A response's output items are built in the order the model writes them,
 * from the harmony parser's events: reasoning (the analysis channel),
 * message (final, and commentary without a recipient), function_call
 * (a message to functions.NAME). Streamed, each item is announced
 * (output_item.added, content_part.added), grows by deltas and is closed
 * (*.done, output_item.done) before the next one opens, between
 * response.created / response.in_progress and response.completed (or
 * .incomplete, .failed); every event carries "type" and a sequence_number
 * counting from 0.
 */
#ifndef MS_SERVER_RESPONSES_H
#define MS_SERVER_RESPONSES_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "bridge.h"

struct ms_rsp;  /* one response being built (responses.c) */

/* One engine event of the job's one call (its choice 0). */
void ms_rsp_event(struct ms_job *jb, const struct ms_ev *e);
/* The stream's last event (completed, incomplete or failed); the response
 * is stored when the request asked for it. */
void ms_rsp_stream_end(struct ms_job *jb);
/* The non-streamed answer (stored as above). */
cJSON *ms_rsp_final(struct ms_job *jb);
void ms_rsp_free(struct ms_rsp *r);   /* NULL is fine */

/* ---- the store: responses in memory, least recently used evicted ---- */

struct ms_rsp_entry;

struct ms_rsp_store {
	pthread_mutex_t mu;
	int cap;                      /* responses kept; 0: none */
	int n;
	struct ms_rsp_entry *head;    /* most recently used first */
};

void ms_rsp_store_init(struct ms_rsp_store *st, int cap);
void ms_rsp_store_free(struct ms_rsp_store *st);
/* Keep id's response and its conversation (the items that led to it and
 * its output), both taken. */
void ms_rsp_store_put(struct ms_rsp_store *st, const char *id, cJSON *response, cJSON *items);
/* Copies of what id keeps (either pointer may be NULL); false when the
 * store has no such id (never was, evicted or deleted). */
bool ms_rsp_store_get(struct ms_rsp_store *st, const char *id, cJSON **response, cJSON **items);
bool ms_rsp_store_delete(struct ms_rsp_store *st, const char *id);

#endif
