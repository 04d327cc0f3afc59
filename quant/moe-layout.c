/*
 * moe-layout.c: GPT-OSS experts as the producers in the wild store them,
 * all mapped to the one layout of struct ms_qmoe (per expert, gate_up
 * [2I, H] with gate on even rows, up on odd rows; down [H, I]).
 *
 * The family is recognised from tensor names under prefix
 * (model.layers.N.mlp.experts), see ../shared/docs/quant-formats.md §5:
 *
 *   hf-fused        .gate_up_proj[_blocks] 3-D tensors (HF bf16, OpenAI MXFP4):
 *                   loaded by the method's MoE scheme.
 *   per-expert      .E.gate_up_proj.* and .E.down_proj.* (Quark, per-expert
 *                   GPTQ): [2I, H] already interleaved.
 *   defuser-halves  .E.gate_proj.*, .E.up_proj.*, .E.down_proj.* (GPTQModel
 *                   with Defuser): gate_proj is the FIRST half of the
 *                   interleaved rows and up_proj the second half, not the
 *                   true gate and up; concatenated they are gate_up again.
 *   gptqmodel-old   .gate_up.E.* and .down.E.*: [2I, H] interleaved.
 *   llmc-true       .experts.E.gate_proj.* and .up_proj.* (llm-compressor):
 *                   the true gate and up, interleaved back row by row.
 *
 * Each per-expert module loads through ms_quant_load_linear, so every
 * method (and Quark's per-layer configs) applies to experts as to any
 * linear layer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

int ms_qmoe_init_fused(struct ms_qmoe *m, const struct ms_checkpoint *ck, const char *prefix,
		       int64_t E, int64_t H, int64_t I, struct ms_err *err)
{
	char name[512];
	float *gub = NULL, *dnb = NULL;
	int rc;
	m->n_experts = E;
	m->hidden = H;
	m->inter = I;
	m->gate_up = calloc((size_t)E, sizeof(*m->gate_up));
	m->down = calloc((size_t)E, sizeof(*m->down));
	if (!m->gate_up || !m->down)
		return ms_err_set(err, -ENOMEM, "%s: out of memory", prefix);
	snprintf(name, sizeof(name), "%s.gate_up_proj_bias", prefix);
	if ((rc = ms_checkpoint_get_f32(ck, name, 2, (int64_t[]){E, 2 * I}, &gub, err)))
		return rc;
	snprintf(name, sizeof(name), "%s.down_proj_bias", prefix);
	if ((rc = ms_checkpoint_get_f32(ck, name, 2, (int64_t[]){E, H}, &dnb, err))) {
		free(gub);
		return rc;
	}
	for (int64_t e = 0; e < E && !rc; e++) {
		m->gate_up[e].lin.bias = malloc((size_t)(2 * I) * sizeof(float));
		m->down[e].lin.bias = malloc((size_t)H * sizeof(float));
		if (!m->gate_up[e].lin.bias || !m->down[e].lin.bias) {
			rc = ms_err_set(err, -ENOMEM, "%s: out of memory", prefix);
			break;
		}
		memcpy(m->gate_up[e].lin.bias, gub + e * 2 * I, (size_t)(2 * I) * sizeof(float));
		memcpy(m->down[e].lin.bias, dnb + e * H, (size_t)H * sizeof(float));
	}
	free(gub);
	free(dnb);
	return rc;
}

enum layout {
	LAYOUT_HF_FUSED,
	LAYOUT_PER_EXPERT,
	LAYOUT_DEFUSER,
	LAYOUT_GPTQMODEL_OLD,
	LAYOUT_LLMC,
};

static const char *const layout_names[] = {
	[LAYOUT_HF_FUSED] = "hf-fused",
	[LAYOUT_PER_EXPERT] = "per-expert",
	[LAYOUT_DEFUSER] = "defuser-halves",
	[LAYOUT_GPTQMODEL_OLD] = "gptqmodel-old",
	[LAYOUT_LLMC] = "llmc-true",
};

static int detect(const struct ms_checkpoint *ck, const char *prefix, enum layout *out,
		  struct ms_err *err)
{
	static const struct {
		const char *fmt;
		enum layout l;
	} probes[] = {
		{"%s.gate_up_proj", LAYOUT_HF_FUSED},     /* also _blocks, _scales, _bias */
		{"%s.0.gate_up_proj.", LAYOUT_PER_EXPERT},
		{"%s.0.gate_proj.", LAYOUT_DEFUSER},
		{"%s.gate_up.0.", LAYOUT_GPTQMODEL_OLD},
		{"%s.experts.0.gate_proj.", LAYOUT_LLMC},
	};
	char p[512];
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
		snprintf(p, sizeof(p), probes[i].fmt, prefix);
		if (ms_quant_has_prefix(ck, p)) {
			*out = probes[i].l;
			return 0;
		}
	}
	return ms_err_set(err, -ENOENT,
			  "%s: no expert tensors found (looked for %s.gate_up_proj[_blocks], "
			  "%s.0.gate_up_proj.*, %s.0.gate_proj.*, %s.gate_up.0.*, %s.experts.0.gate_proj.*)",
			  ck->dir ? ck->dir : "checkpoint", prefix, prefix, prefix, prefix, prefix);
}

/* Load `a_name` and `b_name` ([I, H] each) and splice them into gate_up. */
static int load_split(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
		      const char *a_name, const char *b_name, int64_t H, int64_t I, bool interleave,
		      struct ms_qload *ld, struct ms_qlinear *gu, struct ms_err *err)
{
	struct ms_qlinear a, b;
	int64_t *map = malloc((size_t)(2 * I) * sizeof(int64_t));
	if (!map)
		return ms_err_set(err, -ENOMEM, "out of memory");
	/* The parts only live until they are spliced: pack the result, not them. */
	ld->no_pack++;
	int rc = ms_quant_load_linear(qc, ck, a_name, MS_QKIND_LINEAR, I, H, true, ld, &a, err);
	if (!rc) {
		rc = ms_quant_load_linear(qc, ck, b_name, MS_QKIND_LINEAR, I, H, true, ld, &b, err);
		if (rc)
			ms_qlinear_free(&a);
	}
	ld->no_pack--;
	if (rc) {
		free(map);
		return rc;
	}
	for (int64_t i = 0; i < 2 * I; i++) {
		if (interleave) /* true gate j -> row 2j, true up j -> row 2j+1 */
			map[i] = (i % 2 == 0) ? i / 2 : -(i / 2) - 1;
		else            /* halves of the interleaved rows, one after the other */
			map[i] = i < I ? i : -(i - I) - 1;
	}
	rc = ms_qlinear_splice_rows(gu, &a, &b, map, 2 * I, a_name, err);
	if (!rc && (rc = ms_qlinear_set_kernel(gu, ld, a_name, err)))
		ms_qlinear_free(gu);
	ms_qlinear_free(&a);
	ms_qlinear_free(&b);
	free(map);
	return rc;
}

/* The backend's view of the experts (m->w): pointers to each expert's
 * ms_linear, which stay where they are from here on. */
static int make_view(struct ms_qmoe *m, const char *prefix, struct ms_err *err)
{
	int64_t E = m->n_experts;
	m->w = (struct ms_moe_w){.n_experts = E, .hidden = m->hidden, .inter = m->inter};
	m->w.gate_up = malloc((size_t)E * sizeof(*m->w.gate_up));
	m->w.down = malloc((size_t)E * sizeof(*m->w.down));
	if (!m->w.gate_up || !m->w.down) {
		ms_qmoe_free(m);
		return ms_err_set(err, -ENOMEM, "%s: out of memory", prefix);
	}
	for (int64_t e = 0; e < E; e++) {
		m->w.gate_up[e] = &m->gate_up[e].lin;
		m->w.down[e] = &m->down[e].lin;
	}
	return 0;
}

int ms_quant_load_moe(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
		      const char *prefix, int64_t E, int64_t H, int64_t I, struct ms_qload *ld,
		      struct ms_qmoe *m, struct ms_err *err)
{
	enum layout lay = LAYOUT_HF_FUSED;
	memset(m, 0, sizeof(*m));
	int rc = detect(ck, prefix, &lay, err);
	if (rc)
		return rc;
	if (lay == LAYOUT_HF_FUSED) {
		const struct ms_quant_scheme *s;
		rc = qc->method->scheme_for(qc, ck, prefix, MS_QKIND_MOE, &s, err);
		if (!rc && !s->load_moe)
			rc = ms_err_set(err, -ENOTSUP,
					"%s: 3-D expert tensors, but scheme %s stores experts per expert",
					prefix, s->name);
		if (!rc)
			rc = s->load_moe(qc, ck, prefix, E, H, I, ld, m, err);
		if (rc) {
			ms_qmoe_free(m);
			return rc;
		}
		m->scheme = s->name;
		for (int64_t e = 0; e < E; e++)
			m->gate_up[e].scheme = m->down[e].scheme = s->name;
		m->layout = layout_names[lay];
		return make_view(m, prefix, err);
	}
	m->n_experts = E;
	m->hidden = H;
	m->inter = I;
	m->layout = layout_names[lay];
	m->gate_up = calloc((size_t)E, sizeof(*m->gate_up));
	m->down = calloc((size_t)E, sizeof(*m->down));
	if (!m->gate_up || !m->down) {
		ms_qmoe_free(m);
		return ms_err_set(err, -ENOMEM, "%s: out of memory", prefix);
	}
	char a[512], b[512], d[512];
	for (int64_t e = 0; e < E && !rc; e++) {
		switch (lay) {
		case LAYOUT_PER_EXPERT:
			snprintf(a, sizeof(a), "%s.%lld.gate_up_proj", prefix, (long long)e);
			snprintf(d, sizeof(d), "%s.%lld.down_proj", prefix, (long long)e);
			break;
		case LAYOUT_GPTQMODEL_OLD:
			snprintf(a, sizeof(a), "%s.gate_up.%lld", prefix, (long long)e);
			snprintf(d, sizeof(d), "%s.down.%lld", prefix, (long long)e);
			break;
		case LAYOUT_DEFUSER:
			snprintf(a, sizeof(a), "%s.%lld.gate_proj", prefix, (long long)e);
			snprintf(b, sizeof(b), "%s.%lld.up_proj", prefix, (long long)e);
			snprintf(d, sizeof(d), "%s.%lld.down_proj", prefix, (long long)e);
			break;
		case LAYOUT_LLMC:
		default:
			snprintf(a, sizeof(a), "%s.experts.%lld.gate_proj", prefix, (long long)e);
			snprintf(b, sizeof(b), "%s.experts.%lld.up_proj", prefix, (long long)e);
			snprintf(d, sizeof(d), "%s.experts.%lld.down_proj", prefix, (long long)e);
			break;
		}
		if (lay == LAYOUT_PER_EXPERT || lay == LAYOUT_GPTQMODEL_OLD)
			rc = ms_quant_load_linear(qc, ck, a, MS_QKIND_LINEAR, 2 * I, H, true, ld,
						  &m->gate_up[e], err);
		else
			rc = load_split(qc, ck, a, b, H, I, lay == LAYOUT_LLMC, ld, &m->gate_up[e], err);
		if (!rc)
			rc = ms_quant_load_linear(qc, ck, d, MS_QKIND_LINEAR, H, I, true, ld,
						  &m->down[e], err);
	}
	if (rc) {
		ms_qmoe_free(m);
		return rc;
	}
	m->scheme = m->gate_up[0].scheme;
	return make_view(m, prefix, err);
}
