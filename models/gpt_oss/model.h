// models/gpt_oss/model.h — GptOssForCausalLM, numerically as Hugging Face's.
// Parameter names are HF's (model.layers.0.mlp.experts.gate_up_proj, ...).
// The MoE block routes through comms::dispatch/combine; `ep_group` (set by
// an expert-parallel plan from outside) spreads the experts over ranks.
#pragma once
#include <memory>
#include <vector>

#include "comms/process_group.h"
#include "models/causal_lm.h"
#include "models/gpt_oss/args.h"
#include "src/nn/layer_list.h"
#include "src/nn/layers.h"

namespace titan::gpt_oss {

class Attention : public nn::Module {
 public:
  Attention(const Args& a, bool sliding);
  Tensor forward(const Tensor& x, const nn::AttentionInputs& in) const;  // x [B, S, dim]
  nn::Linear *q_proj, *k_proj, *v_proj, *o_proj;
  Tensor sinks;  // [n_heads]
  int64_t head_dim, window;
  nn::AttentionVariant variant;
  Tensor bias;  // attn_bias: ALiBi slopes [Hq] (constant) or the parameter relative_bias [Hq, 2R-1]
};

class Experts : public nn::Module {
 public:
  explicit Experts(const Args& a);
  // rows grouped by local expert -> [R, dim]
  Tensor forward(const Tensor& x, const std::vector<int64_t>& counts) const;
  Tensor gate_up_proj;       // [E, dim, 2I] (gate = even columns, up = odd)
  Tensor gate_up_proj_bias;  // [E, 2I]
  Tensor down_proj;          // [E, I, dim]
  Tensor down_proj_bias;     // [E, dim]
  double limit;
};

class MoE : public nn::Module {
 public:
  explicit MoE(const Args& a);
  Tensor forward(const Tensor& x) const;  // [B, S, dim]
  nn::Linear* router;
  Experts* experts;
  int64_t num_experts, top_k;
  comms::PG ep_group;  // null: all experts local
  double aux_loss_coeff = 0.0;
  // auxiliary-loss-free balancing: added to the router logits for the top-k
  // choice only (the weights come from the unbiased logits); not trained
  Tensor expert_bias;  // [E]
  mutable std::vector<int64_t> last_routed;  // (token, k) pairs this rank routed to each expert, last forward
  mutable Tensor last_aux_loss;
};

class DecoderLayer : public nn::Module {
 public:
  DecoderLayer(const Args& a, int64_t layer);
  Tensor forward(const Tensor& x, const nn::AttentionInputs& in) const;
  nn::Norm *input_layernorm, *post_attention_layernorm;
  Attention* self_attn;
  MoE* mlp;
};

using LayerList = nn::LayerList<DecoderLayer>;

class Backbone : public nn::Module {
 public:
  explicit Backbone(const Args& a);
  nn::Embedding* embed_tokens;
  LayerList* layers;
  nn::Norm* norm;
};

class GptOss : public DecoderLM<Args, Backbone> {
 public:
  explicit GptOss(const Args& a);
  Tensor forward(const Tensor& tokens, const Tensor& doc_ids) override;  // [B, S] -> [B, S, vocab]
  using CausalLM::forward;
  void init_weights(uint64_t seed) override;      // HF: normal(0, 0.02), biases 0, norms 1
  std::string describe() const override;
  Tensor aux_loss() const override;
  std::vector<std::vector<int64_t>> routed_counts() const override;
  void update_router_bias(const std::vector<std::vector<double>>& global_counts) override;
  nn::Linear* lm_head = nullptr;

 private:
  Tensor cos_, sin_;  // YaRN tables [S, head_dim/2] for the last seq_len seen
};

// YaRN RoPE tables as HF computes them: [S, head_dim/2], both scaled by the
// attention factor 0.1 * ln(factor) + 1.
std::pair<Tensor, Tensor> yarn_rope_tables(const Args& a, int64_t seq_len, Device d);

}  // namespace titan::gpt_oss
