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
// combine sums each token's k contributions in a fixed order (deterministic): the standard backend in expert
// order; the hierarchical one each rank's experts, then a host's ranks, then the hosts (not bitwise the same).
//
// Backends behind one interface: `group` null or of size 1 -> local (no
// communication); otherwise experts are split evenly over the group's ranks
// (rank r owns experts [r*E/P, (r+1)*E/P)) and rows travel by MPI
// all-to-all-v (counts exchanged first, then the payload):
//  - standard (dispatch): one exchange over the group, a row per (token, k) pair (TorchTitan's default, Megatron's
//    alltoall dispatcher);
//  - hierarchical (dispatch_by_host, parallelism.expert_parallel_comm_backend): DeepEP's two-level exchange
//    (DeepSeek-V3 report, 3.2.2): a token crosses to another host once per host that holds any of its experts,
//    to the rank of the sender's local index there, which forwards it once to each rank of its host holding
//    any of them; that rank makes the (token, expert) rows. combine sums on the way back: each rank over its
//    experts, each forwarder over its host's ranks, the token over hosts. A token of k experts on m hosts moves m
//    rows across (m - 1 of them leave its host), not k.
#pragma once
#include <array>
#include <memory>
#include <string_view>
#include <vector>

#include "comms/process_group.h"

namespace titan::comms {

enum class ExpertCommBackend { Standard, Hierarchical };
constexpr std::array<std::string_view, 2> enum_names(ExpertCommBackend) { return {"standard", "hierarchical"}; }

// The ranks a MoE layer's dispatch reaches. Hierarchical: group rank g sits on host g / L at local index g % L
// (L = within_host's size, the same on every host); across_hosts holds the group ranks of this one's local
// index, one per host in host order, within_host this host's ranks of the group in local order.
struct ExpertComm {
  PG group;  // null: all experts local
  PG across_hosts, within_host;  // both set: hierarchical
  bool hierarchical() const { return group && across_hosts && within_host; }
};

struct DispatchHandle {
  PG group;                     // null: local
  int64_t num_tokens = 0, num_experts = 0, local_experts = 0;
  Tensor token_of_row;          // int64 [T*k]: token of each expert-sorted (token, k) row (this rank's)
  Tensor weight_of_row;         // [R, 1] each expert row's routing weight (differentiable; standard: R = T*k)
  bool weights_on_inputs = false;  // the weight scaled the expert's input (dispatch), not its output (combine)
  std::vector<int64_t> send_rows, recv_rows;  // per rank, for the all-to-all-v
  Tensor regroup;               // int64 [R]: received row -> position grouped by local expert
  Tensor ungroup;               // its inverse
  // hierarchical: (1) across hosts, (2) within the host; rows per peer of each exchange
  PG across, within;
  std::vector<int64_t> send1, recv1, send2, recv2;
  Tensor token_of_sent1;        // int64 [sum send1]: the token of each row sent across hosts (by host)
  Tensor row1_of_sent2;         // int64 [sum send2]: the received (1) row of each row sent within the host
  Tensor row2_of_expert_row;    // int64 [R]: the received (2) row of each expert row (grouped by local expert)
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
// rotate false: in expert order (no rank first); weights: the expert weights those counts follow (1 each when
// balanced), rotated alike.
std::vector<int64_t> meta_routed_counts(int64_t pairs, int64_t E, int64_t P, int64_t moe_layer = 0, bool rotate = true,
                                        std::vector<double>* weights = nullptr);

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
// The hierarchical exchange (above) over ep (ep.hierarchical()). A planned (meta) dispatch moves each layer's
// pair counts as `dispatch` plans them (MetaRoutingScope; the planned rank is the busiest); how many distinct
// tokens those pairs are, per host and per rank of the planned rank's host, is counted on min(T, 4096) tokens
// routed at random (a fixed seed) by the same expert weights: each token picks topk_group of n_group groups
// (contiguous expert ranges; by their weight sums), then its k distinct experts among theirs (by weight).
Dispatched dispatch_by_host(const Tensor& hidden, const Tensor& topk_idx, const Tensor& topk_weight, int64_t num_experts,
                            const ExpertComm& ep, bool weights_on_inputs = false, int64_t moe_layer = 0,
                            int64_t n_group = 1, int64_t topk_group = 1);
// Either dispatch's rows back to their tokens.
Tensor combine(const Tensor& expert_output, const DispatchHandle& handle);

// Rows exchanged by all-to-all-v as a differentiable op (backward: the reverse exchange). float32_wire: the
// values (routing weights) travel in float32 whatever the autocast (else the step's activation wire, functional.h).
Tensor all_to_all_v_op(const Tensor& x, const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows,
                       const PG& group, bool float32_wire = false);

namespace detail {
Tensor combine_by_host(const Tensor& expert_output, const DispatchHandle& handle);  // combine's hierarchical half
// Index tensors on the data's device: meta data plans with meta indices.
Tensor index_tensor(const std::vector<int64_t>& v, bool meta);
// Both dispatches' inputs: hidden [T, H], topk_idx and topk_weight [T, k]; throws naming `who` and the shapes.
void check_dispatch_inputs(const char* who, const Tensor& hidden, const Tensor& topk_idx, const Tensor& topk_weight);
}  // namespace detail

}  // namespace titan::comms
