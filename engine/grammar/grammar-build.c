/* grammar-build.c: expressions and rules, built (grammar.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar-int.h"

int ms_gb_new(struct ms_gb **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void ms_gb_free(struct ms_gb *b)
{
	if (!b)
		return;
	for (uint32_t i = 0; i < b->n_rules; i++)
		free(b->names[i]);
	free(b->names);
	free(b->body);
	free(b->nodes);
	free(b->kids);
	free(b->sets);
	free(b);
}

static ms_gx add_node(struct ms_gb *b, struct node n)
{
	if (b->oom || !grow((void **)&b->nodes, &b->cap_nodes, b->n_nodes + 1, sizeof(n))) {
		b->oom = true;
		return -1;
	}
	b->nodes[b->n_nodes] = n;
	return (ms_gx)b->n_nodes++;
}

static int32_t add_set(struct ms_gb *b, const uint64_t w[4])
{
	for (uint32_t i = 0; i < b->n_sets; i++)  /* few distinct sets: a scan */
		if (!memcmp(b->sets[i].w, w, 32))
			return (int32_t)i;
	if (!grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof(struct set))) {
		b->oom = true;
		return -1;
	}
	memcpy(b->sets[b->n_sets].w, w, 32);
	return (int32_t)b->n_sets++;
}

ms_gx ms_gb_byteset(struct ms_gb *b, const uint64_t set[4])
{
	int32_t s = add_set(b, set);
	return s < 0 ? -1 : add_node(b, (struct node){.kind = NK_SET, .a = s});
}

ms_gx ms_gb_byterange(struct ms_gb *b, uint8_t lo, uint8_t hi)
{
	uint64_t w[4] = {0};
	for (int c = lo; c <= hi; c++)
		w[c >> 6] |= 1ull << (c & 63);
	return ms_gb_byteset(b, w);
}

static ms_gx list_node(struct ms_gb *b, int kind, const ms_gx *xs, int n)
{
	for (int i = 0; i < n; i++)
		if (xs[i] < 0)
			return -1;
	if (b->oom || !grow((void **)&b->kids, &b->cap_kids, b->n_kids + (uint32_t)n, 4)) {
		b->oom = true;
		return -1;
	}
	if (n)
		memcpy(b->kids + b->n_kids, xs, (size_t)n * 4);
	ms_gx r = add_node(b, (struct node){.kind = (uint8_t)kind, .a = (int32_t)b->n_kids, .n = n});
	b->n_kids += (uint32_t)n;
	return r;
}

ms_gx ms_gb_seq(struct ms_gb *b, const ms_gx *xs, int n)
{
	return n == 1 ? xs[0] : list_node(b, NK_SEQ, xs, n);
}

ms_gx ms_gb_alt(struct ms_gb *b, const ms_gx *xs, int n)
{
	return n == 1 ? xs[0] : list_node(b, NK_ALT, xs, n);
}

ms_gx ms_gb_seq2(struct ms_gb *b, ms_gx x, ms_gx y)
{
	ms_gx xs[2] = {x, y};
	return ms_gb_seq(b, xs, 2);
}

ms_gx ms_gb_alt2(struct ms_gb *b, ms_gx x, ms_gx y)
{
	ms_gx xs[2] = {x, y};
	return ms_gb_alt(b, xs, 2);
}

ms_gx ms_gb_empty(struct ms_gb *b)
{
	return list_node(b, NK_SEQ, NULL, 0);
}

ms_gx ms_gb_lit(struct ms_gb *b, const char *s, size_t n)
{
	ms_gx one[64];
	ms_gx acc = ms_gb_empty(b);
	/* in pieces, so that a long literal needs no large array */
	for (size_t at = 0; at < n && acc >= 0; at += 63) {
		int k = 0;
		one[k++] = acc;
		for (size_t i = at; i < n && i < at + 63; i++)
			one[k++] = ms_gb_byterange(b, (uint8_t)s[i], (uint8_t)s[i]);
		acc = list_node(b, NK_SEQ, one, k);
	}
	return acc;
}

ms_gx ms_gb_str(struct ms_gb *b, const char *s)
{
	return ms_gb_lit(b, s, strlen(s));
}

ms_gx ms_gb_rep(struct ms_gb *b, ms_gx x, int min, int max)
{
	if (x < 0)
		return -1;
	return add_node(b, (struct node){.kind = NK_REP, .a = x, .min = min, .max = max});
}

ms_gx ms_gb_opt(struct ms_gb *b, ms_gx x)
{
	return ms_gb_rep(b, x, 0, 1);
}

int ms_gb_rule(struct ms_gb *b, const char *name)
{
	int r = ms_gb_find_rule(b, name);
	if (r >= 0)
		return r;
	if (b->oom || !grow((void **)&b->names, &b->cap_rules, b->n_rules + 1, sizeof(char *))) {
		b->oom = true;
		return -1;
	}
	uint32_t cap = b->cap_rules;
	void *nb = realloc(b->body, (size_t)cap * sizeof(ms_gx));
	char *nm = strdup(name);
	if (!nb || !nm) {
		if (nb)
			b->body = nb;
		free(nm);
		b->oom = true;
		return -1;
	}
	b->body = nb;
	b->names[b->n_rules] = nm;
	b->body[b->n_rules] = -1;
	return (int)b->n_rules++;
}

int ms_gb_find_rule(const struct ms_gb *b, const char *name)
{
	for (uint32_t i = 0; i < b->n_rules; i++)
		if (!strcmp(b->names[i], name))
			return (int)i;
	return -1;
}

bool ms_gb_defined(const struct ms_gb *b, int rule)
{
	return rule >= 0 && (uint32_t)rule < b->n_rules && b->body[rule] >= 0;
}

ms_gx ms_gb_ref(struct ms_gb *b, int rule)
{
	if (rule < 0)
		return -1;
	return add_node(b, (struct node){.kind = NK_REF, .a = rule});
}

void ms_gb_define(struct ms_gb *b, int rule, ms_gx body)
{
	if (rule < 0 || body < 0) {
		b->oom = true;
		return;
	}
	b->body[rule] = body;
}

/* ---- code points as UTF-8 byte sequences ---- */

static int utf8_len(uint32_t c)
{
	return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

static void utf8_enc(uint32_t c, uint8_t *o)
{
	int n = utf8_len(c);
	if (n == 1) {
		o[0] = (uint8_t)c;
		return;
	}
	for (int i = n - 1; i > 0; i--, c >>= 6)
		o[i] = (uint8_t)(0x80 | (c & 0x3f));
	o[0] = (uint8_t)((n == 2 ? 0xc0 : n == 3 ? 0xe0 : 0xf0) | c);
}

/* lo..hi (one encoded length, split so that each byte position is a range). */
static void utf8_pieces(struct ms_gb *b, uint32_t lo, uint32_t hi, ms_gx *alts, int *na, int cap)
{
	int n = utf8_len(lo);
	if (n != utf8_len(hi)) {
		uint32_t top = n == 1 ? 0x7f : n == 2 ? 0x7ff : 0xffff;
		utf8_pieces(b, lo, top, alts, na, cap);
		utf8_pieces(b, top + 1, hi, alts, na, cap);
		return;
	}
	for (int i = 1; i < n; i++) {
		uint32_t m = (1u << (6 * i)) - 1;
		if ((lo & ~m) != (hi & ~m)) {
			if (lo & m) {
				utf8_pieces(b, lo, lo | m, alts, na, cap);
				utf8_pieces(b, (lo | m) + 1, hi, alts, na, cap);
				return;
			}
			if ((hi & m) != m) {
				utf8_pieces(b, lo, (hi & ~m) - 1, alts, na, cap);
				utf8_pieces(b, hi & ~m, hi, alts, na, cap);
				return;
			}
		}
	}
	uint8_t el[4], eh[4];
	utf8_enc(lo, el);
	utf8_enc(hi, eh);
	ms_gx xs[4];
	for (int i = 0; i < n; i++)
		xs[i] = ms_gb_byterange(b, el[i], eh[i]);
	if (*na < cap)
		alts[(*na)++] = ms_gb_seq(b, xs, n);
	else
		b->oom = true;
}

ms_gx ms_gb_cps(struct ms_gb *b, const uint32_t *r, int n)
{
	int cap = 64 * (n + 1), na = 0;
	ms_gx *alts = malloc((size_t)cap * sizeof(ms_gx));
	if (!alts) {
		b->oom = true;
		return -1;
	}
	for (int i = 0; i < n; i++) {
		uint32_t lo = r[2 * i], hi = r[2 * i + 1] > 0x10ffff ? 0x10ffff : r[2 * i + 1];
		/* no surrogates: cut D800..DFFF out */
		if (lo <= 0xdfff && hi >= 0xd800) {
			if (lo < 0xd800)
				utf8_pieces(b, lo, 0xd7ff, alts, &na, cap);
			if (hi > 0xdfff)
				utf8_pieces(b, 0xe000, hi, alts, &na, cap);
		} else if (lo <= hi) {
			utf8_pieces(b, lo, hi, alts, &na, cap);
		}
	}
	ms_gx x = ms_gb_alt(b, alts, na);
	free(alts);
	return x;
}
