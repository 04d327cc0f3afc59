/*
 * grammar-text.h: grammars written as text: regular
 * expressions (JSON Schema's "pattern", vLLM's guided_regex) and GBNF
 * (llama.cpp's grammar format, llama-server's "grammar"), both built as
 * grammar.h expressions.
 *
 * The regex dialect is the subset of ECMAScript that JSON Schema names:
 * literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH \u{H..} \/ and
 * escaped metacharacters), classes with ranges and negation, \d \w \s
 * and their negations (as ECMAScript defines them: \s is Unicode white
 * space), ".", groups (capturing, (?:...), named), alternation,
 * quantifiers * + ? {m} {m,} {m,n} (lazy forms match the same strings),
 * and the anchors ^ at the start and $ at the end. Backreferences,
 * lookaround, \b, \p{...} and anchors elsewhere are refused by name.
 */
#ifndef MS_GRAMMAR_TEXT_H
#define MS_GRAMMAR_TEXT_H

#include <stdbool.h>

#include "grammar.h"

enum ms_regex_mode {
	MS_REGEX_FULL,         /* the whole text matches (guided_regex) */
	MS_REGEX_JSON_SEARCH,  /* a JSON string's content (escaped as JSON), matched
				* anywhere unless anchored (JSON Schema "pattern") */
};

/* The expression of pattern re in b; -1 with err set. */
ms_gx ms_regex_expr(struct ms_gb *b, const char *re, enum ms_regex_mode mode, struct ms_err *err);

/* One code point of the ranges r[0..2n) as it appears inside a JSON
 * string: itself, or its escape where JSON needs one (", \, controls). */
ms_gx ms_json_char_expr(struct ms_gb *b, const uint32_t *r, int n);

/* A GBNF text's rules into b; *root: the rule "root". */
int ms_gbnf_parse(struct ms_gb *b, const char *text, int *root, struct ms_err *err);

#endif
