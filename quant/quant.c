/*
 * quant.c: the method registry, config sources, and what all schemes share.
 */
#include "pool.h"
#include "quant.h"

#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <string.h>

#include "ms-json.h"
#include "ms-map.h"

/* The registry. To add a method: one line here, one file beside this one. */
static const struct ms_quant_method *const methods[] = {
	&ms_quant_none,
	&ms_quant_mxfp4,
	&ms_quant_gptq,
	&ms_quant_awq,
	&ms_quant_quark,
};
#define N_METHODS (sizeof(methods) / sizeof(methods[0]))

const char *ms_quant_method_names(void)
{
	static char buf[256];
	if (!buf[0]) {
		size_t n = 0;
		for (size_t i = 0; i < N_METHODS && n < sizeof(buf); i++)
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s", i ? ", " : "",
					      methods[i]->name);
	}
	return buf;
}

bool ms_dtype_is_float(enum ms_dtype dt)
{
	return dt == MS_DTYPE_F32 || dt == MS_DTYPE_F16 || dt == MS_DTYPE_BF16;
}

enum ms_wfmt ms_wfmt_from_dtype(enum ms_dtype dt)
{
	switch (dt) {
	case MS_DTYPE_F16: return MS_WFMT_F16;
	case MS_DTYPE_BF16: return MS_WFMT_BF16;
	default: return MS_WFMT_F32;
	}
}

/* ---- JSON helpers ---- */

static const cJSON *jfield(const cJSON *o, const char *name)
{
	const cJSON *it = name ? cJSON_GetObjectItemCaseSensitive(o, name) : NULL;
	return (it && !cJSON_IsNull(it)) ? it : NULL;
}

int ms_qjson_int(const cJSON *o, const char *where, const char *name, const char *alias,
		 bool required, int64_t dflt, int64_t *out, struct ms_err *err)
{
	const cJSON *it = jfield(o, name);
	const char *nm = name;
	if (!it && alias && (it = jfield(o, alias)))
		nm = alias;
	if (!it) {
		if (required)
			return ms_err_set(err, -EINVAL, "%s: missing field \"%s\"", where, name);
		*out = dflt;
		return 0;
	}
	if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
	    fabs(it->valuedouble) > 1e9)
		return ms_err_set(err, -EINVAL, "%s: \"%s\" must be an integer", where, nm);
	*out = (int64_t)it->valuedouble;
	return 0;
}

int ms_qjson_bool(const cJSON *o, const char *where, const char *name, bool dflt, bool *out,
		  struct ms_err *err)
{
	const cJSON *it = jfield(o, name);
	if (!it) {
		*out = dflt;
		return 0;
	}
	if (!cJSON_IsBool(it))
		return ms_err_set(err, -EINVAL, "%s: \"%s\" must be true or false", where, name);
	*out = cJSON_IsTrue(it);
	return 0;
}

int ms_qjson_str(const cJSON *o, const char *where, const char *name, bool required,
		 const char **out, struct ms_err *err)
{
	const cJSON *it = jfield(o, name);
	*out = NULL;
	if (!it) {
		if (required)
			return ms_err_set(err, -EINVAL, "%s: missing field \"%s\"", where, name);
		return 0;
	}
	if (!cJSON_IsString(it))
		return ms_err_set(err, -EINVAL, "%s: \"%s\" must be a string", where, name);
	*out = it->valuestring;
	return 0;
}

/* ---- config sources ---- */

static int parse_not_convert(struct ms_quant_config *qc, const cJSON *q, const char *where,
			     struct ms_err *err)
{
	const cJSON *nc = jfield(q, "modules_to_not_convert");
	if (!nc)
		return 0;
	if (!cJSON_IsArray(nc))
		return ms_err_set(err, -EINVAL, "%s: \"modules_to_not_convert\" must be a list", where);
	int n = cJSON_GetArraySize(nc);
	qc->not_convert = calloc((size_t)n + 1, sizeof(*qc->not_convert));
	if (!qc->not_convert)
		return ms_err_set(err, -ENOMEM, "out of memory");
	const cJSON *it;
	int rc;
	cJSON_ArrayForEach(it, nc) {
		if (!cJSON_IsString(it))
			return ms_err_set(err, -EINVAL, "%s: \"modules_to_not_convert[%d]\" is not a string",
					  where, qc->n_not_convert);
		char w[160];
		snprintf(w, sizeof(w), "%s: \"modules_to_not_convert[%d]\"", where, qc->n_not_convert);
		if ((rc = ms_qname_init(&qc->not_convert[qc->n_not_convert++], it->valuestring, w, err)))
			return rc;
	}
	return 0;
}

/* Older GPTQ/AWQ checkpoints carry their config beside config.json. Without
 * a quant_method in it, the keys tell: AutoAWQ writes w_bit/q_group_size,
 * AutoGPTQ bits/group_size. */
static int read_standalone(const char *dir, cJSON **out, const char **source, struct ms_err *err)
{
	static const char *const names[] = {"quantize_config.json", "quant_config.json"};
	*out = NULL;
	for (size_t i = 0; i < 2; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		FILE *f = fopen(path, "rb");
		if (!f)
			continue;
		fclose(f);
		cJSON *j;
		int rc = ms_json_read_file(path, &j, err);
		if (rc)
			return rc;
		if (!cJSON_IsObject(j)) {
			cJSON_Delete(j);
			return ms_err_set(err, -EINVAL, "%s: not a JSON object", path);
		}
		if (!cJSON_GetObjectItemCaseSensitive(j, "quant_method")) {
			bool awq = cJSON_GetObjectItemCaseSensitive(j, "w_bit") ||
				   cJSON_GetObjectItemCaseSensitive(j, "q_group_size") ||
				   cJSON_GetObjectItemCaseSensitive(j, "zero_point");
			cJSON_AddStringToObject(j, "quant_method", awq ? "awq" : "gptq");
		}
		*out = j;
		*source = names[i];
		return 0;
	}
	return 0;
}

int ms_quant_config_init(struct ms_quant_config *qc, const cJSON *root, const char *dir,
			 struct ms_err *err)
{
	memset(qc, 0, sizeof(*qc));
	const cJSON *q = jfield(root, "quantization_config");
	cJSON *standalone = NULL;
	qc->source = "config.json";
	if (!q && dir) {
		int rc = read_standalone(dir, &standalone, &qc->source, err);
		if (rc)
			return rc;
		q = standalone;
	}
	char where[64];
	snprintf(where, sizeof(where), "%s%s", qc->source,
		 standalone ? "" : ": \"quantization_config\"");
	const char *name = "none";
	if (q) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
		if (!cJSON_IsObject(q) || !cJSON_IsString(m)) {
			cJSON_Delete(standalone);
			return ms_err_set(err, -EINVAL, "%s: \"quant_method\" is missing or not a string",
					  where);
		}
		name = m->valuestring;
	}
	int rc = -ENOTSUP;
	for (size_t i = 0; i < N_METHODS; i++) {
		if (strcmp(methods[i]->name, name))
			continue;
		qc->method = methods[i];
		rc = q ? parse_not_convert(qc, q, where, err) : 0;
		if (!rc && qc->method->parse)
			rc = qc->method->parse(qc, q, err);
		break;
	}
	if (rc == -ENOTSUP && !qc->method)
		ms_err_set(err, -ENOTSUP, "%s: unknown \"quant_method\" \"%s\" (known: %s)", where, name,
			   ms_quant_method_names());
	cJSON_Delete(standalone);
	if (rc)
		ms_quant_config_free(qc);
	return rc;
}

void ms_quant_config_free(struct ms_quant_config *qc)
{
	if (!qc)
		return;
	if (qc->method && qc->method->free)
		qc->method->free(qc);
	for (int i = 0; i < qc->n_not_convert; i++)
		ms_qname_free(&qc->not_convert[i]);
	free(qc->not_convert);
	memset(qc, 0, sizeof(*qc));
}

/* ---- name matching ---- */

int ms_quant_not_converted(const struct ms_quant_config *qc, const char *module, bool *hit,
			   struct ms_err *err)
{
	*hit = false;
	for (int i = 0; i < qc->n_not_convert && !*hit; i++) {
		if (qc->not_convert_substring && strstr(module, qc->not_convert[i].text)) {
			*hit = true;
			break;
		}
		int rc = ms_qname_match(&qc->not_convert[i], module, hit, err);
		if (rc)
			return rc;
	}
	return 0;
}

bool ms_quant_has_prefix(const struct ms_checkpoint *ck, const char *prefix)
{
	return ms_checkpoint_has_prefix(ck, prefix);
}

/* ---- loading ---- */

int ms_quant_load_linear(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			 const char *prefix, enum ms_qkind kind, int64_t out, int64_t in,
			 bool has_bias, struct ms_qload *ld, struct ms_qlinear *l,
			 struct ms_err *err)
{
	const struct ms_quant_scheme *s = &ms_scheme_unquantized;
	memset(l, 0, sizeof(*l));
	int rc = 0;
	if (kind != MS_QKIND_EMBEDDING)
		rc = qc->method->scheme_for(qc, ck, prefix, MS_QKIND_LINEAR, &s, err);
	if (!rc && !s->load_linear)
		rc = ms_err_set(err, -ENOTSUP, "%s: scheme %s cannot load a linear layer", prefix,
				s->name);
	/* embeddings are looked up by row: never packed */
	ld->no_pack += kind == MS_QKIND_EMBEDDING;
	ld->table = kind == MS_QKIND_EMBEDDING;
	if (!rc)
		rc = s->load_linear(qc, ck, prefix, out, in, has_bias, ld, l, err);
	ld->no_pack -= kind == MS_QKIND_EMBEDDING;
	ld->table = false;
	if (rc) {
		ms_qlinear_free(l);
		return rc;
	}
	l->scheme = s->name;
	return 0;
}

void ms_qlinear_drop_pack(struct ms_qlinear *l)
{
	ms_linear_unbind(&l->lin);
}

/* ---- scheme buffers (ms_quant_buf_alloc) ---- */

/* Freed buffers kept for reuse while a bind pass is open: process-wide, as
 * buffers outlive the pass that made them (a kernel that reads rows in
 * place keeps them as its weights); exact sizes only, as each layer asks
 * for the same ones. */
static struct {
	pthread_mutex_t mu;
	int open;         /* bind passes open */
	bool keep;        /* keep what is freed (not in a pass's last flush) */
	void **bufs;      /* buffers (ms_map_alloc) */
	size_t n, cap;
} recycle = {.mu = PTHREAD_MUTEX_INITIALIZER};

#ifdef __SANITIZE_ADDRESS__
/* Under AddressSanitizer the heap's, so that overruns of these copies are
 * caught: no reuse (the speed is not what such a build is for). */
void *ms_quant_buf_alloc(size_t n, bool zero)
{
	return zero ? calloc(n ? n : 1, 1) : malloc(n ? n : 1);
}

void ms_quant_buf_free(void *p)
{
	free(p);
}

static void recycle_drain(void)
{
}
#else
void *ms_quant_buf_alloc(size_t n, bool zero)
{
	void *p = NULL;
	pthread_mutex_lock(&recycle.mu);
	for (size_t i = recycle.n; i-- > 0;)
		if (ms_map_size(recycle.bufs[i]) == n) {
			p = recycle.bufs[i];
			recycle.bufs[i] = recycle.bufs[--recycle.n];
			break;
		}
	pthread_mutex_unlock(&recycle.mu);
	if (p) {
		if (zero)
			memset(p, 0, n);
		return p;
	}
	return ms_map_alloc(n); /* fresh pages are zero already */
}

void ms_quant_buf_free(void *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&recycle.mu);
	bool keep = recycle.open && recycle.keep;
	if (keep && recycle.n == recycle.cap) {
		size_t cap = recycle.cap ? 2 * recycle.cap : 64;
		void **b = realloc(recycle.bufs, cap * sizeof(*b));
		if (b)
			recycle.bufs = b, recycle.cap = cap;
	}
	bool kept = keep && recycle.n < recycle.cap;
	if (kept)
		recycle.bufs[recycle.n++] = p;
	pthread_mutex_unlock(&recycle.mu);
	if (!kept)
		ms_map_free(p);
}

/* Unmap the kept buffers (a pass ends, or no more layers of those shapes). */
static void recycle_drain(void)
{
	pthread_mutex_lock(&recycle.mu);
	for (size_t i = 0; i < recycle.n; i++)
		ms_map_free(recycle.bufs[i]);
	recycle.n = 0;
	if (!recycle.open) {
		free(recycle.bufs);
		recycle.bufs = NULL;
		recycle.cap = 0;
	}
	pthread_mutex_unlock(&recycle.mu);
}
#endif

static void owned_free(struct ms_qlinear *l, int i)
{
	if (l->owned_bufs & (1u << i))
		ms_quant_buf_free(l->owned[i]);
	else
		free(l->owned[i]);
	l->owned[i] = NULL;
	l->owned_bufs &= ~(1u << i);
}

/* After packing, the rows the scheme produced are dead weight: free the
 * copies it owns, or let the kernel drop the checkpoint pages it read (they
 * stay in the page cache; touching them again just faults them back in). */
static void release_rows(struct ms_qlinear *l)
{
	struct ms_wmat *w = &l->lin.w;
	if (!l->lin.rows_free)
		return;
	bool owned = false;
	for (int i = 0; i < MS_QLINEAR_OWNED; i++)
		owned |= l->owned[i] != NULL;
	if (owned) {
		for (int i = 0; i < MS_QLINEAR_OWNED; i++)
			owned_free(l, i);
	} else {
		long pg = sysconf(_SC_PAGESIZE);
		const uint8_t *ranges[2][2] = {
			{w->w, w->w ? w->w + (size_t)w->rows * w->row_bytes : NULL},
			{w->scales, w->scales ? w->scales + (size_t)w->rows * w->scale_row_bytes : NULL},
		};
		for (int i = 0; i < 2; i++) {
			if (!ranges[i][0])
				continue;
			uintptr_t a = ((uintptr_t)ranges[i][0] + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
			uintptr_t b = (uintptr_t)ranges[i][1] & ~((uintptr_t)pg - 1);
			if (b > a)
				madvise((void *)a, b - a, MADV_DONTNEED);
		}
	}
	w->w = NULL;
	w->scales = NULL;
	w->fscale = NULL;
	w->fzero = NULL;
	w->row_g_idx = NULL;
}

static int bind_now(struct ms_qlinear *l, struct ms_backend *be, const char *prefix,
		    struct ms_err *err)
{
	struct ms_err e2 = {0};
	size_t o = strlen(l->origin);
	snprintf(l->why, sizeof(l->why), "%s", l->origin);
	int rc = be->ops->bind(be, &l->lin, MS_BIND_FULL, l->why + o, sizeof(l->why) - o, &e2);
	if (rc)
		return ms_err_set(err, rc, "%s: %s", prefix, e2.msg);
	release_rows(l);
	return 0;
}

/* Binding deferred to a parallel pass (ms_quant_bind_begin/end). */
struct bind_item {
	struct ms_qlinear *l;
	char prefix[192];
	int rc;
	struct ms_err err;
};

struct ms_bind_defer {
	struct bind_item *items;
	size_t n, cap;
	struct ms_backend *be;
};

/* Record l for the deferred pass. */
static int defer_bind(struct ms_bind_defer *d, struct ms_qlinear *l, const char *prefix,
		      struct ms_err *err)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 256;
		struct bind_item *it = realloc(d->items, cap * sizeof(*it));
		if (!it)
			return ms_err_set(err, -ENOMEM, "%s: out of memory", prefix);
		d->items = it;
		d->cap = cap;
	}
	struct bind_item *it = &d->items[d->n];
	memset(it, 0, sizeof(*it));
	it->l = l;
	/* so that freeing l (a load failing later) takes it off the list */
	l->bind_list = d;
	l->bind_idx = (int64_t)d->n++;
	snprintf(it->prefix, sizeof(it->prefix), "%s", prefix);
	return 0;
}

int ms_qlinear_set_kernel(struct ms_qlinear *l, struct ms_qload *ld, const char *prefix,
			  struct ms_err *err)
{
	struct ms_backend *be = ld->be;
	/* Something to be spliced into another matrix, or an embedding: the
	 * rows are read as they are, so no packed copy. A deferred matrix
	 * reads them so too until its pass binds it. */
	if (ld->no_pack || ld->defer) {
		struct ms_err e2 = {0};
		size_t o = strlen(l->origin);
		snprintf(l->why, sizeof(l->why), "%s", l->origin);
		enum ms_bind_mode mode = ld->table ? MS_BIND_TABLE : MS_BIND_IN_PLACE;
		int rc = be->ops->bind(be, &l->lin, mode, l->why + o, sizeof(l->why) - o, &e2);
		if (rc)
			return ms_err_set(err, rc, "%s: %s", prefix, e2.msg);
		return ld->no_pack ? 0 : defer_bind(ld->defer, l, prefix, err);
	}
	return bind_now(l, be, prefix, err);
}

int ms_quant_bind_begin(struct ms_qload *ld, struct ms_err *err)
{
	struct ms_bind_defer *d = calloc(1, sizeof(*d));
	if (!d)
		return ms_err_set(err, -ENOMEM, "out of memory");
	d->be = ld->be;
	ld->defer = d;
	pthread_mutex_lock(&recycle.mu);
	recycle.open++;
	recycle.keep = true;
	pthread_mutex_unlock(&recycle.mu);
	return 0;
}

static void bind_task(void *ctx, int i, int worker)
{
	(void)worker;
	struct ms_bind_defer *d = ctx;
	struct bind_item *it = &d->items[i];
	if (it->l) {
		it->l->bind_list = NULL;
		it->rc = bind_now(it->l, d->be, it->prefix, &it->err);
	}
}

int ms_quant_bind_flush(struct ms_qload *ld, struct ms_bind_stats *st, bool more,
			struct ms_err *err)
{
	struct ms_bind_defer *d = ld->defer;
	int rc = 0;
	if (!d || !d->n)
		return 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* the last flush unmaps the copies as their matrices are packed */
	pthread_mutex_lock(&recycle.mu);
	recycle.keep = more;
	pthread_mutex_unlock(&recycle.mu);
	/* One matrix per task; the pool balances uneven sizes. */
	ms_pool_run(ld->be->pool, (int)d->n, bind_task, d);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (st) {
		st->seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
		st->threads = ld->be->threads;
	}
	for (size_t i = 0; i < d->n; i++) {
		if (d->items[i].rc && !rc)
			rc = ms_err_set(err, d->items[i].rc, "%s", d->items[i].err.msg);
		if (st && !d->items[i].rc && d->items[i].l) {
			st->matrices++;
			if (d->items[i].l->lin.w.pack) {
				st->packed++;
				st->packed_bytes += d->items[i].l->lin.w.pack_bytes;
			}
		}
	}
	d->n = 0;
	/* The copies schemes made before packing were freed; glibc keeps freed
	 * heap pages mapped unless asked (its mmap threshold grows with the
	 * first large frees), which would count against peak memory. Our own
	 * buffers stay for the next layer's copies when more follow. */
	malloc_trim(0);
	if (!more)
		recycle_drain();
	return rc;
}

int ms_quant_bind_end(struct ms_qload *ld, struct ms_bind_stats *st, struct ms_err *err)
{
	struct ms_bind_defer *d = ld->defer;
	if (!d)
		return 0;
	int rc = ms_quant_bind_flush(ld, st, false, err);
	ld->defer = NULL;
	free(d->items);
	free(d);
	pthread_mutex_lock(&recycle.mu);
	recycle.open--;
	pthread_mutex_unlock(&recycle.mu);
	recycle_drain();
	return rc;
}

int ms_qlinear_load_bias(struct ms_qlinear *l, const struct ms_checkpoint *ck, const char *prefix,
			 int64_t out, bool has_bias, struct ms_err *err)
{
	if (!has_bias)
		return 0;
	char name[512];
	snprintf(name, sizeof(name), "%s.bias", prefix);
	return ms_checkpoint_get_f32(ck, name, 1, (int64_t[]){out}, &l->lin.bias, err);
}

int ms_quant_read_scale(const struct ms_checkpoint *ck, const char *name, float *out,
			struct ms_err *err)
{
	const struct ms_tensor *t = ms_checkpoint_find(ck, name);
	if (!t)
		return ms_err_set(err, -ENOENT, "%s: tensor \"%s\" is missing from the checkpoint",
				  ck->dir ? ck->dir : "checkpoint", name);
	int64_t count = 1;
	for (int i = 0; i < t->ndim; i++)
		count *= t->shape[i];
	if (count != 1) {
		char sb[128];
		return ms_err_set(err, -EBADMSG, "%s: tensor \"%s\" has shape %s, expected a scalar",
				  ms_checkpoint_file_of(ck, t), name,
				  ms_shape_str(sb, sizeof(sb), t->ndim, t->shape));
	}
	float *v;
	int rc = ms_checkpoint_get_f32(ck, name, t->ndim, t->shape, &v, err);
	if (rc)
		return rc;
	*out = v[0];
	free(v);
	if (!isfinite(*out) || *out <= 0)
		return ms_err_set(err, -EBADMSG, "%s: tensor \"%s\" holds %g, not a positive finite scale",
				  ms_checkpoint_file_of(ck, t), name, (double)*out);
	return 0;
}

void ms_qlinear_free(struct ms_qlinear *l)
{
	if (!l)
		return;
	if (l->bind_list) {
		struct ms_bind_defer *d = l->bind_list;
		d->items[l->bind_idx].l = NULL;
	}
	free(l->lin.bias);
	ms_qlinear_drop_pack(l);
	for (int i = 0; i < MS_QLINEAR_OWNED; i++)
		owned_free(l, i);
	memset(l, 0, sizeof(*l));
}

void ms_qmoe_free(struct ms_qmoe *m)
{
	if (!m)
		return;
	for (int64_t e = 0; e < m->n_experts; e++) {
		if (m->gate_up)
			ms_qlinear_free(&m->gate_up[e]);
		if (m->down)
			ms_qlinear_free(&m->down[e]);
	}
	free(m->gate_up);
	free(m->down);
	free(m->owned);
	free(m->w.gate_up);
	free(m->w.down);
	memset(m, 0, sizeof(*m));
}

/* ---- applying ---- */

int ms_qlinear_apply(struct ms_backend *be, const struct ms_qlinear *l, const float *x,
		     int64_t n, float *y, struct ms_err *err)
{
	const struct ms_linear *one = &l->lin;
	return be->ops->linear(be, 1, &one, x, n, &y, err);
}

int ms_qlinear_apply_multi(struct ms_backend *be, int m, const struct ms_qlinear *const *l,
			   const float *x, int64_t n, float *const *y, struct ms_err *err)
{
	const struct ms_linear *lin[MS_LINEAR_MULTI_MAX];
	if (m < 1 || m > MS_LINEAR_MULTI_MAX)
		return ms_err_set(err, -EINVAL, "linear: %d matrices at once (1 to %d)", m,
				  MS_LINEAR_MULTI_MAX);
	for (int i = 0; i < m; i++)
		lin[i] = &l[i]->lin;
	return be->ops->linear(be, m, lin, x, n, y, err);
}

/* ---- splicing rows of two matrices ---- */

/* Source group map of a matrix whose rows share one (all our loaders make
 * such matrices); NULL when groups are natural. */
static const int32_t *shared_g_idx(const struct ms_wmat *w, bool *ok)
{
	*ok = true;
	if (!w->row_g_idx)
		return NULL;
	for (int64_t r = 1; r < w->rows; r++)
		*ok &= w->row_g_idx[r] == w->row_g_idx[0];
	return w->row_g_idx[0];
}

int ms_qlinear_splice_rows(struct ms_qlinear *dst, const struct ms_qlinear *a,
			   const struct ms_qlinear *b, const int64_t *map, int64_t rows,
			   const char *what, struct ms_err *err)
{
	const struct ms_wmat *wa = &a->lin.w, *wb = &b->lin.w;
	memset(dst, 0, sizeof(*dst));
	bool oka, okb;
	const int32_t *ga = shared_g_idx(wa, &oka), *gb = shared_g_idx(wb, &okb);
	if (wa->fmt != wb->fmt || wa->cols != wb->cols || wa->row_bytes != wb->row_bytes ||
	    wa->scale_row_bytes != wb->scale_row_bytes || wa->bits != wb->bits ||
	    wa->group_size != wb->group_size || wa->n_groups != wb->n_groups ||
	    a->lin.act.kind != b->lin.act.kind || a->lin.act.scale != b->lin.act.scale ||
	    !a->lin.bias != !b->lin.bias ||
	    !oka || !okb)
		return ms_err_set(err, -ENOTSUP,
				  "%s: its two parts are stored differently (%s, %s activations vs %s, "
				  "%s activations, or other group sizes): cannot fuse them",
				  what, ms_wfmt_name(wa->fmt), ms_actq_name(a->lin.act.kind),
				  ms_wfmt_name(wb->fmt), ms_actq_name(b->lin.act.kind));
	size_t rb = wa->row_bytes, sb = wa->scale_row_bytes, G = (size_t)wa->n_groups;
	size_t K = (size_t)wa->cols;
	bool intq = wa->fmt == MS_WFMT_INTQ;
	size_t nfs = intq ? G : (wa->fmt == MS_WFMT_FP8 ? 1 : 0);
	uint8_t *wbuf = ms_quant_buf_alloc((size_t)rows * rb + 1, false);
	uint8_t *sbuf = sb ? ms_quant_buf_alloc((size_t)rows * sb, false) : NULL;
	float *fs = nfs ? ms_quant_buf_alloc((size_t)rows * nfs * sizeof(float), false) : NULL;
	float *fz = intq ? ms_quant_buf_alloc((size_t)rows * G * sizeof(float), false) : NULL;
	/* Group maps: a row pointer per row, then a copy of each side's map, in
	 * one block, so the spliced matrix outlives a and b. */
	bool maps = intq && (ga || gb);
	void *gblk = maps ? malloc((size_t)rows * sizeof(int32_t *) + 2 * K * sizeof(int32_t)) : NULL;
	dst->owned[0] = wbuf, dst->owned[1] = sbuf, dst->owned[2] = fs, dst->owned[3] = fz;
	dst->owned[4] = gblk;
	dst->owned_bufs = 0xF;
	if (a->lin.bias)
		dst->lin.bias = malloc((size_t)rows * sizeof(float));
	if (!wbuf || (sb && !sbuf) || (nfs && !fs) || (intq && !fz) || (maps && !gblk) ||
	    (a->lin.bias && !dst->lin.bias)) {
		ms_qlinear_free(dst);
		return ms_err_set(err, -ENOMEM, "%s: out of memory", what);
	}
	const int32_t **rg = gblk;
	int32_t *gcopy = maps ? (int32_t *)(rg + rows) : NULL;
	for (int side = 0; maps && side < 2; side++) {
		const int32_t *g = side ? gb : ga;
		for (size_t k = 0; k < K; k++)
			gcopy[side * K + k] = g ? g[k] : (int32_t)((int64_t)k / wa->group_size);
	}
	for (int64_t i = 0; i < rows; i++) {
		bool from_a = map[i] >= 0;
		const struct ms_qlinear *sl = from_a ? a : b;
		const struct ms_wmat *src = &sl->lin.w;
		int64_t r = from_a ? map[i] : -map[i] - 1;
		memcpy(wbuf + (size_t)i * rb, src->w + (size_t)r * rb, rb);
		if (sb)
			memcpy(sbuf + (size_t)i * sb, src->scales + (size_t)r * sb, sb);
		if (nfs)
			memcpy(fs + (size_t)i * nfs, src->fscale + (size_t)r * nfs, nfs * sizeof(float));
		if (fz)
			memcpy(fz + (size_t)i * G, src->fzero + (size_t)r * G, G * sizeof(float));
		if (maps)
			rg[i] = gcopy + (from_a ? 0 : K);
		if (dst->lin.bias)
			dst->lin.bias[i] = sl->lin.bias[r];
	}
	dst->lin.w = *wa;
	dst->lin.w.rows = rows;
	dst->lin.w.w = wbuf;
	dst->lin.w.scales = sbuf;
	dst->lin.w.fscale = fs;
	dst->lin.w.fzero = fz;
	dst->lin.w.row_g_idx = maps ? (const int32_t *const *)rg : NULL;
	dst->lin.w.pack = NULL; /* the caller binds a kernel to the new matrix */
	dst->lin.w.pack_bytes = 0;
	dst->lin.kernel = a->lin.kernel;
	dst->lin.kernel_name = a->lin.kernel_name;
	snprintf(dst->why, sizeof(dst->why), "%s", a->why);
	dst->lin.act = a->lin.act;
	dst->scheme = a->scheme;
	return 0;
}
