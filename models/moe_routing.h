// models/moe_routing.h — constraints on which experts a token may choose.
#pragma once
#include "src/tensor/tensor.h"

namespace titan::moe {

// Group-limited routing (DeepSeek-V3's node-limited routing; HF DeepseekV3MoE.route_tokens_to_experts): the E
// experts form n_group groups of E / n_group; a group scores the sum of its 2 best choice scores; each token keeps
// its topk_group best groups and the other experts' scores become 0 (HF's masked_fill, so a kept expert with a
// negative biased score can lose to a masked one, as there). choose [T, E] float32 -> [T, E]; no gradient (the
// choice). Meta: choose itself (the shape).
Tensor limit_to_groups(const Tensor& choose, int64_t n_group, int64_t topk_group);

}  // namespace titan::moe
