/* tokenizer-load: tokenizer.json files as models/tokenizer-load.c loads them;
 * a loaded tokenizer then encodes a few texts (special tokens allowed and
 * not) and decodes what it made, whole and streamed. */
#include "fuzz.h"

static const char *const texts[] = {
	"In the beginning God created the heaven and the earth.",
	"<|start|>user<|message|>Hi<|end|>  \t\n\n x's 123456 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
	"", " ", "\xC0\x80", "a\300\200b",
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	(void)fuzz_dir();
	return 0;
}

static void use(const struct ms_tokenizer *t)
{
	int32_t n_ids = ms_tokenizer_n_ids(t);
	FUZZ_CHECK(n_ids > 0, "a tokenizer of %d ids", n_ids);
	for (size_t i = 0; i < sizeof(texts) / sizeof(*texts); i++) {
		for (int special = 0; special < 2; special++) {
			int32_t *ids = NULL;
			size_t n = 0;
			struct ms_err err = {0};
			if (ms_tokenizer_encode(t, texts[i], strlen(texts[i]), special, &ids, &n, &err)) {
				FUZZ_CHECK(err.msg[0] && !ids, "encode refused without a message");
				continue;
			}
			for (size_t j = 0; j < n; j++)
				FUZZ_CHECK(ids[j] >= 0 && ids[j] < n_ids, "id %d of %d", ids[j], n_ids);
			char *out = NULL;
			size_t len = 0;
			if (!ms_tokenizer_decode(t, ids, n, special, &out, &len, &err))
				FUZZ_CHECK(out, "decoded to nothing");
			free(out);
			free(ids);
		}
	}
	(void)ms_tokenizer_find(t, "<|end|>");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file("tokenizer.json", data, size);
	struct ms_tokenizer *t = NULL;
	struct ms_err err = {0};
	int rc = ms_tokenizer_load(&t, path, &err);
	if (!rc) {
		use(t);
		ms_tokenizer_free(t);
	} else {
		FUZZ_CHECK(!t && err.msg[0], "refused (%d) without a message", rc);
	}
	return 0;
}
