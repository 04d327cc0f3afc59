/*
 * tool-force.h: the shape of an answer, enforced by a token constraint
 * (engine.h's struct ms_constraint) for harmony models: tool_choice "required"
 * or a named function, structured outputs (a final answer that matches a
 * grammar), strict tool arguments.
 *
 * With harmony the model may reason first, in the analysis channel, free
 * (no special token but the <|end|> that closes it), then its next message
 * is one of those allowed: a call, `<|channel|>commentary to=functions.NAME
 * <|constrain|>json<|message|> ARGS <|call|>` with NAME among the allowed
 * functions (each header its own token sequence, "commentary
 * to=functions.NAME " encoded in one piece as the model read it, chosen
 * token by token), or a
 * final answer, `<|channel|>final<|constrain|>json<|message|> TEXT
 * <|return|>` (`<|channel|>final<|message|>` when it is free). Where a
 * grammar is given (token-mask.h) the body is held to it and, once the
 * grammar is complete, only its end token can follow; generation cannot
 * end before.
 *
 *   <|channel|> ( analysis <|message|> TEXT <|end|> <|start|> assistant <|channel|> )?
 *   ( commentary to=functions.NAME' ' <|constrain|> json <|message|> ARGS <|call|>
 *   | final (<|constrain|> json)? <|message|> BODY <|return|> )
 *
 * Without harmony (plain, /v1/completions) the body is the whole output
 * and an end-of-text token ends it.
 *
 * A reasoning budget (Messages' thinking.budget_tokens) closes the
 * analysis at that many tokens of its text; the answer follows.
 *
 * The budget (the request's max_tokens) is kept: the reasoning is closed,
 * and a grammar's body is driven along its shortest completion, early
 * enough that the answer is complete within it whenever the frame and the
 * grammar's shortest sentence fit at all.
 */
#ifndef MS_TOOL_FORCE_H
#define MS_TOOL_FORCE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "harmony.h"
#include "ms-error.h"
#include "token-mask.h"
#include "tokenizer.h"

#define MS_FORCE_MAX_NAMES 128

struct ms_force_spec {
	const char *const *names;        /* the functions a call may name */
	int n_names;
	struct ms_tmask *const *args;    /* per name its arguments' grammar (NULL: free); or NULL */
	bool final_ok;                   /* a final answer may come instead of a call */
	struct ms_tmask *final;          /* the final answer's grammar, NULL: free */
	bool plain;                      /* no harmony: the output is final's body */
	int64_t budget;                  /* max_tokens (0: unbounded) */
	int64_t reason_budget;           /* the analysis's tokens at most (0: unbounded) */
};

struct ms_tool_force; /* the token sequences and grammars (immutable once built) */

/* For spec (names and grammars copied or referenced: spec need not
 * outlive the call); eos: the model's end-of-text ids. -ERANGE when a
 * call is forced and the budget cannot hold its frame and the shortest
 * valid arguments. */
int ms_tool_force_new(const struct ms_tokenizer *tok, const struct ms_harmony_ids *ids,
		      const int32_t *eos, int n_eos, const struct ms_force_spec *spec,
		      struct ms_tool_force **out, struct ms_err *err);
void ms_tool_force_free(struct ms_tool_force *f);   /* NULL is fine */

/* The constraint over f (f must outlive the submit; each request's state
 * copies what it needs and references the grammars). */
struct ms_constraint ms_tool_force_constraint(const struct ms_tool_force *f);

#endif
