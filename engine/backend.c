/*
 * backend.c: the backend registry, and the helpers every backend shares
 * (the forward pass's arena, host vectors moved into backend memory).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

/* The backends this build has, in order: the first is the default. */
static const struct ms_backend_reg *const registry[] = {
	&ms_backend_reg_cpu,
	&ms_backend_reg_rocm,
	&ms_backend_reg_rocm_sim,
};
#define N_REG (sizeof(registry) / sizeof(registry[0]))

const char *ms_backend_names(void)
{
	static char names[128];
	if (!names[0])
		for (size_t i = 0; i < N_REG; i++) {
			size_t l = strlen(names);
			snprintf(names + l, sizeof(names) - l, "%s%s", i ? ", " : "", registry[i]->name);
		}
	return names;
}

/* The index of s in names[0 .. n), or -EINVAL. */
static int name_index(const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -EINVAL;
}

int ms_dense_mode_parse(const char *s, enum ms_dense_mode *out)
{
	static const char *const names[] = {"auto", "bf16", "int8"};
	int i = name_index(s, names, 3);
	if (i >= 0)
		*out = (enum ms_dense_mode)i;
	return i < 0 ? i : 0;
}

int ms_attn_products_parse(const char *s, enum ms_attn_products *out)
{
	static const char *const names[] = {"auto", "f32", "bf16"};
	int i = name_index(s, names, 3);
	if (i >= 0)
		*out = (enum ms_attn_products)i;
	return i < 0 ? i : 0;
}

const char *ms_attn_products_name(const struct ms_backend *be, enum ms_kv_dtype dt)
{
	return dt == MS_KV_BF16 && be->attn_bf16_products ? "bf16" : "f32";
}

int ms_backend_open(const struct ms_backend_opts *o, struct ms_backend **out, struct ms_err *err)
{
	*out = NULL;
	for (size_t i = 0; i < N_REG; i++) {
		if (o->backend && strcmp(o->backend, registry[i]->name))
			continue;
		int rc = registry[i]->open(o, out, err);
		if (!rc && !(*out)->mask_words)
			(*out)->mask_words = ms_mask_words_ref;
		return rc;
	}
	return ms_err_set(err, -EINVAL, "--backend: unknown backend \"%s\" (known: %s)",
			  o->backend, ms_backend_names());
}

void ms_mask_words_ref(const uint64_t *bits, int64_t words, float *z)
{
	for (int64_t w = 0; w < words; w++)
		for (uint64_t x = ~bits[w]; x; x &= x - 1)
			z[w * 64 + __builtin_ctzll(x)] = -INFINITY;
}

void ms_backend_close(struct ms_backend *be)
{
	if (be)
		be->ops->free(be);
}

void ms_rope_table_host(const int64_t *pos, int64_t n, const double *inv_freq, float scale,
			int64_t d, float *table)
{
	for (int64_t t = 0; t < n; t++) {
		float *cs = table + t * d, *sn = cs + d / 2;
		for (int64_t i = 0; i < d / 2; i++) {
			double ang = (double)pos[t] * inv_freq[i];
			cs[i] = (float)cos(ang) * scale;
			sn[i] = (float)sin(ang) * scale;
		}
	}
}

/* ---- the arena ---- */

int ms_backend_arena_reserve(struct ms_backend *be, size_t bytes, struct ms_err *err)
{
	struct ms_arena *a = &be->arena;
	a->used = 0;
	if (bytes <= a->cap)
		return 0;
	/* grow by half again, so a batch creeping up a token at a time does
	 * not reallocate every step */
	size_t want = bytes + bytes / 2;
	void *p = be->ops->buf_alloc(be, want);
	if (!p)
		return ms_err_set(err, -ENOMEM, "%s backend: no memory for %zu MiB of activations",
				  be->name, (want >> 20) + 1);
	if (a->base)
		be->ops->buf_free(be, a->base);
	a->base = p;
	a->cap = want;
	return 0;
}

void *ms_backend_arena_take(struct ms_backend *be, size_t bytes)
{
	struct ms_arena *a = &be->arena;
	size_t n = ms_arena_size(bytes);
	if (n > a->cap - a->used)
		return NULL;
	void *p = a->base + a->used;
	a->used += n;
	return p;
}

void ms_backend_arena_free(struct ms_backend *be)
{
	if (be->arena.base)
		be->ops->buf_free(be, be->arena.base);
	memset(&be->arena, 0, sizeof(be->arena));
}

/* ---- host vectors ---- */

int ms_backend_adopt(struct ms_backend *be, float **p, size_t n, struct ms_err *err)
{
	if (be->host || !*p)
		return 0;
	float *d = be->ops->buf_alloc(be, n * sizeof(float));
	if (!d)
		return ms_err_set(err, -ENOMEM, "%s backend: no memory for %zu floats", be->name, n);
	be->ops->from_host(be, d, *p, n * sizeof(float));
	free(*p);
	*p = d;
	return 0;
}

void ms_backend_release(struct ms_backend *be, void *p)
{
	if (!p)
		return;
	if (be->host)
		free(p);
	else
		be->ops->buf_free(be, p);
}
