/*
 * grammar-json.h: JSON Schema as a grammar: the JSON texts
 * the grammar accepts all validate against the schema (the grammar may be
 * narrower: one key order, the schema's; canonical string escapes where
 * a length or pattern counts characters; bounded whitespace; numbers of at
 * most 16 integer and 16 fraction digits; extra keys, where allowed, plain
 * identifiers not among the declared ones).
 *
 * Covered: type (and lists of types), properties, required,
 * additionalProperties (false, true, a schema), enum, const, anyOf, oneOf
 * (as anyOf; refused unless its branches provably exclude each other), allOf of objects,
 * $ref to #, #/$defs/..., #/definitions/... or any JSON pointer in the
 * document (recursion allowed), items, prefixItems (and the draft-07
 * items array with additionalItems), minItems, maxItems, minLength,
 * maxLength, pattern, format (date, time, date-time, uuid, email),
 * minimum/maximum/exclusiveMinimum/exclusiveMaximum for integers (and
 * minimum 0 for numbers), nullable (OpenAPI). Annotations (title,
 * description, default, examples, $schema, $id, $comment, ...) are
 * ignored. Any other assertion keyword is refused with its JSON pointer.
 */
#ifndef MS_GRAMMAR_JSON_H
#define MS_GRAMMAR_JSON_H

#include <cjson/cJSON.h>

#include "grammar.h"

/* The root rule of schema's grammar, built in b; schema NULL: any JSON
 * object (json_object). Errors name the keyword and its JSON pointer:
 * "\"not\" at /properties/a is not supported". */
int ms_json_schema_rules(struct ms_gb *b, const cJSON *schema, int *root, struct ms_err *err);

/* The same, compiled. */
int ms_json_schema_compile(const cJSON *schema, struct ms_grammar **out, struct ms_err *err);

#endif
