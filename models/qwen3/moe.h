// models/qwen3/moe.h — the MoE ablation of the Qwen3 family (titan's, YAML
// `model.moe_enabled`): every layer's SwiGLU MLP becomes a router over
// E SwiGLU experts (top-k by softmax or sigmoid scores, weights optionally
// renormalized) plus an optional always-on shared expert. Experts are stored
// grouped ([E, ...] tensors) and run as one GEMM per expert through
// comms::dispatch / combine.
#pragma once
#include "comms/process_group.h"
#include "models/qwen3/args.h"
#include "src/nn/layers.h"

namespace titan::qwen3 {

class MLP;

class SwiGLUExperts : public nn::Module {
 public:
  SwiGLUExperts(int64_t num_experts, int64_t dim, int64_t hidden);
  Tensor forward(const Tensor& x, const std::vector<int64_t>& counts, bool gelu) const;  // rows grouped by expert
  Tensor gate_proj, up_proj;  // [E, dim, hidden]
  Tensor down_proj;           // [E, hidden, dim]
};

class MoEMLP : public nn::Module {
 public:
  explicit MoEMLP(const Args& a);
  Tensor forward(const Tensor& x) const;  // [B, S, dim]
  nn::Linear* gate;            // router, no bias (HF Qwen3-MoE's name)
  SwiGLUExperts* experts;
  MLP* shared_expert = nullptr;
  int64_t num_experts, top_k;
  bool sigmoid_scores, renormalize, gelu;
  double aux_loss_coeff;
  Tensor expert_bias;  // [E], auxiliary-loss-free balancing (choice only)
  comms::PG ep_group;
  mutable std::vector<int64_t> last_routed;
  mutable Tensor last_aux_loss;
};

}  // namespace titan::qwen3
