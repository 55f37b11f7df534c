// models/decoder/model.h — titan's decoder: Qwen3, Qwen3-MoE, gpt-oss and
// Llama-3 as configurations of one block (models/decoder/args.h), each
// numerically as Hugging Face's class for that configuration.
//
// Parameter names are HF's state-dict keys (model.layers.0.self_attn.q_proj.weight,
// ...); the experts are stored stacked per layer ([E, ...] tensors: gpt-oss's
// own layout; Qwen3-MoE's per-expert linears are split out at export,
// models/hf_layout.h). The model includes nothing from parallel/: plans
// are applied from outside through named_parameters(), the blocks and the
// module hooks, which every child runs through nn::Module::call.
#pragma once
#include <memory>
#include <vector>

#include "comms/process_group.h"
#include "models/causal_lm.h"
#include "models/decoder/args.h"
#include "src/nn/attention_variants.h"
#include "src/nn/layer_list.h"
#include "src/nn/layers.h"

namespace titan::decoder {

// The gated activation of the MLPs and experts: act(gate) * up, with
// gate <= limit and |up| <= limit when limit > 0; oai_swiglu is gpt-oss's
// gate * sigmoid(1.702 gate) * (up + 1).
Tensor gated_activation(const Tensor& gate, const Tensor& up, const std::string& activation, double limit);

class Attention : public nn::Module {
 public:
  Attention(const Args& a, int64_t window);
  // x [B, S, dim], in.cos/sin [S, head_dim/2] -> [B, S, dim]
  Tensor forward(const Tensor& x, const nn::AttentionInputs& in) const;
  nn::Linear *q_proj, *k_proj, *v_proj, *o_proj;
  nn::Norm *q_norm = nullptr, *k_norm = nullptr;  // over head_dim, before RoPE
  Tensor sinks;                                    // [Hq] (attn_sinks)
  int64_t head_dim, window;
  nn::AttentionVariant variant;
  // attn_bias: ALiBi slopes [Hq] (a constant) or the parameter relative_bias
  // [Hq, 2R-1]; a tensor-parallel shard keeps its heads' rows
  Tensor bias;
};

class MLP : public nn::Module {  // down(act(gate(x), up(x)))
 public:
  MLP(const Args& a, int64_t hidden);
  Tensor forward(const Tensor& x) const;
  nn::Linear *gate_proj, *up_proj, *down_proj;
  std::string activation;
  double limit;
};

// E experts stored stacked; rows arrive grouped by (local) expert.
class Experts : public nn::Module {
 public:
  explicit Experts(const Args& a);
  Tensor forward(const Tensor& x, const std::vector<int64_t>& counts) const;  // [R, dim] -> [R, dim]
  bool fused;            // gpt-oss: gate_up_proj [E, dim, 2I], gate = even columns, up = odd
  Tensor gate_up_proj, gate_up_proj_bias;                    // fused: [E, dim, 2I], [E, 2I]
  Tensor gate_proj, up_proj, gate_proj_bias, up_proj_bias;   // else: [E, dim, I], [E, I]
  Tensor down_proj, down_proj_bias;                          // [E, I, dim], [E, dim]
  std::string activation;
  double limit;
  double down_bias_scale = 1.0;  // tensor parallel: the down bias added on one rank only
};

class MoE : public nn::Module {
 public:
  explicit MoE(const Args& a);
  Tensor forward(const Tensor& x) const;  // [B, S, dim]
  nn::Linear* router;  // HF name: "router" (gpt-oss) or "gate" (Qwen3-MoE)
  Experts* experts;
  MLP* shared_expert = nullptr;
  int64_t num_experts, top_k;
  bool sigmoid_scores, renormalize;
  double aux_loss_coeff;
  double aux_loss_scale = 1.0;  // tensor parallel: 0 on all tp ranks but one (they route alike)
  // auxiliary-loss-free balancing: added to the scores for the top-k choice
  // only (the weights come from the unbiased scores); not trained
  Tensor expert_bias;  // [E]
  comms::PG ep_group;  // null: all experts local (an expert-parallel plan sets it)
  mutable std::vector<int64_t> last_routed;  // (token, k) pairs this rank routed to each expert, last forward
  mutable Tensor last_aux_loss;
};

class DecoderLayer : public nn::Module {
 public:
  DecoderLayer(const Args& a, int64_t layer);
  Tensor forward(const Tensor& x, const nn::AttentionInputs& in) const;
  nn::Norm *input_layernorm, *post_attention_layernorm;
  Attention* self_attn;
  MLP* mlp = nullptr;  // a dense layer
  MoE* moe = nullptr;  // an MoE layer (HF name "mlp" either way)
  nn::Module* ffn() const { return moe ? (nn::Module*)moe : (nn::Module*)mlp; }
};

using LayerList = nn::LayerList<DecoderLayer>;

class Backbone : public nn::Module {  // HF's "model."
 public:
  explicit Backbone(const Args& a);
  nn::Embedding* embed_tokens;
  LayerList* layers;
  nn::Norm* norm;
};

class Decoder : public CausalLM {
 public:
  explicit Decoder(const Args& a);
  // tokens int [B, S] -> logits [B, S, vocab]
  Tensor forward(const Tensor& tokens, const Tensor& doc_ids) override {
    return forward_chunk(tokens, doc_ids, ModelChunk{});
  }
  Tensor forward_chunk(const Tensor& x, const Tensor& doc_ids, const ModelChunk& chunk) override;
  using CausalLM::forward;
  using CausalLM::aux_loss;
  using CausalLM::routed_counts;
  // HF init: normal(0, 0.02) for linears, embeddings, experts and sinks, norms 1,
  // biases 0; in named_parameters() order from one seeded generator.
  void init_weights(uint64_t seed) override;
  std::string hf_config_json() const override { return args_.to_hf_json(); }
  HfLayout hf_layout(const std::vector<Region>& params) const override;
  std::vector<nn::Module*> blocks() override;
  void set_activation_checkpoint(int64_t every, bool save_ops = false) override {
    activation_checkpoint = every;
    checkpoint_save_ops = save_ops;
  }
  int64_t vocab_size() const override { return args_.vocab_size; }
  int64_t hidden_size() const override { return args_.dim; }
  int64_t expected_num_params() const override { return args_.num_params(); }
  int64_t num_embedding_params() const override { return args_.num_embedding_params(); }
  double flops_per_token(int64_t seq) const override { return args_.flops_per_token(seq); }
  Tensor loss_targets(const Tensor& targets) const override;
  std::string describe() const override { return args_.describe(); }
  Tensor aux_loss(const ModelChunk& chunk) const override;
  std::vector<std::vector<int64_t>> routed_counts(const ModelChunk& chunk) const override;
  void update_router_bias(const std::vector<std::vector<double>>& global_counts) override;
  std::vector<std::pair<std::string, Tensor*>> buffers() override;  // MoE expert biases when balancing updates them
  const Args& args() const { return args_; }

  Backbone* model = nullptr;
  nn::Linear* lm_head = nullptr;  // absent when tied
  int64_t activation_checkpoint = 0;  // every how many blocks (0: none)
  bool checkpoint_save_ops = false;   // op-level selective checkpointing in those blocks

 private:
  Args args_;
  Tensor cos_, sin_;  // RoPE tables [S, head_dim/2] for the last seq_len seen
  std::pair<int64_t, int64_t> rope_shard_{1, 0};  // the sequence shard (parts, index) they were built for
};

}  // namespace titan::decoder
