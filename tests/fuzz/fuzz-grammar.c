/* grammar: structured outputs' grammars compiled as requests name them
 * (engine/grammar/grammar-cache.c: JSON Schema, any JSON object, regex, GBNF, a
 * list of choices), then a sentence walked through the matcher with the
 * token masks of its first steps. Input: one byte, the kind (mod 5); the
 * grammar's text; FUZZ_SEP; the sentence. Properties: the matcher takes
 * the sentence byte by byte exactly when ms_grammar_accepts says it is a
 * sentence (or a prefix of one), a finished sentence needs 0 more bytes,
 * and the mask allows a byte's own token exactly when the matcher takes
 * that byte. */
#include <errno.h>

#include "fuzz.h"
#include "grammar-cache.h"
#include "grammar.h"
#include "token-mask.h"

#define VOCAB 4096

static struct ms_grammar_cache *cache;

static void cache_free(void)
{
	ms_grammar_cache_free(cache);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	struct ms_err err = {0};
	/* one grammar kept: each new text compiles */
	if (ms_grammar_cache_new(ms_tokenizer_vocab(fuzz_tokenizer()), VOCAB, 1, NULL, &cache, &err)) {
		fprintf(stderr, "fuzz: %s\n", err.msg);
		exit(1);
	}
	atexit(cache_free);
	return 0;
}

/* The mask at m allows the token of byte c exactly when m takes c. */
static void check_mask(struct ms_tmask *t, const struct ms_gmatch *m, uint8_t c)
{
	uint64_t bits[VOCAB / 64];
	int rc = ms_tmask_bits(t, m, bits);
	if (rc == -E2BIG)  /* too costly a mask: refused, as requests see it */
		return;
	FUZZ_CHECK(rc == 0, "mask: out of memory");
	int32_t id = ms_vocab_trie_byte_token(ms_tmask_vocab(t), c);
	if (id < 0)
		return;
	struct ms_gmatch copy;
	FUZZ_CHECK(ms_gmatch_copy(&copy, m) == 0, "copy");
	bool takes = ms_gmatch_feed(&copy, &c, 1);
	ms_gmatch_free(&copy);
	bool allowed = bits[id / 64] >> (id % 64) & 1;
	FUZZ_CHECK(allowed == takes, "byte 0x%02x: the matcher %s it, the mask %s token %d", c,
		   takes ? "takes" : "refuses", allowed ? "allows" : "refuses", id);
}

static void walk(struct ms_tmask *t, const uint8_t *s, size_t n)
{
	const struct ms_grammar *g = ms_tmask_grammar(t);
	struct ms_gmatch m;
	FUZZ_CHECK(ms_gmatch_init(&m, g) == 0, "gmatch_init");
	size_t i = 0;
	for (; i < n; i++) {
		if (i < 3)
			check_mask(t, &m, s[i]);
		if (!ms_gmatch_feed(&m, s + i, 1))
			break;
	}
	bool whole = i == n && m.accept;
	FUZZ_CHECK(whole == ms_grammar_accepts(g, s, n), "the matcher %s %zu bytes, accepts() %s",
		   whole ? "took" : "refused", n, whole ? "refuses" : "takes");
	if (m.accept)
		FUZZ_CHECK(ms_gmatch_min_bytes(&m) == 0, "a sentence needs %lld more bytes",
			   (long long)ms_gmatch_min_bytes(&m));
	ms_gmatch_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	enum ms_grammar_kind kind = (enum ms_grammar_kind)(data[0] % 5);
	const uint8_t *p = data + 1, *text, *sentence = NULL;
	size_t n = size - 1, text_len, s_len = 0;
	fuzz_part(&p, &n, &text, &text_len);
	fuzz_part(&p, &n, &sentence, &s_len);
	char *t_str = fuzz_dup(text, text_len, true); /* requests give C strings */
	struct ms_tmask *t = NULL;
	struct ms_err err = {0};
	int rc = ms_grammar_cache_get(cache, kind, t_str, &t, &err);
	if (!rc) {
		walk(t, sentence, s_len);
		ms_tmask_unref(t);
	} else {
		FUZZ_CHECK(!t && err.msg[0], "refused (%d) without a message", rc);
	}
	free(t_str);
	return 0;
}
