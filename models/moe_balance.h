// models/moe_balance.h — load balancing shared by the MoE blocks of the zoo.
#pragma once
#include <vector>

#include "src/tensor/tensor.h"

namespace titan::moe {

// Switch Transformer auxiliary loss: coeff * E * sum_e f_e * P_e, with f_e the
// share of (token, k) pairs routed to expert e (no gradient) and P_e the mean
// router probability of e over the tokens (probs [T, E]).
Tensor switch_aux_loss(const Tensor& probs, const std::vector<int64_t>& routed, double coeff);

// Auxiliary-loss-free balancing (DeepSeek-V3): bias[e] += rate * sign(mean load - load[e]).
void update_bias(Tensor& bias, const std::vector<double>& load, double rate);

// (token, k) pairs routed to each of E experts.
std::vector<int64_t> count_routed(const Tensor& topk_idx, int64_t num_experts);

}  // namespace titan::moe
