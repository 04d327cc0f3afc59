/* model-config: config.json as models/model.c reads it (held to RFC
 * 8259 by ms_json_parse_rfc, then ms_model_config_from_json and
 * ms_quant_config_init on the one tree),
 * with every quantization_config form quant/ takes (mxfp4, GPTQ with
 * dynamic rules, AWQ, Quark with its layer and exclude patterns). Input:
 * config.json, then optionally FUZZ_SEP and a standalone
 * quantize_config.json (older GPTQ/AWQ). Each parsed method is then asked
 * for the scheme of GPT-OSS's modules on a checkpoint that has a qweight
 * for some of them. */
#include "fuzz.h"
#include "model-config.h"
#include "ms-json.h"
#include "quant.h"
#include "safetensors.h"

#include <cjson/cJSON.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	(void)fuzz_dir();
	return 0;
}

static const char *const modules[] = {
	"lm_head", "model.embed_tokens",
	"model.layers.0.mlp.experts", "model.layers.0.mlp.router",
	"model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.o_proj",
	"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.experts.0.gate_up_proj",
	"model.layers.1.self_attn.v_proj", "model.layers.23.mlp.experts.31.down_proj",
};

/* What the methods resolve for every module, as a load would ask. */
static void resolve_all(const struct ms_quant_config *qc)
{
	/* a checkpoint with a qweight for some modules (sorted by name) */
	static struct ms_tensor tensors[] = {
		{.name = "model.layers.0.self_attn.q_proj.qweight"},
		{.name = "model.layers.1.mlp.experts.0.gate_up_proj.qweight"},
		{.name = "model.layers.1.self_attn.v_proj.qweight"},
	};
	struct ms_checkpoint ck = {.dir = "fuzz", .tensors = tensors, .n_tensors = 3};
	for (size_t i = 0; i < sizeof(modules) / sizeof(*modules); i++) {
		for (int k = 0; k < 2; k++) {
			const struct ms_quant_scheme *s = NULL;
			struct ms_err err = {0};
			enum ms_qkind kind = k ? MS_QKIND_MOE : MS_QKIND_LINEAR;
			int rc = qc->method->scheme_for(qc, &ck, modules[i], kind, &s, &err);
			FUZZ_CHECK(rc ? err.msg[0] != 0 : s != NULL, "%s: scheme_for %d", modules[i], rc);
		}
		bool hit;
		struct ms_err err = {0};
		if (ms_quant_not_converted(qc, modules[i], &hit, &err))
			FUZZ_CHECK(err.msg[0] != 0, "%s: not_converted without a message", modules[i]);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *cfg_text, *standalone;
	size_t n = size, cfg_len, st_len;
	fuzz_part(&p, &n, &cfg_text, &cfg_len);
	if (fuzz_part(&p, &n, &standalone, &st_len))
		fuzz_file("quantize_config.json", standalone, st_len);
	else
		fuzz_file("quantize_config.json", NULL, 0);
	/* as models/model.c reads it: the file's bytes held to RFC 8259, then
	 * one tree for the model config and the quantization registry */
	cJSON *root = NULL;
	char msg[sizeof(((struct ms_err *)0)->msg)] = "";
	int rc = ms_json_parse_rfc((const char *)cfg_text, cfg_len, 0, &root, msg, sizeof(msg));
	if (rc) {
		FUZZ_CHECK(!root && msg[0], "JSON refused (%d) without a message", rc);
		return 0;
	}
	struct ms_model_config cfg;
	struct ms_err err = {0};
	rc = ms_model_config_from_json(&cfg, root, &err);
	if (!rc) {
		FUZZ_CHECK(cfg.n_layers > 0 && cfg.layer_sliding, "parsed without layers");
		ms_model_config_free(&cfg);
	} else {
		FUZZ_CHECK(err.msg[0], "config refused (%d) without a message", rc);
	}
	/* the quantization config is read whatever the model config said */
	struct ms_quant_config qc;
	memset(&err, 0, sizeof(err));
	rc = ms_quant_config_init(&qc, root, fuzz_dir(), &err);
	if (!rc) {
		FUZZ_CHECK(qc.method && qc.method->scheme_for, "no method");
		resolve_all(&qc);
	} else {
		FUZZ_CHECK(err.msg[0], "quant config refused (%d) without a message", rc);
	}
	ms_quant_config_free(&qc);
	cJSON_Delete(root);
	return 0;
}
