// models/qwen3/model.h — Qwen3ForCausalLM, numerically as Hugging Face's.
//
// Parameter names are HF's state-dict keys (model.layers.0.self_attn.q_proj.weight, ...).
// The model includes nothing from parallel/: plans are applied from outside
// through named_parameters() and the layer list.
#pragma once
#include <memory>
#include <vector>

#include "models/causal_lm.h"
#include "models/qwen3/args.h"
#include "src/nn/attention_variants.h"
#include "src/nn/layer_list.h"
#include "src/nn/layers.h"

namespace titan::qwen3 {

class Attention : public nn::Module {
 public:
  Attention(const Args& a, int64_t window);
  // x [B, S, dim], in.cos/sin [S, head_dim/2] -> [B, S, dim]
  Tensor forward(const Tensor& x, const nn::AttentionInputs& in) const;
  nn::Linear *q_proj, *k_proj, *v_proj, *o_proj;
  nn::Norm *q_norm = nullptr, *k_norm = nullptr;  // over head_dim, before RoPE
  int64_t n_heads, n_kv_heads, head_dim, window;
  nn::AttentionVariant variant;
  // attn_bias: ALiBi slopes [Hq] (a constant) or the parameter relative_bias
  // [Hq, 2R-1]; a tensor-parallel shard keeps its heads' rows
  Tensor bias;
};

class MLP : public nn::Module {  // down(act(gate(x)) * up(x))
 public:
  MLP(const Args& a);
  Tensor forward(const Tensor& x) const;
  nn::Linear *gate_proj, *up_proj, *down_proj;
  bool gelu;
};

class MoEMLP;

class DecoderLayer : public nn::Module {
 public:
  DecoderLayer(const Args& a, int64_t layer);
  Tensor forward(const Tensor& x, const nn::AttentionInputs& in) const;
  nn::Norm *input_layernorm, *post_attention_layernorm;
  Attention* self_attn;
  MLP* mlp = nullptr;     // dense
  MoEMLP* moe = nullptr;  // the MoE ablation (args.moe)
};

using LayerList = nn::LayerList<DecoderLayer>;

class Backbone : public nn::Module {  // HF's Qwen3Model ("model.")
 public:
  explicit Backbone(const Args& a);
  nn::Embedding* embed_tokens;
  LayerList* layers;
  nn::Norm* norm;
};

class Qwen3 : public DecoderLM<Args, Backbone> {
 public:
  explicit Qwen3(const Args& a);
  // tokens int [B, S] -> logits [B, S, vocab]
  Tensor forward(const Tensor& tokens, const Tensor& doc_ids) override;
  using CausalLM::forward;
  // HF init: normal(0, 0.02) for linears and embeddings, norms 1, biases 0; in
  // named_parameters() order from one seeded generator.
  void init_weights(uint64_t seed) override;
  std::string describe() const override;
  Tensor aux_loss() const override;
  std::vector<std::vector<int64_t>> routed_counts() const override;
  void update_router_bias(const std::vector<std::vector<double>>& global_counts) override;
  nn::Linear* lm_head = nullptr;  // absent when tied

 private:
  Tensor cos_, sin_;  // RoPE tables [S, head_dim/2] for the last seq_len seen
};

// RoPE tables for positions 0..S-1 (HF's inv_freq = theta^(-2i/d)).
std::pair<Tensor, Tensor> rope_tables(int64_t seq_len, int64_t head_dim, double theta, Device d);

}  // namespace titan::qwen3
