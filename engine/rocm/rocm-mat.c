/*
 * rocm-mat.c: matrices onto the device. A matrix goes up as its scheme left
 * it (struct ms_wmat's rows are already contiguous and self-describing in
 * every format), in one allocation: the descriptor the kernels read, then
 * the rows, the MXFP4 scales, the INTQ scales, zeros and group maps, and
 * the bias. A layer's experts get their descriptors side by side once, so
 * that one launch covers every expert.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rocm.h"

static size_t up64(size_t b)
{
	return (b + 63) & ~(size_t)63;
}

/* The distinct group maps of an INTQ matrix (rows share them: all of a
 * matrix, or gate rows and up rows after splicing), and each row's. */
static int gmaps(const struct ms_wmat *w, const int32_t **maps, int *n_maps, uint8_t *row_map,
		 struct ms_err *err)
{
	*n_maps = 0;
	for (int64_t r = 0; r < w->rows; r++) {
		int i = 0;
		while (i < *n_maps && maps[i] != w->row_g_idx[r])
			i++;
		if (i == *n_maps) {
			if (i == 255)
				return ms_err_set(err, -ENOTSUP, "INTQ matrix with more than 255 "
						  "distinct g_idx maps: not on the rocm backend");
			maps[(*n_maps)++] = w->row_g_idx[r];
		}
		row_map[r] = (uint8_t)i;
	}
	return 0;
}

struct upload {
	size_t at[8];      /* offsets: desc, w, scales, fscale, fzero, g_idx, row_gmap, bias */
	size_t total;
	const int32_t *maps[255];
	int n_maps;
	uint8_t *row_map;
};

static void plan(const struct ms_linear *l, struct upload *u)
{
	const struct ms_wmat *w = &l->w;
	size_t ng = w->fmt == MS_WFMT_INTQ ? (size_t)w->n_groups : (w->fmt == MS_WFMT_FP8 ? 1 : 0);
	size_t sizes[8] = {
		sizeof(struct ms_gpu_mat),
		(size_t)w->rows * w->row_bytes,
		w->scales ? (size_t)w->rows * w->scale_row_bytes : 0,
		w->fscale ? (size_t)w->rows * ng * sizeof(float) : 0,
		w->fzero ? (size_t)w->rows * ng * sizeof(float) : 0,
		(size_t)u->n_maps * (size_t)w->cols * sizeof(int32_t),
		u->n_maps ? (size_t)w->rows : 0,
		l->bias ? (size_t)w->rows * sizeof(float) : 0,
	};
	u->total = 0;
	for (int i = 0; i < 8; i++) {
		u->at[i] = u->total;
		u->total += up64(sizes[i]);
	}
}

static int fill(struct ms_rocm *be, const struct ms_linear *l, struct ms_rocm_mat *rm,
		const struct upload *u, struct ms_err *err)
{
	const struct ms_wmat *w = &l->w;
	char *d = rm->alloc;
	struct ms_gpu_mat *g = &rm->m;
	size_t ng = w->fmt == MS_WFMT_INTQ ? (size_t)w->n_groups : 1;
	*g = (struct ms_gpu_mat){
		.fmt = (int32_t)w->fmt, .bits = w->bits, .rows = w->rows, .cols = w->cols,
		.w = (const uint8_t *)(d + u->at[1]), .row_bytes = (int64_t)w->row_bytes,
		.scales = w->scales ? (const uint8_t *)(d + u->at[2]) : NULL,
		.scale_row_bytes = (int64_t)w->scale_row_bytes, .group_size = w->group_size,
		.n_groups = w->n_groups, .fscale = w->fscale ? (const float *)(d + u->at[3]) : NULL,
		.fzero = w->fzero ? (const float *)(d + u->at[4]) : NULL,
		.g_idx = u->n_maps ? (const int32_t *)(d + u->at[5]) : NULL,
		.row_gmap = u->n_maps ? (const uint8_t *)(d + u->at[6]) : NULL,
		.bias = l->bias ? (const float *)(d + u->at[7]) : NULL,
		.act = (int32_t)l->act.kind, .act_scale = l->act.scale,
	};
	rm->dev = (const struct ms_gpu_mat *)d;
	struct ms_gpu_ctx cc = be->ctx; /* uploads run on several threads: own messages */
	cc.err = err;
	const struct ms_gpu_ctx *c = &cc;
	int rc = be->rt->h2d(c, d, g, sizeof(*g));
	rc = rc ? rc : be->rt->h2d(c, d + u->at[1], w->w, (size_t)w->rows * w->row_bytes);
	if (!rc && w->scales)
		rc = be->rt->h2d(c, d + u->at[2], w->scales, (size_t)w->rows * w->scale_row_bytes);
	if (!rc && w->fscale)
		rc = be->rt->h2d(c, d + u->at[3], w->fscale, (size_t)w->rows * ng * sizeof(float));
	if (!rc && w->fzero)
		rc = be->rt->h2d(c, d + u->at[4], w->fzero, (size_t)w->rows * ng * sizeof(float));
	for (int i = 0; !rc && i < u->n_maps; i++)
		rc = be->rt->h2d(c, d + u->at[5] + (size_t)i * (size_t)w->cols * 4, u->maps[i],
				 (size_t)w->cols * 4);
	if (!rc && u->n_maps)
		rc = be->rt->h2d(c, d + u->at[6], u->row_map, (size_t)w->rows);
	if (!rc && l->bias)
		rc = be->rt->h2d(c, d + u->at[7], l->bias, (size_t)w->rows * sizeof(float));
	return rc;
}

static void mat_free(void *p)
{
	struct ms_rocm_mat *rm = p;
	rm->be->rt->free(rm->alloc);
	__atomic_add_fetch(&rm->be->gen, 1, __ATOMIC_RELAXED);
	free(rm);
}

static int check_fits(struct ms_rocm *be, size_t bytes, struct ms_err *err)
{
	size_t fr = 0, tot = 0;
	if (be->rt->mem_info(&fr, &tot) == 0 && bytes > fr)
		return ms_err_set(err, -ENOMEM, "needs %zu MiB on the device, %zu MiB free of %zu",
				  (bytes >> 20) + 1, fr >> 20, tot >> 20);
	return 0;
}

/* Row r decoded from the device copy (the host's rows are released after
 * upload): its bytes, scales, zeros and group map come back and are
 * decoded by the formats' own host code. For dequant and audits, not the
 * forward pass. */
static void mat_row(const void *pack, int64_t r, float *out)
{
	const struct ms_rocm_mat *rm = pack;
	const struct ms_gpu_mat *g = &rm->m;
	const struct ms_gpu_rt *rt = rm->be->rt;
	const struct ms_gpu_ctx *c = &rm->be->ctx;
	int64_t ng = g->fmt == MS_WFMT_INTQ ? g->n_groups : 1;
	uint8_t *row = malloc((size_t)g->row_bytes + (size_t)g->scale_row_bytes + 1);
	float *sz = malloc((size_t)(2 * ng) * sizeof(float));
	int32_t *gi = g->g_idx ? malloc((size_t)g->cols * sizeof(int32_t)) : NULL;
	bool ok = row && sz && (!g->g_idx || gi);
	uint8_t map = 0;
	ok = ok && !rt->d2h(c, row, g->w + r * g->row_bytes, (size_t)g->row_bytes);
	if (ok && g->scales)
		ok = !rt->d2h(c, row + g->row_bytes, g->scales + r * g->scale_row_bytes,
			      (size_t)g->scale_row_bytes);
	if (ok && g->fscale)
		ok = !rt->d2h(c, sz, g->fscale + r * ng, (size_t)ng * sizeof(float));
	if (ok && g->fzero)
		ok = !rt->d2h(c, sz + ng, g->fzero + r * ng, (size_t)ng * sizeof(float));
	if (ok && g->g_idx)
		ok = !rt->d2h(c, &map, g->row_gmap + r, 1) &&
		     !rt->d2h(c, gi, g->g_idx + (int64_t)map * g->cols, (size_t)g->cols * 4);
	const int32_t *rows_g[1] = {gi};
	struct ms_wmat w = {
		.fmt = (enum ms_wfmt)g->fmt, .rows = 1, .cols = g->cols, .w = row,
		.row_bytes = (size_t)g->row_bytes, .scales = g->scales ? row + g->row_bytes : NULL,
		.scale_row_bytes = (size_t)g->scale_row_bytes, .bits = g->bits,
		.group_size = g->group_size, .n_groups = g->n_groups, .fscale = sz, .fzero = sz + ng,
		.row_g_idx = gi ? rows_g : NULL,
	};
	if (ok)
		ms_wmat_row_range_f32(&w, 0, 0, g->cols, out);
	else
		memset(out, 0, (size_t)g->cols * sizeof(float));
	free(row), free(sz), free(gi);
}

/* ---- the MFMA kind of a matrix ---- */

static bool quantized_input(const struct ms_linear *l)
{
	return l->act.kind == MS_ACTQ_FP8_STATIC || l->act.kind == MS_ACTQ_FP8_DYNAMIC ||
	       l->act.kind == MS_ACTQ_MXFP4_DYNAMIC;
}

static bool takes_f4f8(const struct ms_linear *l)
{
	return l->w.fmt == MS_WFMT_MXFP4 && quantized_input(l);
}

static bool takes_fp8(const struct ms_linear *l)
{
	return (l->w.fmt == MS_WFMT_MXFP4 || l->w.fmt == MS_WFMT_FP8) && quantized_input(l);
}

static bool takes_any(const struct ms_linear *l)
{
	(void)l;
	return true;
}

/* The MFMA kinds, best first (one ordered table, as the CPU's
 * kernel-table.c): a matrix's prefill takes the first one the device has
 * (gpu.h's MS_GPU_MMA_*) and the matrix's format and input allow. The fp8
 * kinds keep the scheme's own products (only the summation differs);
 * bf16 rounds what is not already a bf16 value. */
static const struct mma_choice {
	int kind;
	unsigned needs;            /* any of these instructions */
	bool (*takes)(const struct ms_linear *l);
	const char *name, *kernel, *why;
} mma_table[] = {
	{MS_GPU_MM_F4F8, MS_GPU_MMA_F8F6F4, takes_f4f8, "mfma-f8f6f4", "gemv+mfma-f8f6f4",
	 "MXFP4 codes and E8M0 scales as stored, inputs as e4m3 with the block's scale"},
	{MS_GPU_MM_FP8, MS_GPU_MMA_FP8 | MS_GPU_MMA_FP8_FNUZ, takes_fp8, "mfma-fp8", "gemv+mfma-fp8",
	 "weights and the quantized inputs as e4m3 (fnuz: the same bits, scales doubled), "
	 "scales per 32 columns"},
	{MS_GPU_MM_BF16, MS_GPU_MMA_BF16, takes_any, "mfma-bf16", "gemv+mfma-bf16",
	 "weights and inputs rounded to bf16"},
};

static const struct mma_choice *mma_choose(const struct ms_rocm *be, const struct ms_linear *l)
{
	/* --exact keeps fp32 products; the router's logits choose experts */
	if (be->exact || l->w.exact_acts)
		return NULL;
	for (size_t i = 0; i < sizeof(mma_table) / sizeof(mma_table[0]); i++)
		if ((be->ctx.mma & mma_table[i].needs) && mma_table[i].takes(l))
			return &mma_table[i];
	return NULL;
}

/* What inspect says of a matrix on the device. */
static void why_of(const struct ms_linear *l, const struct mma_choice *mc, char *why, size_t len)
{
	const struct ms_wmat *w = &l->w;
	const char *how = ms_wfmt_name(w->fmt);
	char buf[96], mfma[192] = "";
	switch (w->fmt) {
	case MS_WFMT_MXFP4: how = "e2m1 + E8M0"; break;
	case MS_WFMT_INTQ:
		snprintf(buf, sizeof(buf), "%d-bit codes + scales/zeros%s", w->bits,
			 w->row_g_idx ? " + g_idx" : "");
		how = buf;
		break;
	case MS_WFMT_FP8: how = "e4m3 + row scale"; break;
	default: break;
	}
	if (mc)
		snprintf(mfma, sizeof(mfma), "; prefill %s: %s", mc->name, mc->why);
	snprintf(why, len, "as stored; %s to fp32 in registers (GEMV)%s%s%s%s", how,
		 mc ? "" : " or LDS (prefill GEMM)", mfma,
		 l->act.kind != MS_ACTQ_NONE ? "; input quantized on the device: " : "",
		 l->act.kind != MS_ACTQ_NONE ? ms_actq_name(l->act.kind) : "");
}

int ms_rocm_mat_upload(struct ms_rocm *be, struct ms_linear *l, bool table, char *why,
		       size_t len, struct ms_err *err)
{
	const struct ms_wmat *w = &l->w;
	if (!w->w)
		return ms_err_set(err, -ENOTSUP, "%s matrix without its rows (released after "
				  "packing): not on the rocm backend", ms_wfmt_name(w->fmt));
	struct upload u = {0};
	struct ms_rocm_mat *rm = calloc(1, sizeof(*rm));
	u.row_map = w->row_g_idx ? malloc((size_t)w->rows) : NULL;
	int rc = !rm || (w->row_g_idx && !u.row_map) ? ms_err_set(err, -ENOMEM, "out of memory") : 0;
	if (!rc && w->row_g_idx)
		rc = gmaps(w, u.maps, &u.n_maps, u.row_map, err);
	if (!rc) {
		plan(l, &u);
		rc = check_fits(be, u.total, err);
	}
	if (!rc && !(rm->alloc = be->rt->alloc(u.total)))
		rc = ms_err_set(err, -ENOMEM, "no device memory for %zu MiB of weights",
				(u.total >> 20) + 1);
	if (!rc) {
		rm->be = be;
		rm->bytes = u.total;
		if ((rc = fill(be, l, rm, &u, err)))
			ms_err_prefix(err, "uploading a %s matrix: ", ms_wfmt_name(w->fmt));
	}
	free(u.row_map);
	if (rc) {
		if (rm && rm->alloc)
			be->rt->free(rm->alloc);
		free(rm);
		return rc;
	}
	l->bound = rm;
	l->owned = rm;
	l->owned_free = mat_free;
	/* the device copy is what runs: the scheme's host rows may go (its
	 * repacked copies freed, checkpoint pages dropped), rows read back
	 * from the device when asked */
	l->w.pack = rm;
	l->w.pack_bytes = u.total - up64(sizeof(struct ms_gpu_mat));
	l->w.pack_row = mat_row;
	l->rows_free = true;
	const struct mma_choice *mc = table ? NULL : mma_choose(be, l);
	rm->mma = mc ? mc->kind : MS_GPU_MM_NONE;
	l->kernel_name = table ? "gather" : (mc ? mc->kernel : "gemv+gemm");
	why_of(l, mc, why, len);
	return 0;
}

/* ---- a layer's experts ---- */

static int layer_build(struct ms_rocm *be, const struct ms_moe_w *w, struct ms_rocm_layer *L,
		       struct ms_err *err)
{
	int64_t E = w->n_experts;
	struct ms_gpu_mat *host = malloc((size_t)(2 * E) * sizeof(*host));
	if (!host)
		return ms_err_set(err, -ENOMEM, "out of memory");
	L->act_gu = L->act_dn = false;
	/* one launch runs every expert: one kind for all, or none */
	L->mma_gu = L->mma_dn = -1;
	for (int64_t e = 0; e < E; e++) {
		const struct ms_rocm_mat *gu = w->gate_up[e]->bound, *dn = w->down[e]->bound;
		if (!gu || !dn) {
			free(host);
			return ms_err_set(err, -EINVAL, "moe: expert %lld is not on the device",
					  (long long)e);
		}
		host[e] = gu->m;
		host[E + e] = dn->m;
		L->mma_gu = L->mma_gu < 0 || L->mma_gu == gu->mma ? gu->mma : MS_GPU_MM_NONE;
		L->mma_dn = L->mma_dn < 0 || L->mma_dn == dn->mma ? dn->mma : MS_GPU_MM_NONE;
		L->act_gu |= gu->m.act != MS_GPU_ACT_NONE;
		L->act_dn |= dn->m.act != MS_GPU_ACT_NONE;
	}
	L->mma_gu = L->mma_gu < 0 ? MS_GPU_MM_NONE : L->mma_gu;
	L->mma_dn = L->mma_dn < 0 ? MS_GPU_MM_NONE : L->mma_dn;
	if (L->gate_up)
		be->rt->free(L->gate_up);
	L->gate_up = be->rt->alloc((size_t)(2 * E) * sizeof(*host));
	int rc = L->gate_up ? be->rt->h2d(&be->ctx, L->gate_up, host, (size_t)(2 * E) * sizeof(*host))
			    : ms_err_set(err, -ENOMEM, "moe: no device memory for descriptors");
	free(host);
	if (rc)
		return rc;
	L->down = L->gate_up + E;
	L->key = w;
	L->gen = __atomic_load_n(&be->gen, __ATOMIC_RELAXED);
	return 0;
}

const struct ms_rocm_layer *ms_rocm_layer(struct ms_rocm *be, const struct ms_moe_w *w,
					  struct ms_err *err)
{
	uint64_t gen = __atomic_load_n(&be->gen, __ATOMIC_RELAXED);
	struct ms_rocm_layer *L = NULL;
	for (int i = 0; i < be->n_layer_cache && !L; i++)
		if (be->layers[i].key == w)
			L = &be->layers[i];
	if (L && L->gen == gen)
		return L;
	if (!L) {
		struct ms_rocm_layer *n = realloc(be->layers, (size_t)(be->n_layer_cache + 1) * sizeof(*n));
		if (!n)
			return ms_err_set(err, -ENOMEM, "out of memory"), NULL;
		be->layers = n;
		L = &n[be->n_layer_cache++];
		memset(L, 0, sizeof(*L));
	}
	return layer_build(be, w, L, err) ? NULL : L;
}

void ms_rocm_layers_free(struct ms_rocm *be)
{
	for (int i = 0; i < be->n_layer_cache; i++)
		if (be->layers[i].gate_up)
			be->rt->free(be->layers[i].gate_up);
	free(be->layers);
	be->layers = NULL;
	be->n_layer_cache = 0;
}
