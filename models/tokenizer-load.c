/*
 * tokenizer-load.c: ms_tokenizer_load and ms_tokenizer_free of tokenizer.h:
 * a Hugging Face tokenizer.json read into struct ms_tokenizer
 * (tokenizer-int.h): the model's vocab and merges in the byte-level
 * alphabet, the added tokens, the pre-tokenizers' regexes compiled for
 * PCRE2. What is not byte-level BPE (other model types, pre-tokenizers,
 * normalizers, decoders) is refused here, with a message naming it; see
 * tokenizer.h for what is supported and why it is exact. Encoding and
 * decoding are tokenizer.c's.
 */
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms-hash.h"
#include "ms-json.h"
#include "tokenizer-int.h"

/* ---- GPT-2's byte <-> printable code point mapping ---- */

static void byte_level_tables(uint16_t b2u[256], int16_t u2b[0x180])
{
	int n = 0;
	for (int i = 0; i < 0x180; i++)
		u2b[i] = -1;
	for (int b = 0; b < 256; b++) {
		bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
		b2u[b] = printable ? (uint16_t)b : (uint16_t)(256 + n++);
		u2b[b2u[b]] = (int16_t)b;
	}
}

/* ---- hash tables ---- */

static void vocab_put(struct ms_tokenizer *t, int32_t id)
{
	size_t mask = t->vocab.cap - 1;
	size_t i = fnv1a(t->blob + t->off[id], tok_len(t, id)) & mask;
	while (t->vocab.slot[i] >= 0)
		i = (i + 1) & mask;
	t->vocab.slot[i] = id;
}

/* false when the pair is already there (the first, lower rank, wins) */
static bool pair_put(struct pair_map *m, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
	uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
	size_t mask = m->cap - 1;
	size_t i = ms_mix64(key) & mask;
	for (; m->e[i].key != UINT64_MAX; i = (i + 1) & mask)
		if (m->e[i].key == key)
			return false;
	m->e[i] = (struct pair_entry){key, rank, merged};
	return true;
}

static size_t pow2_at_least(size_t n)
{
	size_t c = 16;
	while (c < n)
		c <<= 1;
	return c;
}

void ms_tokenizer_free(struct ms_tokenizer *t)
{
	if (!t)
		return;
	free(t->blob), free(t->off), free(t->known), free(t->special);
	free(t->vocab.slot);
	free(t->merges.e);
	for (int i = 0; i < t->n_steps; i++)
		pcre2_code_free(t->steps[i].re);
	for (int i = 0; i < t->n_added; i++)
		free(t->added[i].text);
	free(t->added);
	free(t);
}

/* ---- loading ---- */

/* Rewrite a pattern for PCRE2 so that \s and \S mean Unicode White_Space
 * (Rust regex, Oniguruma) rather than PCRE2's \p{Xsp}, which lacks U+0085. */
#define WS_CLASS "\\t-\\r\\x{20}\\x{85}\\p{Z}"
static char *rewrite_pattern(const char *p, struct ms_err *err)
{
	size_t n = strlen(p), cap = n * 4 + 64, o = 0;
	char *out = malloc(cap);
	if (!out) {
		ms_err_set(err, -ENOMEM, "out of memory");
		return NULL;
	}
	bool in_class = false;
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\\' && i + 1 < n) {
			char c = p[i + 1];
			if (c == 's') {
				o += (size_t)sprintf(out + o, in_class ? "%s" : "[%s]", WS_CLASS);
			} else if (c == 'S') {
				if (in_class) {
					free(out);
					ms_err_set(err, -ENOTSUP,
						   "tokenizer.json: \\S inside a character class is not supported "
						   "in the Split pattern");
					return NULL;
				}
				o += (size_t)sprintf(out + o, "[^%s]", WS_CLASS);
			} else {
				out[o++] = '\\';
				out[o++] = c;
			}
			i++;
			continue;
		}
		if (p[i] == '[' && !in_class) {
			in_class = true;
			out[o++] = p[i];
			/* a ']' or '^]' right after '[' is literal */
			if (i + 1 < n && p[i + 1] == '^')
				out[o++] = p[++i];
			if (i + 1 < n && p[i + 1] == ']')
				out[o++] = p[++i];
			continue;
		}
		if (p[i] == ']' && in_class)
			in_class = false;
		out[o++] = p[i];
	}
	out[o] = '\0';
	return out;
}

static int compile_regex(const char *pattern, bool literal, pcre2_code **out, struct ms_err *err)
{
	char *rw = literal ? NULL : rewrite_pattern(pattern, err);
	if (!literal && !rw)
		return err->code;
	int ec;
	PCRE2_SIZE eo;
	uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
	*out = pcre2_compile((PCRE2_SPTR)(literal ? pattern : rw), PCRE2_ZERO_TERMINATED, opts, &ec,
			     &eo, NULL);
	free(rw);
	if (!*out) {
		PCRE2_UCHAR msg[256];
		if (ec == PCRE2_ERROR_HEAP_FAILED)
			return ms_err_set(err, -ENOMEM, "out of memory");
		pcre2_get_error_message(ec, msg, sizeof(msg));
		return ms_err_set(err, -EINVAL,
				  "tokenizer.json: Split pattern does not compile at offset %zu: %s",
				  (size_t)eo, (char *)msg);
	}
	/* JIT when the platform has it; the interpreter gives the same matches */
	pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE);
	return 0;
}

/* GPT-2's pre-tokenizer regex (ByteLevel with use_regex). */
static const char gpt2_pattern[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_step(struct ms_tokenizer *t, const cJSON *pt, struct ms_err *err)
{
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(pt, "type");
	if (!cJSON_IsString(ty))
		return ms_err_set(err, -EINVAL, "tokenizer.json: pre_tokenizer without a \"type\"");
	if (t->n_steps == (int)(sizeof(t->steps) / sizeof(t->steps[0])))
		return ms_err_set(err, -ENOTSUP, "tokenizer.json: too many pre_tokenizers");
	struct split_step *s = &t->steps[t->n_steps];
	memset(s, 0, sizeof(*s));
	if (!strcmp(ty->valuestring, "Split")) {
		const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
		const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
		const cJSON *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
		const cJSON *beh = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
		const cJSON *inv = cJSON_GetObjectItemCaseSensitive(pt, "invert");
		if (!cJSON_IsString(re) && !cJSON_IsString(str))
			return ms_err_set(err, -EINVAL, "tokenizer.json: Split needs pattern.Regex or pattern.String");
		if (cJSON_IsTrue(inv))
			return ms_err_set(err, -ENOTSUP, "tokenizer.json: Split with \"invert\": true is not supported");
		const char *b = cJSON_IsString(beh) ? beh->valuestring : "Isolated";
		if (!strcmp(b, "Isolated"))
			s->behavior = SPLIT_ISOLATED;
		else if (!strcmp(b, "Removed"))
			s->behavior = SPLIT_REMOVED;
		else
			return ms_err_set(err, -ENOTSUP, "tokenizer.json: Split behavior \"%s\" is not supported "
					  "(supported: Isolated, Removed)", b);
		int rc = compile_regex(cJSON_IsString(re) ? re->valuestring : str->valuestring,
				       !cJSON_IsString(re), &s->re, err);
		if (rc)
			return rc;
		t->n_steps++;
		return 0;
	}
	if (!strcmp(ty->valuestring, "ByteLevel")) {
		/* The byte mapping itself is implicit (we work on bytes); what
		 * matters is the prefix space and GPT-2's own split. */
		s->prefix_space = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pt, "add_prefix_space"));
		const cJSON *ur = cJSON_GetObjectItemCaseSensitive(pt, "use_regex");
		if (!ur || cJSON_IsTrue(ur)) {
			int rc = compile_regex(gpt2_pattern, false, &s->re, err);
			if (rc)
				return rc;
		}
		t->n_steps++;
		return 0;
	}
	if (!strcmp(ty->valuestring, "Sequence")) {
		const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
		const cJSON *it;
		if (!cJSON_IsArray(list))
			return ms_err_set(err, -EINVAL, "tokenizer.json: Sequence without \"pretokenizers\"");
		cJSON_ArrayForEach(it, list) {
			int rc = add_step(t, it, err);
			if (rc)
				return rc;
		}
		return 0;
	}
	return ms_err_set(err, -ENOTSUP, "tokenizer.json: pre_tokenizer \"%s\" is not supported "
			  "(supported: Split, ByteLevel, Sequence of them)", ty->valuestring);
}

/* Vocab string (byte-level printable form) -> raw bytes, in place. */
static int unmap_bytes(const char *s, const int16_t u2b[0x180], char *out, size_t *n)
{
	size_t len = strlen(s), o = 0;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		int k = utf8_next((const unsigned char *)s + i, len - i, &cp);
		if (!k || cp >= 0x180 || u2b[cp] < 0)
			return -1;
		out[o++] = (char)u2b[cp];
		i += (size_t)k;
	}
	*n = o;
	return 0;
}

static int cmp_added(const void *a, const void *b)
{
	const struct added *x = a, *y = b;
	unsigned char fx = x->len ? (unsigned char)x->text[0] : 0, fy = y->len ? (unsigned char)y->text[0] : 0;
	if (fx != fy)
		return fx < fy ? -1 : 1;
	return x->len > y->len ? -1 : (x->len < y->len); /* longest first */
}

/* What is refused before any id is read: models other than byte-level
 * BPE, normalizers, decoders other than ByteLevel. */
static int check_supported(const cJSON *root, const cJSON *model, struct ms_err *err)
{
	const cJSON *mty = cJSON_GetObjectItemCaseSensitive(model, "type");
	if (!cJSON_IsString(mty) || strcmp(mty->valuestring, "BPE"))
		return ms_err_set(err, -ENOTSUP, "tokenizer.json: model type \"%s\" is not supported "
				  "(supported: BPE)", cJSON_IsString(mty) ? mty->valuestring : "?");
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")))
		return ms_err_set(err, -ENOTSUP, "tokenizer.json: model.byte_fallback true (SentencePiece-"
				  "style BPE) is not supported; byte-level BPE is");
	const char *sfx[] = {"continuing_subword_prefix", "end_of_word_suffix"};
	for (int i = 0; i < 2; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, sfx[i]);
		if (cJSON_IsString(v) && v->valuestring[0])
			return ms_err_set(err, -ENOTSUP, "tokenizer.json: model.%s \"%s\" is not supported",
					  sfx[i], v->valuestring);
	}
	const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
	if (norm && !cJSON_IsNull(norm)) {
		const cJSON *ty = cJSON_GetObjectItemCaseSensitive(norm, "type");
		return ms_err_set(err, -ENOTSUP, "tokenizer.json: normalizer \"%s\" is not supported",
				  cJSON_IsString(ty) ? ty->valuestring : "?");
	}
	const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
	const cJSON *dty = cJSON_GetObjectItemCaseSensitive(dec, "type");
	if (dec && !cJSON_IsNull(dec) && (!cJSON_IsString(dty) || strcmp(dty->valuestring, "ByteLevel")))
		return ms_err_set(err, -ENOTSUP, "tokenizer.json: decoder \"%s\" is not supported "
				  "(supported: ByteLevel)", cJSON_IsString(dty) ? dty->valuestring : "?");
	return 0;
}

/* Longest byte-level spelling of a vocab entry or a merge's side (bytes,
 * NUL included): far beyond any real vocabulary's. */
#define SPELLING_MAX 4096

/* Check every id of the vocab and the added tokens; *n_ids is one more
 * than the largest, *blob_cap the bytes of all their spellings. */
static int count_ids(const cJSON *vocab, const cJSON *added, int32_t *n_ids, size_t *blob_cap,
		     struct ms_err *err)
{
	int32_t max_id = -1;
	const cJSON *it;
	*blob_cap = 0;
	cJSON_ArrayForEach(it, vocab) {
		if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 16777216)
			return ms_err_set(err, -EINVAL, "tokenizer.json: vocab entry \"%s\" has no valid id",
					  it->string);
		max_id = (int32_t)it->valuedouble > max_id ? (int32_t)it->valuedouble : max_id;
		*blob_cap += strlen(it->string);
	}
	cJSON_ArrayForEach(it, added) {
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
		if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 16777216 ||
		    !cJSON_IsString(c) || !c->valuestring[0])
			return ms_err_set(err, -EINVAL, "tokenizer.json: an added_tokens entry lacks a valid "
					  "id or content");
		max_id = (int32_t)id->valuedouble > max_id ? (int32_t)id->valuedouble : max_id;
		*blob_cap += strlen(c->valuestring);
	}
	if (max_id < 0)  /* nothing to encode into, and every id check would fail */
		return ms_err_set(err, -EINVAL, "tokenizer.json: no tokens (model.vocab and "
				  "added_tokens are both empty)");
	*n_ids = max_id + 1;
	return 0;
}

/* Each id's bytes while the ids are read (in any order), before they are
 * laid out in id order in the blob. */
struct id_bytes {
	char **p;  /* [n_ids], NULL: no token has that id */
	size_t *n;
};

static int id_bytes_set(struct id_bytes *ib, int32_t id, const char *s, size_t n, struct ms_err *err)
{
	if (!(ib->p[id] = malloc(n + 1)))
		return ms_err_set(err, -ENOMEM, "out of memory");
	memcpy(ib->p[id], s, n);
	ib->n[id] = n;
	return 0;
}

static void id_bytes_free(struct id_bytes *ib, size_t n_ids)
{
	for (size_t i = 0; ib->p && i < n_ids; i++)
		free(ib->p[i]);
	free(ib->p);
	free(ib->n);
}

/* The id tables, sized for t->n_ids, and the gathering arrays. */
static int alloc_ids(struct ms_tokenizer *t, size_t blob_cap, struct id_bytes *ib, struct ms_err *err)
{
	size_t nid = (size_t)t->n_ids;
	t->blob = malloc(blob_cap + 1);
	t->off = calloc(nid + 1, sizeof(size_t));
	t->known = calloc(nid, sizeof(bool));
	t->special = calloc(nid, sizeof(bool));
	t->vocab.cap = pow2_at_least(2 * nid);
	t->vocab.slot = malloc(t->vocab.cap * sizeof(int32_t));
	ib->p = calloc(nid, sizeof(char *));
	ib->n = calloc(nid, sizeof(size_t));
	if (!t->blob || !t->off || !t->known || !t->special || !t->vocab.slot || !ib->p || !ib->n)
		return ms_err_set(err, -ENOMEM, "tokenizer.json: out of memory");
	memset(t->vocab.slot, 0xFF, t->vocab.cap * sizeof(int32_t));
	return 0;
}

/* The vocab's entries, spelled in the byte-level alphabet, as raw bytes. */
static int gather_vocab(struct ms_tokenizer *t, const cJSON *vocab, const int16_t u2b[0x180],
			struct id_bytes *ib, struct ms_err *err)
{
	char scratch[SPELLING_MAX];
	const cJSON *it;
	cJSON_ArrayForEach(it, vocab) {
		int32_t id = (int32_t)it->valuedouble;
		size_t n;
		if (strlen(it->string) >= sizeof(scratch) ||
		    unmap_bytes(it->string, u2b, scratch, &n))
			return ms_err_set(err, -ENOTSUP, "tokenizer.json: vocab entry \"%.40s\" is not in "
					  "the byte-level alphabet (not a byte-level BPE?)", it->string);
		if (t->known[id])
			return ms_err_set(err, -EINVAL, "tokenizer.json: id %d appears twice in the vocab", id);
		int rc = id_bytes_set(ib, id, scratch, n, err);
		if (rc)
			return rc;
		t->known[id] = true;
	}
	return 0;
}

/* Added tokens: their flag, and their content as the bytes of an id that
 * is not also a vocab entry. */
static int gather_added(struct ms_tokenizer *t, const cJSON *added, struct id_bytes *ib,
			struct ms_err *err)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, added) {
		int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
		const char *c = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
		t->special[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special"));
		if (t->known[id])
			continue;
		int rc = id_bytes_set(ib, id, c, strlen(c), err);
		if (rc)
			return rc;
		t->known[id] = true;
	}
	return 0;
}

/* The gathered bytes into the blob in id order; the vocab's hash (only
 * vocab entries take part in BPE) and single-byte tokens. */
static void lay_out_ids(struct ms_tokenizer *t, const cJSON *vocab, const struct id_bytes *ib)
{
	size_t o = 0, nid = (size_t)t->n_ids;
	for (size_t i = 0; i < nid; i++) {
		t->off[i] = o;
		if (ib->p[i]) {
			memcpy(t->blob + o, ib->p[i], ib->n[i]);
			o += ib->n[i];
		}
	}
	t->off[nid] = o;
	const cJSON *it;
	cJSON_ArrayForEach(it, vocab)
		vocab_put(t, (int32_t)it->valuedouble);
	for (int b = 0; b < 256; b++) {
		unsigned char c = (unsigned char)b;
		t->byte_id[b] = vocab_get(t, &c, 1);
	}
}

/* ids: the vocab and the added tokens. */
static int load_ids(struct ms_tokenizer *t, const cJSON *model, const cJSON *root,
		    const int16_t u2b[0x180], struct ms_err *err)
{
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
	const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
	if (!cJSON_IsObject(vocab))
		return ms_err_set(err, -EINVAL, "tokenizer.json: model.vocab must be an object");
	size_t blob_cap;
	int rc = count_ids(vocab, added, &t->n_ids, &blob_cap, err);
	if (rc)
		return rc;
	struct id_bytes ib = {0};
	if (!(rc = alloc_ids(t, blob_cap, &ib, err)) && !(rc = gather_vocab(t, vocab, u2b, &ib, err)) &&
	    !(rc = gather_added(t, added, &ib, err)))
		lay_out_ids(t, vocab, &ib);
	id_bytes_free(&ib, (size_t)t->n_ids);
	return rc;
}

/* The two sides of merge `rank`: "a b" (a copied into buf) or ["a", "b"]. */
static int merge_sides(const cJSON *it, int32_t rank, char buf[SPELLING_MAX], const char **a,
		       const char **b, struct ms_err *err)
{
	if (cJSON_IsString(it)) {
		const char *sp = strchr(it->valuestring, ' ');
		size_t la = sp ? (size_t)(sp - it->valuestring) : 0;
		if (!sp || la >= SPELLING_MAX || strchr(sp + 1, ' '))
			return ms_err_set(err, -EINVAL, "tokenizer.json: merge %d \"%s\" is not \"a b\"",
					  rank, it->valuestring);
		memcpy(buf, it->valuestring, la);
		buf[la] = '\0';
		*a = buf;
		*b = sp + 1;
		return 0;
	}
	if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
	    cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
		*a = cJSON_GetArrayItem(it, 0)->valuestring;
		*b = cJSON_GetArrayItem(it, 1)->valuestring;
		return 0;
	}
	return ms_err_set(err, -EINVAL, "tokenizer.json: merge %d is neither \"a b\" nor [a, b]", rank);
}

/* Merge `rank` of a and b (byte-level spellings of vocab entries). */
static int add_merge(struct ms_tokenizer *t, const char *a, const char *b, int32_t rank,
		     const int16_t u2b[0x180], struct ms_err *err)
{
	char ab[2 * SPELLING_MAX];
	size_t na, nb;
	if (strlen(a) >= SPELLING_MAX || strlen(b) >= SPELLING_MAX || unmap_bytes(a, u2b, ab, &na) ||
	    unmap_bytes(b, u2b, ab + na, &nb))
		return ms_err_set(err, -EINVAL, "tokenizer.json: merge %d is not in the byte-level "
				  "alphabet", rank);
	int32_t ia = vocab_get(t, ab, na), ib = vocab_get(t, ab + na, nb);
	int32_t im = vocab_get(t, ab, na + nb);
	if (ia < 0 || ib < 0 || im < 0)
		return ms_err_set(err, -EINVAL, "tokenizer.json: merge %d (\"%s\" + \"%s\") names a "
				  "token that is not in the vocab", rank, a, b);
	pair_put(&t->merges, ia, ib, rank, im);
	return 0;
}

/* merges: "a b" strings or ["a", "b"] pairs, rank = position */
static int load_merges(struct ms_tokenizer *t, const cJSON *model, const int16_t u2b[0x180],
		       struct ms_err *err)
{
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
	if (merges && !cJSON_IsArray(merges))
		return ms_err_set(err, -EINVAL, "tokenizer.json: model.merges must be a list");
	size_t nm = (size_t)cJSON_GetArraySize(merges);
	t->merges.cap = pow2_at_least(2 * nm + 2);
	t->merges.e = malloc(t->merges.cap * sizeof(struct pair_entry));
	if (!t->merges.e)
		return ms_err_set(err, -ENOMEM, "out of memory");
	memset(t->merges.e, 0xFF, t->merges.cap * sizeof(struct pair_entry));
	int32_t rank = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, merges) {
		const char *a = NULL, *b = NULL;
		char buf[SPELLING_MAX];
		int rc = merge_sides(it, rank, buf, &a, &b, err);
		if (!rc)
			rc = add_merge(t, a, b, rank, u2b, err);
		if (rc)
			return rc;
		rank++;
	}
	return 0;
}

/* added tokens, bucketed by first byte, longest first */
static int load_added(struct ms_tokenizer *t, const cJSON *added, struct ms_err *err)
{
	int na = cJSON_GetArraySize(added);
	t->added = calloc((size_t)na + 1, sizeof(*t->added));
	if (!t->added)
		return ms_err_set(err, -ENOMEM, "out of memory");
	const cJSON *it;
	cJSON_ArrayForEach(it, added) {
		struct added *a = &t->added[t->n_added];
		const char *c = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "single_word")))
			return ms_err_set(err, -ENOTSUP, "tokenizer.json: added token \"%s\" has "
					  "single_word true, which is not supported", c);
		a->id = (int32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
		a->len = strlen(c);
		a->text = strdup(c);
		a->special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special"));
		a->lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "lstrip"));
		a->rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "rstrip"));
		if (!a->text)
			return ms_err_set(err, -ENOMEM, "out of memory");
		t->n_added++;
	}
	qsort(t->added, (size_t)t->n_added, sizeof(*t->added), cmp_added);
	for (int b = 0, i = 0; b <= 256; b++) {
		while (i < t->n_added && (unsigned char)t->added[i].text[0] < b)
			i++;
		t->first_added[b] = i;
	}
	return 0;
}

/* Everything of a parsed tokenizer.json into t (freed by the caller on
 * failure), in the order errors are reported. */
static int load_json(struct ms_tokenizer *t, const cJSON *root, struct ms_err *err)
{
	uint16_t b2u[256];
	int16_t u2b[0x180];
	byte_level_tables(b2u, u2b);
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
	if (!cJSON_IsObject(model))
		return ms_err_set(err, -EINVAL, "tokenizer.json: no \"model\" object");
	int rc = check_supported(root, model, err);
	if (rc)
		return rc;
	t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
	if ((rc = load_ids(t, model, root, u2b, err)) || (rc = load_merges(t, model, u2b, err)))
		return rc;
	const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
	if (pre && !cJSON_IsNull(pre) && (rc = add_step(t, pre, err)))
		return rc;
	return load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), err);
}

int ms_tokenizer_load(struct ms_tokenizer **out, const char *path, struct ms_err *err)
{
	*out = NULL;
	cJSON *root;
	int rc = ms_json_read_file(path, &root, err);
	if (rc)
		return rc;
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return ms_err_set(err, -EINVAL, "%s: not a JSON object", path);
	}
	struct ms_tokenizer *t = calloc(1, sizeof(*t));
	if (!t) {
		cJSON_Delete(root);
		return ms_err_set(err, -ENOMEM, "out of memory");
	}
	rc = load_json(t, root, err);
	cJSON_Delete(root);
	if (rc) {
		ms_tokenizer_free(t);
		return ms_err_prefix(err, "%s: ", path);
	}
	*out = t;
	return 0;
}
