/*
 * tool-force.h: tool_choice "required" and a named function, enforced (server/
 * only). A token constraint (engine.h's struct ms_constraint) that lets the
 * model reason first, in the analysis channel, and then makes its next
 * message a call: `<|channel|>commentary to=functions.NAME<|constrain|>json
 * <|message|>` with NAME one of the allowed functions (each its own token
 * sequence, chosen by the model token by token among those still possible),
 * the arguments free until <|call|>. While it reasons, and in the
 * arguments, no special token other than the one that ends the message can
 * be drawn, nor an end of text: generation cannot end without the call.
 *
 *   <|channel|> ( analysis <|message|> TEXT <|end|> <|start|> assistant <|channel|> )?
 *   commentary to=functions. NAME <|constrain|> json <|message|> ARGS <|call|>
 */
#ifndef MS_SERVER_TOOL_FORCE_H
#define MS_SERVER_TOOL_FORCE_H

#include <stdint.h>

#include "engine.h"
#include "harmony.h"
#include "ms-error.h"
#include "tokenizer.h"

struct ms_tool_force; /* the token sequences (immutable once built) */

/* For the n function names (n >= 1); eos: the model's end-of-text ids. */
int ms_tool_force_new(const struct ms_tokenizer *tok, const struct ms_harmony_ids *ids,
		      const int32_t *eos, int n_eos, const char *const *names, int n,
		      struct ms_tool_force **out, struct ms_err *err);
void ms_tool_force_free(struct ms_tool_force *f);   /* NULL is fine */

/* The constraint over f (f must outlive the submit; each request's state
 * copies what it needs). */
struct ms_constraint ms_tool_force_constraint(const struct ms_tool_force *f);

#endif
