/* reqtest.c: the request tests' shared state (reqtest.h). */
#include <stdio.h>

#include "reqtest.h"

struct ms_tokenizer *tok;
struct ms_grammar_cache *grammars;
const int32_t eos[2] = {4084, 4081};

int reqtest_load(const char *who)
{
	char path[4096];
	struct ms_err err = {0};
	snprintf(path, sizeof(path), "%s/tokenizer.json", MS_DEFAULT_MODEL);
	if (!ms_tokenizer_load(&tok, path, &err))
		return 0;
	fprintf(stderr, "%s: %s\n", who, err.msg);
	return 1;
}
