/*
 * mxfp4.c: the native MXFP4 of the original gpt-oss release
 * (quantization_config {"quant_method": "mxfp4", "modules_to_not_convert": [...]}).
 *
 * Only the experts are MXFP4, as in transformers' integration: per layer
 * gate_up_proj_blocks [E, 2I, G_H, 16] and _scales [E, 2I, G_H], and
 * down_proj_blocks [E, H, G_I, 16] and _scales [E, H, G_I] (U8), blocked
 * along the input axis of the [out, in] matrix, low nibble first, one E8M0
 * scale per 32 inputs; biases stay BF16. G_K = ceil(K / 32): real checkpoints
 * have K % 32 == 0; for other K the last group is zero-padded. That layout is
 * already one [out, in] row per output, so the kernels read it in place.
 * Everything else, and experts that modules_to_not_convert names, loads
 * through the unquantized scheme.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

static int load_moe(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
		    const char *prefix, int64_t E, int64_t H, int64_t I, struct ms_qload *ld,
		    struct ms_qmoe *m, struct ms_err *err)
{
	(void)qc;
	char name[512];
	const struct ms_tensor *gub, *gus, *dnb, *dns;
	int64_t gh = (H + 31) / 32, gi = (I + 31) / 32;
	int rc;
	snprintf(name, sizeof(name), "%s.gate_up_proj_blocks", prefix);
	if ((rc = ms_checkpoint_get(ck, name, MS_DTYPE_U8, 4, (int64_t[]){E, 2 * I, gh, 16}, &gub, err)))
		return rc;
	snprintf(name, sizeof(name), "%s.gate_up_proj_scales", prefix);
	if ((rc = ms_checkpoint_get(ck, name, MS_DTYPE_U8, 3, (int64_t[]){E, 2 * I, gh}, &gus, err)))
		return rc;
	snprintf(name, sizeof(name), "%s.down_proj_blocks", prefix);
	if ((rc = ms_checkpoint_get(ck, name, MS_DTYPE_U8, 4, (int64_t[]){E, H, gi, 16}, &dnb, err)))
		return rc;
	snprintf(name, sizeof(name), "%s.down_proj_scales", prefix);
	if ((rc = ms_checkpoint_get(ck, name, MS_DTYPE_U8, 3, (int64_t[]){E, H, gi}, &dns, err)))
		return rc;
	if ((rc = ms_qmoe_init_fused(m, ck, prefix, E, H, I, err)))
		return rc;
	/* E8M0 0xFF is NaN in OCP MX: refuse it rather than compute 2^128. */
	const struct ms_tensor *sc[2] = {gus, dns};
	for (int i = 0; i < 2; i++)
		if (memchr(sc[i]->data, 0xFF, sc[i]->nbytes))
			return ms_err_set(err, -EBADMSG,
					  "%s: tensor \"%s\" holds the E8M0 byte 0xFF (NaN scale)",
					  ms_checkpoint_file_of(ck, sc[i]), i ? "down_proj_scales"
									      : "gate_up_proj_scales");
	const uint8_t *gb = gub->data, *gs = gus->data, *db = dnb->data, *ds = dns->data;
	for (int64_t e = 0; e < E; e++) {
		m->gate_up[e].lin.w = (struct ms_wmat){
			.fmt = MS_WFMT_MXFP4, .rows = 2 * I, .cols = H,
			.w = gb + (size_t)(e * 2 * I * gh * 16), .row_bytes = (size_t)gh * 16,
			.scales = gs + (size_t)(e * 2 * I * gh), .scale_row_bytes = (size_t)gh};
		m->down[e].lin.w = (struct ms_wmat){
			.fmt = MS_WFMT_MXFP4, .rows = H, .cols = I,
			.w = db + (size_t)(e * H * gi * 16), .row_bytes = (size_t)gi * 16,
			.scales = ds + (size_t)(e * H * gi), .scale_row_bytes = (size_t)gi};
		if ((rc = ms_qlinear_set_kernel(&m->gate_up[e], ld, prefix, err)) ||
		    (rc = ms_qlinear_set_kernel(&m->down[e], ld, prefix, err)))
			return rc;
	}
	return 0;
}

const struct ms_quant_scheme ms_scheme_mxfp4 = {
	.name = "mxfp4",
	.load_moe = load_moe,
};

static int mxfp4_scheme_for(const struct ms_quant_config *qc, const struct ms_checkpoint *ck,
			    const char *prefix, enum ms_qkind kind,
			    const struct ms_quant_scheme **out, struct ms_err *err)
{
	(void)ck;
	bool keep = true;
	*out = &ms_scheme_unquantized;
	int rc = kind == MS_QKIND_MOE ? ms_quant_not_converted(qc, prefix, &keep, err) : 0;
	if (!rc && !keep)
		*out = &ms_scheme_mxfp4;
	return rc;
}

const struct ms_quant_method ms_quant_mxfp4 = {
	.name = "mxfp4",
	.scheme_for = mxfp4_scheme_for,
};
