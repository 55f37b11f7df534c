// models/decoder/args.h — the architecture of titan's one decoder family.
//
// Qwen3, Qwen3-MoE, gpt-oss and Llama-3 are configurations of this one block
// (src/config/model_families.h holds their presets); every field below applies to
// every member. The mapping to Hugging Face's config.json is honest: a
// configuration one of HF's classes represents exactly is written as that
// class (Qwen3ForCausalLM, Qwen3MoeForCausalLM, GptOssForCausalLM,
// LlamaForCausalLM); anything else as titan's decoder (model_type
// "titan_decoder", every field under "titan_decoder"), never as a class HF
// would load and run differently.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "src/config/job_config.h"
#include "src/nn/attention_variants.h"

namespace titan::decoder {

// RoPE frequency scaling (HF's rope_scaling).
struct RopeScaling {
  std::string type = "none";  // none | yarn | llama3
  double factor = 1.0;
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn
  bool truncate = true;                      // yarn: HF's default; gpt-oss sets false
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  bool operator==(const RopeScaling&) const = default;
};

struct Args {
  std::string family = "qwen3";  // qwen3 | qwen3_moe | gpt_oss | llama3: parameter names and HF class follow it
  int64_t vocab_size = 0, dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t hidden_dim = 0;  // dense MLP intermediate size
  // norms
  std::string norm_type = "rmsnorm";  // rmsnorm | layernorm
  double norm_eps = 1e-6;
  // attention
  bool qk_norm = true;                // per-head norm of q and k before RoPE
  bool attn_proj_bias = false;        // biases on q, k, v, o projections
  bool attn_sinks = false;            // a learned sink logit per head in every softmax
  std::vector<int64_t> layer_window;  // per layer: 0 = full attention (attn.mask), > 0 = sliding window
  nn::AttentionVariant attn;          // mask of full layers, softcap, score bias
  double rope_theta = 1e6;
  RopeScaling rope;
  int64_t max_position_embeddings = 40960;
  // gated MLP (dense and experts): down(act(gate) * up)
  std::string activation = "silu";  // silu | gelu | oai_swiglu (gpt-oss: gate*sigmoid(1.702 gate)*(up+1))
  double swiglu_limit = 0.0;        // > 0: gate clamped above at limit, up to [-limit, limit]
  // MoE
  bool moe = false;
  int64_t moe_experts = 8, moe_top_k = 2, moe_hidden_dim = 256;
  std::string moe_score = "softmax";  // softmax | sigmoid router scores
  bool moe_renormalize = true;        // chosen weights divided by their sum (HF norm_topk_prob)
  bool moe_shared_expert = false;     // plus one always-on expert of moe_hidden_dim
  bool moe_router_bias = false;       // router linear has a bias
  bool moe_expert_bias = false;       // expert projections have biases
  int64_t moe_every = 1;              // layer i is MoE when (i + 1) % moe_every == 0 (HF decoder_sparse_step)
  int64_t moe_first_dense = 0;        // the first k layers stay dense
  double moe_aux_loss_coeff = 0.0, moe_bias_update_rate = 0.0;  // load balancing (titan's)
  bool moe_route_bias = false;  // the router's choice adds per-expert biases (auxiliary-loss-free balancing):
                                // model state, saved in checkpoints and titan-layout exports
  bool tie_embeddings = false;
  // read from a titan_decoder config.json (or titan 0.8's titan_moe): the file
  // holds titan's own tensor layout, and an export keeps it (not an HF class)
  bool titan_layout = false;

  bool is_moe_layer(int64_t i) const { return moe && i >= moe_first_dense && (i + 1) % moe_every == 0; }
  bool any_dense_layer() const;
  // gpt-oss's storage: experts' gate and up interleaved in one [E, dim, 2I] tensor, router "router"
  bool fused_experts() const { return family == "gpt_oss"; }

  static Args from_job(const JobConfig::Model& m);  // after family defaults (family.h)
  // HF config.json content: qwen3, qwen3_moe, gpt_oss, llama or titan_decoder (HF's defaults for absent keys)
  static Args from_hf_json(const std::string& json);
  std::string to_hf_json() const;
  // The HF class that represents this configuration exactly, or "" with *why it cannot.
  std::string hf_architecture(std::string* why = nullptr) const;
  void validate() const;

  // Counts (TorchTitan conventions; see flops_per_token).
  int64_t num_params() const;
  int64_t num_embedding_params() const { return vocab_size * dim; }
  int64_t num_active_params() const;  // MoE: top_k experts counted, the embedding lookup not (OpenAI's card)
  int64_t num_matmul_params() const;  // projections (MoE: the active experts) + router + lm_head
  // 6 * matmul params (lm_head included) + 12 * sum over layers of
  // heads * head_dim * min(window, seq): fwd + bwd FLOPs per token.
  double flops_per_token(int64_t seq_len) const;
  std::string describe() const;
};

}  // namespace titan::decoder
