/* model.c: the architecture registry and the architecture-neutral parts. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static double now_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ms_model_load(struct ms_model *m, const char *dir, struct ms_backend *be, struct ms_err *err)
{
	memset(m, 0, sizeof(*m));
	double t0 = now_seconds();
	char path[4096], *text;
	snprintf(path, sizeof(path), "%s/config.json", dir);
	int rc = ms_read_file(path, &text, NULL, err);
	if (rc)
		return rc;
	rc = ms_model_config_parse(&m->cfg, text, err);
	if (!rc) {
		/* The quant registry reads the same document. */
		cJSON *root = cJSON_Parse(text);
		rc = root ? ms_quant_config_init(&m->qcfg, root, dir, err)
			  : ms_err_set(err, -EINVAL, "config.json: invalid JSON");
		cJSON_Delete(root);
	}
	free(text);
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
	m->be = be;
	if ((rc = ms_checkpoint_open(&m->ck, dir, err)) || (rc = m->ops->load(m, err))) {
		ms_model_free(m);
		return rc;
	}
	m->load_seconds = now_seconds() - t0;
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
	int rc = m->ops->seq_init(m, capacity, &s->state, err);
	if (rc)
		return rc;
	s->model = m;
	s->capacity = capacity;
	return 0;
}

void ms_seq_free(struct ms_seq *s)
{
	if (!s || !s->model)
		return;
	s->model->ops->seq_free(s->model, s->state);
	memset(s, 0, sizeof(*s));
}

int ms_seq_forward(struct ms_seq *s, const int32_t *tokens, int64_t n, float *logits,
		   bool all_logits, struct ms_err *err)
{
	if (n <= 0)
		return ms_err_set(err, -EINVAL, "no tokens to process");
	if (n > s->capacity - s->n_past)
		return ms_err_set(err, -ENOSPC,
				  "%lld tokens do not fit: %lld of the context's %lld positions are used",
				  (long long)n, (long long)s->n_past, (long long)s->capacity);
	for (int64_t i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= s->model->cfg.vocab)
			return ms_err_set(err, -EINVAL, "token id %d at index %lld is outside [0, %lld)",
					  tokens[i], (long long)i, (long long)s->model->cfg.vocab);
	int rc = s->model->ops->forward(s->model, s->state, s->n_past, tokens, n, logits, all_logits,
					err);
	if (!rc)
		s->n_past += n;
	return rc;
}
