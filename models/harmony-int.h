/*
 * harmony-int.h: what the harmony renderer (harmony-render.c) takes from
 * its JSON reader (harmony-json.c). Private to those two files; the public
 * API is harmony.h. The streaming parser (harmony-parse.c) needs neither.
 *
 * The reader exists because the template's output depends on Python's view
 * of the JSON it is given: object order, 1 versus 1.0, json.dumps's
 * separators and escapes, str() of a value. cJSON keeps none of these.
 */
#ifndef MS_HARMONY_INT_H
#define MS_HARMONY_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "ms-strbuf.h"

/* A parsed JSON value. Objects keep their members in source order (Python
 * dicts do, and the template iterates properties in that order); numbers
 * keep their literal, since Python tells 1 from 1.0. */
enum jt { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };

struct jv {
	enum jt t;
	char *s;   /* J_STR: decoded UTF-8; J_NUM: the literal (both NUL-terminated) */
	size_t n;
	char *k;   /* key, when a member of an object */
	size_t kn;
	struct jv *child, *next;
};

/* Parse text (n bytes). 0 and *out, or -EINVAL (*why, *at; both may be
 * NULL) / -ENOMEM. */
int ms_hj_parse(const char *text, size_t n, struct jv **out, const char **why, size_t *at);
void ms_hj_free(struct jv *v); /* NULL is fine */

/* Member `key` of object v (the last one, as in a Python dict), or NULL. */
const struct jv *ms_hj_get(const struct jv *v, const char *key);
/* Object members as a Python dict iterates them: a repeated key takes its
 * first place and its last value. Returns the value to use for member c,
 * or NULL when c repeats an earlier key. */
const struct jv *ms_hj_member(const struct jv *obj, const struct jv *c);
/* v is the string s. */
bool ms_hj_is(const struct jv *v, const char *s);
/* Jinja/Python truthiness (NULL, a missing value, is false). */
bool ms_hj_truthy(const struct jv *v);

/* Python's writers, appending to b (an OOM sticks in b->oom). */
/* json.dumps(s, ensure_ascii=False) of n bytes of UTF-8. */
void ms_hj_dump_string(struct ms_strbuf *b, const char *s, size_t n);
/* json.dumps(v) with the default separators (transformers' tojson). */
void ms_hj_dump(struct ms_strbuf *b, const struct jv *v);
/* str(v): what Jinja's `~`, join and `{{ }}` write. */
void ms_hj_str(struct ms_strbuf *b, const struct jv *v);

#endif
