/*
 * test-grammar.h: the token-mask cases (test-grammar-masks.c) as
 * test-grammar's main runs them.
 */
#ifndef MS_TEST_GRAMMAR_H
#define MS_TEST_GRAMMAR_H

#include <check.h>
#include <stdbool.h>

/* masks_synthetic, masks_eviction, masks_threads, cache_refusals. */
TCase *grammar_masks_tcase(void);
/* The o200k case, and whether $MS_O200K names a readable vocabulary. */
const TTest *grammar_masks_o200k(void);
bool grammar_o200k_available(void);

#endif
