/*
 * test-quant.c: the quantization registry's configs: every refusal names
 * the field and the value; config sources (config.json, quantize_config.json,
 * quant_config.json); Quark's per-layer resolution order; GPTQModel's
 * dynamic rules; activation quantization (FP8, MXFP4) on hand-checked values;
 * the schemes' copy buffers (ms_quant_buf_alloc).
 * Loading real tensors is covered by tests/quant/quant_golden.py.
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actq.h"
#include "check-run.h"
#include "cpu.h"
#include "quant.h"

/* ms_quant_not_converted for names that cannot make it fail */
static bool not_converted(const struct ms_quant_config *qc, const char *module)
{
	bool hit;
	struct ms_err err = {0};
	ck_assert_msg(ms_quant_not_converted(qc, module, &hit, &err) == 0, "%s", err.msg);
	return hit;
}

static int init_from(const char *json, struct ms_quant_config *qc, struct ms_err *err)
{
	cJSON *root = cJSON_Parse(json);
	ck_assert_msg(root != NULL, "bad test JSON: %s", json);
	int rc = ms_quant_config_init(qc, root, NULL, err);
	cJSON_Delete(root);
	return rc;
}

/* Refused, with every needle in the message. */
static void refused(const char *json, ...)
{
	struct ms_quant_config qc;
	struct ms_err err = {0};
	int rc = init_from(json, &qc, &err);
	ck_assert_msg(rc < 0, "accepted: %s", json);
	ck_assert_ptr_null(qc.method);
	va_list ap;
	va_start(ap, json);
	for (const char *s; (s = va_arg(ap, const char *));)
		ck_assert_msg(strstr(err.msg, s), "message \"%s\" lacks \"%s\"", err.msg, s);
	va_end(ap);
}

static void accepted(const char *json, const char *method)
{
	struct ms_quant_config qc;
	struct ms_err err = {0};
	int rc = init_from(json, &qc, &err);
	ck_assert_msg(rc == 0, "refused (%s): %s", err.msg, json);
	ck_assert_str_eq(qc.method->name, method);
	ms_quant_config_free(&qc);
}

#define QC(body) "{\"quantization_config\":" body "}"

START_TEST(gptq_config)
{
	accepted(QC("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128}"), "gptq");
	accepted(QC("{\"quant_method\":\"gptq\",\"bits\":3,\"group_size\":-1,\"desc_act\":true,"
		    "\"sym\":false,\"checkpoint_format\":\"gptq_v2\"}"), "gptq");
	accepted(QC("{\"quant_method\":\"gptq\",\"bits\":8,\"group_size\":32,\"format\":\"gptq\","
		    "\"pack_dtype\":\"int32\",\"meta\":{\"static_groups\":true,\"true_sequential\":true},"
		    "\"dynamic\":{\"-:.*router.*\":{},\"+:.*experts.*\":{\"bits\":8}}}"), "gptq");
	refused(QC("{\"quant_method\":\"gptq\",\"bits\":5,\"group_size\":128}"), "\"bits\"", "5",
		"2, 3, 4, 8", NULL);
	refused(QC("{\"quant_method\":\"gptq\",\"group_size\":128}"), "\"bits\"", NULL);
	refused(QC("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":0}"), "\"group_size\"", "0",
		NULL);
	refused(QC("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,"
		   "\"checkpoint_format\":\"marlin\"}"), "\"checkpoint_format\"", "\"marlin\"",
		"gptq_v2", NULL);
	refused(QC("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,\"format\":\"bitblas\"}"),
		"\"format\"", "\"bitblas\"", NULL);
	refused(QC("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,"
		   "\"is_marlin_format\":true}"), "is_marlin_format", NULL);
	refused(QC("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,\"pack_dtype\":\"int16\"}"),
		"\"pack_dtype\"", "\"int16\"", NULL);
	refused(QC("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,"
		   "\"dynamic\":{\"+:.*\":{\"damp_percent\":0.1}}}"), "dynamic", "damp_percent", NULL);
	refused(QC("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,"
		   "\"dynamic\":{\"+:.*experts.*\":{\"bits\":6}}}"), "dynamic", "\"bits\"", "6", NULL);
	refused(QC("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128,"
		   "\"dynamic\":{\"-:([\":{}}}"), "dynamic", "([", NULL);
	refused(QC("{\"quant_method\":\"gptq\",\"bits\":4.5,\"group_size\":128}"), "\"bits\"", NULL);
}
END_TEST

START_TEST(awq_config)
{
	accepted(QC("{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128,\"zero_point\":true,"
		    "\"version\":\"gemm\"}"), "awq");
	accepted(QC("{\"quant_method\":\"awq\",\"w_bit\":4,\"q_group_size\":64,\"zero_point\":false,"
		    "\"version\":\"GEMM\"}"), "awq");
	refused(QC("{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128,\"version\":\"gemv\"}"),
		"\"version\"", "\"gemv\"", "gemm", NULL);
	refused(QC("{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128,\"version\":\"gemv_fast\"}"),
		"\"gemv_fast\"", NULL);
	refused(QC("{\"quant_method\":\"awq\",\"bits\":8,\"group_size\":128}"), "\"bits\"", "8", NULL);
	refused(QC("{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":-1}"), "\"group_size\"", "-1",
		NULL);
	refused(QC("{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":128,\"zero_point\":\"yes\"}"),
		"\"zero_point\"", NULL);
}
END_TEST

#define QK_W4 "{\"dtype\":\"fp4\",\"qscheme\":\"per_group\",\"group_size\":32,\"is_dynamic\":false," \
	      "\"scale_format\":\"e8m0\"}"
#define QK_A8 "{\"dtype\":\"fp8_e4m3\",\"qscheme\":\"per_tensor\",\"is_dynamic\":false}"
#define QK_A8D "{\"dtype\":\"fp8_e4m3\",\"qscheme\":\"per_tensor\",\"is_dynamic\":true}"
#define QK_A4 "{\"dtype\":\"fp4\",\"qscheme\":\"per_group\",\"group_size\":32,\"is_dynamic\":true," \
	      "\"scale_format\":\"e8m0\"}"
#define QK_W8 "{\"dtype\":\"fp8_e4m3\",\"qscheme\":\"per_tensor\",\"is_dynamic\":false}"
#define QK_W8C "{\"dtype\":\"fp8_e4m3\",\"qscheme\":\"per_channel\",\"is_dynamic\":false}"
#define QK_SPEC(w, i) "{\"weight\":" w ",\"input_tensors\":" i ",\"output_tensors\":null,\"bias\":null}"
#define QK(global, extra) QC("{\"quant_method\":\"quark\",\"global_quant_config\":" global extra "}")

START_TEST(quark_config_refusals)
{
	accepted(QK(QK_SPEC(QK_W4, QK_A8), ""), "quark");
	accepted(QK(QK_SPEC(QK_W4, QK_A4), ""), "quark");
	accepted(QK(QK_SPEC(QK_W8C, QK_A8D), ""), "quark");
	accepted(QK(QK_SPEC(QK_W4, "null"), ""), "quark");
	/* the seed's checks, each violation named */
	refused(QK(QK_SPEC("{\"dtype\":\"int4\",\"qscheme\":\"per_group\",\"group_size\":32}", QK_A8), ""),
		"global_quant_config.weight.dtype", "\"int4\"", "fp4", NULL);
	refused(QK(QK_SPEC("{\"dtype\":\"fp4\",\"qscheme\":\"per_group\",\"group_size\":64,"
			   "\"scale_format\":\"e8m0\"}", QK_A8), ""),
		"weight.group_size", "64", "32", NULL);
	refused(QK(QK_SPEC("{\"dtype\":\"fp4\",\"qscheme\":\"per_group\",\"group_size\":32,"
			   "\"scale_format\":\"e4m3\"}", QK_A8), ""),
		"weight.scale_format", "\"e4m3\"", "e8m0", NULL);
	refused(QK(QK_SPEC("{\"dtype\":\"fp4\",\"qscheme\":\"per_channel\",\"group_size\":32,"
			   "\"scale_format\":\"e8m0\"}", QK_A8), ""),
		"weight.qscheme", "\"per_channel\"", NULL);
	refused(QK(QK_SPEC("{\"dtype\":\"fp4\",\"qscheme\":\"per_group\",\"group_size\":32,"
			   "\"scale_format\":\"e8m0\",\"is_dynamic\":true}", QK_A8), ""),
		"weight.is_dynamic", NULL);
	refused(QK(QK_SPEC(QK_W4, "{\"dtype\":\"fp8_e4m3\",\"qscheme\":\"per_channel\"}"), ""),
		"input_tensors.qscheme", "\"per_channel\"", NULL);
	refused(QK(QK_SPEC(QK_W4, "{\"dtype\":\"int8\",\"qscheme\":\"per_tensor\"}"), ""),
		"input_tensors.dtype", "\"int8\"", NULL);
	refused(QK(QK_SPEC(QK_W4, "{\"dtype\":\"fp4\",\"qscheme\":\"per_group\",\"group_size\":32,"
			   "\"scale_format\":\"e8m0\",\"is_dynamic\":false}"), ""),
		"input_tensors.is_dynamic", NULL);
	refused(QK(QK_SPEC(QK_W4, QK_A8D), ""), "dynamic fp8", NULL);
	refused(QK(QK_SPEC(QK_W8, QK_A4), ""), "fp4 activations", NULL);
	refused(QK(QK_SPEC("[" QK_W4 "," QK_W4 "]", QK_A8), ""), "weight", "list", NULL);
	refused(QK("{\"weight\":" QK_W4 ",\"input_tensors\":" QK_A8 ",\"output_tensors\":" QK_A8
		   ",\"bias\":null}", ""), "output_tensors", NULL);
	refused(QK("{\"weight\":" QK_W4 ",\"input_tensors\":" QK_A8 ",\"output_tensors\":null,"
		   "\"bias\":" QK_A8 "}", ""), ".bias", NULL);
	refused(QK(QK_SPEC(QK_W4, QK_A8), ",\"export\":{\"weight_format\":\"fake_quantized\"}"),
		"weight_format", "\"fake_quantized\"", NULL);
	refused(QK(QK_SPEC(QK_W4, QK_A8), ",\"exclude\":[\"re:([\"]"), "exclude[0]", "re:([", NULL);
	/* a bad entry of layer_quant_config is named with its key */
	refused(QK(QK_SPEC(QK_W4, QK_A8),
		   ",\"layer_quant_config\":{\"*q_proj\":" QK_SPEC("{\"dtype\":\"uint4\"}", "null") "}"),
		"layer_quant_config[\"*q_proj\"].weight.dtype", "\"uint4\"", NULL);
	/* a KV-cache output spec on the kv_cache_group patterns is allowed */
	accepted(QK(QK_SPEC(QK_W4, QK_A8),
		    ",\"layer_quant_config\":{\"*k_proj\":{\"weight\":" QK_W4 ",\"input_tensors\":" QK_A8
		    ",\"output_tensors\":" QK_A8 ",\"bias\":null}},"
		    "\"export\":{\"kv_cache_group\":[\"*k_proj\",\"*v_proj\"],"
		    "\"weight_format\":\"real_quantized\"}"), "quark");
}
END_TEST

static const char *scheme_of(const struct ms_quant_config *qc, const char *module)
{
	const struct ms_quant_scheme *s = NULL;
	struct ms_err err = {0};
	ck_assert_int_eq(qc->method->scheme_for(qc, NULL, module, MS_QKIND_LINEAR, &s, &err), 0);
	return s->name;
}

/* exclude, then layer_quant_config (fnmatch, first match), then
 * layer_type_quant_config (FusedMoE for experts, then Linear), then global. */
START_TEST(quark_resolution_order)
{
	struct ms_quant_config qc;
	struct ms_err err = {0};
	int rc = init_from(QK(QK_SPEC(QK_W4, QK_A8),
			      ",\"layer_quant_config\":{\"*self_attn.q_proj\":" QK_SPEC(QK_W8, QK_A8)
			      ",\"*self_attn*\":" QK_SPEC(QK_W8C, QK_A8D) "},"
			      "\"layer_type_quant_config\":{\"FusedMoE\":" QK_SPEC(QK_W4, QK_A4) "},"
			      "\"exclude\":[\"lm_head\",\"re:.*router.*\",\"model.layers.1.self_attn\","
			      "\"*.7.down_proj\"]"),
			   &qc, &err);
	ck_assert_msg(rc == 0, "%s", err.msg);
	ck_assert_str_eq(scheme_of(&qc, "lm_head"), "unquantized");
	ck_assert_str_eq(scheme_of(&qc, "model.layers.0.mlp.router"), "unquantized");
	/* the exclusion of a parent module covers its projections */
	ck_assert_str_eq(scheme_of(&qc, "model.layers.1.self_attn.q_proj"), "unquantized");
	/* first matching layer pattern wins */
	ck_assert_str_eq(scheme_of(&qc, "model.layers.0.self_attn.q_proj"), "quark-w8a8-static");
	ck_assert_str_eq(scheme_of(&qc, "model.layers.0.self_attn.k_proj"), "quark-w8a8-dynamic");
	/* experts: type config FusedMoE beats global */
	ck_assert_str_eq(scheme_of(&qc, "model.layers.0.mlp.experts.3.gate_up_proj"), "quark-w4a4");
	ck_assert_str_eq(scheme_of(&qc, "model.layers.0.mlp.experts.7.down_proj"), "unquantized");
	ms_quant_config_free(&qc);
	/* without type configs, global applies; Linear applies to everything */
	rc = init_from(QK(QK_SPEC(QK_W4, QK_A8),
			  ",\"layer_type_quant_config\":{\"Linear\":" QK_SPEC(QK_W4, "null") "}"),
		       &qc, &err);
	ck_assert_int_eq(rc, 0);
	ck_assert_str_eq(scheme_of(&qc, "model.layers.0.mlp.experts.3.gate_up_proj"), "quark-w4a16");
	ms_quant_config_free(&qc);
	rc = init_from(QK(QK_SPEC(QK_W4, QK_A8), ""), &qc, &err);
	ck_assert_str_eq(scheme_of(&qc, "model.layers.0.mlp.experts.3.gate_up_proj"), "quark-w4a8");
	ms_quant_config_free(&qc);
}
END_TEST

/* Globs read as Python's fnmatch.fnmatchcase reads them (the expected
 * column is Python 3's answer), in linear time: a pattern that makes a
 * backtracking matcher take C(n, k) steps answers at once. */
START_TEST(module_globs)
{
	static const struct { const char *pat, *name; bool want; } cases[] = {
		{"model.layers.*.self_attn", "model.layers.3.self_attn", true},
		{"*q_proj", "model.layers.0.self_attn.q_proj", true},
		{"*.[kv]_proj", "a.k_proj", true}, {"*.[kv]_proj", "a.q_proj", false},
		{"*.[!kv]_proj", "a.q_proj", true}, {"*.[!kv]_proj", "a.v_proj", false},
		{"layer[0-9]", "layer7", true}, {"layer[0-9]", "layerx", false},
		{"a[]b", "a]b", false}, {"a[]b", "a[]b", true}, {"a[!]]b", "a]b", false},
		{"a[!]]b", "axb", true}, {"a[", "a[", true}, {"a[b", "ab", false},
		{"a\\b", "a\\b", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"**", "", true}, {"*", "x", true}, {"a*", "b", false}, {"[^a]", "^", true},
		{"[^a]", "b", false}, {"[a-]", "-", true}, {"[z-a]", "m", false},
		{"*a*b*c", "xaybzc", true}, {"*a*b*c", "xaybzcd", false},
		{"lm_head", "lm_head", true}, {"lm_head", "lm_headx", false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++)
		ck_assert_msg(ms_qglob_match(cases[i].pat, cases[i].name) == cases[i].want,
			      "glob \"%s\" on \"%s\"", cases[i].pat, cases[i].name);
	char pat[200] = "", name[400];
	for (int i = 0; i < 60; i++)
		strcat(pat, "*a");
	strcat(pat, "*b");
	memset(name, 'a', sizeof(name) - 1);
	name[sizeof(name) - 1] = 0;
	ck_assert(!ms_qglob_match(pat, name));
	name[sizeof(name) - 2] = 'b';
	ck_assert(ms_qglob_match(pat, name));
}
END_TEST

/* Regexes as Python's re.match applies them: Python syntax, anchored at
 * the start only; a pattern that backtracks without end is an error that
 * names it (the fuzzer's out-of-memory keys were of this kind). */
START_TEST(module_regexes)
{
	static const struct { const char *re, *name; bool want; } cases[] = {
		{"model\\.layers\\.\\d+\\.mlp\\.experts", "model.layers.12.mlp.experts.3.down_proj", true},
		{"(?:.*\\.)?(q|k)_proj$", "model.layers.0.self_attn.k_proj", true},
		{"(?:.*\\.)?(q|k)_proj$", "model.layers.0.self_attn.v_proj", false},
		{"experts", "model.layers.0.mlp.experts", false},  /* anchored at the start */
		{"model", "model.layers.0.mlp.experts", true},     /* not at the end */
		{".*?router", "model.layers.0.mlp.router", true},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct ms_qregex *re;
		struct ms_err err = {0};
		bool hit;
		ck_assert_msg(ms_qregex_init(&re, cases[i].re, "test", &err) == 0, "%s", err.msg);
		ck_assert_int_eq(ms_qregex_match(re, cases[i].name, &hit, &err), 0);
		ck_assert_msg(hit == cases[i].want, "re \"%s\" on \"%s\"", cases[i].re, cases[i].name);
		ms_qregex_free(re);
	}
	/* exponential backtracking: an error naming the rule and the module */
	struct ms_quant_config qc;
	struct ms_err err = {0};
	ck_assert_int_eq(init_from(QC("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,"
				      "\"dynamic\":{\"-:(.|.)*(.|.)*(#|%)\":{}}}"), &qc, &err), 0);
	const struct ms_quant_scheme *s = NULL;
	int rc = qc.method->scheme_for(&qc, &(struct ms_checkpoint){0},
				       "model.layers.23.mlp.experts.31.down_proj", MS_QKIND_LINEAR, &s,
				       &err);
	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_msg(strstr(err.msg, "\"dynamic\" key \"-:(.|.)*(.|.)*(#|%)\"") &&
		      strstr(err.msg, "model.layers.23.mlp.experts.31.down_proj") &&
		      strstr(err.msg, "limit"), "%s", err.msg);
	ms_quant_config_free(&qc);
	/* the same through modules_to_not_convert's "re:" entries */
	ck_assert_int_eq(init_from(QC("{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":32,"
				      "\"modules_to_not_convert\":[\"re:(.|.)*(.|.)*(#|%)\"]}"), &qc, &err),
			 0);
	bool hit;
	ck_assert_int_eq(ms_quant_not_converted(&qc, "model.layers.23.mlp.experts.31.down_proj", &hit,
						&err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "modules_to_not_convert[0]"), "%s", err.msg);
	ms_quant_config_free(&qc);
	/* longer than any producer writes: refused, not truncated */
	char cfg[1300] = QC("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,\"dynamic\":{\"-:");
	size_t at = strlen(cfg) - 1;
	memset(cfg + at, 'a', 1100);
	strcpy(cfg + at + 1100, "\":{}}}}");
	refused(cfg, "dynamic", "1100 bytes", NULL);
}
END_TEST

/* GPTQ picks its scheme from the tensors the producer wrote, minus what
 * modules_to_not_convert and dynamic "-:" rules exclude. */
START_TEST(gptq_scheme_by_tensors)
{
	struct ms_tensor ts[] = {
		{.name = "model.layers.0.mlp.router.qweight"},
		{.name = "model.layers.0.self_attn.q_proj.qweight"},
		{.name = "model.layers.0.self_attn.v_proj.qweight"},
	};
	struct ms_checkpoint ck = {.tensors = ts, .n_tensors = 3};
	struct ms_quant_config qc;
	struct ms_err err = {0};
	int rc = init_from(QC("{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,"
			      "\"modules_to_not_convert\":[\"*.v_proj\"],"
			      "\"dynamic\":{\"-:.*router\":{}}}"), &qc, &err);
	ck_assert_msg(rc == 0, "%s", err.msg);
	const struct ms_quant_scheme *s;
	const char *mods[] = {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
			      "model.layers.0.self_attn.v_proj", "model.layers.0.mlp.router"};
	const char *want[] = {"gptq", "unquantized", "unquantized", "unquantized"};
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(qc.method->scheme_for(&qc, &ck, mods[i], MS_QKIND_LINEAR, &s, &err), 0);
		ck_assert_msg(!strcmp(s->name, want[i]), "%s: %s", mods[i], s->name);
	}
	ms_quant_config_free(&qc);
}
END_TEST

/* Standalone config files of older checkpoints, and the method inferred
 * from their keys when quant_method is absent. */
START_TEST(standalone_config_files)
{
	char dir[] = "/tmp/ms-test-quant.XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char path[256];
	snprintf(path, sizeof(path), "%s/quant_config.json", dir);
	FILE *f = fopen(path, "w");
	fputs("{\"zero_point\":true,\"q_group_size\":64,\"w_bit\":4,\"version\":\"GEMM\"}", f);
	fclose(f);
	cJSON *root = cJSON_Parse("{}");
	struct ms_quant_config qc;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_quant_config_init(&qc, root, dir, &err), 0);
	ck_assert_str_eq(qc.method->name, "awq");
	ck_assert_str_eq(qc.source, "quant_config.json");
	ms_quant_config_free(&qc);
	unlink(path);
	snprintf(path, sizeof(path), "%s/quantize_config.json", dir);
	f = fopen(path, "w");
	fputs("{\"bits\":7,\"group_size\":128,\"desc_act\":false}", f);
	fclose(f);
	ck_assert_int_lt(ms_quant_config_init(&qc, root, dir, &err), 0);
	ck_assert_msg(strstr(err.msg, "quantize_config.json") && strstr(err.msg, "\"bits\" 7"), "%s",
		      err.msg);
	/* held to RFC 8259 (config/ms-json.h): a repeated key is refused, not
	 * read as cJSON's first or Python's last */
	f = fopen(path, "w");
	fputs("{\"bits\":4,\"group_size\":128,\"bits\":8}", f);
	fclose(f);
	ck_assert_int_eq(ms_quant_config_init(&qc, root, dir, &err), -EINVAL);
	ck_assert_msg(strstr(err.msg, "quantize_config.json: not accepted: the key \"bits\" appears twice"),
		      "%s", err.msg);
	/* config.json's own quantization_config wins over a standalone file */
	cJSON_Delete(root);
	root = cJSON_Parse(QC("{\"quant_method\":\"mxfp4\"}"));
	ck_assert_int_eq(ms_quant_config_init(&qc, root, dir, &err), 0);
	ck_assert_str_eq(qc.method->name, "mxfp4");
	ms_quant_config_free(&qc);
	cJSON_Delete(root);
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(awq_not_convert_is_substring)
{
	struct ms_quant_config qc;
	struct ms_err err = {0};
	ck_assert_int_eq(init_from(QC("{\"quant_method\":\"awq\",\"bits\":4,\"group_size\":32,"
				      "\"modules_to_not_convert\":[\"router\"]}"), &qc, &err), 0);
	ck_assert(not_converted(&qc, "model.layers.3.mlp.router"));
	ck_assert(!not_converted(&qc, "model.layers.3.mlp.experts.0.gate_proj"));
	ms_quant_config_free(&qc);
}
END_TEST

START_TEST(actq_fp8)
{
	/* static: x / s rounded to e4m3, saturated, row scale s */
	struct ms_actq q = {MS_ACTQ_FP8_STATIC, 0.5f};
	float x[6] = {1.0f, 0.3f, -1000.0f, 0.0f, 0.0078125f, 229.0f}, y[6], rs;
	ms_actq_apply(&q, x, 6, 1, 6, y, &rs);
	ck_assert_float_eq(rs, 0.5f);
	ck_assert_float_eq(y[0], 2.0f);
	ck_assert_float_eq(y[1], 0.625f);   /* 0.6 -> nearest e4m3 is 0.625 */
	ck_assert_float_eq(y[2], -448.0f);  /* saturates, never NaN */
	ck_assert_float_eq(y[3], 0.0f);
	ck_assert_float_eq(y[4], 0.015625f);
	ck_assert_float_eq(y[5], 448.0f);   /* 458 -> 448 */
	/* dynamic: per row amax / 448, each row on its own */
	struct ms_actq d = {MS_ACTQ_FP8_DYNAMIC, 0};
	float x2[4] = {4.48f, -2.24f, 0.0f, 0.0f}, y2[4], rs2[2];
	ms_actq_apply(&d, x2, 2, 2, 2, y2, rs2);
	ck_assert(fabsf(rs2[0] - 0.01f) < 1e-9f);
	ck_assert_float_eq(y2[0], 448.0f);
	ck_assert_float_eq(y2[1], -224.0f);
	ck_assert_float_eq(rs2[1], 1.0f); /* an all-zero row */
	ck_assert_float_eq(y2[2], 0.0f);
}
END_TEST

/* The bit-level e4m3 rounding in actq.c against the byte round trip of the
 * reference conversion: every float bit pattern of exponents 2^-20 .. 2^10
 * (every third pattern; the rest of the range saturates or flushes to 0,
 * covered by a stride over all 2^32 patterns), both signs. */
START_TEST(actq_fp8_bits)
{
	enum { N = 1 << 16 };
	static float x[N], y[N];
	struct ms_actq q = {MS_ACTQ_FP8_STATIC, 1.0f};
	int64_t checked = 0, bad = 0;
	for (int pass = 0; pass < 2; pass++) {
		uint64_t lo = pass ? 0 : (uint64_t)(127 - 20) << 23;
		uint64_t hi = pass ? UINT64_C(1) << 32 : (uint64_t)(127 + 11) << 23;
		uint64_t step = pass ? 65537 : 3;
		for (uint64_t u = lo; u < hi;) {
			int n = 0;
			for (; n < N && u < hi; n++, u += step) {
				uint32_t bits = (uint32_t)u ^ (pass ? 0 : (uint32_t)(u & 1) << 31);
				memcpy(&x[n], &bits, 4);
			}
			ms_actq_apply(&q, x, n, 1, n, y, &(float){0});
			for (int i = 0; i < n; i++) {
				float v = x[i] > 448.0f ? 448.0f : (x[i] < -448.0f ? -448.0f : x[i]);
				float want = ms_fp8_e4m3_to_f32(ms_f32_to_fp8_e4m3(v));
				bool same = isnan(want) ? isnan(y[i]) : (memcmp(&want, &y[i], 4) == 0);
				if (!same && bad++ < 5)
					fprintf(stderr, "fp8 round of %a: %a, want %a\n", (double)x[i],
						(double)y[i], (double)want);
				checked++;
			}
		}
	}
	ck_assert_int_eq(bad, 0);
	ck_assert_int_gt(checked, 60000000);
}
END_TEST

START_TEST(actq_mxfp4)
{
	/* amax 3.0: bits + 2^21 keeps exponent 1 (3.0 = 1.5 * 2^1 < 1.75), so
	 * E = 1, e = -1, scale 0.5; 3.0 / 0.5 = 6 (code 7). */
	float g[32] = {3.0f, 1.0f, 0.375f, -0.625f, 0.125f, 1.25f, 2.75f};
	ms_actq_mxfp4_group(g, 32);
	ck_assert_float_eq(g[0], 3.0f);
	ck_assert_float_eq(g[1], 1.0f);
	ck_assert_float_eq(g[2], 0.5f);    /* 0.75 (tie of 0.5 and 1.0) -> 1.0 (even code) * 0.5 */
	ck_assert_float_eq(g[3], -0.5f);   /* 1.25 (tie of 1.0 and 1.5) -> 1.0 */
	ck_assert_float_eq(g[4], 0.0f);    /* 0.25 (tie of 0 and 0.5) -> 0 */
	ck_assert_float_eq(g[5], 1.0f);    /* 2.5 (tie of 2 and 3) -> 2 */
	ck_assert_float_eq(g[6], 3.0f);    /* 5.5 -> 6 */
	/* amax 3.5 = 1.75 * 2^1 rounds up to 2^2: e = 0, scale 1 */
	float h[32] = {3.5f, 0.25f, 5.0f / 4.0f};
	ms_actq_mxfp4_group(h, 32);
	ck_assert_float_eq(h[0], 4.0f);    /* 3.5 tie of 3 and 4 -> 4 */
	ck_assert_float_eq(h[1], 0.0f);
	ck_assert_float_eq(h[2], 1.0f);
	/* all zero stays zero; a ragged group of 5 */
	float z[5] = {0};
	ms_actq_mxfp4_group(z, 5);
	ck_assert_float_eq(z[0], 0.0f);
	/* saturation at 6 * scale: amax 7 -> E = 3 (7 = 1.75 * 4 rounds up), e = 1 */
	float s[32] = {7.0f, -13.0f};
	ms_actq_mxfp4_group(s, 32);
	ck_assert_float_eq(s[1], -12.0f);  /* -13/2 = -6.5 saturates to -6 */
	ck_assert_float_eq(s[0], 8.0f);    /* 7/2 = 3.5 -> 4 */
}
END_TEST

/* The schemes' copy buffers: zero-filled when asked even when reused;
 * within a bind pass a freed one comes back for the same size (not under
 * AddressSanitizer, which gets heap buffers to watch); after the pass,
 * nothing is kept. */
START_TEST(scheme_buffers)
{
	struct ms_cpu be;
	struct ms_err err = {0};
	ck_assert_int_eq(ms_cpu_init(&be, "ref", 1, &err), 0);
	struct ms_qload ld = {.be = ms_cpu_backend(&be)};
	ck_assert_int_eq(ms_quant_bind_begin(&ld, &err), 0);
	const size_t n = 3 * 4096 + 7;
	uint8_t *a = ms_quant_buf_alloc(n, false);
	ck_assert_ptr_nonnull(a);
	memset(a, 0xA5, n);
	ms_quant_buf_free(a);
	uint8_t *b = ms_quant_buf_alloc(n, true);
	ck_assert_ptr_nonnull(b);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(b[i], 0);
#ifndef __SANITIZE_ADDRESS__
	ck_assert_ptr_eq(b, a);
#endif
	uint8_t *c = ms_quant_buf_alloc(n + 1, false); /* another size: a new buffer */
	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_ne(c, b);
	memset(b, 0x5A, n);
	ms_quant_buf_free(b);
	ms_quant_buf_free(c);
	ck_assert_int_eq(ms_quant_bind_end(&ld, NULL, &err), 0);
	/* outside a pass: fresh pages, zero without being asked */
	uint8_t *d = ms_quant_buf_alloc(n, false);
	ck_assert_ptr_nonnull(d);
#ifndef __SANITIZE_ADDRESS__
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(d[i], 0);
#endif
	ms_quant_buf_free(d);
	ms_quant_buf_free(NULL);
	ms_cpu_free(&be);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("quant");
	TCase *tc = tcase_create("configs");
	tcase_add_test(tc, gptq_config);
	tcase_add_test(tc, awq_config);
	tcase_add_test(tc, quark_config_refusals);
	tcase_add_test(tc, quark_resolution_order);
	tcase_add_test(tc, module_globs);
	tcase_add_test(tc, module_regexes);
	tcase_add_test(tc, gptq_scheme_by_tensors);
	tcase_add_test(tc, standalone_config_files);
	tcase_add_test(tc, awq_not_convert_is_substring);
	tcase_add_test(tc, actq_fp8);
	tcase_add_test(tc, actq_mxfp4);
	tcase_add_test(tc, scheme_buffers);
	suite_add_tcase(s, tc);
	/* ~90M conversions: seconds, a minute under the sanitizers */
	TCase *tb = tcase_create("fp8-bits");
	tcase_set_timeout(tb, 300);
	tcase_add_test(tb, actq_fp8_bits);
	suite_add_tcase(s, tb);
	return ms_check_run(s);
}
