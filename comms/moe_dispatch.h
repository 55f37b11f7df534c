// comms/moe_dispatch.h — TokenSwitch-style MoE dispatch / combine.
//
//   auto d = dispatch(hidden [T, H], topk_idx [T, k], topk_weight [T, k], num_experts, group);
//   // d.expert_input [R, H]: rows grouped by local expert, d.tokens_per_local_expert[j] rows each
//   Tensor y = combine(expert_output [R, H], *d.handle);   // [T, H]
//
// Both are differentiable: dispatch's backward is a combine of the gradients
// (rows summed back to their tokens) and combine's backward a dispatch;
// gradients reach the router through topk_weight, which combine applies (or dispatch, weights_on_inputs).
// Dropless: every (token, k) pair is routed; an expert with no tokens works.
// combine sums each token's k contributions in expert order (deterministic).
//
// Backends behind one interface: `group` null or of size 1 -> local (no
// communication); otherwise experts are split evenly over the group's ranks
// (rank r owns experts [r*E/P, (r+1)*E/P)) and rows travel by MPI
// all-to-all-v (counts exchanged first, then the payload).
#pragma once
#include <memory>
#include <vector>

#include "comms/process_group.h"

namespace titan::comms {

struct DispatchHandle {
  PG group;                     // null: local
  int64_t num_tokens = 0, num_experts = 0, local_experts = 0;
  Tensor token_of_row;          // int64 [T*k]: token of each expert-sorted (token, k) row (this rank's)
  Tensor weight_of_row;         // [T*k, 1] its routing weight (differentiable)
  bool weights_on_inputs = false;  // the weight scaled the expert's input (dispatch), not its output (combine)
  std::vector<int64_t> send_rows, recv_rows;  // per rank, for the all-to-all-v
  Tensor regroup;               // int64 [R]: received row -> position grouped by local expert
  Tensor ungroup;               // its inverse
};

// Routing of meta (planned) dispatches, which have no router outputs: while a
// MetaRoutingScope is alive on this thread, every (token, k) pair of MoE layer l
// is routed by `weights[l]` (one per expert, any scale; a single list: every
// layer's; none = balanced, pair i to expert i mod E), in proportion, and the
// experts are renumbered, layer by layer, so that the planned rank (group rank
// 0) holds that layer's busiest rank's block: a planned step is priced at the
// rank each layer's exchange waits for (the ranks meet at every layer's
// all-to-alls, so a step's MoE time is the sum over layers of each layer's
// busiest rank, not the busiest rank of the layers' sum). The counts every
// source sends follow the same weights.
class MetaRoutingScope {
 public:
  explicit MetaRoutingScope(std::vector<std::vector<double>> weights);
  ~MetaRoutingScope();
  MetaRoutingScope(const MetaRoutingScope&) = delete;
  MetaRoutingScope& operator=(const MetaRoutingScope&) = delete;

 private:
  std::vector<std::vector<double>> weights_;
  const std::vector<std::vector<double>>* prev_;  // scopes nest: the outer one's weights come back
};
// (token, k) pairs per expert of a meta dispatch of `pairs` pairs over E experts on P ranks, MoE layer
// `moe_layer` (see above).
std::vector<int64_t> meta_routed_counts(int64_t pairs, int64_t E, int64_t P, int64_t moe_layer = 0);

struct Dispatched {
  Tensor expert_input;                          // [R, H]
  std::vector<int64_t> tokens_per_local_expert;  // sums to R
  std::shared_ptr<DispatchHandle> handle;
};

// weights_on_inputs: each (token, k) row is scaled by its weight before the experts (Llama 4: an expert sees
// w x, its output joins the token unweighted), else combine weights the outputs. moe_layer: the MoE layer's
// place among the model's (a meta dispatch's routing, MetaRoutingScope).
Dispatched dispatch(const Tensor& hidden, const Tensor& topk_idx, const Tensor& topk_weight, int64_t num_experts,
                    const PG& group = nullptr, bool weights_on_inputs = false, int64_t moe_layer = 0);
Tensor combine(const Tensor& expert_output, const DispatchHandle& handle);

// Rows exchanged by all-to-all-v as a differentiable op (backward: the reverse exchange).
Tensor all_to_all_v_op(const Tensor& x, const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows,
                       const PG& group);

}  // namespace titan::comms
