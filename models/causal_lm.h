// models/causal_lm.h — what the trainer, titan-eval and the parallel plans
// need from any model of the zoo: tokens -> logits, HF names and config,
// the decoder blocks (FSDP units), counts for logging and MFU.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/hf_layout.h"
#include "src/config/job_config.h"
#include "src/nn/attention_variants.h"
#include "src/nn/module.h"

namespace titan {

// A contiguous part of a model run on its own (a pipeline stage): blocks
// [begin, end), the embedding when `first`, the final norm and head when `last`.
struct ModelChunk {
  int64_t begin = 0, end = -1;  // end -1: through the last block
  bool first = true, last = true;
  int64_t seq_len = 0;  // the full sequence length when x arrives sequence-sharded (0: x's own)
  bool whole() const { return first && last && begin == 0 && end == -1; }
};

class CausalLM : public nn::Module {
 public:
  // tokens int [B, S] -> [B, S, vocab]; doc_ids int64 [B, S]: the document index
  // of every token (the loader's Batch::doc_ids), read by attn_mask_type block_causal
  virtual Tensor forward(const Tensor& tokens, const Tensor& doc_ids) = 0;
  Tensor forward(const Tensor& tokens) { return forward(tokens, Tensor()); }
  // A chunk's forward: x is tokens int [B, S] when chunk.first, else the hidden state entering block
  // chunk.begin; returns the logits when chunk.last, else the hidden state leaving block chunk.end - 1.
  // forward(tokens, doc_ids) is the whole model's chunk.
  virtual Tensor forward_chunk(const Tensor& x, const Tensor& doc_ids, const ModelChunk& chunk) = 0;
  // Mean next-token cross-entropy of logits [B, S, vocab] against targets
  // [B, S], over the targets the inputs do not already show (prefix_lm: the
  // prefix's own tokens are ignored, its queries see them).
  Tensor loss(const Tensor& logits, const Tensor& targets) const;
  // Set by a plan whose logits leave the model split over the vocabulary
  // (loss parallel): cross-entropy of logits [N, V_local] against targets [N].
  std::function<Tensor(const Tensor& logits, const Tensor& targets)> sharded_loss;
  // Set by a context-parallel plan: which positions of each sequence this rank holds (tokens [B, S_local]
  // arrive as those positions; RoPE, the masks and the loss targets follow them) and the attention over
  // the whole sequence. doc_ids stay the whole sequence's [B, S].
  nn::SequenceShard sequence_shard;
  // The targets the loss counts (the rest set to -100, cross_entropy's ignore_index).
  virtual Tensor loss_targets(const Tensor& targets) const { return targets; }
  virtual void init_weights(uint64_t seed) = 0;
  virtual std::string hf_config_json() const = 0;
  // Regions of this model's parameters (or gradients) under the HF class's tensor names (models/hf_layout.h).
  virtual HfLayout hf_layout(const std::vector<Region>& params) const { return same_layout(params); }
  virtual std::vector<nn::Module*> blocks() = 0;     // decoder layers, in order
  // Checkpoint every `every`-th block (0: none, 1: all; N: blocks N-1, 2N-1, ... 0-based, as TorchTitan).
  // Checkpoint every `every`-th block (0: none); save_ops: TorchTitan's op-level selective policy in each
  // checkpointed block (autograd::SavePolicy::TorchTitanOps) instead of recomputing all of it.
  virtual void set_activation_checkpoint(int64_t every, bool save_ops = false) = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t hidden_size() const = 0;  // the residual stream's width (what pipeline stages pass on)
  virtual int64_t expected_num_params() const = 0;
  virtual int64_t num_embedding_params() const = 0;
  virtual double flops_per_token(int64_t seq) const = 0;
  virtual std::string describe() const = 0;  // one line for the startup log

  // MoE models (defaults: dense). Load balancing: the auxiliary loss of the
  // last forward (undefined when off), the (token, expert) pairs each layer
  // routed to each expert in the last forward, and the auxiliary-loss-free
  // bias update from globally summed counts.
  // The chunk versions count the MoE layers of the chunk's blocks (routed_counts: zeros for the others).
  virtual Tensor aux_loss(const ModelChunk& chunk) const { return Tensor(); }
  virtual std::vector<std::vector<int64_t>> routed_counts(const ModelChunk& chunk) const { return {}; }
  Tensor aux_loss() const { return aux_loss(ModelChunk{}); }
  std::vector<std::vector<int64_t>> routed_counts() const { return routed_counts(ModelChunk{}); }
  virtual void update_router_bias(const std::vector<std::vector<double>>& global_counts) {}

  // Training state that is not a parameter and that a resumed run needs (the expert biases of
  // auxiliary-loss-free balancing): saved in checkpoints and titan-layout exports, the same on every rank.
  virtual std::vector<std::pair<std::string, Tensor*>> buffers() { return {}; }
};

// targets with [:, :prefix - 1] set to -100: inside a bidirectional prefix
// the query at i sees token i + 1, its target. positions: the global position of each column (empty:
// 0..S-1; a context-parallel rank's chunks).
Tensor ignore_prefix_targets(const Tensor& targets, int64_t prefix, const std::vector<int64_t>& positions = {});

// Builds the decoder (models/decoder) from the YAML model section (model.name:
// qwen3 | qwen3_moe | gpt_oss | llama3) or from HF config.json content
// (model_type qwen3 | qwen3_moe | gpt_oss | llama | titan_decoder).
std::unique_ptr<CausalLM> build_model(const JobConfig::Model& m);
std::unique_ptr<CausalLM> build_model_from_hf(const std::string& hf_config_json);

}  // namespace titan
