/*
 * gpt-oss.h: pieces of the GPT-OSS forward pass that tests check on their
 * own (the model itself is reached through ms_model_gpt_oss in model.h).
 */
#ifndef MS_GPT_OSS_H
#define MS_GPT_OSS_H

#include <stdint.h>

#include "model-config.h"
#include "model.h"

/* RoPE inverse frequencies [head_dim / 2] and the factor applied to cos and
 * sin (YaRN's attention scaling; 1 for plain RoPE), per transformers'
 * _compute_yarn_parameters with truncate honoured. */
void ms_gptoss_rope_freqs(const struct ms_model_config *c, double *inv_freq, float *scale);

/* Attention probabilities with a sink: s[0..n) holds scaled scores on entry
 * and p_j = exp(s_j) / (sum_i exp(s_i) + exp(sink)) on return; the sink's
 * own share is dropped (it has no value vector). */
void ms_sink_softmax(float *s, int64_t n, float sink);

#endif
