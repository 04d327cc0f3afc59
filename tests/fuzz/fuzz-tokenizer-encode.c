/* tokenizer-encode: arbitrary bytes through the default model's tokenizer
 * (models/default/bf16). Input: one flags byte (bit 0: special tokens
 * allowed), then the text. Encoding refuses what is not UTF-8 (a NUL
 * carried as C0 80 is the byte 0x00); what it takes must come back from
 * the decoder byte for byte, carried NULs as the byte, and the streaming
 * decoder (ms_detok) must give what the whole-text one gives. */
#include "fuzz.h"
#include "ms-utf8.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	(void)fuzz_tokenizer();
	return 0;
}

/* ids through ms_detok one at a time: the same text as decode's. */
static void check_stream(const struct ms_tokenizer *t, const int32_t *ids, size_t n,
			 const char *whole, size_t whole_len)
{
	struct ms_detok d;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	ms_detok_init(&d, t, false);
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK(ms_detok_push(&d, ids[i], &buf, &len, &cap) == 0, "push %d", ids[i]);
	FUZZ_CHECK(ms_detok_flush(&d, &buf, &len, &cap) == 0, "flush");
	FUZZ_CHECK(len == whole_len && !memcmp(buf, whole, len),
		   "streamed decoding (%zu bytes) differs from decode (%zu bytes)", len, whole_len);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const struct ms_tokenizer *t = fuzz_tokenizer();
	bool special = data[0] & 1;
	size_t len = size - 1;
	char *text = fuzz_dup(data + 1, len, false);
	int32_t *ids = NULL;
	size_t n = 0;
	struct ms_err err = {0};
	if (ms_tokenizer_encode(t, text, len, special, &ids, &n, &err)) {
		FUZZ_CHECK(err.msg[0] && !ids, "refused without a message");
		free(text);
		return 0;
	}
	FUZZ_CHECK(len == 0 || n > 0, "%zu bytes encoded as no token", len);
	for (size_t i = 0; i < n; i++) {
		FUZZ_CHECK(ids[i] >= 0 && ids[i] < ms_tokenizer_n_ids(t), "id %d", ids[i]);
		FUZZ_CHECK(special || !ms_tokenizer_is_special(t, ids[i]),
			   "special token %d with special tokens off", ids[i]);
	}
	char *out = NULL;
	size_t out_len = 0;
	FUZZ_CHECK(ms_tokenizer_decode(t, ids, n, false, &out, &out_len, &err) == 0, "decode: %s",
		   err.msg);
	check_stream(t, ids, n, out, out_len);
	/* the round trip, NULs compared as the byte they stand for */
	size_t a = ms_nul_uncarry(text, len);
	char *back = fuzz_dup(out, out_len, false);
	size_t b = ms_nul_uncarry(back, out_len);
	FUZZ_CHECK(a == b && !memcmp(text, back, a), "round trip: %zu bytes in, %zu out", a, b);
	free(back);
	free(out);
	free(ids);
	free(text);
	return 0;
}
