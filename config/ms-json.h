/*
 * ms-json.h: the project's one JSON module, over cJSON.
 *
 * Reading: JSON text held to RFC 8259 before cJSON reads it: request
 * bodies and every JSON file of a checkpoint (config.json, the
 * quantization configs, the shard index, tokenizer.json).
 *
 * cJSON is lenient where outside input must not be: it takes any byte up
 * to a space as whitespace (a raw NUL between tokens passes), raw control
 * bytes inside strings and text after the value, and keeps both of two
 * equal keys (its lookups find the first; Python's json, which wrote and
 * reads most checkpoints, the last). Such a text means different things to
 * different readers, so it is refused, naming where.
 *
 * Building: cJSON tells of a failed allocation only by a NULL, and its
 * Add* functions swallow that NULL: a tree built through them silently
 * lacks the field, and would go out as a shorter but valid JSON text.
 * ms_json_init installs an allocator that counts its failures per thread;
 * a producer compares this thread's count before and after building
 * (every connection has its own thread, so the difference is its own) and
 * answers an error instead of an incomplete text. Output escapes a
 * carried NUL.
 *
 * (models/harmony-json.c keeps a reader of its own: the chat template
 * needs object order and number literals as written, which cJSON drops.)
 */
#ifndef MS_JSON_H
#define MS_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "ms-error.h"

enum {
	/* a \u0000 in a string arrives carried (ms-utf8.h), so no reader cuts
	 * the string at it; without this flag it is refused (cJSON's strings
	 * end at a NUL: kept, it would silently cut the string) */
	MS_JSON_CARRY_NUL = 1,
	/* the text is a request body: "the body ends ..." (else "the file") */
	MS_JSON_BODY = 2,
};

/* text[0..len) as strict RFC 8259 JSON: whitespace as the RFC spells it,
 * strings valid UTF-8 with control bytes escaped and surrogates paired,
 * numbers by the RFC's grammar, nothing after the value, nesting under 512,
 * no object holding a key twice. 0 with *out set; -EINVAL with msg "not
 * valid JSON: <fault>, at line L, column C (byte B)" or "not accepted: the
 * key "k" appears twice in <path>"; -ENOMEM with "out of memory". */
int ms_json_parse_rfc(const char *text, size_t len, unsigned flags, cJSON **out, char *msg,
		      size_t cap);

/* The file at path read whole and parsed as above (no NUL carried); an
 * error names the path. */
int ms_json_read_file(const char *path, cJSON **out, struct ms_err *err);

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

/* A request body text[0..len) as strict RFC 8259 JSON (ms_json_parse_rfc),
 * a \u0000 in a string carried (ms-utf8.h); the messages begin "the body is not valid JSON: " or "the body is not
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
