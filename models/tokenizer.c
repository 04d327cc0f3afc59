/*
 * tokenizer.c: byte-level BPE from a Hugging Face tokenizer.json, once
 * tokenizer-load.c has read it into struct ms_tokenizer (tokenizer-int.h):
 * encoding (added tokens cut out, PCRE2 pre-tokenization, heap merges),
 * the lookups and the vocabulary view, and the streaming decoder. See
 * tokenizer.h for what is supported and why it is exact.
 */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "ms-hash.h"
#include "ms-utf8.h"
#include "tokenizer-int.h"

/* ---- hash tables ---- */

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

int32_t ms_tokenizer_n_ids(const struct ms_tokenizer *t)
{
	return t->n_ids;
}

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
	if (d->skip_special && d->t->special[id]) {
		/* a character never spans a special token: what is held back ends
		 * here, as U+FFFD in this token's text, not in front of the text
		 * after it (a harmony header's role) */
		int rc = d->n_pend ? out_append(buf, len, cap, replacement, 3) : 0;
		d->n_pend = 0;
		return rc;
	}
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
