/*
 * inspect.c: `moeserve inspect`, a checkpoint described as the daemon
 * would load it: architecture and sizes, the KV cache's cost, the
 * quantization scheme of each tensor group, the kernel chosen for each and
 * why, and the weight bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>

#include "cli.h"
#include "cpu.h"
#include "load.h"

static void print_bytes(uint64_t b)
{
	if (b >= (1ull << 30))
		printf("%.2f GiB", (double)b / (double)(1ull << 30));
	else if (b >= (1ull << 20))
		printf("%.2f MiB", (double)b / (double)(1ull << 20));
	else
		printf("%.1f KiB", (double)b / 1024.0);
}

/* What the KV cache costs at its dtype: a token in one layer; a token of
 * a long context (full layers: a sliding layer keeps its window only); the
 * tokens a GiB holds; the model's whole context. */
static void print_kv(const struct ms_model *m, int64_t n_sliding)
{
	const struct ms_kv_geom *g = &m->lm.kv;
	int64_t full = g->n_layers - n_sliding, ctx = m->cfg.max_pos;
	double layer = ms_kv_geom_bytes(g, 1) / g->n_layers;
	double per_token = ms_kv_geom_bytes_per_position(g);
	double whole = ms_kv_geom_bytes(g, ctx), windows = whole - per_token * (double)ctx;
	printf("kv cache:      %s, %.0f bytes a token a layer", ms_kv_dtype_name(g->dtype), layer);
	if (full)
		printf("; %.0f a token of context (%lld full layer%s), %.0f tokens per GiB", per_token,
		       (long long)full, full == 1 ? "" : "s", 1073741824.0 / per_token);
	if (n_sliding)
		printf("; %.1f MiB for the windows of %lld sliding layer%s", windows / 1048576.0,
		       (long long)n_sliding, n_sliding == 1 ? "" : "s");
	printf("; the whole context: %.2f GiB\n", whole / 1073741824.0);
	const char *ap = ms_attn_products_name(m->be, g->dtype);
	printf("attn products: %s%s\n", ap,
	       strcmp(ap, "bf16") ? ""
				  : " (q and the probabilities rounded to bf16; --attn-products f32 keeps f32)");
}


/* The architecture and sizes. */
static void print_config(const struct ms_model *m, const char *dir)
{
	const struct ms_model_config *cf = &m->cfg;
	int64_t n_sliding = 0;
	for (int64_t i = 0; i < cf->n_layers; i++)
		n_sliding += cf->layer_sliding[i];
	printf("model:         %s\n", dir);
	printf("architecture:  %s\n", cf->arch);
	printf("layers:        %lld (%lld sliding, window %lld; %lld full)\n", (long long)cf->n_layers,
	       (long long)n_sliding, (long long)cf->sliding_window, (long long)(cf->n_layers - n_sliding));
	printf("hidden:        %lld\n", (long long)cf->hidden);
	printf("attention:     %lld heads x %lld, %lld kv heads, sinks\n", (long long)cf->n_heads,
	       (long long)cf->head_dim, (long long)cf->n_kv_heads);
	printf("experts:       %lld, top-%lld, intermediate %lld, swiglu limit %g\n",
	       (long long)cf->n_experts, (long long)cf->top_k, (long long)cf->intermediate,
	       cf->swiglu_limit);
	printf("vocab:         %lld\n", (long long)cf->vocab);
	if (cf->rope.type == MS_ROPE_YARN)
		printf("rope:          yarn, theta %g, factor %g, original context %lld, beta %g/%g, "
		       "truncate %s, attention factor %.6f\n",
		       cf->rope.theta, cf->rope.factor, (long long)cf->rope.original_max_pos,
		       cf->rope.beta_fast, cf->rope.beta_slow, cf->rope.truncate ? "true" : "false",
		       cf->rope.attention_factor);
	else
		printf("rope:          default, theta %g\n", cf->rope.theta);
	printf("context:       %lld (max_position_embeddings)\n", (long long)cf->max_pos);
	print_kv(m, n_sliding);
	printf("quantization:  %s (from %s)\n", m->qcfg.method->name, m->qcfg.source);
	printf("expert layout: %s\n", m->moe_layout ? m->moe_layout : "?");
}

/* The checkpoint, the backend, and each tensor group's scheme and kernel. */
static void print_placement(const struct ms_model *m, struct ms_backend *be)
{
	char flags[256];
	printf("checkpoint:    %d file%s, %zu tensors\n", m->ck.n_files, m->ck.n_files == 1 ? "" : "s",
	       m->ck.n_tensors);
	printf("backend:       %s, kernels %s, %d threads (pinned)\n", be->name, be->kernels,
	       be->threads);
	const struct ms_cpu *cpu = ms_cpu_from(be);
	if (cpu) {
		printf("numa:          %d node%s%s\n", cpu->numa_nodes, cpu->numa_nodes == 1 ? "" : "s",
		       cpu->numa_interleave ? ", weights interleaved" : "");
		printf("cpu features:  %s\n", ms_cpu_flags_str(cpu->cpu_flags, flags, sizeof(flags)));
	}
	printf("\n%-18s %-19s %-6s %-13s %-10s %5s %12s  %s\n", "tensor group", "scheme", "format",
	       "activations", "kernel", "count", "bytes", "why this kernel");
	uint64_t total = 0;
	for (int i = 0; i < m->n_groups; i++) {
		const struct ms_tensor_group *g = &m->groups[i];
		printf("%-18s %-19s %-6s %-13s %-10s %5d %12llu  %s\n", g->name, g->scheme, g->format,
		       g->act, g->kernel, g->count, (unsigned long long)g->bytes, g->why ? g->why : "");
		total += g->bytes;
	}
	printf("\ntotal weight bytes: %llu (", (unsigned long long)total);
	print_bytes(total);
	printf(")\nload time: %.3f s\n", m->load_seconds);
}

int ms_cmd_inspect(int argc, char **argv)
{
	struct ms_cli_options o;
	int ex = ms_cli_parse(MS_CLI_INSPECT, argc, argv, &o);
	if (ex != MS_CLI_GO_ON)
		return ex;
	const char *dir = o.s.model ? o.s.model : ms_cli_default_model();
	struct ms_cli_model lm;
	ex = ms_cli_load(&o, dir, &lm);
	if (ex == EX_OK) {
		print_config(&lm.m, dir);
		print_placement(&lm.m, lm.be);
		ms_cli_model_free(&lm);
		ex = fflush(stdout) == 0 ? EX_OK : EX_IOERR;
	}
	ms_cli_options_free(&o);
	return ex;
}
