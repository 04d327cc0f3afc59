/*
 * test-grammar.h: the cases of test-grammar's other files, as its main
 * runs them: GBNF and the matcher (test-grammar-gbnf.c), token masks
 * (test-grammar-masks.c).
 */
#ifndef MS_TEST_GRAMMAR_H
#define MS_TEST_GRAMMAR_H

#include <check.h>
#include <stdbool.h>

/* gbnf_vs_oracles, gbnf_errors, gbnf_many_calls_in_one_state. */
TCase *grammar_gbnf_tcase(void);
/* matcher_min_bytes, matcher_states, matcher_depth, builder_errors. */
TCase *grammar_matcher_tcase(void);
/* masks_synthetic, masks_eviction, masks_threads, cache_refusals. */
TCase *grammar_masks_tcase(void);
/* The o200k case, and whether $MS_O200K names a readable vocabulary. */
const TTest *grammar_masks_o200k(void);
bool grammar_o200k_available(void);

#endif
