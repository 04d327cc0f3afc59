/*
 * quant.c: the method registry and what all schemes share.
 */
#include "quant.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The registry. To add a method: one line here, one file beside this one. */
static const struct ms_quant_method *const methods[] = {
	&ms_quant_none,
	&ms_quant_mxfp4,
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

static int parse_not_convert(struct ms_quant_config *qc, const cJSON *q, struct ms_err *err)
{
	const cJSON *nc = cJSON_GetObjectItemCaseSensitive(q, "modules_to_not_convert");
	if (!nc || cJSON_IsNull(nc))
		return 0;
	if (!cJSON_IsArray(nc))
		return ms_err_set(err, -EINVAL,
				  "config.json: \"quantization_config.modules_to_not_convert\" must be a list");
	int n = cJSON_GetArraySize(nc);
	qc->not_convert = calloc((size_t)n + 1, sizeof(char *));
	if (!qc->not_convert)
		return ms_err_set(err, -ENOMEM, "out of memory");
	const cJSON *it;
	cJSON_ArrayForEach(it, nc) {
		if (!cJSON_IsString(it))
			return ms_err_set(err, -EINVAL,
					  "config.json: \"quantization_config.modules_to_not_convert[%d]\" "
					  "is not a string", qc->n_not_convert);
		if (!(qc->not_convert[qc->n_not_convert++] = strdup(it->valuestring)))
			return ms_err_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

int ms_quant_config_init(struct ms_quant_config *qc, const cJSON *root, struct ms_err *err)
{
	memset(qc, 0, sizeof(*qc));
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
	if (q && cJSON_IsNull(q))
		q = NULL;
	const char *name = "none";
	if (q) {
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
		if (!cJSON_IsObject(q) || !cJSON_IsString(m))
			return ms_err_set(err, -EINVAL,
					  "config.json: \"quantization_config.quant_method\" is missing or "
					  "not a string");
		name = m->valuestring;
	}
	for (size_t i = 0; i < N_METHODS; i++) {
		if (strcmp(methods[i]->name, name))
			continue;
		qc->method = methods[i];
		int rc = q ? parse_not_convert(qc, q, err) : 0;
		if (!rc && qc->method->parse)
			rc = qc->method->parse(qc, q, err);
		if (rc)
			ms_quant_config_free(qc);
		return rc;
	}
	return ms_err_set(err, -ENOTSUP,
			  "config.json: unknown \"quantization_config.quant_method\" \"%s\" (known: %s)",
			  name, ms_quant_method_names());
}

void ms_quant_config_free(struct ms_quant_config *qc)
{
	if (!qc)
		return;
	if (qc->method && qc->method->free)
		qc->method->free(qc);
	for (int i = 0; i < qc->n_not_convert; i++)
		free(qc->not_convert[i]);
	free(qc->not_convert);
	memset(qc, 0, sizeof(*qc));
}

bool ms_quant_not_converted(const struct ms_quant_config *qc, const char *module)
{
	for (int i = 0; i < qc->n_not_convert; i++) {
		const char *p = qc->not_convert[i];
		size_t pl = strlen(p);
		char sub[512];
		/* the module itself, or anything inside it */
		if (fnmatch(p, module, 0) == 0)
			return true;
		if (strncmp(module, p, pl) == 0 && module[pl] == '.')
			return true;
		snprintf(sub, sizeof(sub), "%s.*", p);
		if (fnmatch(sub, module, 0) == 0)
			return true;
	}
	return false;
}

static int load_via(const struct ms_quant_config *qc, const char *prefix, enum ms_qkind kind,
		    const struct ms_quant_scheme **s, struct ms_err *err)
{
	int rc = qc->method->scheme_for(qc, prefix, kind, s, err);
	if (!rc && !(kind == MS_QKIND_LINEAR ? (*s)->load_linear != NULL : (*s)->load_moe != NULL))
		rc = ms_err_set(err, -ENOTSUP, "%s: scheme %s cannot load a %s", prefix, (*s)->name,
				kind == MS_QKIND_LINEAR ? "linear layer" : "MoE layer");
	return rc;
}

int ms_quant_load_linear(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			 const char *prefix, int64_t out, int64_t in, bool has_bias,
			 struct ms_backend *be, struct ms_qlinear *l, struct ms_err *err)
{
	const struct ms_quant_scheme *s;
	memset(l, 0, sizeof(*l));
	int rc = load_via(qc, prefix, MS_QKIND_LINEAR, &s, err);
	if (!rc)
		rc = s->load_linear(qc, ck, prefix, out, in, has_bias, be, l, err);
	if (rc) {
		ms_qlinear_free(l);
		return rc;
	}
	l->scheme = s->name;
	return 0;
}

int ms_quant_load_moe(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
		      const char *prefix, int64_t n_experts, int64_t hidden, int64_t inter,
		      struct ms_backend *be, struct ms_qmoe *m, struct ms_err *err)
{
	const struct ms_quant_scheme *s;
	memset(m, 0, sizeof(*m));
	int rc = load_via(qc, prefix, MS_QKIND_MOE, &s, err);
	if (!rc)
		rc = s->load_moe(qc, ck, prefix, n_experts, hidden, inter, be, m, err);
	if (rc) {
		ms_qmoe_free(m);
		return rc;
	}
	m->scheme = s->name;
	return 0;
}

int ms_qmoe_init(struct ms_qmoe *m, const struct ms_checkpoint *ck, const char *prefix,
		 int64_t E, int64_t H, int64_t I, struct ms_err *err)
{
	char name[512];
	int rc;
	m->n_experts = E;
	m->hidden = H;
	m->inter = I;
	snprintf(name, sizeof(name), "%s.gate_up_proj_bias", prefix);
	if ((rc = ms_checkpoint_get_f32(ck, name, 2, (int64_t[]){E, 2 * I}, &m->gate_up_bias, err)))
		return rc;
	snprintf(name, sizeof(name), "%s.down_proj_bias", prefix);
	if ((rc = ms_checkpoint_get_f32(ck, name, 2, (int64_t[]){E, H}, &m->down_bias, err)))
		return rc;
	m->gate_up = calloc((size_t)E, sizeof(*m->gate_up));
	m->down = calloc((size_t)E, sizeof(*m->down));
	if (!m->gate_up || !m->down)
		return ms_err_set(err, -ENOMEM, "%s: out of memory", prefix);
	return 0;
}

void ms_qlinear_free(struct ms_qlinear *l)
{
	if (!l)
		return;
	free(l->bias);
	free(l->owned);
	memset(l, 0, sizeof(*l));
}

void ms_qmoe_free(struct ms_qmoe *m)
{
	if (!m)
		return;
	free(m->gate_up);
	free(m->down);
	free(m->gate_up_bias);
	free(m->down_bias);
	free(m->owned);
	memset(m, 0, sizeof(*m));
}

void ms_qlinear_apply(struct ms_backend *be, const struct ms_qlinear *l, const float *x,
		      int64_t n, float *y)
{
	ms_backend_gemm(be, l->kernel, &l->w, x, n, y, l->bias);
}
