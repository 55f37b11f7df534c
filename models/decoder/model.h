// models/decoder/model.h — titan's decoder: Qwen3, Qwen3-MoE, gpt-oss,
// Llama-3, Mixtral and OLMo 2 as configurations of one block (models/decoder/args.h), each
// numerically as Hugging Face's class for that configuration.
//
// Parameter names are HF's state-dict keys (model.layers.0.self_attn.q_proj.weight,
// ...); the experts are stored stacked per layer ([E, ...] tensors: gpt-oss's
// own layout; Qwen3-MoE's per-expert linears are split out at export,
// models/hf_layout.h). The model includes nothing from parallel/: plans
// are applied from outside through named_parameters(), the blocks and the
// module hooks, which every child runs through nn::Module::call.
#pragma once
#include <optional>

#include "src/ops/float8.h"
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comms/moe_dispatch.h"
#include "comms/process_group.h"
#include "models/hf_layout.h"
#include "models/decoder/args.h"
#include "src/nn/attention_variants.h"
#include "src/nn/layer_list.h"
#include "src/nn/layers.h"

namespace titan::decoder {

// The gated activation of the MLPs and experts: act(gate) * up, with
// gate <= limit and |up| <= limit when limit > 0; oai_swiglu is gpt-oss's
// gate * sigmoid(1.702 gate) * (up + 1).
Tensor gated_activation(const Tensor& gate, const Tensor& up, Activation activation, double limit);

// Grouped-query attention (q/k/v projections), or multi-head latent attention (kv_lora_rank > 0, DeepSeek-V2/V3):
// q from x (q_proj) or from a normed latent (q_a_proj -> q_a_layernorm -> q_b_proj) as [nope | rope] per head;
// kv_a_proj_with_mqa gives each token a latent [kv_lora_rank] and one RoPE key part [qk_rope_head_dim] shared by
// every head; kv_b_proj expands the normed latent to each head's [nope key | value]. HF's names.
class Attention : public nn::Module {
 public:
  Attention(const Args& a, int64_t layer);  // layer: its window, RoPE and chunk (Args::layer_window, nope_layer, layer_chunk)
  // x [B, S, dim], in.cos/sin [S, rope dims/2] -> [B, S, dim]
  Tensor forward(const Tensor& x, const nn::AttentionInputs& in) const;
  nn::Linear *q_proj = nullptr, *k_proj = nullptr, *v_proj = nullptr, *o_proj = nullptr;
  // MLA (null otherwise; q_a_proj / q_b_proj only with q_lora_rank > 0, else q_proj)
  nn::Linear *q_a_proj = nullptr, *q_b_proj = nullptr, *kv_a_proj = nullptr, *kv_b_proj = nullptr;
  nn::Norm *q_a_norm = nullptr, *kv_a_norm = nullptr;
  int64_t nope_dim = 0, rope_dim = 0, v_dim = 0, kv_rank = 0;  // MLA's widths
  bool rope_interleave = false;  // the rotated dims come in adjacent pairs (DeepSeek's and Llama 4's weights)
  bool nope = false;              // no RoPE: a global layer of iRoPE (Llama 4)
  int64_t chunk = 0;              // > 0: chunked local attention
  double l2_norm_eps = 0;         // > 0: q and k RMS-normed per head after RoPE, without weights (qk_l2_norm)
  bool tuned_temperature = false;  // a NoPE layer's queries times in.nope_q_scale (nope_attn_scale)
  // the latents' RMSNorms: HF's DeepseekV3RMSNorm(rank) at its default epsilon, whatever rms_norm_eps says
  static constexpr double kLatentNormEps = 1e-6;
  Tensor forward_mla(const Tensor& x, const nn::AttentionInputs& in) const;
  // RoPE on x [B, S, H, Dr] with this layer's tables (the sliding layers' own under rope_local_theta), its dims
  // taken as adjacent pairs first under rope_interleave
  Tensor rotary(const Tensor& x, const nn::AttentionInputs& in) const;
  // before RoPE: over head_dim, or (qk_norm_scope projection) over the whole projection [Hq * D] / [Hkv * D]
  nn::Norm *q_norm = nullptr, *k_norm = nullptr;
  bool qk_norm_projection = false;
  bool local_rope = false;  // a sliding layer with its own RoPE tables (rope_local_theta)
  double score_scale = 0;   // what multiplies q.k (Args::attention_scale; 0: head_dim^-0.5)
  // Set by a tensor-parallel plan when this rank holds a part of the heads: a projection-wide QK-norm reduces
  // its statistics over the group (null: all heads local).
  comms::PG heads_group;
  Tensor sinks;  // [Hq] (attn_sinks)
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
  Activation activation;
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
  Activation activation;
  double limit;
  double down_bias_scale = 1.0;  // tensor parallel: the down bias added on one rank only
  // float8.moe_fqns_prototype (models/converters.h): the grouped GEMMs in FP8 as these casts say (torchao's
  // float8 grouped GEMM); none: as autocast says
  std::optional<Float8Casts> float8;
  // the projections' weights in bf16 (the grouped GEMMs read them, and their biases, as bf16); none in FP8
  std::vector<const Tensor*> bf16_operands() const override;
};

class MoE : public nn::Module {
 public:
  MoE(const Args& a, int64_t moe_layer);
  Tensor forward(const Tensor& x) const;  // [B, S, dim]
  int64_t moe_layer;   // its place among the model's MoE layers (a planned step's per-layer routing)
  nn::Linear* router;  // HF name: "router" (gpt-oss) or "gate" (Qwen3-MoE)
  Experts* experts;
  MLP* shared_expert = nullptr;  // HF name: shared_experts (DeepSeek-V3), else shared_expert
  int64_t num_experts, top_k;
  int64_t n_group = 1, topk_group = 1;  // group-limited routing (DeepSeek-V3)
  double routed_scale = 1.0;            // the chosen weights times this
  bool score_before_experts = false;    // the weights scale the experts' inputs (Llama 4), not their outputs
  bool route_bias_state = false;        // the choice adds selection biases kept as model state (Args::moe_route_bias)
  bool sigmoid_scores, renormalize;
  double aux_loss_coeff;
  double aux_loss_scale = 1.0;  // tensor parallel: 0 on all tp ranks but one (they route alike)
  // auxiliary-loss-free balancing: added to the scores for the top-k choice
  // only (the weights come from the unbiased scores); not trained
  Tensor expert_bias;  // [E]
  comms::ExpertComm ep;  // group null: all experts local (an expert-parallel plan sets it)
  mutable std::vector<int64_t> last_routed;  // (token, k) pairs this rank routed to each expert, last forward
  mutable Tensor last_aux_loss;
};

// x + out(f(in(x))) for the attention and then the MLP, each norm present as model.norm_placement puts it
// (pre: in only; post: out only; sandwich: both). HF names: pre's are input_layernorm and
// post_attention_layernorm (the MLP's in, Llama's name); post / sandwich's post_attention_layernorm (the
// attention's out), pre_feedforward_layernorm and post_feedforward_layernorm (OLMo 2, Gemma 3).
class DecoderLayer : public nn::Module {
 public:
  DecoderLayer(const Args& a, int64_t layer);
  Tensor forward(const Tensor& x, const nn::AttentionInputs& in) const;
  nn::Norm *attn_in = nullptr, *attn_out = nullptr, *ffn_in = nullptr, *ffn_out = nullptr;
  std::vector<nn::Norm*> norms() const;  // the ones present, in the order above
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

// A contiguous part of a model run on its own (a pipeline stage): blocks
// [begin, end), the embedding when `first`, the final norm and head when `last`.
struct ModelChunk {
  int64_t begin = 0, end = -1;  // end -1: through the last block
  bool first = true, last = true;
  int64_t seq_len = 0;  // the full sequence length when x arrives sequence-sharded (0: x's own)
  bool whole() const { return first && last && begin == 0 && end == -1; }
};

// The model the trainer, titan-eval, the plans and the planner run: tokens -> logits, HF names and config,
// the decoder blocks (FSDP units), counts for logging and MFU.
class Decoder : public nn::Module {
 public:
  explicit Decoder(const Args& a);  // builds Args(a).resolve()
  // tokens int [B, S] -> logits [B, S, vocab]; doc_ids int64 [B, S]: the document index of every token (the
  // loader's Batch::doc_ids), read by attn_mask_type block_causal
  Tensor forward(const Tensor& tokens, const Tensor& doc_ids) { return forward_chunk(tokens, doc_ids, ModelChunk{}); }
  Tensor forward(const Tensor& tokens) { return forward(tokens, Tensor()); }
  // A chunk's forward: x is tokens int [B, S] when chunk.first, else the hidden state entering block
  // chunk.begin; returns the logits when chunk.last, else the hidden state leaving block chunk.end - 1.
  Tensor forward_chunk(const Tensor& x, const Tensor& doc_ids, const ModelChunk& chunk);
  // Mean next-token cross-entropy of logits [B, S, vocab] against targets [B, S], over the targets the inputs
  // do not already show (prefix_lm: the prefix's own tokens are ignored, its queries see them).
  Tensor loss(const Tensor& logits, const Tensor& targets) const;
  // The targets the loss counts (the rest set to -100, cross_entropy's ignore_index).
  Tensor loss_targets(const Tensor& targets) const;
  // Set by a plan whose logits leave the model split over the vocabulary
  // (loss parallel): cross-entropy of logits [N, V_local] against targets [N].
  std::function<Tensor(const Tensor& logits, const Tensor& targets)> sharded_loss;
  // Set by a context-parallel plan: which positions of each sequence this rank holds (tokens [B, S_local]
  // arrive as those positions; RoPE, the masks and the loss targets follow them) and the attention over
  // the whole sequence. doc_ids stay the whole sequence's [B, S].
  nn::SequenceShard sequence_shard;

  // HF init: normal(0, 0.02) for linears, embeddings, experts and sinks, norms 1,
  // biases 0; in named_parameters() order from one seeded generator.
  void init_weights(uint64_t seed);
  std::string hf_config_json() const { return args_.to_hf_json(); }
  // Regions of this model's parameters (or gradients) under the HF class's tensor names (models/hf_layout.h).
  HfLayout hf_layout(const std::vector<Region>& params) const;
  std::vector<nn::Module*> blocks();  // decoder layers, in order
  // Checkpoint every `every`-th block (0: none, 1: all; N: blocks N-1, 2N-1, ... 0-based, as TorchTitan);
  // save_ops: TorchTitan's op-level selective policy in each checkpointed block
  // (autograd::SavePolicy::TorchTitanOps) instead of recomputing all of it.
  void set_activation_checkpoint(int64_t every, bool save_ops = false) {
    activation_checkpoint = every;
    checkpoint_save_ops = save_ops;
  }
  int64_t vocab_size() const { return args_.vocab_size; }
  int64_t hidden_size() const { return args_.dim; }  // the residual stream's width (what pipeline stages pass on)
  int64_t expected_num_params() const { return args_.num_params(); }
  int64_t num_embedding_params() const { return args_.num_embedding_params(); }
  double flops_per_token(int64_t seq) const { return args_.flops_per_token(seq); }
  std::string describe() const { return args_.describe(); }  // one line for the startup log

  // Load balancing: the auxiliary loss of the last forward (undefined when off), the (token, expert) pairs
  // each layer routed to each expert in the last forward, and the auxiliary-loss-free bias update from
  // globally summed counts. The chunk versions count the MoE layers of the chunk's blocks (routed_counts:
  // zeros for the others).
  Tensor aux_loss(const ModelChunk& chunk) const;
  std::vector<std::vector<int64_t>> routed_counts(const ModelChunk& chunk) const;
  Tensor aux_loss() const { return aux_loss(ModelChunk{}); }
  std::vector<std::vector<int64_t>> routed_counts() const { return routed_counts(ModelChunk{}); }
  void update_router_bias(const std::vector<std::vector<double>>& global_counts);
  // Training state that is not a parameter and that a resumed run needs (the expert biases of
  // auxiliary-loss-free balancing): saved in checkpoints and titan-layout exports, the same on every rank.
  std::vector<std::pair<std::string, Tensor*>> buffers();
  const Args& args() const { return args_; }

  Backbone* model = nullptr;
  nn::Linear* lm_head = nullptr;  // absent when tied
  int64_t activation_checkpoint = 0;  // every how many blocks (0: none)
  bool checkpoint_save_ops = false;   // op-level selective checkpointing in those blocks

 private:
  Args args_;
  Tensor cos_, sin_;  // RoPE tables [S, head_dim/2] for the last seq_len seen
  Tensor cos_local_, sin_local_;  // the sliding layers' (rope_local_theta > 0)
  nn::BlockMaskCache masks_;      // every layer's block mask, built once per kind and size
  Tensor nope_q_scale_;  // [S, 1, 1]: the NoPE layers' query temperature (nope_attn_scale > 0)
  std::pair<int64_t, int64_t> rope_shard_{1, 0};  // the sequence shard (parts, index) they were built for
};

// targets with [:, :prefix - 1] set to -100: inside a bidirectional prefix
// the query at i sees token i + 1, its target. positions: the global position of each column (empty:
// 0..S-1; a context-parallel rank's chunks).
Tensor ignore_prefix_targets(const Tensor& targets, int64_t prefix, const std::vector<int64_t>& positions = {});

}  // namespace titan::decoder

namespace titan {
using decoder::ModelChunk;  // what a pipeline stage runs (parallel/pipeline.h)
}  // namespace titan
