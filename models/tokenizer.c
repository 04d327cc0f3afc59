/*
 * tokenizer.c: byte-level BPE from a Hugging Face tokenizer.json; see
 * tokenizer.h for what is supported and why it is exact.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms-json.h"
#include "ms-hash.h"
#include "ms-utf8.h"

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

/* Next code point of valid UTF-8 at s (len bytes left): returns its length,
 * 0 when invalid. */
static int utf8_next(const unsigned char *s, size_t len, uint32_t *cp)
{
	unsigned c = s[0];
	int n;
	uint32_t v, min;
	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if ((c & 0xE0) == 0xC0) {
		n = 2, v = c & 0x1F, min = 0x80;
	} else if ((c & 0xF0) == 0xE0) {
		n = 3, v = c & 0x0F, min = 0x800;
	} else if ((c & 0xF8) == 0xF0) {
		n = 4, v = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if ((size_t)n > len)
		return 0;
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		v = (v << 6) | (s[i] & 0x3F);
	}
	if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
		return 0;
	*cp = v;
	return n;
}

/* ---- hash tables ---- */

static uint64_t fnv1a(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* token bytes -> id, over the blob of all token bytes */
struct bytes_map {
	int32_t *slot; /* id or -1 */
	size_t cap;    /* power of two */
};

/* (left id, right id) -> merge rank and result */
struct pair_entry {
	uint64_t key; /* left << 32 | right, UINT64_MAX = empty */
	int32_t rank, merged;
};

struct pair_map {
	struct pair_entry *e;
	size_t cap;
};

/* ---- the tokenizer ---- */

enum split_behavior { SPLIT_ISOLATED, SPLIT_REMOVED };

struct split_step {
	pcre2_code *re;
	enum split_behavior behavior;
	bool prefix_space; /* ByteLevel add_prefix_space */
};

struct added {
	int32_t id;
	char *text;
	size_t len;
	bool special, lstrip, rstrip;
};

struct ms_tokenizer {
	/* id -> bytes */
	char *blob;
	size_t *off;    /* [n_ids + 1] into blob; tokens with no bytes have off[i] == off[i+1] */
	bool *known;    /* [n_ids] */
	bool *special;  /* [n_ids] */
	int32_t n_ids;
	struct bytes_map vocab;      /* BPE vocab bytes -> id */
	int32_t byte_id[256];        /* single-byte tokens */
	struct pair_map merges;
	bool ignore_merges;
	struct split_step steps[8];
	int n_steps;
	struct added *added;         /* sorted by first byte, then longest first */
	int n_added;
	int first_added[257];        /* bucket starts by first byte */
};

static size_t tok_len(const struct ms_tokenizer *t, int32_t id)
{
	return t->off[id + 1] - t->off[id];
}

static int32_t vocab_get(const struct ms_tokenizer *t, const void *b, size_t n)
{
	size_t mask = t->vocab.cap - 1;
	for (size_t i = fnv1a(b, n) & mask;; i = (i + 1) & mask) {
		int32_t id = t->vocab.slot[i];
		if (id < 0)
			return -1;
		if (tok_len(t, id) == n && memcmp(t->blob + t->off[id], b, n) == 0)
			return id;
	}
}

static void vocab_put(struct ms_tokenizer *t, int32_t id)
{
	size_t mask = t->vocab.cap - 1;
	size_t i = fnv1a(t->blob + t->off[id], tok_len(t, id)) & mask;
	while (t->vocab.slot[i] >= 0)
		i = (i + 1) & mask;
	t->vocab.slot[i] = id;
}

static const struct pair_entry *pair_get(const struct pair_map *m, int32_t a, int32_t b)
{
	uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
	size_t mask = m->cap - 1;
	for (size_t i = ms_mix64(key) & mask;; i = (i + 1) & mask) {
		if (m->e[i].key == UINT64_MAX)
			return NULL;
		if (m->e[i].key == key)
			return &m->e[i];
	}
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

int32_t ms_tokenizer_n_ids(const struct ms_tokenizer *t)
{
	return t->n_ids;
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

/* ---- encoding ---- */

struct ids {
	int32_t *v;
	size_t n, cap;
};

static int ids_push(struct ids *o, int32_t id)
{
	if (o->n == o->cap) {
		size_t c = o->cap ? o->cap * 2 : 64;
		int32_t *nv = realloc(o->v, c * sizeof(int32_t));
		if (!nv)
			return -ENOMEM;
		o->v = nv;
		o->cap = c;
	}
	o->v[o->n++] = id;
	return 0;
}

/* Heap of candidate merges: lowest rank first, then leftmost. */
struct cand {
	int32_t rank;
	int32_t left, right;   /* symbol slots */
	uint32_t vl, vr;       /* their versions when pushed */
};

static bool cand_less(const struct cand *a, const struct cand *b)
{
	return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void heap_push(struct cand *h, size_t *n, struct cand c)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!cand_less(&c, &h[p]))
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = c;
}

static struct cand heap_pop(struct cand *h, size_t *n)
{
	struct cand top = h[0], last = h[--(*n)];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		const struct cand *best = &last;
		if (l < *n && cand_less(&h[l], best))
			m = l, best = &h[l];
		if (r < *n && cand_less(&h[r], best))
			m = r;
		if (m == i)
			break;
		h[i] = h[m];
		i = m;
	}
	if (*n)
		h[i] = last;
	return top;
}

/* BPE of one pre-token (raw bytes). */
static int bpe(const struct ms_tokenizer *t, const unsigned char *s, size_t n, struct ids *out)
{
	if (t->ignore_merges || n == 1) {
		int32_t whole = vocab_get(t, s, n);
		if (whole >= 0)
			return ids_push(out, whole);
	}
	int32_t *id = malloc(n * sizeof(int32_t));
	int32_t *prev = malloc(n * sizeof(int32_t)), *next = malloc(n * sizeof(int32_t));
	uint32_t *ver = calloc(n, sizeof(uint32_t));
	struct cand *heap = malloc((2 * n + 1) * sizeof(struct cand));
	size_t hn = 0;
	int rc = 0;
	if (!id || !prev || !next || !ver || !heap) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		id[i] = t->byte_id[s[i]];
		if (id[i] < 0) {
			rc = -EINVAL; /* a byte with no token: not a byte-level vocab */
			goto out;
		}
		prev[i] = (int32_t)i - 1;
		next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
	}
	for (size_t i = 0; i + 1 < n; i++) {
		const struct pair_entry *p = pair_get(&t->merges, id[i], id[i + 1]);
		if (p)
			heap_push(heap, &hn, (struct cand){p->rank, (int32_t)i, (int32_t)i + 1, 0, 0});
	}
	while (hn) {
		struct cand c = heap_pop(heap, &hn);
		/* stale: a side was merged away or changed since */
		if (id[c.left] < 0 || id[c.right] < 0 || next[c.left] != c.right ||
		    ver[c.left] != c.vl || ver[c.right] != c.vr)
			continue;
		const struct pair_entry *p = pair_get(&t->merges, id[c.left], id[c.right]);
		id[c.left] = p->merged;
		ver[c.left]++;
		id[c.right] = -1;
		next[c.left] = next[c.right];
		if (next[c.right] >= 0)
			prev[next[c.right]] = c.left;
		int32_t l = prev[c.left], r = next[c.left];
		if (l >= 0 && (p = pair_get(&t->merges, id[l], id[c.left])))
			heap_push(heap, &hn, (struct cand){p->rank, l, c.left, ver[l], ver[c.left]});
		if (r >= 0 && (p = pair_get(&t->merges, id[c.left], id[r])))
			heap_push(heap, &hn, (struct cand){p->rank, c.left, r, ver[c.left], ver[r]});
	}
	for (int32_t i = 0; i >= 0 && !rc; i = next[i])
		rc = ids_push(out, id[i]);
out:
	free(id), free(prev), free(next), free(ver), free(heap);
	return rc;
}

/* A piece of text waiting for the next pre-tokenizer step. */
struct piece {
	size_t b, e;
};

struct pieces {
	struct piece *v;
	size_t n, cap;
};

static int pieces_push(struct pieces *p, size_t b, size_t e)
{
	if (b >= e)
		return 0;
	if (p->n == p->cap) {
		size_t c = p->cap ? p->cap * 2 : 64;
		struct piece *nv = realloc(p->v, c * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		p->v = nv;
		p->cap = c;
	}
	p->v[p->n++] = (struct piece){b, e};
	return 0;
}

/* Apply one Split step to every piece. */
static int split_pieces(const struct split_step *s, const char *text, struct pieces *in,
			struct pieces *out, pcre2_match_data *md, pcre2_match_context *mc,
			struct ms_err *err)
{
	out->n = 0;
	for (size_t i = 0; i < in->n; i++) {
		size_t pos = in->v[i].b, end = in->v[i].e, start = pos;
		while (start < end) {
			int r = pcre2_match(s->re, (PCRE2_SPTR)text + in->v[i].b, end - in->v[i].b,
					    start - in->v[i].b, PCRE2_NO_UTF_CHECK, md, mc);
			if (r == PCRE2_ERROR_NOMATCH)
				break;
			if (r < 0) {
				PCRE2_UCHAR msg[256];
				pcre2_get_error_message(r, msg, sizeof(msg));
				return ms_err_set(err, -EINVAL, "tokenizer: regex failed: %s", (char *)msg);
			}
			PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
			size_t mb = in->v[i].b + ov[0], me = in->v[i].b + ov[1];
			if (me == mb) {
				/* an empty match splits nothing: step over one character */
				start = mb + 1;
				while (start < end && ((unsigned char)text[start] & 0xC0) == 0x80)
					start++;
				continue;
			}
			if (pieces_push(out, pos, mb))
				return ms_err_set(err, -ENOMEM, "out of memory");
			if (s->behavior == SPLIT_ISOLATED && pieces_push(out, mb, me))
				return ms_err_set(err, -ENOMEM, "out of memory");
			pos = start = me;
		}
		if (pieces_push(out, pos, end))
			return ms_err_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

/* Pre-tokenize and BPE one stretch of ordinary text. */
static int encode_text(const struct ms_tokenizer *t, const char *text, size_t len, struct ids *out,
		       pcre2_match_data *md, pcre2_match_context *mc, struct ms_err *err)
{
	struct pieces a = {0}, b = {0};
	int rc = 0;
	char *buf = NULL;
	/* ByteLevel add_prefix_space: a space before text that lacks one */
	for (int i = 0; i < t->n_steps; i++)
		if (t->steps[i].prefix_space && len && text[0] != ' ') {
			if (!(buf = malloc(len + 1)))
				return ms_err_set(err, -ENOMEM, "out of memory");
			buf[0] = ' ';
			memcpy(buf + 1, text, len);
			text = buf;
			len++;
			break;
		}
	if (pieces_push(&a, 0, len)) {
		rc = ms_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < t->n_steps && !rc; i++) {
		if (!t->steps[i].re)
			continue;
		rc = split_pieces(&t->steps[i], text, &a, &b, md, mc, err);
		struct pieces tmp = a;
		a = b;
		b = tmp;
	}
	for (size_t i = 0; i < a.n && !rc; i++)
		if ((rc = bpe(t, (const unsigned char *)text + a.v[i].b, a.v[i].e - a.v[i].b, out)))
			ms_err_set(err, rc, rc == -ENOMEM ? "out of memory"
						   : "tokenizer: a byte has no token in the vocab");
out:
	free(a.v), free(b.v), free(buf);
	return rc;
}

static bool is_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int encode_bytes(const struct ms_tokenizer *t, const char *text, size_t len,
			bool allow_special, int32_t **ids, size_t *n, struct ms_err *err)
{
	*ids = NULL;
	*n = 0;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		int k = utf8_next((const unsigned char *)text + i, len - i, &cp);
		if (!k)
			return ms_err_set(err, -EINVAL, "text is not valid UTF-8 (byte %zu)", i);
		i += (size_t)k;
	}
	struct ids out = {0};
	pcre2_match_data *md = NULL;
	pcre2_match_context *mc = pcre2_match_context_create(NULL);
	pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
	int rc = 0;
	for (int i = 0; i < t->n_steps && !md; i++)
		if (t->steps[i].re)
			md = pcre2_match_data_create_from_pattern(t->steps[i].re, NULL);
	if (!mc || !js || (t->n_steps && !md)) {
		rc = ms_err_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	pcre2_jit_stack_assign(mc, NULL, js);
	/* Cut added tokens out (leftmost, longest), BPE the text between. */
	size_t seg = 0;
	for (size_t p = 0; p < len && !rc;) {
		unsigned char c = (unsigned char)text[p];
		const struct added *hit = NULL;
		for (int i = t->first_added[c]; i < t->first_added[c + 1]; i++) {
			const struct added *a = &t->added[i];
			if ((allow_special || !a->special) && a->len <= len - p &&
			    memcmp(text + p, a->text, a->len) == 0) {
				hit = a;
				break;
			}
		}
		if (!hit) {
			p++;
			continue;
		}
		size_t seg_end = p, after = p + hit->len;
		if (hit->lstrip)
			while (seg_end > seg && is_ws((unsigned char)text[seg_end - 1]))
				seg_end--;
		if (hit->rstrip)
			while (after < len && is_ws((unsigned char)text[after]))
				after++;
		if (seg_end > seg)
			rc = encode_text(t, text + seg, seg_end - seg, &out, md, mc, err);
		if (!rc && ids_push(&out, hit->id))
			rc = ms_err_set(err, -ENOMEM, "out of memory");
		seg = p = after;
	}
	if (!rc && seg < len)
		rc = encode_text(t, text + seg, len - seg, &out, md, mc, err);
out:
	pcre2_match_data_free(md);
	pcre2_match_context_free(mc);
	pcre2_jit_stack_free(js);
	if (rc) {
		free(out.v);
		return rc;
	}
	*ids = out.v;
	*n = out.n;
	return 0;
}

int ms_tokenizer_encode(const struct ms_tokenizer *t, const char *text, size_t len,
			bool allow_special, int32_t **ids, size_t *n, struct ms_err *err)
{
	if (!ms_nul_carried(text, len))
		return encode_bytes(t, text, len, allow_special, ids, n, err);
	/* a carried NUL (ms-utf8.h) is the byte 0x00 */
	char *raw = malloc(len);
	if (!raw) {
		*ids = NULL;
		*n = 0;
		return ms_err_set(err, -ENOMEM, "out of memory");
	}
	memcpy(raw, text, len);
	int rc = encode_bytes(t, raw, ms_nul_uncarry(raw, len), allow_special, ids, n, err);
	free(raw);
	return rc;
}

/* ---- lookups ---- */

const char *ms_tokenizer_bytes(const struct ms_tokenizer *t, int32_t id, size_t *len)
{
	if (id < 0 || id >= t->n_ids || !t->known[id])
		return NULL;
	*len = tok_len(t, id);
	return t->blob + t->off[id];
}

int32_t ms_tokenizer_find(const struct ms_tokenizer *t, const char *text)
{
	size_t n = strlen(text);
	if (n) {
		unsigned char c = (unsigned char)text[0];
		for (int i = t->first_added[c]; i < t->first_added[c + 1]; i++)
			if (t->added[i].len == n && !memcmp(t->added[i].text, text, n))
				return t->added[i].id;
	}
	return vocab_get(t, text, n);
}

bool ms_tokenizer_is_special(const struct ms_tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n_ids && t->special[id];
}

static int32_t vocab_n_ids(const void *t)
{
	return ms_tokenizer_n_ids(t);
}

static const char *vocab_bytes(const void *t, int32_t id, size_t *len)
{
	return ms_tokenizer_bytes(t, id, len);
}

static bool vocab_is_special(const void *t, int32_t id)
{
	return ms_tokenizer_is_special(t, id);
}

static const struct ms_vocab_ops vocab_ops = {
	.n_ids = vocab_n_ids,
	.bytes = vocab_bytes,
	.is_special = vocab_is_special,
};

struct ms_vocab ms_tokenizer_vocab(const struct ms_tokenizer *t)
{
	return (struct ms_vocab){.ops = &vocab_ops, .tok = t};
}

/* ---- decoding ---- */

void ms_detok_init(struct ms_detok *d, const struct ms_tokenizer *t, bool skip_special)
{
	memset(d, 0, sizeof(*d));
	d->t = t;
	d->skip_special = skip_special;
}

static int out_append(char **buf, size_t *len, size_t *cap, const void *p, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t c = *cap ? *cap : 64;
		while (c < *len + n + 1)
			c *= 2;
		char *nb = realloc(*buf, c);
		if (!nb)
			return -ENOMEM;
		*buf = nb;
		*cap = c;
	}
	memcpy(*buf + *len, p, n);
	*len += n;
	(*buf)[*len] = '\0';
	return 0;
}

static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Length a UTF-8 sequence starting with c needs, 0 if c cannot start one. */
static int utf8_need(unsigned char c)
{
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		return 2;
	if (c >= 0xE0 && c <= 0xEF)
		return 3;
	if (c >= 0xF0 && c <= 0xF4)
		return 4;
	return 0;
}

/* Could pend[0..n) still become a valid sequence? */
static bool prefix_ok(const unsigned char *s, int n)
{
	uint32_t cp;
	int need = utf8_need(s[0]);
	if (!need)
		return false;
	for (int i = 1; i < n; i++)
		if ((s[i] & 0xC0) != 0x80)
			return false;
	if (n == need)
		return utf8_next(s, (size_t)n, &cp) == n;
	/* partial: check the second byte's range rules early */
	if (n >= 2) {
		unsigned char a = s[0], b = s[1];
		if ((a == 0xE0 && b < 0xA0) || (a == 0xED && b > 0x9F) || (a == 0xF0 && b < 0x90) ||
		    (a == 0xF4 && b > 0x8F))
			return false;
	}
	return true;
}

static int feed_bytes(struct ms_detok *d, const unsigned char *p, size_t n, char **buf,
		      size_t *len, size_t *cap)
{
	for (size_t i = 0; i < n; i++) {
		d->pend[d->n_pend++] = p[i];
		while (d->n_pend) {
			if (prefix_ok(d->pend, d->n_pend)) {
				if (d->n_pend == utf8_need(d->pend[0])) {
					/* NUL as the process carries it (ms-utf8.h) */
					bool nul = d->pend[0] == 0;
					if (out_append(buf, len, cap, nul ? MS_NUL_CARRIER : (const char *)d->pend,
						       nul ? 2 : (size_t)d->n_pend))
						return -ENOMEM;
					d->n_pend = 0;
				}
				break;
			}
			/* the first byte can never be part of valid text */
			if (out_append(buf, len, cap, replacement, 3))
				return -ENOMEM;
			memmove(d->pend, d->pend + 1, (size_t)--d->n_pend);
		}
	}
	return 0;
}

int ms_detok_push(struct ms_detok *d, int32_t id, char **buf, size_t *len, size_t *cap)
{
	size_t n;
	const char *b = ms_tokenizer_bytes(d->t, id, &n);
	if (!b)
		return -EINVAL;
	if (d->skip_special && d->t->special[id])
		return 0;
	return feed_bytes(d, (const unsigned char *)b, n, buf, len, cap);
}

int ms_detok_flush(struct ms_detok *d, char **buf, size_t *len, size_t *cap)
{
	int rc = d->n_pend ? out_append(buf, len, cap, replacement, 3) : 0;
	d->n_pend = 0;
	if (!rc && !*buf)
		rc = out_append(buf, len, cap, "", 0);
	return rc;
}

int ms_tokenizer_decode(const struct ms_tokenizer *t, const int32_t *ids, size_t n,
			bool skip_special, char **out, size_t *len, struct ms_err *err)
{
	struct ms_detok d;
	size_t cap = 0;
	*out = NULL;
	*len = 0;
	ms_detok_init(&d, t, skip_special);
	for (size_t i = 0; i < n; i++) {
		int rc = ms_detok_push(&d, ids[i], out, len, &cap);
		if (rc) {
			free(*out);
			*out = NULL;
			return ms_err_set(err, rc, rc == -EINVAL ? "token id %d is not in the vocabulary"
								 : "out of memory", ids[i]);
		}
	}
	int rc = ms_detok_flush(&d, out, len, &cap);
	if (rc) {
		free(*out);
		*out = NULL;
		return ms_err_set(err, rc, "out of memory");
	}
	return 0;
}

/* ---- the engine's text interface (engine/lm.h) ---- */

static void text_init(void *state, const void *tok, bool skip_special)
{
	ms_detok_init(state, tok, skip_special);
}

static int text_push(void *state, int32_t id, char **buf, size_t *len, size_t *cap)
{
	return ms_detok_push(state, id, buf, len, cap);
}

static const struct ms_detok_ops detok_ops = {
	.state_size = sizeof(struct ms_detok),
	.init = text_init,
	.push = text_push,
};

struct ms_text ms_tokenizer_text(const struct ms_tokenizer *t)
{
	return (struct ms_text){.ops = t ? &detok_ops : NULL, .tok = t};
}
