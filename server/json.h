/*
 * json.h: the server's JSON (server/ only): request bodies parsed as
 * strict RFC 8259 JSON, output with NULs escaped, and cJSON's allocation
 * failures made visible.
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
#include <stdbool.h>
#include <stddef.h>

/* Install the counting allocator (idempotent; before other threads use
 * cJSON). Without it the count stays 0. */
void ms_json_init(void);

/* cJSON allocations that failed on this thread so far. */
unsigned long ms_json_failures(void);

/* Tests: the n-th next cJSON allocation on this thread fails, and only
 * that one (1: the next); 0 turns it off. Needs ms_json_init. */
void ms_json_fail_nth(unsigned long n);

/* cJSON's AddItemTo* and ReplaceItem* keep the item only when they
 * succeed (the key's copy may fail; the container may be NULL): these
 * delete it otherwise, so that a failed allocation costs a field, counted,
 * never a leak. True when the item was kept. */
bool ms_json_push(cJSON *arr, cJSON *item);
bool ms_json_put(cJSON *obj, const char *key, cJSON *item);
bool ms_json_replace(cJSON *obj, const char *key, cJSON *item);

/* text[0..len) as strict RFC 8259 JSON (config/ms-json.h's
 * ms_json_parse_rfc), a \u0000 in a string carried (ms-utf8.h); the
 * messages begin "the body is not valid JSON: " or "the body is not
 * accepted: ". */
int ms_json_parse_strict(const char *text, size_t len, cJSON **out, char *msg, size_t cap);

/* v as compact JSON text (malloc'd; NULL when out of memory), a carried
 * NUL written as \u0000. */
char *ms_json_text(const cJSON *v);

/* j as compact text (malloc'd), j deleted; NULL when printing fails or when
 * an allocation failed on this thread since the count was `since` (the
 * tree may lack a part). */
char *ms_json_print(cJSON *j, unsigned long since);

#endif
