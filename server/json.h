/*
 * json.h: cJSON's allocation failures made visible (server/ only).
 *
 * cJSON tells of a failed allocation only by a NULL, and its Add*
 * functions swallow that NULL: a tree built through them silently lacks the
 * field, and would go out as a shorter but valid JSON text. ms_json_init
 * installs an allocator that counts its failures per thread; a producer
 * compares this thread's count before and after building (every connection
 * has its own thread, so the difference is its own) and answers an error
 * instead of an incomplete text.
 */
#ifndef MS_SERVER_JSON_H
#define MS_SERVER_JSON_H

#include <cjson/cJSON.h>

/* Install the counting allocator (idempotent; before other threads use
 * cJSON). Without it the count stays 0. */
void ms_json_init(void);

/* cJSON allocations that failed on this thread so far. */
unsigned long ms_json_failures(void);

/* Tests: the n-th next cJSON allocation on this thread fails, and only
 * that one (1: the next); 0 turns it off. Needs ms_json_init. */
void ms_json_fail_nth(unsigned long n);

/* j as compact text (malloc'd), j deleted; NULL when printing fails or when
 * an allocation failed on this thread since the count was `since` (the
 * tree may lack a part). */
char *ms_json_print(cJSON *j, unsigned long since);

#endif
