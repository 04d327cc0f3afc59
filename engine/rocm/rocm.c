/*
 * rocm.c: the ROCm backend (backend.h's interface on a GPU through HIP),
 * and rocm-sim, the same host code and the same kernel sources run on the
 * host model of the HIP execution model (sim/). Two registry entries, one
 * struct: only the runtime and kernel tables (gpu.h) differ.
 *
 * Memory is the device's (host = false): the model reaches it only through
 * these operations. Weights go up once at bind (rocm-mat.c); a step's
 * tables once in step_begin (rocm-ops.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ms-clock.h"
#include "rocm-config.h"
#include "rocm.h"

/* ---- scratch ---- */

int ms_rocm_reserve(struct ms_rocm *be, enum ms_rocm_buf b, size_t bytes, struct ms_err *err)
{
	struct ms_dbuf *d = &be->buf[b];
	if (bytes <= d->cap)
		return 0;
	size_t want = bytes + bytes / 2 + 64;
	void *p = be->rt->alloc(want);
	if (!p)
		return ms_err_set(err, -ENOMEM, "rocm: no device memory for %zu MiB of scratch",
				  (want >> 20) + 1);
	be->rt->free(d->p);
	d->p = p;
	d->cap = want;
	return 0;
}

void *ms_rocm_host_stage(struct ms_rocm *be, size_t bytes)
{
	if (bytes > be->host_stage_cap) {
		size_t want = bytes + bytes / 2 + 64;
		void *p = realloc(be->host_stage, want);
		if (!p)
			return NULL;
		be->host_stage = p;
		be->host_stage_cap = want;
	}
	return be->host_stage;
}

void ms_rocm_fail(struct ms_rocm *be, int rc)
{
	if (rc && !be->kerr.code) {
		be->kerr.code = rc;
		if (!be->kerr.msg[0])
			snprintf(be->kerr.msg, sizeof(be->kerr.msg), "a device operation failed (%d)", rc);
	}
}

/* ---- memory ---- */

static void *r_buf_alloc(struct ms_backend *b, size_t bytes)
{
	return ms_rocm_of(b)->rt->alloc(bytes);
}

static void r_buf_free(struct ms_backend *b, void *p)
{
	if (p)
		ms_rocm_of(b)->rt->free(p);
}

static void r_copy(struct ms_backend *b, void *dst, const void *src, size_t bytes)
{
	struct ms_rocm *be = ms_rocm_of(b);
	ms_rocm_fail(be, be->rt->d2d(&be->ctx, dst, src, bytes));
}

static void r_to_host(struct ms_backend *b, void *host, const void *src, size_t bytes)
{
	struct ms_rocm *be = ms_rocm_of(b);
	ms_rocm_fail(be, be->rt->d2h(&be->ctx, host, src, bytes));
}

static void r_from_host(struct ms_backend *b, void *dst, const void *host, size_t bytes)
{
	struct ms_rocm *be = ms_rocm_of(b);
	ms_rocm_fail(be, be->rt->h2d(&be->ctx, dst, host, bytes));
}

/* ---- weights ---- */

/* Every format a scheme produces runs here; an unknown one is refused.
 * FULL and TABLE upload the rows as they are (no device repacking yet).
 * IN_PLACE uploads nothing: such a matrix is a half about to be spliced
 * into another, or waits for its FULL bind, and the device cannot read
 * host rows anyway (uploading it would move it twice). */
static int r_bind(struct ms_backend *b, struct ms_linear *l, enum ms_bind_mode mode, char *why,
		  size_t len, struct ms_err *err)
{
	struct ms_rocm *be = ms_rocm_of(b);
	ms_linear_unbind(l);
	if (l->w.fmt < 0 || l->w.fmt >= MS_WFMT_COUNT)
		return ms_err_set(err, -ENOTSUP, "%s backend: no kernel computes format %d",
				  b->name, (int)l->w.fmt);
	int bits = l->w.bits;
	if (l->w.fmt == MS_WFMT_INTQ && bits != 2 && bits != 3 && bits != 4 && bits != 8)
		return ms_err_set(err, -ENOTSUP, "%s backend: %d-bit INTQ weights (bits: 2, 3, 4 "
				  "or 8)", b->name, bits);
	if (mode == MS_BIND_IN_PLACE) {
		l->kernel_name = "host rows";
		snprintf(why, len, "not on the device (rows read on the host until bound)");
		return 0;
	}
	return ms_rocm_mat_upload(be, l, mode == MS_BIND_TABLE, why, len, err);
}

static int r_weights_fit(struct ms_backend *b, uint64_t bytes, struct ms_err *err)
{
	struct ms_rocm *be = ms_rocm_of(b);
	size_t fr = 0, tot = 0;
	if (be->rt->mem_info(&fr, &tot))
		return 0;
	if (bytes > fr)
		return ms_err_set(err, -ENOMEM, "the model's weights take %llu MiB, %s has %zu MiB "
				  "free (of %zu MiB)", (unsigned long long)(bytes >> 20) + 1,
				  be->info.name, fr >> 20, tot >> 20);
	return 0;
}

/* ---- measuring ---- */

/* Timed runs after one untimed (the first launch loads the kernel), each
 * of enough copies to last BW_RUN_S: the drain's own latency (~10 us)
 * is then a fraction of a percent of a run even where one copy of 1 GiB
 * takes half a millisecond (an H200). */
#define BW_RUNS 5
#define BW_RUN_S 0.005
#define BW_MAX_COPIES 32

/* Wait until everything queued has run: a copy back waits for the queue
 * (gpu.h), and 16 bytes of it cost next to nothing. */
static int r_drain(struct ms_rocm *be, const struct ms_gpu_ctx *c, const void *dev)
{
	unsigned char h[16];
	return be->rt->d2h(c, h, dev, sizeof(h));
}

/* The copy kernel (gpu.h's bandwidth probe) between two fresh buffers,
 * each run timed from its launch to the drained queue, so that the time
 * is the copy's and not only its launch's. */
static double r_copy_bandwidth(struct ms_backend *b, size_t bytes, struct ms_err *err)
{
	struct ms_rocm *be = ms_rocm_of(b);
	if (be->kerr.code) {
		ms_err_set(err, be->kerr.code, "rocm: %s", be->kerr.msg);
		return 0;
	}
	bytes &= ~(size_t)15; /* 16-byte vectors */
	if (bytes < 16) {
		ms_err_set(err, -EINVAL, "copy bandwidth: %zu bytes (at least 16)", bytes);
		return 0;
	}
	void *src = be->rt->alloc(bytes), *dst = src ? be->rt->alloc(bytes) : NULL;
	if (!dst) {
		be->rt->free(src);
		ms_err_set(err, -ENOMEM, "copy bandwidth: no device memory for two %zu MiB buffers",
			   bytes >> 20);
		return 0;
	}
	struct ms_gpu_ctx c = be->ctx;
	c.err = err;
	double best = 0;
	int copies = 1;
	int rc = r_drain(be, &c, dst); /* the buffers' zero-fill done before the clock starts */
	for (int rep = 0; !rc && rep <= BW_RUNS; rep++) {
		double t0 = ms_now_s();
		for (int i = 0; !rc && i < copies; i++)
			rc = be->k->copy(&c, dst, src, bytes);
		rc = rc ? rc : r_drain(be, &c, dst);
		double t = ms_now_s() - t0;
		if (rc || t <= 0)
			continue;
		if (rep == 0) {
			double want = BW_RUN_S / t + 1;
			copies = want < BW_MAX_COPIES ? (int)want : BW_MAX_COPIES;
		} else if (2.0 * (double)bytes * copies / t > best) {
			best = 2.0 * (double)bytes * copies / t;
		}
	}
	be->rt->free(src);
	be->rt->free(dst);
	return rc ? 0 : best;
}

/* ---- the instance ---- */

static void r_free(struct ms_backend *b)
{
	struct ms_rocm *be = ms_rocm_of(b);
	ms_rocm_layers_free(be);
	ms_backend_arena_free(b);
	for (int i = 0; i < RB_COUNT; i++)
		be->rt->free(be->buf[i].p);
	free(be->host_stage);
	be->rt->close(&be->ctx);
	ms_pool_free(&be->pool);
	free(be);
}

#define ROCM_OPS(NAME)                                                                \
	{                                                                             \
		.name = NAME, .free = r_free, .buf_alloc = r_buf_alloc,               \
		.buf_free = r_buf_free, .copy = r_copy, .to_host = r_to_host,         \
		.from_host = r_from_host, .bind = r_bind, .weights_fit = r_weights_fit, \
		.step_begin = ms_rocm_step_begin, .embed = ms_rocm_embed,             \
		.linear = ms_rocm_linear, .rmsnorm = ms_rocm_rmsnorm,                 \
		.rope_table = ms_rocm_rope_table, .rope = ms_rocm_rope,               \
		.add = ms_rocm_add, .kv_write = ms_rocm_kv_write,                     \
		.attention = ms_rocm_attention, .moe = ms_rocm_moe,                   \
		.copy_bandwidth = r_copy_bandwidth,                                   \
	}

const struct ms_backend_ops ms_rocm_ops_dev = ROCM_OPS("rocm");
const struct ms_backend_ops ms_rocm_ops_sim = ROCM_OPS("rocm-sim");

unsigned ms_gpu_mma_of_arch(const char *arch)
{
	static const struct {
		const char *name;
		unsigned mma;
	} t[] = {
		{"gfx90a", MS_GPU_MMA_BF16},
		{"gfx940", MS_GPU_MMA_BF16 | MS_GPU_MMA_FP8_FNUZ},
		{"gfx941", MS_GPU_MMA_BF16 | MS_GPU_MMA_FP8_FNUZ},
		{"gfx942", MS_GPU_MMA_BF16 | MS_GPU_MMA_FP8_FNUZ},
		{"gfx950", MS_GPU_MMA_BF16 | MS_GPU_MMA_FP8 | MS_GPU_MMA_F8F6F4},
	};
	for (size_t i = 0; arch && i < sizeof(t) / sizeof(t[0]); i++) {
		size_t n = strlen(t[i].name);
		if (!strncmp(arch, t[i].name, n) && strchr(":- ", arch[n]))
			return t[i].mma;
	}
	return 0;
}

/* The MFMA instructions in use, for the kernel set's name. */
static void mma_name(unsigned mma, char *out, size_t len)
{
	snprintf(out, len, "%s%s%s%s%s", mma ? " mfma:" : "", mma & MS_GPU_MMA_BF16 ? " bf16" : "",
		 mma & MS_GPU_MMA_FP8_FNUZ ? " fp8-fnuz" : "", mma & MS_GPU_MMA_FP8 ? " fp8" : "",
		 mma & MS_GPU_MMA_F8F6F4 ? " f8f6f4" : "");
}

/* MOESERVE_ROCM_PRODUCT: auto (by inputs, rocm-ops.c), gemv or gemm. */
static int product_of_env(enum ms_rocm_product *p, struct ms_err *err)
{
	const char *v = getenv("MOESERVE_ROCM_PRODUCT");
	*p = MS_ROCM_AUTO;
	if (!v || !*v || !strcmp(v, "auto"))
		return 0;
	static const char *const names[] = {"auto", "gemv", "gemm", "mma"};
	for (int i = 1; i < 4; i++)
		if (!strcmp(v, names[i])) {
			*p = (enum ms_rocm_product)i;
			return 0;
		}
	return ms_err_set(err, -EINVAL, "MOESERVE_ROCM_PRODUCT=%s: auto, gemv, gemm or mma", v);
}

static int rocm_open_with(const struct ms_backend_opts *o, const struct ms_backend_ops *ops,
			  const struct ms_gpu_rt *rt, const struct ms_gpu_kern *k,
			  struct ms_backend **out, struct ms_err *err)
{
	if (o->dense == MS_DENSE_INT8)
		return ms_err_set(err, -ENOTSUP, "--dense int8: not on the %s backend (its kernels "
				  "keep fp32 activations)", ops->name);
	if (o->attn_products == MS_ATTN_PRODUCTS_BF16)
		return ms_err_set(err, -ENOTSUP, "--attn-products bf16: not on the %s backend (its "
				  "attention multiplies in f32)", ops->name);
	if (o->kernels && *o->kernels && strcmp(o->kernels, "auto"))
		return ms_err_set(err, -EINVAL, "--kernels %s: the %s backend has one kernel set "
				  "(auto)", o->kernels, ops->name);
	enum ms_rocm_product product;
	int rc = product_of_env(&product, err);
	if (rc)
		return rc;
	struct ms_rocm *be = calloc(1, sizeof(*be));
	if (!be)
		return ms_err_set(err, -ENOMEM, "%s backend: out of memory", ops->name);
	be->rt = rt;
	be->k = k;
	be->product = product;
	rc = rt->open(o->device, &be->ctx, &be->info, err);
	if (!rc && (rc = ms_pool_init(&be->pool, o->threads > 0 ? o->threads : 4, false, err)))
		rt->close(&be->ctx);
	if (rc) {
		free(be);
		return rc;
	}
	be->ctx.err = &be->kerr;
	be->ctx.mma = ms_gpu_mma_of_arch(be->info.arch);
	be->exact = o->exact;
	static const char *const prods[] = {"gemv+gemm", "gemv", "gemm", "gemv+mma"};
	char mma[64];
	mma_name(be->exact ? 0 : be->ctx.mma, mma, sizeof(mma));
	snprintf(be->kernels, sizeof(be->kernels), "%s %s%s (%s, wave%d)", k->name, prods[product],
		 mma, be->info.arch, be->info.wave);
	struct ms_backend *b = &be->base;
	*b = (struct ms_backend){.ops = ops, .name = ops->name, .kernels = be->kernels,
				 .device = be->info.name,
				 .host = false, .exact = be->exact || !be->ctx.mma,
				 .kv_dtypes = 1u << MS_KV_F32 | 1u << MS_KV_BF16 | 1u << MS_KV_FP8,
				 .threads = be->pool.n_threads,
				 .pool = &be->pool};
	*out = b;
	return 0;
}

static int sim_open(const struct ms_backend_opts *o, struct ms_backend **out, struct ms_err *err)
{
	return rocm_open_with(o, &ms_rocm_ops_sim, ms_gsim_rt(), ms_gsim_kern(), out, err);
}

const struct ms_backend_reg ms_backend_reg_rocm_sim = {
	.name = "rocm-sim",
	.about = "the ROCm kernels on a host model of the GPU (tests; tiny models only)",
	.open = sim_open,
};

static int dev_open(const struct ms_backend_opts *o, struct ms_backend **out, struct ms_err *err)
{
#if defined(MS_HAVE_HIP)
	return rocm_open_with(o, &ms_rocm_ops_dev, ms_ghip_rt(), ms_ghip_kern(), out, err);
#elif defined(MS_HAVE_CUDA)
	return rocm_open_with(o, &ms_rocm_ops_dev, ms_gcuda_rt(), ms_gcuda_kern(), out, err);
#else
	(void)o;
	(void)out;
	return ms_err_set(err, -ENODEV, "no ROCm/HIP device: this moeserve was built without HIP "
			  "(meson -Drocm=enabled, with hipcc)");
#endif
}

const struct ms_backend_reg ms_backend_reg_rocm = {
	.name = "rocm",
	.about = "an AMD Instinct GPU through HIP (--device N)",
	.open = dev_open,
};
