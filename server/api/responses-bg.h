/*
 * responses-bg.h: background responses (POST /v1/responses with
 * "background": true).
 *
 * The request's job is run by a thread of its own, not by a connection:
 * the answer goes back at once (queued or in progress), and the client
 * polls GET /v1/responses/{id}, reads or resumes the stream (?stream=true,
 * starting_after), or cancels (POST /v1/responses/{id}/cancel). The job
 * always writes its stream events; the run keeps them all (each event's
 * offset by its sequence_number), and a snapshot of the response as it
 * stands, rebuilt at most every 200 ms and at the end. A background
 * response is stored when it ends, whatever "store" says.
 *
 * The API keeps the runs in one list (struct ms_bg_list): the running ones
 * and the last MS_BG_KEEP that ended (their streams can still be read);
 * a run is shared by reference between the list, its thread and readers.
 */
#ifndef MS_API_RESPONSES_BG_H
#define MS_API_RESPONSES_BG_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "ms-error.h"

#define MS_BG_KEEP 64   /* ended runs kept for their streams */

struct ms_api;
struct ms_job;
struct ms_bg;

struct ms_bg_list {
	pthread_mutex_t mu;
	struct ms_bg *head;   /* newest first */
};

void ms_bg_list_init(struct ms_bg_list *l);
/* Cancels what runs, waits for the threads, frees every run. */
void ms_bg_list_free(struct ms_bg_list *l);

/* Run jb (submitted; taken) in the background under its id; *out is a
 * reference for the caller (ms_bg_unref). -ENOMEM, or -EAGAIN when the
 * thread cannot start (jb cancelled and freed either way). */
int ms_bg_start(struct ms_api *api, struct ms_job *jb, struct ms_bg **out, struct ms_err *err);

/* The run of id (a reference), or NULL. */
struct ms_bg *ms_bg_find(struct ms_bg_list *l, const char *id);
void ms_bg_unref(struct ms_bg *bg);

/* The response as it stands (a copy), its status one of queued,
 * in_progress, completed, incomplete, cancelled, failed. */
cJSON *ms_bg_snapshot(struct ms_bg *bg);
/* The items of the conversation that led to it (a copy). */
cJSON *ms_bg_input_items(struct ms_bg *bg);
/* Ask it to stop; true when it had not ended. Waits up to wait_s for the
 * end (the snapshot then says cancelled). */
bool ms_bg_cancel(struct ms_bg *bg, double wait_s);

/* The stream from the event after sequence number `after` (-1: from the
 * start): the byte offset to read from, or -ERANGE when no such event was
 * written. */
long ms_bg_stream_start(struct ms_bg *bg, long after);
/* Up to max bytes of the stream from *pos into buf, waiting up to wait_s
 * for more: the bytes copied (0: none yet), or -1 once the stream has
 * ended and everything was read. */
long ms_bg_read(struct ms_bg *bg, size_t *pos, char *buf, size_t max, double wait_s);

#endif
