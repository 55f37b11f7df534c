// models/qwen3/args.h — the Qwen3-family architecture, and its mapping to
// the YAML job config and to Hugging Face's config.json.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "src/config/job_config.h"
#include "src/nn/attention_variants.h"

namespace titan::qwen3 {

struct Args {
  int64_t dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, hidden_dim = 0, vocab_size = 0;
  bool qk_norm = true;
  std::string norm_type = "rmsnorm";
  double norm_eps = 1e-6;
  std::string activation = "silu";
  double rope_theta = 1e6;
  bool tie_embeddings = false;
  std::vector<int64_t> layer_window;  // per layer: 0 = full attention (attn.mask), > 0 = sliding window
  nn::AttentionVariant attn;          // mask of full layers, softcap, bias (model.attn_*)
  int64_t max_position_embeddings = 40960;
  // MoE ablation (titan's, not HF Qwen3's): replaces every layer's MLP
  bool moe = false;
  int64_t moe_experts = 8, moe_top_k = 2, moe_hidden_dim = 256;
  std::string moe_score = "softmax";  // softmax | sigmoid (router score function)
  bool moe_renormalize = true;        // weights of the chosen experts divided by their sum
  bool moe_shared_expert = false;     // plus one always-on expert of moe_hidden_dim
  double moe_aux_loss_coeff = 0.0, moe_bias_update_rate = 0.0;

  static Args from_job(const JobConfig::Model& m);
  // HF config.json content (model_type qwen3), HF's defaults for absent keys.
  static Args from_hf_json(const std::string& json);
  std::string to_hf_json() const;
  void validate() const;

  // Counts (TorchTitan conventions; see flops_per_token).
  int64_t num_params() const;
  int64_t num_embedding_params() const { return vocab_size * dim; }
  int64_t num_matmul_params() const;  // layers' projections (MoE: the active experts) + lm_head
  int64_t mlp_params(bool active) const;  // one layer's MLP (MoE: router + experts, all or top-k)
  // 6 * matmul params (lm_head included) + 12 * sum over layers of
  // heads * head_dim * min(window, seq): fwd + bwd FLOPs per token.
  double flops_per_token(int64_t seq_len) const;
};

}  // namespace titan::qwen3
