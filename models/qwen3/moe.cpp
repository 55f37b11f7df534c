#include "models/qwen3/moe.h"

#include <algorithm>

#include "comms/moe_dispatch.h"
#include "models/moe_balance.h"
#include "models/qwen3/model.h"
#include "src/autograd/grad_mode.h"

namespace titan::qwen3 {

SwiGLUExperts::SwiGLUExperts(int64_t E, int64_t dim, int64_t hidden) {
  register_parameter("gate_proj", gate_proj, nn::new_parameter({E, dim, hidden}));
  register_parameter("up_proj", up_proj, nn::new_parameter({E, dim, hidden}));
  register_parameter("down_proj", down_proj, nn::new_parameter({E, hidden, dim}));
}

Tensor SwiGLUExperts::forward(const Tensor& x, const std::vector<int64_t>& counts, bool gelu) const {
  Tensor g = grouped_linear(x, gate_proj, Tensor(), counts);
  g = gelu ? titan::gelu(g) : silu(g);
  return grouped_linear(mul(g, grouped_linear(x, up_proj, Tensor(), counts)), down_proj, Tensor(), counts);
}

MoEMLP::MoEMLP(const Args& a)
    : num_experts(a.moe_experts),
      top_k(a.moe_top_k),
      sigmoid_scores(a.moe_score == "sigmoid"),
      renormalize(a.moe_renormalize),
      gelu(a.activation == "gelu"),
      aux_loss_coeff(a.moe_aux_loss_coeff) {
  gate = &register_module("gate", std::make_unique<nn::Linear>(a.dim, a.moe_experts, false));
  experts = &register_module("experts", std::make_unique<SwiGLUExperts>(a.moe_experts, a.dim, a.moe_hidden_dim));
  if (a.moe_shared_expert) {
    Args s = a;
    s.hidden_dim = a.moe_hidden_dim;
    shared_expert = &register_module("shared_expert", std::make_unique<MLP>(s));
  }
  expert_bias = zeros({a.moe_experts});
}

Tensor MoEMLP::forward(const Tensor& x) const {
  const int64_t B = x.size(0), S = x.size(1), H = x.size(2);
  Tensor h = x.reshape({B * S, H});
  Tensor logits = gate->forward(h);                                          // [T, E]
  Tensor scores = sigmoid_scores ? sigmoid(logits) : softmax(logits, -1);    // [T, E]
  Tensor idx;
  {
    NoGradGuard ng;  // the choice (biased when balancing) carries no gradient
    Tensor choose = scores.detach();
    if (!expert_bias.is_meta()) choose = add(choose, expert_bias);
    idx = topk(choose, top_k).second;                                        // [T, k]
  }
  Tensor w = gather(scores, 1, idx);                                         // [T, k]
  if (renormalize) w = div(w, sum(w, {1}, true));
  auto d = comms::dispatch(h, idx, w, num_experts, ep_group);
  last_routed = moe::count_routed(idx, num_experts);
  last_aux_loss = aux_loss_coeff > 0 ? moe::switch_aux_loss(softmax(logits, -1), last_routed, aux_loss_coeff) : Tensor();
  Tensor y = comms::combine(experts->forward(d.expert_input, d.tokens_per_local_expert, gelu), *d.handle);
  if (shared_expert) y = add(y, shared_expert->forward(h));
  return y.reshape({B, S, H});
}

}  // namespace titan::qwen3
