/*
 * responses-answer.h: the Responses API's answers (POST /v1/responses);
 * responses-store.h keeps them for previous_response_id and GET / DELETE
 * /v1/responses/{id}.
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
#ifndef MS_API_RESPONSES_ANSWER_H
#define MS_API_RESPONSES_ANSWER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "job.h"

struct ms_rsp;  /* one response being built (responses-answer.c) */

/* One engine event of the job's one call (its choice 0). */
void ms_responses_event(struct ms_job *jb, const struct ms_ev *e);
/* The stream's last event (completed, incomplete or failed); the response
 * is stored when the request asked for it. */
void ms_responses_stream_end(struct ms_job *jb);
/* The response as it stands (in progress until the end), not stored. */
cJSON *ms_responses_snapshot(struct ms_job *jb);
/* The non-streamed answer (stored as above). */
cJSON *ms_responses_final(struct ms_job *jb);
void ms_responses_free(struct ms_rsp *r);   /* NULL is fine */

#endif
