/*
 * messages-answer.h: Anthropic's Messages API answers (POST /v1/messages).
 *
 * The content blocks are built in the order the model writes them, from
 * the harmony parser's events: thinking (the analysis channel, shown when
 * the request enabled thinking), text (final, and commentary without a
 * recipient; after the stop sequences), tool_use (a message to
 * functions.NAME, its arguments parsed into "input"). Streamed: the
 * message_start event at once, then per block content_block_start, its
 * deltas (text_delta, thinking_delta, then signature_delta; input_json_delta)
 * and content_block_stop, then message_delta (stop_reason, usage) and
 * message_stop, each as "event: TYPE" and its data line.
 *
 * A thinking block's signature carries its analysis (base64 behind a
 * prefix): sent back with the next turn it restores the analysis even when
 * the answer showed it "omitted". It is not a secret, nor checked: a
 * client could as well send the thinking text.
 */
#ifndef MS_API_MESSAGES_ANSWER_H
#define MS_API_MESSAGES_ANSWER_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "job.h"
#include "ms-strbuf.h"

struct ms_msg;  /* one message being built (messages-answer.c) */

/* Streamed: message_start, sent before the first token. */
void ms_messages_begin(struct ms_job *jb);
/* One engine event of the job's one call. */
void ms_messages_event(struct ms_job *jb, const struct ms_ev *e);
/* The stream's end: message_delta, message_stop. */
void ms_messages_stream_end(struct ms_job *jb);
/* The non-streamed answer. */
cJSON *ms_messages_final(struct ms_job *jb);
void ms_messages_free(struct ms_msg *m);   /* NULL is fine */

/* A thinking text's signature, onto out. */
void ms_messages_sign(const char *text, size_t len, struct ms_strbuf *out);
/* The analysis a signature of ours carries, onto out; false (out as it
 * was) when sig is not one of ours. */
bool ms_messages_unsign(const char *sig, struct ms_strbuf *out);

#endif
