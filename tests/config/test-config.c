/*
 * test-config.c: config.json parsing (config/model-config.c), the
 * quantization_config registry (quant/quant.c), the architecture check of
 * ms_model_load (models/model.c), and config/'s string builder and UTF-8
 * helpers (ms-strbuf.c, ms-utf8.h).
 *
 * Every case starts from the verbatim gpt-oss-20b config.json
 * (shared/docs/gpt-oss.md §1.2) and changes a few fields through cJSON, so
 * that each error test differs from a known-good file in exactly what it
 * tests.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check-run.h"
#include "model-config.h"
#include "model.h"
#include "ms-strbuf.h"
#include "ms-utf8.h"
#include "quant.h"

/* ms_quant_not_converted for names that cannot make it fail */
static bool not_converted(const struct ms_quant_config *qc, const char *module)
{
	bool hit;
	struct ms_err err = {0};
	ck_assert_msg(ms_quant_not_converted(qc, module, &hit, &err) == 0, "%s", err.msg);
	return hit;
}

static char g_root[256];

#define ASSERT_MSG_HAS(err, s)                                                              \
	ck_assert_msg(strstr((err).msg, (s)) != NULL, "message \"%s\" lacks \"%s\"", (err).msg, \
		      (s))

#define LT2 "\"sliding_attention\",\"full_attention\""
#define LT24 LT2 "," LT2 "," LT2 "," LT2 "," LT2 "," LT2 "," LT2 "," LT2 "," LT2 "," LT2 "," LT2 "," LT2

/* gpt-oss-20b config.json, verbatim but for the 24-entry layer_types. */
static const char gpt_oss_20b[] =
	"{\"architectures\":[\"GptOssForCausalLM\"],\"attention_bias\":true,\"attention_dropout\":0.0,"
	"\"eos_token_id\":200002,\"experts_per_token\":4,\"head_dim\":64,\"hidden_act\":\"silu\","
	"\"hidden_size\":2880,"
	"\"initial_context_length\":4096,\"initializer_range\":0.02,\"intermediate_size\":2880,"
	"\"layer_types\":[" LT24 "],"
	"\"max_position_embeddings\":131072,\"model_type\":\"gpt_oss\",\"num_attention_heads\":64,"
	"\"num_experts_per_tok\":4,"
	"\"num_hidden_layers\":24,\"num_key_value_heads\":8,\"num_local_experts\":32,"
	"\"output_router_logits\":false,"
	"\"pad_token_id\":199999,"
	"\"quantization_config\":{\"modules_to_not_convert\":[\"model.layers.*.self_attn\","
	"\"model.layers.*.mlp.router\",\"model.embed_tokens\",\"lm_head\"],\"quant_method\":\"mxfp4\"},"
	"\"rms_norm_eps\":1e-05,"
	"\"rope_scaling\":{\"beta_fast\":32.0,\"beta_slow\":1.0,\"factor\":32.0,"
	"\"original_max_position_embeddings\":4096,"
	"\"rope_type\":\"yarn\",\"truncate\":false},"
	"\"rope_theta\":150000,\"router_aux_loss_coef\":0.9,\"sliding_window\":128,\"swiglu_limit\":7.0,"
	"\"tie_word_embeddings\":false,\"transformers_version\":\"4.55.0.dev0\",\"use_cache\":true,"
	"\"vocab_size\":201088}";

/* The v5 form of the same rope block: rope_theta moves inside. */
static const char v5_rope[] =
	"{\"rope_parameters\":{\"beta_fast\":32.0,\"beta_slow\":1.0,\"factor\":32.0,"
	"\"original_max_position_embeddings\":4096,\"rope_theta\":150000,"
	"\"rope_type\":\"yarn\",\"truncate\":false}}";

/* ---- helpers ---- */

/* The 20b config with the top-level keys of set_json (a JSON object, may be
 * NULL) replacing or adding fields and the keys in rm (NULL-terminated, may
 * be NULL) removed. Free with cJSON_free. */
static char *variant(const char *set_json, const char *const *rm)
{
	cJSON *root = cJSON_Parse(gpt_oss_20b);
	ck_assert_ptr_nonnull(root);
	for (size_t i = 0; rm && rm[i]; i++) {
		ck_assert_msg(cJSON_HasObjectItem(root, rm[i]), "base has no %s", rm[i]);
		cJSON_DeleteItemFromObjectCaseSensitive(root, rm[i]);
	}
	if (set_json) {
		cJSON *set = cJSON_Parse(set_json);
		ck_assert_msg(set != NULL && cJSON_IsObject(set), "bad test JSON %s", set_json);
		while (set->child) {
			cJSON *it = cJSON_DetachItemViaPointer(set, set->child);
			char *key = strdup(it->string);
			ck_assert_ptr_nonnull(key);
			if (cJSON_HasObjectItem(root, key))
				cJSON_ReplaceItemInObjectCaseSensitive(root, key, it);
			else
				cJSON_AddItemToObject(root, key, it);
			free(key);
		}
		cJSON_Delete(set);
	}
	char *text = cJSON_PrintUnformatted(root);
	ck_assert_ptr_nonnull(text);
	cJSON_Delete(root);
	return text;
}

static void parse_ok(struct ms_model_config *c, const char *set, const char *const *rm)
{
	char *text = variant(set, rm);
	struct ms_err err = {0};
	int rc = ms_model_config_parse(c, text, &err);
	ck_assert_msg(rc == 0, "parse failed (%d): %s\nconfig: %s", rc, err.msg, text);
	cJSON_free(text);
}

/* Parse text expecting failure: negative code (== want when want != 0), a
 * zeroed config, and every NULL-terminated needle in the message. */
static void expect_text_error(const char *text, int want, ...)
{
	struct ms_model_config c;
	struct ms_err err = {0};
	memset(&c, 0x5a, sizeof(c));
	int rc = ms_model_config_parse(&c, text, &err);
	ck_assert_msg(rc < 0, "accepted: %s", text);
	if (want)
		ck_assert_msg(rc == want, "code %d, expected %d (%s)", rc, want, err.msg);
	ck_assert_int_eq(err.code, rc);
	ck_assert_ptr_null(c.layer_sliding);
	ck_assert_int_eq(c.hidden, 0);
	ck_assert_int_eq(c.n_layers, 0);
	ck_assert_str_eq(c.arch, "");
	va_list ap;
	va_start(ap, want);
	for (const char *s; (s = va_arg(ap, const char *));)
		ASSERT_MSG_HAS(err, s);
	va_end(ap);
	ms_model_config_free(&c); /* harmless on a zeroed config */
}

#define expect_error(set, rm, want, ...)                            \
	do {                                                        \
		char *text_ = variant((set), (rm));                 \
		expect_text_error(text_, (want), __VA_ARGS__, NULL); \
		cJSON_free(text_);                                  \
	} while (0)

#define RM(...) ((const char *const[]){__VA_ARGS__, NULL})

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	ck_assert_int_ge(n, 0);
	return s;
}

static char *new_dir(void)
{
	char *d = xasprintf("%s/t.XXXXXX", g_root);
	ck_assert_ptr_nonnull(mkdtemp(d));
	return d;
}

static void write_text(const char *dir, const char *name, const char *text)
{
	char *path = xasprintf("%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	ck_assert_msg(f != NULL, "cannot create %s", path);
	ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
	ck_assert_int_eq(fclose(f), 0);
	free(path);
}

static void assert_same_config(const struct ms_model_config *a, const struct ms_model_config *b)
{
	ck_assert_str_eq(a->arch, b->arch);
	ck_assert_int_eq(a->hidden, b->hidden);
	ck_assert_int_eq(a->n_layers, b->n_layers);
	ck_assert_int_eq(a->n_heads, b->n_heads);
	ck_assert_int_eq(a->n_kv_heads, b->n_kv_heads);
	ck_assert_int_eq(a->head_dim, b->head_dim);
	ck_assert_int_eq(a->intermediate, b->intermediate);
	ck_assert_int_eq(a->n_experts, b->n_experts);
	ck_assert_int_eq(a->top_k, b->top_k);
	ck_assert_int_eq(a->vocab, b->vocab);
	ck_assert_int_eq(a->sliding_window, b->sliding_window);
	ck_assert_int_eq(a->max_pos, b->max_pos);
	ck_assert(a->rms_eps == b->rms_eps);
	ck_assert(a->swiglu_limit == b->swiglu_limit);
	ck_assert(a->swiglu_alpha == b->swiglu_alpha);
	ck_assert_int_eq(a->tie_embeddings, b->tie_embeddings);
	ck_assert_int_eq(a->rope.type, b->rope.type);
	ck_assert(a->rope.theta == b->rope.theta);
	ck_assert(a->rope.factor == b->rope.factor);
	ck_assert(a->rope.beta_fast == b->rope.beta_fast);
	ck_assert(a->rope.beta_slow == b->rope.beta_slow);
	ck_assert_int_eq(a->rope.original_max_pos, b->rope.original_max_pos);
	ck_assert_int_eq(a->rope.truncate, b->rope.truncate);
	ck_assert(a->rope.attention_factor == b->rope.attention_factor);
	for (int64_t i = 0; i < a->n_layers; i++)
		ck_assert_int_eq(a->layer_sliding[i], b->layer_sliding[i]);
	ck_assert_int_eq(a->n_eos, b->n_eos);
	for (int i = 0; i < a->n_eos; i++)
		ck_assert_int_eq(a->eos_ids[i], b->eos_ids[i]);
}

/* ---- valid configs ---- */

START_TEST(test_gpt_oss_20b)
{
	struct ms_model_config c;
	struct ms_err err = {0};
	ck_assert_msg(ms_model_config_parse(&c, gpt_oss_20b, &err) == 0, "%s", err.msg);
	ck_assert_str_eq(c.arch, "GptOssForCausalLM");
	ck_assert_int_eq(c.hidden, 2880);
	ck_assert_int_eq(c.n_layers, 24);
	ck_assert_int_eq(c.n_heads, 64);
	ck_assert_int_eq(c.n_kv_heads, 8);
	ck_assert_int_eq(c.head_dim, 64);
	ck_assert_int_eq(c.intermediate, 2880);
	ck_assert_int_eq(c.n_experts, 32);
	ck_assert_int_eq(c.top_k, 4);
	ck_assert_int_eq(c.vocab, 201088);
	ck_assert_int_eq(c.sliding_window, 128);
	ck_assert_int_eq(c.max_pos, 131072);
	ck_assert(c.rms_eps == 1e-5);
	ck_assert(c.swiglu_limit == 7.0);
	ck_assert(c.swiglu_alpha == 1.702);
	ck_assert(!c.tie_embeddings);
	ck_assert_int_eq(c.rope.type, MS_ROPE_YARN);
	ck_assert(c.rope.theta == 150000.0);
	ck_assert(c.rope.factor == 32.0);
	ck_assert(c.rope.beta_fast == 32.0);
	ck_assert(c.rope.beta_slow == 1.0);
	ck_assert_int_eq(c.rope.original_max_pos, 4096);
	ck_assert(!c.rope.truncate);
	ck_assert_double_eq_tol(c.rope.attention_factor, 0.1 * log(32.0) + 1.0, 1e-12);
	ck_assert_ptr_nonnull(c.layer_sliding);
	for (int i = 0; i < 24; i++)
		ck_assert_msg(c.layer_sliding[i] == (i % 2 == 0), "layer %d", i);
	ck_assert_int_eq(c.n_eos, 1);
	ck_assert_int_eq(c.eos_ids[0], 200002);
	ms_model_config_free(&c);
	ck_assert_ptr_null(c.layer_sliding);
	ms_model_config_free(&c); /* twice is fine */
	ms_model_config_free(NULL);
}
END_TEST

START_TEST(test_v5_rope_parameters)
{
	struct ms_model_config a, b;
	parse_ok(&a, NULL, NULL);
	parse_ok(&b, v5_rope, RM("rope_scaling", "rope_theta"));
	assert_same_config(&a, &b);
	ms_model_config_free(&b);
	/* rope_parameters wins over a stale rope_scaling */
	parse_ok(&b,
		 "{\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":32.0,\"rope_theta\":150000,"
		 "\"original_max_position_embeddings\":4096,\"truncate\":false},"
		 "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":8.0}}",
		 RM("rope_theta"));
	assert_same_config(&a, &b);
	ms_model_config_free(&b);
	ms_model_config_free(&a);
}
END_TEST

START_TEST(test_layer_types_default)
{
	struct ms_model_config c;
	parse_ok(&c, NULL, RM("layer_types"));
	for (int i = 0; i < 24; i++)
		ck_assert_msg(c.layer_sliding[i] == (i % 2 == 0), "layer %d", i);
	ms_model_config_free(&c);
	/* an odd layer count: 0, 2, 4 slide */
	parse_ok(&c, "{\"num_hidden_layers\":5}", RM("layer_types"));
	ck_assert_int_eq(c.n_layers, 5);
	static const bool want[5] = {true, false, true, false, true};
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(c.layer_sliding[i], want[i]);
	ms_model_config_free(&c);
	/* explicit, not alternating */
	parse_ok(&c,
		 "{\"num_hidden_layers\":3,\"layer_types\":[\"full_attention\",\"full_attention\","
		 "\"sliding_attention\"]}",
		 NULL);
	ck_assert(!c.layer_sliding[0] && !c.layer_sliding[1] && c.layer_sliding[2]);
	ms_model_config_free(&c);
}
END_TEST

START_TEST(test_sliding_window_only_needed_when_sliding)
{
	struct ms_model_config c;
	parse_ok(&c, "{\"num_hidden_layers\":2,\"layer_types\":[\"full_attention\",\"full_attention\"]}",
		 RM("sliding_window"));
	ck_assert(!c.layer_sliding[0] && !c.layer_sliding[1]);
	ms_model_config_free(&c);
	expect_error(NULL, RM("sliding_window"), -EINVAL, "sliding_window");
	expect_error("{\"sliding_window\":0}", NULL, -EINVAL, "sliding_window", "0");
}
END_TEST

START_TEST(test_expert_aliases)
{
	struct ms_model_config c;
	/* experts_per_token alone */
	parse_ok(&c, "{\"experts_per_token\":3}", RM("num_experts_per_tok"));
	ck_assert_int_eq(c.top_k, 3);
	ms_model_config_free(&c);
	/* num_experts alone */
	parse_ok(&c, "{\"num_experts\":16}", RM("num_local_experts"));
	ck_assert_int_eq(c.n_experts, 16);
	ms_model_config_free(&c);
	/* the canonical names win over the aliases */
	parse_ok(&c, "{\"experts_per_token\":2,\"num_experts\":8}", NULL);
	ck_assert_int_eq(c.top_k, 4);
	ck_assert_int_eq(c.n_experts, 32);
	ms_model_config_free(&c);
	/* neither spelling: an error naming the canonical field */
	expect_error(NULL, RM("num_experts_per_tok", "experts_per_token"), -EINVAL,
		     "num_experts_per_tok");
}
END_TEST

START_TEST(test_head_dim_default)
{
	struct ms_model_config c;
	/* absent: H / nH */
	parse_ok(&c, "{\"hidden_size\":4096}", RM("head_dim"));
	ck_assert_int_eq(c.head_dim, 64);
	ms_model_config_free(&c);
	/* present: taken as is, nH * d need not equal H (real: 4096 vs 2880) */
	parse_ok(&c, "{\"head_dim\":128}", NULL);
	ck_assert_int_eq(c.head_dim, 128);
	ck_assert_int_eq(c.hidden, 2880);
	ms_model_config_free(&c);
	/* absent with 2880 / 64 = 45: odd, refused, and the message says so */
	expect_error(NULL, RM("head_dim"), -EINVAL, "head_dim", "45");
}
END_TEST

START_TEST(test_yarn_defaults)
{
	struct ms_model_config c;
	/* truncate defaults to true */
	parse_ok(&c,
		 "{\"rope_scaling\":{\"beta_fast\":32.0,\"beta_slow\":1.0,\"factor\":32.0,"
		 "\"original_max_position_embeddings\":4096,\"rope_type\":\"yarn\"}}",
		 NULL);
	ck_assert(c.rope.truncate);
	ck_assert_int_eq(c.rope.type, MS_ROPE_YARN);
	ms_model_config_free(&c);
	/* betas default to 32 / 1, factor to max_pos / L0, L0 to
	 * initial_context_length */
	parse_ok(&c, "{\"rope_scaling\":{\"type\":\"yarn\"},\"max_position_embeddings\":65536}",
		 NULL);
	ck_assert_int_eq(c.rope.type, MS_ROPE_YARN);
	ck_assert(c.rope.beta_fast == 32.0);
	ck_assert(c.rope.beta_slow == 1.0);
	ck_assert_int_eq(c.rope.original_max_pos, 4096);
	ck_assert(c.rope.factor == 16.0);
	ck_assert(c.rope.truncate);
	ck_assert_double_eq_tol(c.rope.attention_factor, 0.1 * log(16.0) + 1.0, 1e-12);
	ms_model_config_free(&c);
	/* an explicit attention_factor is taken as is */
	parse_ok(&c,
		 "{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":32.0,\"attention_factor\":1.25,"
		 "\"original_max_position_embeddings\":4096}}",
		 NULL);
	ck_assert(c.rope.attention_factor == 1.25);
	ms_model_config_free(&c);
	/* no L0 anywhere: an error naming it */
	expect_error("{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":32.0}}",
		     RM("initial_context_length"), -EINVAL, "original_max_position_embeddings");
}
END_TEST

START_TEST(test_plain_rope)
{
	struct ms_model_config c;
	parse_ok(&c, NULL, RM("rope_scaling"));
	ck_assert_int_eq(c.rope.type, MS_ROPE_DEFAULT);
	ck_assert(c.rope.theta == 150000.0);
	ck_assert(c.rope.factor == 1.0);
	ck_assert(c.rope.attention_factor == 1.0);
	ms_model_config_free(&c);
	parse_ok(&c, "{\"rope_scaling\":null}", NULL);
	ck_assert_int_eq(c.rope.type, MS_ROPE_DEFAULT);
	ms_model_config_free(&c);
	parse_ok(&c, "{\"rope_scaling\":{\"rope_type\":\"default\"}}", NULL);
	ck_assert_int_eq(c.rope.type, MS_ROPE_DEFAULT);
	ck_assert(c.rope.factor == 1.0);
	ms_model_config_free(&c);
}
END_TEST

START_TEST(test_eos_forms)
{
	struct ms_model_config c;
	parse_ok(&c, "{\"eos_token_id\":[200002,199999,200012]}", NULL);
	ck_assert_int_eq(c.n_eos, 3);
	ck_assert_int_eq(c.eos_ids[0], 200002);
	ck_assert_int_eq(c.eos_ids[1], 199999);
	ck_assert_int_eq(c.eos_ids[2], 200012);
	ms_model_config_free(&c);
	parse_ok(&c, NULL, RM("eos_token_id"));
	ck_assert_int_eq(c.n_eos, 0);
	ms_model_config_free(&c);
	expect_error("{\"eos_token_id\":\"<|return|>\"}", NULL, -EINVAL, "eos_token_id");
	expect_error("{\"eos_token_id\":[200002,\"x\"]}", NULL, -EINVAL, "eos_token_id");
	/* ids must be integers inside the vocabulary; at most 8 of them */
	expect_error("{\"eos_token_id\":-5}", NULL, -EINVAL, "eos_token_id");
	expect_error("{\"eos_token_id\":1.5}", NULL, -EINVAL, "eos_token_id");
	expect_error("{\"eos_token_id\":1e30}", NULL, -EINVAL, "eos_token_id");
	expect_error("{\"eos_token_id\":201088}", NULL, -EINVAL, "eos_token_id", "201088");
	expect_error("{\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", NULL, -EINVAL, "eos_token_id", "9");
}
END_TEST

START_TEST(test_config_load_from_folder)
{
	char *d = new_dir();
	write_text(d, "config.json", gpt_oss_20b);
	struct ms_model_config a, b;
	struct ms_err err = {0};
	ck_assert_msg(ms_model_config_load(&a, d, &err) == 0, "%s", err.msg);
	parse_ok(&b, NULL, NULL);
	assert_same_config(&a, &b);
	ms_model_config_free(&a);
	ms_model_config_free(&b);
	/* an error from the file names the folder and the field */
	write_text(d, "config.json", "{\"architectures\":[\"GptOssForCausalLM\"]}");
	ck_assert_int_lt(ms_model_config_load(&a, d, &err), 0);
	ASSERT_MSG_HAS(err, d);
	ASSERT_MSG_HAS(err, "hidden_size");
	ck_assert_ptr_null(a.layer_sliding);
	/* the file held to RFC 8259: a second document after the first (or any
	 * text) is refused, not ignored, naming the file and the position */
	char *two = xasprintf("%s\n{\"hidden_size\": 1}\n", gpt_oss_20b);
	write_text(d, "config.json", two);
	ck_assert_int_eq(ms_model_config_load(&a, d, &err), -EINVAL);
	ASSERT_MSG_HAS(err, "config.json: not valid JSON: nothing may follow the JSON value");
	ASSERT_MSG_HAS(err, d);
	ck_assert_ptr_null(a.layer_sliding);
	free(two);
	/* no file at all */
	char *nd = xasprintf("%s/none", d);
	ck_assert_int_eq(ms_model_config_load(&a, nd, &err), -ENOENT);
	ASSERT_MSG_HAS(err, nd);
	ASSERT_MSG_HAS(err, "config.json");
	free(nd);
	free(d);
}
END_TEST

/* ---- invalid configs ---- */

START_TEST(test_heads_not_multiple_of_kv)
{
	expect_error("{\"num_attention_heads\":6,\"num_key_value_heads\":4}", NULL, -EINVAL,
		     "num_attention_heads", "num_key_value_heads", "(6)", "(4)");
	expect_error("{\"num_attention_heads\":8,\"num_key_value_heads\":16}", NULL, -EINVAL,
		     "num_attention_heads", "(8)", "(16)");
}
END_TEST

START_TEST(test_layer_types_wrong_length)
{
	expect_error("{\"layer_types\":[" LT2 "," LT2 "]}", NULL, -EINVAL, "layer_types", "4",
		     "24");
	expect_error("{\"layer_types\":[" LT24 ",\"full_attention\"]}", NULL, -EINVAL,
		     "layer_types", "25", "24");
	expect_error("{\"layer_types\":[]}", NULL, -EINVAL, "layer_types", "0", "24");
	expect_error("{\"num_hidden_layers\":23}", NULL, -EINVAL, "layer_types", "24", "23");
}
END_TEST

START_TEST(test_layer_types_bad_entry)
{
	expect_error("{\"num_hidden_layers\":4,\"layer_types\":[\"sliding_attention\","
		     "\"full_attention\",\"sliding_attention\",\"local_attention\"]}",
		     NULL, -EINVAL, "layer_types[3]", "local_attention");
	expect_error("{\"num_hidden_layers\":2,\"layer_types\":[5,\"full_attention\"]}", NULL,
		     -EINVAL, "layer_types[0]");
	expect_error("{\"num_hidden_layers\":2,\"layer_types\":[\"Sliding_Attention\","
		     "\"full_attention\"]}",
		     NULL, -EINVAL, "layer_types[0]", "Sliding_Attention");
	expect_error("{\"layer_types\":\"sliding_attention\"}", NULL, -EINVAL, "layer_types");
}
END_TEST

START_TEST(test_unknown_rope_type)
{
	expect_error("{\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":32.0}}", NULL,
		     -ENOTSUP, "rope_type", "\"longrope\"");
	expect_error("{\"rope_parameters\":{\"rope_type\":\"dynamic\",\"rope_theta\":10000}}",
		     RM("rope_scaling"), -ENOTSUP, "rope_parameters.rope_type", "\"dynamic\"");
	expect_error("{\"rope_scaling\":{\"factor\":32.0}}", NULL, -EINVAL, "rope_type");
	expect_error("{\"rope_scaling\":{\"rope_type\":5}}", NULL, -EINVAL, "rope_type");
	expect_error("{\"rope_scaling\":\"yarn\"}", NULL, -EINVAL, "rope_scaling");
}
END_TEST

START_TEST(test_bad_rope_values)
{
	expect_error(NULL, RM("rope_theta"), -EINVAL, "rope_theta");
	expect_error("{\"rope_theta\":1}", NULL, -EINVAL, "rope_theta");
	expect_error("{\"rope_theta\":\"150000\"}", NULL, -EINVAL, "rope_theta");
	expect_error("{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":0.5,"
		     "\"original_max_position_embeddings\":4096}}",
		     NULL, -EINVAL, "factor", "0.5");
	expect_error("{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":32,\"beta_fast\":0,"
		     "\"original_max_position_embeddings\":4096}}",
		     NULL, -EINVAL, "beta_fast");
	expect_error("{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":32,\"truncate\":\"no\","
		     "\"original_max_position_embeddings\":4096}}",
		     NULL, -EINVAL, "truncate");
	expect_error("{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":32,"
		     "\"original_max_position_embeddings\":0}}",
		     NULL, -EINVAL, "original_max_position_embeddings", "0");
}
END_TEST

START_TEST(test_missing_required_fields)
{
	static const char *const req[] = {
		"hidden_size",   "num_hidden_layers", "num_attention_heads",
		"num_key_value_heads", "intermediate_size", "vocab_size",
		"max_position_embeddings", "rms_norm_eps", "swiglu_limit",
	};
	for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
		char *q = xasprintf("\"%s\"", req[i]);
		expect_error(NULL, RM(req[i]), -EINVAL, q, "missing");
		free(q);
	}
	expect_error(NULL, RM("num_local_experts"), -EINVAL, "num_local_experts", "missing");
	/* null counts as absent */
	expect_error("{\"hidden_size\":null}", NULL, -EINVAL, "hidden_size");
}
END_TEST

START_TEST(test_nonpositive_sizes)
{
	expect_error("{\"num_hidden_layers\":0}", NULL, -EINVAL, "num_hidden_layers", "0");
	expect_error("{\"vocab_size\":-1}", NULL, -EINVAL, "vocab_size", "-1");
	expect_error("{\"hidden_size\":0}", NULL, -EINVAL, "hidden_size", "0");
	expect_error("{\"num_key_value_heads\":0}", NULL, -EINVAL, "num_key_value_heads", "0");
	expect_error("{\"num_attention_heads\":-64}", NULL, -EINVAL, "num_attention_heads", "-64");
	expect_error("{\"intermediate_size\":-5}", NULL, -EINVAL, "intermediate_size", "-5");
	expect_error("{\"num_local_experts\":0}", NULL, -EINVAL, "num_local_experts", "0");
	expect_error("{\"num_experts_per_tok\":0}", NULL, -EINVAL, "num_experts_per_tok", "0");
	expect_error("{\"max_position_embeddings\":0}", NULL, -EINVAL, "max_position_embeddings",
		     "0");
	expect_error("{\"head_dim\":0}", NULL, -EINVAL, "head_dim", "0");
	expect_error("{\"head_dim\":-2}", NULL, -EINVAL, "head_dim", "-2");
	/* absent head_dim with H < nH: the default H / nH is 0 */
	expect_error("{\"hidden_size\":32}", RM("head_dim"), -EINVAL, "head_dim");
	expect_error("{\"rms_norm_eps\":0}", NULL, -EINVAL, "rms_norm_eps", "0");
	expect_error("{\"rms_norm_eps\":-1e-5}", NULL, -EINVAL, "rms_norm_eps");
	expect_error("{\"swiglu_limit\":0}", NULL, -EINVAL, "swiglu_limit", "0");
}
END_TEST

/* A lying size is refused by name before anything is sized from it (a
 * fuzzer found num_hidden_layers 4.4e14 reaching calloc). */
START_TEST(test_oversized_sizes)
{
	expect_error("{\"num_hidden_layers\":444444444444444}", RM("layer_types"), -EINVAL,
		     "num_hidden_layers", "444444444444444", "limit");
	expect_error("{\"num_hidden_layers\":5000}", NULL, -EINVAL, "num_hidden_layers", "limit");
	expect_error("{\"vocab_size\":4294967296}", NULL, -EINVAL, "vocab_size", "4294967296");
	expect_error("{\"hidden_size\":2147483648}", NULL, -EINVAL, "hidden_size", "limit");
	expect_error("{\"num_local_experts\":100000}", NULL, -EINVAL, "num_local_experts", "limit");
	expect_error("{\"head_dim\":1048576}", NULL, -EINVAL, "head_dim", "limit");
	expect_error("{\"max_position_embeddings\":3000000000}", NULL, -EINVAL,
		     "max_position_embeddings", "limit");
}
END_TEST

START_TEST(test_fractional_integer_field)
{
	/* The message names the field and shows the value. */
	expect_error("{\"hidden_size\":12.5}", NULL, -EINVAL, "hidden_size", "integer", "12.5");
	expect_error("{\"num_hidden_layers\":24.000001}", NULL, -EINVAL, "num_hidden_layers");
	expect_error("{\"experts_per_token\":3.5}", RM("num_experts_per_tok"), -EINVAL,
		     "experts_per_token");
	expect_error("{\"hidden_size\":\"2880\"}", NULL, -EINVAL, "hidden_size");
	expect_error("{\"hidden_size\":true}", NULL, -EINVAL, "hidden_size");
	expect_error("{\"hidden_size\":[2880]}", NULL, -EINVAL, "hidden_size");
	/* beyond what an int64 (and a double) holds exactly: no UB cast */
	expect_error("{\"vocab_size\":1e300}", NULL, -EINVAL, "vocab_size", "out of range");
	expect_error("{\"vocab_size\":-1e300}", NULL, -EINVAL, "vocab_size");
	expect_error("{\"sliding_window\":1e19}", NULL, -EINVAL, "sliding_window");
	/* integral doubles are integers */
	struct ms_model_config c;
	parse_ok(&c, "{\"hidden_size\":2880.0}", NULL);
	ck_assert_int_eq(c.hidden, 2880);
	ms_model_config_free(&c);
}
END_TEST

START_TEST(test_top_k_exceeds_experts)
{
	expect_error("{\"num_experts_per_tok\":33}", NULL, -EINVAL, "num_experts_per_tok",
		     "num_local_experts", "33", "32");
	/* equal is fine */
	struct ms_model_config c;
	parse_ok(&c, "{\"num_experts_per_tok\":32}", NULL);
	ck_assert_int_eq(c.top_k, 32);
	ms_model_config_free(&c);
}
END_TEST

START_TEST(test_odd_head_dim)
{
	expect_error("{\"head_dim\":63}", NULL, -EINVAL, "head_dim", "63");
	expect_error("{\"head_dim\":1}", NULL, -EINVAL, "head_dim", "1");
}
END_TEST

START_TEST(test_non_finite_and_duplicates)
{
	/* 1e400 parses to infinity: not a usable theta, limit or eps. The text
	 * is edited directly: cJSON would print an infinity back as null. */
	static const struct {
		const char *from, *to, *field;
	} inf[] = {
		{"\"rope_theta\":150000,", "\"rope_theta\":1e400,", "rope_theta"},
		{"\"swiglu_limit\":7.0,", "\"swiglu_limit\":1e400,", "swiglu_limit"},
		{"\"rms_norm_eps\":1e-05,", "\"rms_norm_eps\":-1e400,", "rms_norm_eps"},
	};
	for (size_t i = 0; i < sizeof(inf) / sizeof(inf[0]); i++) {
		const char *at = strstr(gpt_oss_20b, inf[i].from);
		ck_assert_ptr_nonnull(at);
		char text[sizeof(gpt_oss_20b) + 64];
		snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - gpt_oss_20b), gpt_oss_20b,
			 inf[i].to, at + strlen(inf[i].from));
		expect_text_error(text, -EINVAL, inf[i].field, "finite", NULL);
	}
	/* an explicit attention_factor must be positive, never silently replaced */
	expect_error("{\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":32.0,"
		     "\"original_max_position_embeddings\":4096,\"attention_factor\":-2}}",
		     NULL, -EINVAL, "attention_factor");
	/* a repeated key: Python keeps the last, cJSON the first; refused */
	expect_text_error("{\"architectures\":[\"GptOssForCausalLM\"],\"hidden_size\":8,"
			  "\"hidden_size\":16}", -EINVAL, "hidden_size", "twice", NULL);
}
END_TEST

START_TEST(test_invalid_json)
{
	expect_text_error("{\"hidden_size\": 2880,", -EINVAL, "config.json", "JSON", NULL);
	expect_text_error("", -EINVAL, "JSON", NULL);
	expect_text_error("{", -EINVAL, "JSON", NULL);
	expect_text_error("hidden_size = 2880", -EINVAL, "JSON", NULL);
	/* cut in the middle of the real file */
	char half[sizeof(gpt_oss_20b) / 2 + 1];
	memcpy(half, gpt_oss_20b, sizeof(half) - 1);
	half[sizeof(half) - 1] = '\0';
	expect_text_error(half, -EINVAL, "JSON", NULL);
}
END_TEST

START_TEST(test_root_not_object)
{
	static const char *const bad[] = {"[1, 2]", "42", "\"config\"", "null", "true", "[]"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_text_error(bad[i], -EINVAL, "config.json", "object", NULL);
}
END_TEST

START_TEST(test_bad_architectures)
{
	expect_error(NULL, RM("architectures"), -EINVAL, "architectures");
	expect_error("{\"architectures\":[]}", NULL, -EINVAL, "architectures");
	expect_error("{\"architectures\":[5]}", NULL, -EINVAL, "architectures");
	expect_error("{\"architectures\":\"GptOssForCausalLM\"}", NULL, -EINVAL, "architectures");
	expect_error("{\"architectures\":null}", NULL, -EINVAL, "architectures");
}
END_TEST

START_TEST(test_bad_bools)
{
	expect_error("{\"tie_word_embeddings\":\"false\"}", NULL, -EINVAL, "tie_word_embeddings");
	expect_error("{\"attention_bias\":1}", NULL, -EINVAL, "attention_bias");
	expect_error("{\"attention_bias\":false}", NULL, -ENOTSUP, "attention_bias");
}
END_TEST

/* ---- quantization_config ---- */

static cJSON *variant_root(const char *set, const char *const *rm)
{
	char *text = variant(set, rm);
	cJSON *root = cJSON_Parse(text);
	cJSON_free(text);
	ck_assert_ptr_nonnull(root);
	return root;
}

START_TEST(test_quant_unknown_method)
{
	cJSON *root = variant_root("{\"quantization_config\":{\"quant_method\":\"foo\"}}", NULL);
	struct ms_quant_config qc;
	struct ms_err err = {0};
	int rc = ms_quant_config_init(&qc, root, NULL, &err);
	ck_assert_int_lt(rc, 0);
	ck_assert_int_eq(err.code, rc);
	ASSERT_MSG_HAS(err, "\"foo\"");
	ASSERT_MSG_HAS(err, "quant_method");
	ASSERT_MSG_HAS(err, "mxfp4");
	ASSERT_MSG_HAS(err, "none");
	ck_assert_ptr_null(qc.method);
	ms_quant_config_free(&qc);
	cJSON_Delete(root);
	/* the registry's list itself */
	ck_assert_ptr_nonnull(strstr(ms_quant_method_names(), "mxfp4"));
}
END_TEST

START_TEST(test_quant_bad_config)
{
	static const char *const bad[] = {
		"{\"quantization_config\":{\"modules_to_not_convert\":[]}}",
		"{\"quantization_config\":{\"quant_method\":4}}",
		"{\"quantization_config\":\"mxfp4\"}",
		"{\"quantization_config\":{\"quant_method\":\"mxfp4\",\"modules_to_not_convert\":\"lm_head\"}}",
		"{\"quantization_config\":{\"quant_method\":\"mxfp4\",\"modules_to_not_convert\":[\"lm_head\",7]}}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cJSON *root = variant_root(bad[i], NULL);
		struct ms_quant_config qc;
		struct ms_err err = {0};
		int rc = ms_quant_config_init(&qc, root, NULL, &err);
		ck_assert_msg(rc < 0, "accepted %s", bad[i]);
		ASSERT_MSG_HAS(err, "quantization_config");
		ck_assert_ptr_null(qc.not_convert);
		ms_quant_config_free(&qc);
		cJSON_Delete(root);
	}
}
END_TEST

START_TEST(test_quant_none)
{
	static const char *const sets[] = {NULL, "{\"quantization_config\":null}"};
	for (size_t i = 0; i < 2; i++) {
		cJSON *root = variant_root(sets[i], sets[i] ? NULL : RM("quantization_config"));
		struct ms_quant_config qc;
		struct ms_err err = {0};
		ck_assert_msg(ms_quant_config_init(&qc, root, NULL, &err) == 0, "%s", err.msg);
		ck_assert_ptr_nonnull(qc.method);
		ck_assert_str_eq(qc.method->name, "none");
		ck_assert_int_eq(qc.n_not_convert, 0);
		ck_assert(!not_converted(&qc, "lm_head"));
		ms_quant_config_free(&qc);
		cJSON_Delete(root);
	}
}
END_TEST

START_TEST(test_quant_not_converted)
{
	cJSON *root = variant_root("{\"quantization_config\":{\"quant_method\":\"mxfp4\","
				   "\"modules_to_not_convert\":[\"model.layers.*.self_attn\","
				   "\"lm_head\"]}}",
				   NULL);
	struct ms_quant_config qc;
	struct ms_err err = {0};
	ck_assert_msg(ms_quant_config_init(&qc, root, NULL, &err) == 0, "%s", err.msg);
	ck_assert_str_eq(qc.method->name, "mxfp4");
	ck_assert_int_eq(qc.n_not_convert, 2);
	ck_assert(not_converted(&qc, "model.layers.3.self_attn"));
	ck_assert(not_converted(&qc, "model.layers.3.self_attn.q_proj"));
	ck_assert(not_converted(&qc, "model.layers.23.self_attn.o_proj"));
	ck_assert(not_converted(&qc, "lm_head"));
	ck_assert(!not_converted(&qc, "model.layers.3.mlp.experts"));
	ck_assert(!not_converted(&qc, "model.layers.3.mlp.router"));
	ck_assert(!not_converted(&qc, "lm_headx"));
	ck_assert(!not_converted(&qc, "lm_hea"));
	ck_assert(!not_converted(&qc, "model.layers.3.self_attnx"));
	ck_assert(!not_converted(&qc, "model.embed_tokens"));
	ck_assert(!not_converted(&qc, ""));
	ms_quant_config_free(&qc);
	ck_assert_ptr_null(qc.not_convert);
	cJSON_Delete(root);

	/* the real 20b list */
	root = variant_root(NULL, NULL);
	ck_assert_msg(ms_quant_config_init(&qc, root, NULL, &err) == 0, "%s", err.msg);
	ck_assert_int_eq(qc.n_not_convert, 4);
	ck_assert(not_converted(&qc, "model.layers.0.mlp.router"));
	ck_assert(not_converted(&qc, "model.embed_tokens"));
	ck_assert(not_converted(&qc, "model.layers.0.self_attn.sinks"));
	ck_assert(!not_converted(&qc, "model.layers.0.mlp.experts"));
	ck_assert(!not_converted(&qc, "model.layers.0.mlp.experts.gate_up_proj"));
	ms_quant_config_free(&qc);
	cJSON_Delete(root);
}
END_TEST

/* ---- ms_model_load's architecture check ---- */

START_TEST(test_model_load_unknown_arch)
{
	char *d = new_dir();
	char *text = variant("{\"architectures\":[\"LlamaForCausalLM\"]}", NULL);
	write_text(d, "config.json", text);
	cJSON_free(text);
	struct ms_model m;
	struct ms_err err = {0};
	/* fails before any backend or safetensors use: none is given */
	int rc = ms_model_load(&m, d, NULL, &err);
	ck_assert_int_eq(rc, -ENOTSUP);
	ck_assert_int_eq(err.code, rc);
	ASSERT_MSG_HAS(err, "\"LlamaForCausalLM\"");
	ASSERT_MSG_HAS(err, "GptOssForCausalLM");
	ASSERT_MSG_HAS(err, d);
	ck_assert_ptr_null(m.ops);
	ck_assert_ptr_null(m.cfg.layer_sliding);
	ms_model_free(&m);
	ck_assert_ptr_nonnull(strstr(ms_model_arch_names(), "GptOssForCausalLM"));
	free(d);
}
END_TEST

START_TEST(test_model_load_bad_config)
{
	char *d = new_dir();
	struct ms_model m;
	struct ms_err err = {0};
	/* no config.json */
	ck_assert_int_eq(ms_model_load(&m, d, NULL, &err), -ENOENT);
	ASSERT_MSG_HAS(err, "config.json");
	/* a NUL byte after the object: the whole file is read, and refused */
	char *text0 = variant(NULL, NULL), *p0 = xasprintf("%s/config.json", d);
	FILE *f0 = fopen(p0, "wb");
	ck_assert_ptr_nonnull(f0);
	fwrite(text0, 1, strlen(text0) + 1, f0);
	fputs("{}", f0);
	fclose(f0);
	ck_assert_int_eq(ms_model_load(&m, d, NULL, &err), -EINVAL);
	ASSERT_MSG_HAS(err, p0);
	ASSERT_MSG_HAS(err, "not the byte 0x00");
	cJSON_free(text0);
	free(p0);
	/* a config error names the folder and the field */
	char *text = variant("{\"num_attention_heads\":6,\"num_key_value_heads\":4}", NULL);
	write_text(d, "config.json", text);
	cJSON_free(text);
	ck_assert_int_eq(ms_model_load(&m, d, NULL, &err), -EINVAL);
	ASSERT_MSG_HAS(err, d);
	ASSERT_MSG_HAS(err, "num_attention_heads");
	/* a quantization error too: an unknown method lists the known ones */
	text = variant("{\"quantization_config\":{\"quant_method\":\"hqq\"}}", NULL);
	write_text(d, "config.json", text);
	cJSON_free(text);
	ck_assert_int_lt(ms_model_load(&m, d, NULL, &err), 0);
	ASSERT_MSG_HAS(err, d);
	ASSERT_MSG_HAS(err, "\"hqq\"");
	ASSERT_MSG_HAS(err, "mxfp4");
	ASSERT_MSG_HAS(err, "gptq");
	ASSERT_MSG_HAS(err, "quark");
	ck_assert_ptr_null(m.qcfg.method);
	/* a known method's missing field is named */
	text = variant("{\"quantization_config\":{\"quant_method\":\"gptq\"}}", NULL);
	write_text(d, "config.json", text);
	cJSON_free(text);
	ck_assert_int_lt(ms_model_load(&m, d, NULL, &err), 0);
	ASSERT_MSG_HAS(err, "\"bits\"");
	free(d);
}
END_TEST

/* ---- the shared string builder and UTF-8 helpers (config/ms-strbuf.c, ms-utf8.h) ---- */

/* A fixed stream (the same data every run), for lengths and bytes. */
static uint32_t sb_seed = 20250805u;

static uint32_t sb_rnd(void)
{
	sb_seed = sb_seed * 1664525u + 1013904223u;
	return sb_seed >> 8;
}

/* b holds ref[0, n), NUL-terminated; bytes before `from` are taken as
 * checked already. */
static void expect_text_from(const struct ms_strbuf *b, const char *ref, size_t n, size_t from)
{
	ck_assert_uint_eq(b->len, n);
	ck_assert(!b->oom);
	ck_assert_uint_gt(b->cap, n);
	for (size_t i = from; i < n; i++)
		if (b->p[i] != ref[i])
			ck_abort_msg("byte %zu of %zu: 0x%02x, expected 0x%02x", i, n,
				     (unsigned char)b->p[i], (unsigned char)ref[i]);
	ck_assert_int_eq(b->p[n], '\0');
	ck_assert_ptr_eq(ms_strbuf_cstr(b), b->p);
}

static void expect_text(const struct ms_strbuf *b, const char *ref, size_t n)
{
	expect_text_from(b, ref, n, 0);
}

/* Appends of random lengths, and of lengths that end one byte before, at
 * and one byte after the capacity, through many doublings: the text is
 * the concatenation, byte for byte, of a reference built separately. */
START_TEST(test_strbuf_append_growth)
{
	enum { MAX = 1 << 20 };
	char *ref = malloc(MAX), *src = malloc(MAX);
	ck_assert_ptr_nonnull(ref);
	ck_assert_ptr_nonnull(src);
	for (size_t i = 0; i < MAX; i++)
		src[i] = (char)(sb_rnd() & 0xFF); /* NUL bytes included */
	struct ms_strbuf b = {0};
	size_t n = 0, cap = 0;
	for (int step = 0; n < MAX / 2; step++) {
		size_t room = b.cap > n ? b.cap - n - 1 : 0, len;
		switch (sb_rnd() % 6) {
		case 0: len = 0; break;
		case 1: len = room ? room - 1 : 0; break; /* one byte before full */
		case 2: len = room; break;                /* exactly full */
		case 3: len = room + 1; break;            /* one byte over */
		case 4: len = sb_rnd() % 5000; break;
		default: len = sb_rnd() % 40; break;
		}
		if (n + len > MAX / 2)
			len = MAX / 2 - n;
		size_t at = sb_rnd() % (MAX - len);
		if (step % 7 == 0) {
			/* ms_strbuf_str: the same bytes up to their first NUL */
			const char *z = memchr(src + at, '\0', len);
			len = z ? (size_t)(z - (src + at)) : len;
			char *tmp = strndup(src + at, len);
			ck_assert_ptr_nonnull(tmp);
			ms_strbuf_str(&b, tmp);
			free(tmp);
		} else {
			ms_strbuf_add(&b, src + at, len);
		}
		memcpy(ref + n, src + at, len);
		/* all of it after a growth (realloc may move it), else the new bytes */
		if (n + len)
			expect_text_from(&b, ref, n + len, b.cap != cap ? 0 : n);
		cap = b.cap;
		n += len;
	}
	ck_assert_uint_ge(b.cap, (size_t)MAX / 2);
	/* one append many times the capacity */
	size_t big = MAX / 2 - 3;
	ms_strbuf_add(&b, src + 3, big);
	memcpy(ref + n, src + 3, big);
	expect_text(&b, ref, n + big);
	ms_strbuf_free(&b);
	free(ref);
	free(src);
}
END_TEST

/* printf of outputs shorter and longer than the buffer's first block and
 * than what is left of it, after text already there: snprintf's output. */
START_TEST(test_strbuf_printf_long)
{
	static const size_t lens[] = {0, 1, 200, 255, 256, 257, 511, 4000, 70000};
	char *arg = malloc(70001), *want = malloc(200000);
	ck_assert_ptr_nonnull(arg);
	ck_assert_ptr_nonnull(want);
	for (size_t i = 0; i < 70000; i++)
		arg[i] = (char)('a' + sb_rnd() % 26);
	arg[70000] = '\0';
	for (size_t pre = 0; pre < 3; pre++) {
		for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
			struct ms_strbuf b = {0};
			size_t n = pre * 100; /* 0, 100 or 200 bytes before */
			for (size_t j = 0; j < n; j++)
				ms_strbuf_add(&b, "p", 1);
			memset(want, 'p', n);
			int l = (int)lens[k];
			ms_strbuf_printf(&b, "[%d|%.*s|%5.2f]", l, l, arg, 3.14159);
			n += (size_t)snprintf(want + n, 200000 - n, "[%d|%.*s|%5.2f]", l, l, arg, 3.14159);
			ms_strbuf_printf(&b, "%s", "");
			ms_strbuf_printf(&b, "%.*s%c", l, arg + 1, '!');
			n += (size_t)snprintf(want + n, 200000 - n, "%.*s%c", l, arg + 1, '!');
			expect_text(&b, want, n);
			ms_strbuf_free(&b);
		}
	}
	free(arg);
	free(want);
}
END_TEST

/* Each boundary of the encoding, against bytes written out by hand; a lone
 * surrogate keeps its 3-byte form, beyond U+10FFFF is U+FFFD. */
START_TEST(test_utf8_encode_boundaries)
{
	static const struct {
		unsigned cp;
		const char *bytes;
		size_t n;
	} cases[] = {
		{0x00, "\x00", 1},
		{0x41, "\x41", 1},
		{0x7F, "\x7F", 1},
		{0x80, "\xC2\x80", 2},
		{0xE9, "\xC3\xA9", 2},
		{0x7FF, "\xDF\xBF", 2},
		{0x800, "\xE0\xA0\x80", 3},
		{0xD800, "\xED\xA0\x80", 3},
		{0xDFFF, "\xED\xBF\xBF", 3},
		{0xFFFD, "\xEF\xBF\xBD", 3},
		{0xFFFF, "\xEF\xBF\xBF", 3},
		{0x10000, "\xF0\x90\x80\x80", 4},
		{0x1F600, "\xF0\x9F\x98\x80", 4},
		{0x10FFFF, "\xF4\x8F\xBF\xBF", 4},
		{0x110000, "\xEF\xBF\xBD", 3},
		{0x7FFFFFFF, "\xEF\xBF\xBD", 3},
		{0xFFFFFFFF, "\xEF\xBF\xBD", 3},
	};
	struct ms_strbuf b = {0};
	char all[128];
	size_t n = 0;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[4];
		size_t l = ms_utf8_encode(cases[i].cp, out);
		ck_assert_msg(l == cases[i].n && !memcmp(out, cases[i].bytes, l),
			      "U+%04X: %zu bytes, expected %zu", cases[i].cp, l, cases[i].n);
		ms_strbuf_utf8(&b, cases[i].cp);
		memcpy(all + n, cases[i].bytes, cases[i].n);
		n += cases[i].n;
		expect_text(&b, all, n);
	}
	ms_strbuf_free(&b);
}
END_TEST

/* Code points counted as OpenAI and Jinja count them: every byte that is
 * not a continuation byte starts one. */
START_TEST(test_utf8_chars_mixed)
{
	/* "héllo, 世界! 😀": 1, 2, 3 and 4-byte characters */
	static const char mixed[] = "h\xC3\xA9llo, \xE4\xB8\x96\xE7\x95\x8C! \xF0\x9F\x98\x80";
	ck_assert_int_eq(ms_utf8_chars(mixed, strlen(mixed)), 12);
	ck_assert_int_eq(ms_utf8_chars(mixed, 0), 0);
	ck_assert_int_eq(ms_utf8_chars(mixed, 2), 2);  /* "h" and the start of é */
	ck_assert_int_eq(ms_utf8_chars(mixed, 3), 2);  /* "hé" */
	ck_assert_int_eq(ms_utf8_chars("a\0b", 3), 3); /* a NUL is a character */
	ck_assert_int_eq(ms_utf8_chars("\x80\xBF", 2), 0); /* lone continuation bytes */
	ck_assert_int_eq(ms_utf8_chars("\xED\xA0\x80x", 4), 2); /* a lone surrogate, then x */
	/* what ms_strbuf_utf8 writes counts as one each */
	struct ms_strbuf b = {0};
	for (unsigned cp = 0; cp < 0x110000; cp += 0x1001)
		ms_strbuf_utf8(&b, cp);
	ck_assert(!b.oom);
	ck_assert_int_eq(ms_utf8_chars(b.p, b.len), (0x110000 + 0x1000) / 0x1001);
	ms_strbuf_free(&b);
}
END_TEST

START_TEST(test_strbuf_reset_take_free)
{
	struct ms_strbuf b = {0};
	/* empty: "" as text, a fresh "" when taken, nothing allocated */
	ck_assert_str_eq(ms_strbuf_cstr(&b), "");
	char *s = ms_strbuf_take(&b);
	ck_assert_ptr_nonnull(s);
	ck_assert_str_eq(s, "");
	free(s);
	ck_assert_ptr_null(b.p);
	/* reset keeps the memory and empties the text */
	ms_strbuf_str(&b, "hello");
	ms_strbuf_printf(&b, " %d", 42);
	ck_assert_str_eq(ms_strbuf_cstr(&b), "hello 42");
	char *p = b.p;
	size_t cap = b.cap;
	ms_strbuf_reset(&b);
	ck_assert_uint_eq(b.len, 0);
	ck_assert_ptr_eq(b.p, p);
	ck_assert_uint_eq(b.cap, cap);
	ck_assert_str_eq(ms_strbuf_cstr(&b), "");
	ms_strbuf_str(&b, "again");
	ck_assert_ptr_eq(b.p, p);
	ck_assert_str_eq(ms_strbuf_cstr(&b), "again");
	/* take hands over the buffer itself and leaves b empty and usable */
	s = ms_strbuf_take(&b);
	ck_assert_ptr_eq(s, p);
	ck_assert_str_eq(s, "again");
	ck_assert_ptr_null(b.p);
	ck_assert_uint_eq(b.len, 0);
	ck_assert_uint_eq(b.cap, 0);
	ck_assert(!b.oom);
	ms_strbuf_str(&b, "next");
	ck_assert_ptr_ne(b.p, s);
	ck_assert_str_eq(ms_strbuf_cstr(&b), "next");
	free(s);
	/* free empties it, and twice is fine */
	ms_strbuf_free(&b);
	ck_assert_ptr_null(b.p);
	ck_assert_uint_eq(b.len, 0);
	ck_assert_uint_eq(b.cap, 0);
	ms_strbuf_free(&b);
	ck_assert_str_eq(ms_strbuf_cstr(&b), "");
}
END_TEST

/* Every append while oom is set is a no-op and the text reads as NULL;
 * reset clears it. */
static void expect_sticky(struct ms_strbuf *b, const char *text)
{
	size_t len = b->len;
	ms_strbuf_add(b, "xyz", 3);
	ms_strbuf_str(b, "xyz");
	ms_strbuf_printf(b, "%s %d", "xyz", 7);
	ms_strbuf_utf8(b, 0x20AC);
	ck_assert(b->oom);
	ck_assert_uint_eq(b->len, len);
	if (text)
		ck_assert_str_eq(b->p, text); /* the bytes, as they were */
	else
		ck_assert_ptr_null(b->p);
	ck_assert_ptr_null(ms_strbuf_cstr(b));
}

START_TEST(test_strbuf_sticky_oom)
{
	struct ms_strbuf b = {0};
	ms_strbuf_str(&b, "abc");
	b.oom = true;
	expect_sticky(&b, "abc");
	ck_assert_ptr_null(ms_strbuf_take(&b)); /* and b is freed */
	ck_assert_ptr_null(b.p);
	ck_assert(!b.oom);

	/* set on an empty buffer: nothing is ever allocated */
	b.oom = true;
	expect_sticky(&b, NULL);
	ck_assert_ptr_null(ms_strbuf_take(&b));

	/* a length no text can have sets it without touching memory */
	ms_strbuf_str(&b, "abc");
	ms_strbuf_add(&b, "", (size_t)1 << 41);
	expect_sticky(&b, "abc");
	/* reset clears it; appends work again */
	ms_strbuf_reset(&b);
	ck_assert(!b.oom);
	ms_strbuf_str(&b, "ok");
	ck_assert_str_eq(ms_strbuf_cstr(&b), "ok");
	char *s = ms_strbuf_take(&b);
	ck_assert_str_eq(s, "ok");
	free(s);
}
END_TEST

/* ---- runner ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *good = tcase_create("valid");
	tcase_add_test(good, test_gpt_oss_20b);
	tcase_add_test(good, test_v5_rope_parameters);
	tcase_add_test(good, test_layer_types_default);
	tcase_add_test(good, test_sliding_window_only_needed_when_sliding);
	tcase_add_test(good, test_expert_aliases);
	tcase_add_test(good, test_head_dim_default);
	tcase_add_test(good, test_yarn_defaults);
	tcase_add_test(good, test_plain_rope);
	tcase_add_test(good, test_eos_forms);
	tcase_add_test(good, test_config_load_from_folder);
	suite_add_tcase(s, good);

	TCase *bad = tcase_create("invalid");
	tcase_add_test(bad, test_heads_not_multiple_of_kv);
	tcase_add_test(bad, test_layer_types_wrong_length);
	tcase_add_test(bad, test_layer_types_bad_entry);
	tcase_add_test(bad, test_unknown_rope_type);
	tcase_add_test(bad, test_bad_rope_values);
	tcase_add_test(bad, test_missing_required_fields);
	tcase_add_test(bad, test_nonpositive_sizes);
	tcase_add_test(bad, test_oversized_sizes);
	tcase_add_test(bad, test_fractional_integer_field);
	tcase_add_test(bad, test_non_finite_and_duplicates);
	tcase_add_test(bad, test_top_k_exceeds_experts);
	tcase_add_test(bad, test_odd_head_dim);
	tcase_add_test(bad, test_invalid_json);
	tcase_add_test(bad, test_root_not_object);
	tcase_add_test(bad, test_bad_architectures);
	tcase_add_test(bad, test_bad_bools);
	suite_add_tcase(s, bad);

	TCase *q = tcase_create("quant");
	tcase_add_test(q, test_quant_unknown_method);
	tcase_add_test(q, test_quant_bad_config);
	tcase_add_test(q, test_quant_none);
	tcase_add_test(q, test_quant_not_converted);
	suite_add_tcase(s, q);

	TCase *m = tcase_create("model");
	tcase_add_test(m, test_model_load_unknown_arch);
	tcase_add_test(m, test_model_load_bad_config);
	suite_add_tcase(s, m);

	TCase *sb = tcase_create("strbuf");
	tcase_add_test(sb, test_strbuf_append_growth);
	tcase_add_test(sb, test_strbuf_printf_long);
	tcase_add_test(sb, test_utf8_encode_boundaries);
	tcase_add_test(sb, test_utf8_chars_mixed);
	tcase_add_test(sb, test_strbuf_reset_take_free);
	tcase_add_test(sb, test_strbuf_sticky_oom);
	suite_add_tcase(s, sb);
	return s;
}

int main(void)
{
	snprintf(g_root, sizeof(g_root), "/tmp/ms-test-config.XXXXXX");
	if (!mkdtemp(g_root)) {
		perror("mkdtemp");
		return 1;
	}
	int failed = ms_check_run(config_suite());
	nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return failed ? 1 : 0;
}
