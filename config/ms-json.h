/*
 * ms-json.h: JSON text held to RFC 8259 before cJSON reads it: request
 * bodies (server/json.c) and every JSON file of a checkpoint (config.json,
 * the quantization configs, the shard index, tokenizer.json).
 *
 * cJSON is lenient where outside input must not be: it takes any byte up
 * to a space as whitespace (a raw NUL between tokens passes), raw control
 * bytes inside strings and text after the value, and keeps both of two
 * equal keys (its lookups find the first; Python's json, which wrote and
 * reads most checkpoints, the last). Such a text means different things to
 * different readers, so it is refused, naming where.
 */
#ifndef MS_JSON_STRICT_H
#define MS_JSON_STRICT_H

#include <cjson/cJSON.h>
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

#endif
