/* model.c: the architecture registry and the architecture-neutral parts. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ms-clock.h"
#include "ms-json.h"

/* The registry: one line per architecture. */
static const struct ms_model_ops *const archs[] = {
	&ms_model_gpt_oss,
};
#define N_ARCHS (sizeof(archs) / sizeof(archs[0]))

const char *ms_model_arch_names(void)
{
	static char buf[256];
	if (!buf[0]) {
		size_t n = 0;
		for (size_t i = 0; i < N_ARCHS && n < sizeof(buf); i++)
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s", i ? ", " : "",
					      archs[i]->arch);
	}
	return buf;
}

void ms_model_add_group(struct ms_model *m, const char *name, const char *scheme,
			const char *format, const char *act, const char *kernel, const char *why,
			uint64_t bytes)
{
	for (int i = 0; i < m->n_groups; i++) {
		struct ms_tensor_group *g = &m->groups[i];
		if (!strcmp(g->name, name) && !strcmp(g->scheme, scheme) &&
		    !strcmp(g->format, format) && !strcmp(g->act, act) && !strcmp(g->kernel, kernel)) {
			g->count++;
			g->bytes += bytes;
			return;
		}
	}
	if (m->n_groups == MS_MAX_GROUPS)
		return;
	struct ms_tensor_group *g = &m->groups[m->n_groups++];
	snprintf(g->name, sizeof(g->name), "%s", name);
	g->scheme = scheme;
	g->format = format;
	g->act = act;
	g->kernel = kernel;
	g->why = why;
	g->count = 1;
	g->bytes = bytes;
}

/* The scheduler's view (engine/lm.h). */
static int lm_forward(void *model, const struct ms_batch *b, float *logits, struct ms_err *err)
{
	struct ms_model *m = model;
	return m->ops->forward_batch(m, b, logits, err);
}

static void lm_init(struct ms_model *m)
{
	const struct ms_model_config *c = &m->cfg;
	m->lm = (struct ms_lm){
		.model = m, .forward = lm_forward, .be = m->be, .vocab = c->vocab,
		.max_pos = c->max_pos,
		.kv = {.n_layers = (int)c->n_layers, .kv_dim = c->n_kv_heads * c->head_dim,
		       .head_dim = c->head_dim, .sliding_window = c->sliding_window, .layer_sliding = c->layer_sliding},
	};
}

/* The checkpoint's size against the backend's own memory, before any of it
 * is allocated. */
static int weights_fit(const struct ms_model *m, struct ms_backend *be, struct ms_err *err)
{
	uint64_t bytes = 0;
	for (int i = 0; i < m->ck.n_files; i++)
		bytes += m->ck.files[i].size;
	return be->ops->weights_fit ? be->ops->weights_fit(be, bytes, err) : 0;
}

void (*ms_model_load_hook)(struct ms_model *m);

/* The architecture's load, then: did every byte it read come from the
 * files? (A file that shrank while mapped reads as zeros: whatever the
 * load made of them, or refused them for, the truncation is the error.) */
static int load_checked(struct ms_model *m, struct ms_err *err)
{
	if (ms_model_load_hook)
		ms_model_load_hook(m);
	int rc = m->ops->load(m, err);
	struct ms_err fault = {0};
	if (ms_checkpoint_check(&m->ck, &fault)) {
		if (err)
			*err = fault;
		return fault.code;
	}
	return rc;
}

int ms_model_load(struct ms_model *m, const char *dir, struct ms_backend *be,
		  struct ms_err *err)
{
	memset(m, 0, sizeof(*m));
	double t0 = ms_now_s();
	char path[4096];
	cJSON *root;
	snprintf(path, sizeof(path), "%s/config.json", dir);
	int rc = ms_json_read_file(path, &root, err);  /* the error names the file */
	if (rc)
		return rc;
	rc = ms_model_config_from_json(&m->cfg, root, err);
	if (!rc) /* the quant registry reads the same document */
		rc = ms_quant_config_init(&m->qcfg, root, dir, err);
	cJSON_Delete(root);
	if (rc) {
		ms_err_prefix(err, "%s: ", dir);
		ms_model_free(m);
		return rc;
	}
	for (size_t i = 0; i < N_ARCHS; i++)
		if (!strcmp(archs[i]->arch, m->cfg.arch))
			m->ops = archs[i];
	if (!m->ops) {
		rc = ms_err_set(err, -ENOTSUP,
				"%s: config.json: unsupported \"architectures\" \"%s\" (supported: %s)",
				dir, m->cfg.arch, ms_model_arch_names());
		ms_model_free(m);
		return rc;
	}
	if (!be) {
		ms_model_free(m);
		return ms_err_set(err, -EINVAL, "%s: no backend to load the model on", dir);
	}
	m->be = be;
	lm_init(m);
	if (be->ops->weights_begin)
		be->ops->weights_begin(be);
	if ((rc = ms_checkpoint_open(&m->ck, dir, err)) || (rc = weights_fit(m, be, err)) ||
	    (rc = load_checked(m, err))) {
		if (be->ops->weights_end)
			be->ops->weights_end(be, NULL, NULL, 0);
		ms_model_free(m);
		return rc;
	}
	{
		void *maps[64];
		size_t sizes[64];
		int n = 0;
		for (int i = 0; i < m->ck.n_files && n < 64; i++, n++) {
			maps[n] = m->ck.files[i].map;
			sizes[n] = m->ck.files[i].size;
		}
		if (be->ops->weights_end)
			be->ops->weights_end(be, maps, sizes, n);
	}
	m->load_seconds = ms_now_s() - t0;
	return 0;
}

void ms_model_free(struct ms_model *m)
{
	if (!m)
		return;
	if (m->ops && m->impl)
		m->ops->unload(m);
	ms_checkpoint_close(&m->ck);
	ms_quant_config_free(&m->qcfg);
	ms_model_config_free(&m->cfg);
	memset(m, 0, sizeof(*m));
}

const struct ms_qlinear *ms_model_find_linear(const struct ms_model *m, const char *name)
{
	return m->ops && m->ops->find_linear ? m->ops->find_linear(m, name) : NULL;
}

int ms_seq_init(struct ms_seq *s, struct ms_model *m, int64_t capacity, struct ms_err *err)
{
	memset(s, 0, sizeof(*s));
	if (capacity <= 0 || capacity > m->cfg.max_pos)
		return ms_err_set(err, -EINVAL,
				  "context of %lld tokens is outside [1, max_position_embeddings = %lld]",
				  (long long)capacity, (long long)m->cfg.max_pos);
	int64_t pages = ms_kv_geom_seq_pages(&m->lm.kv, capacity, MS_SEQ_CHUNK);
	int rc = ms_kv_dtype_check(m->be, m->lm.kv.dtype, err);
	if (!rc)
		rc = ms_kv_pool_init(&s->pool, m->be, (int32_t)pages, MS_KV_PAGE_TOKENS,
				     m->cfg.n_kv_heads * m->cfg.head_dim, m->cfg.head_dim,
				     m->lm.kv.dtype, err);
	if (!rc)
		rc = ms_kv_seq_init(&s->kv, (int)m->cfg.n_layers, capacity, MS_KV_PAGE_TOKENS, err);
	if (!rc) {
		s->pos = malloc(MS_SEQ_CHUNK * sizeof(*s->pos));
		s->rows = malloc(MS_SEQ_CHUNK * sizeof(*s->rows));
		s->seq = calloc(MS_SEQ_CHUNK, sizeof(*s->seq));
		if (!s->pos || !s->rows || !s->seq)
			rc = ms_err_set(err, -ENOMEM, "sequence: out of memory");
	}
	if (rc) {
		ms_kv_seq_free(&s->kv, &s->pool);
		ms_kv_pool_free(&s->pool);
		free(s->pos), free(s->rows), free(s->seq);
		memset(s, 0, sizeof(*s));
		return rc;
	}
	s->model = m;
	s->capacity = capacity;
	return 0;
}

void ms_seq_free(struct ms_seq *s)
{
	if (!s || !s->model)
		return;
	ms_kv_seq_free(&s->kv, &s->pool);
	ms_kv_pool_free(&s->pool);
	free(s->pos), free(s->rows), free(s->seq);
	memset(s, 0, sizeof(*s));
}

int ms_seq_forward(struct ms_seq *s, const int32_t *tokens, int64_t n, float *logits,
		   bool all_logits, struct ms_err *err)
{
	struct ms_model *m = s->model;
	if (n <= 0)
		return ms_err_set(err, -EINVAL, "no tokens to process");
	if (n > s->capacity - s->n_past)
		return ms_err_set(err, -ENOSPC,
				  "%lld tokens do not fit: %lld of the context's %lld positions are used",
				  (long long)n, (long long)s->n_past, (long long)s->capacity);
	for (int64_t i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab)
			return ms_err_set(err, -EINVAL, "token id %d at index %lld is outside [0, %lld)",
					  tokens[i], (long long)i, (long long)m->cfg.vocab);
	int64_t C = n < MS_SEQ_CHUNK ? n : MS_SEQ_CHUNK;
	int64_t *pos = s->pos, *rows = s->rows;
	int32_t *seq = s->seq;
	int rc = 0;
	struct ms_kv_seq *kv = &s->kv;
	for (int64_t i = 0; !rc && i < n; i += C) {
		int64_t cn = n - i < C ? n - i : C;
		bool last = i + cn == n;
		if (ms_kv_seq_reserve(kv, &s->pool, cn)) {
			rc = ms_err_set(err, -ENOSPC, "KV cache: no page left");
			break;
		}
		for (int64_t t = 0; t < cn; t++) {
			pos[t] = s->n_past + t;
			rows[t] = t;
		}
		struct ms_batch b = {
			.n = cn, .tokens = tokens + i, .pos = pos, .seq = seq, .kv = &kv,
			.pool = &s->pool,
			/* all rows, or the last row of the last chunk, or none */
			.logit_rows = all_logits ? rows : rows + cn - 1,
			.n_logits = all_logits ? cn : (last ? 1 : 0),
		};
		rc = m->ops->forward_batch(m, &b, all_logits ? logits + i * m->cfg.vocab : logits, err);
		if (rc)
			break;
		s->n_past += cn;
		kv->len = s->n_past;
		ms_kv_geom_trim(&m->lm.kv, kv, &s->pool, s->n_past);
	}
	return rc;
}
