// models/gpt_oss/args.h — the gpt-oss architecture and its mapping to
// Hugging Face's config.json (model_type gpt_oss; HF's defaults for absent keys).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "src/nn/attention_variants.h"

namespace titan::gpt_oss {

struct Args {
  int64_t vocab_size = 201088, dim = 2880, n_layers = 36, n_heads = 64, n_kv_heads = 8, head_dim = 64;
  int64_t intermediate = 2880, num_experts = 128, top_k = 4;
  int64_t sliding_window = 128;
  std::vector<bool> sliding;  // per layer
  nn::AttentionVariant attn;  // mask of full layers, softcap, bias (model.attn_*)
  std::vector<int64_t> layer_windows() const;  // per layer: sliding_window or 0
  double rope_theta = 150000.0, norm_eps = 1e-5, swiglu_limit = 7.0;
  // YaRN (HF "rope_scaling")
  double yarn_factor = 32.0, beta_fast = 32.0, beta_slow = 1.0;
  int64_t original_max_position_embeddings = 4096, max_position_embeddings = 131072;
  bool yarn_truncate = false;
  bool tie_embeddings = false;
  // load balancing (titan's; not in the HF config): Switch auxiliary loss
  // coefficient, and the auxiliary-loss-free bias update rate (0 = off)
  double aux_loss_coeff = 0.0, bias_update_rate = 0.0;

  static Args from_hf_json(const std::string& json);
  std::string to_hf_json() const;
  void validate() const;

  int64_t num_params() const;
  int64_t num_embedding_params() const { return vocab_size * dim; }
  int64_t num_expert_params_per_layer() const;
  // per token: only top_k of num_experts counted, the embedding lookup not (OpenAI's model card)
  int64_t num_active_params() const;
  // 6 * (matmul params with experts at top_k/num_experts, lm_head included)
  // + 12 * sum over layers heads*head_dim*min(window, seq)
  double flops_per_token(int64_t seq_len) const;
};

}  // namespace titan::gpt_oss
