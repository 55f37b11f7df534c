#include "comms/moe_dispatch.h"

#include <algorithm>
#include <cmath>

#include "comms/functional.h"
#include "src/autograd/function.h"
#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"

namespace titan::comms {

Tensor all_to_all_v_op(const Tensor& x, const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows,
                       const PG& group, bool float32_wire) {
  using V = std::vector<Tensor>;
  // rows and their gradients in the compute dtype (functional.h)
  const DType wire = wire_dtype(x.dtype(), float32_wire ? Wire::float32 : Wire::activation);
  return autograd::custom_op(
      "AllToAllV", {x},
      [=](const V& in) {
        std::vector<int64_t> got;
        Tensor out = group->all_to_all_v(in[0], send_rows, &got, recv_rows, wire);
        return V{out};
      },
      [=](const V& g) {
        std::vector<int64_t> got;
        return V{group->all_to_all_v(g[0], recv_rows, &got, send_rows, wire)};
      })[0];
}

Tensor detail::index_tensor(const std::vector<int64_t>& v, bool meta) {
  return meta ? empty({(int64_t)v.size()}, DType::I64, Device::Meta) : from_vector<int64_t>(v, {(int64_t)v.size()});
}
using detail::index_tensor;

void detail::check_dispatch_inputs(const char* who, const Tensor& hidden, const Tensor& topk_idx,
                                   const Tensor& topk_weight) {
  TITAN_CHECK(hidden.dim() == 2 && topk_idx.dim() == 2 && topk_weight.shape() == topk_idx.shape() &&
                  topk_idx.size(0) == hidden.size(0),
              who, ": expected hidden [T, H], topk_idx [T, k], topk_weight [T, k], got ", shape_str(hidden.shape()),
              ", ", shape_str(topk_idx.shape()), ", ", shape_str(topk_weight.shape()));
}

namespace {
thread_local const std::vector<std::vector<double>>* t_meta_routing = nullptr;
}

MetaRoutingScope::MetaRoutingScope(std::vector<std::vector<double>> weights)
    : weights_(std::move(weights)), prev_(t_meta_routing) {
  for (const auto& layer : weights_)
    for (double w : layer)
      TITAN_CHECK(std::isfinite(w) && w >= 0, "MetaRoutingScope: expert weights must be finite and >= 0");
  t_meta_routing = &weights_;
}
MetaRoutingScope::~MetaRoutingScope() { t_meta_routing = prev_; }

std::vector<int64_t> meta_routed_counts(int64_t pairs, int64_t E, int64_t P, int64_t moe_layer, bool rotate,
                                        std::vector<double>* weights) {
  std::vector<int64_t> counts(E, 0);
  const std::vector<std::vector<double>>* layers = t_meta_routing;
  if (!layers || layers->empty()) {  // balanced: pair i to expert i mod E
    for (int64_t e = 0; e < E; ++e) counts[e] = pairs / E + (e < pairs % E ? 1 : 0);
    if (weights) weights->assign(E, 1.0);
    return counts;
  }
  TITAN_CHECK(layers->size() == 1 || (moe_layer >= 0 && moe_layer < (int64_t)layers->size()),
              "simulation: the MoE routing lists ", layers->size(), " layers, and MoE layer ", moe_layer,
              " dispatches (simulation.moe_routing_histogram gives one list, or one per MoE layer)");
  const std::vector<double>* w = &(*layers)[layers->size() == 1 ? 0 : (size_t)moe_layer];
  TITAN_CHECK((int64_t)w->size() == E, "simulation: the MoE routing lists ", w->size(), " experts, the model has ", E,
              " (simulation.moe_routing_histogram must give one count per expert)");
  double total = 0;
  for (double x : *w) total += x;
  TITAN_CHECK(total > 0, "simulation: the MoE routing weights sum to 0");
  // largest remainders: the counts sum to `pairs`
  std::vector<double> exact(E);
  int64_t given = 0;
  for (int64_t e = 0; e < E; ++e) {
    exact[e] = (double)pairs * (*w)[e] / total;
    counts[e] = (int64_t)std::floor(exact[e]);
    given += counts[e];
  }
  std::vector<int64_t> by_rest(E);
  for (int64_t e = 0; e < E; ++e) by_rest[e] = e;
  std::stable_sort(by_rest.begin(), by_rest.end(), [&](int64_t a, int64_t b) {
    return exact[a] - std::floor(exact[a]) > exact[b] - std::floor(exact[b]);
  });
  for (int64_t i = 0; given < pairs; ++i, ++given) ++counts[by_rest[i % E]];
  if (weights) *weights = *w;
  if (!rotate) return counts;
  // the busiest rank's block of experts first: the planned rank is group rank 0
  const int64_t El = E / P;
  int64_t busiest = 0, most = -1;
  for (int64_t r = 0; r < P; ++r) {
    int64_t load = 0;
    for (int64_t j = 0; j < El; ++j) load += counts[r * El + j];
    if (load > most) most = load, busiest = r;
  }
  std::rotate(counts.begin(), counts.begin() + busiest * El, counts.end());
  if (weights) std::rotate(weights->begin(), weights->begin() + busiest * El, weights->end());
  return counts;
}

Dispatched dispatch(const Tensor& hidden, const Tensor& topk_idx, const Tensor& topk_weight, int64_t E,
                    const PG& group, bool weights_on_inputs, int64_t moe_layer) {
  detail::check_dispatch_inputs("dispatch", hidden, topk_idx, topk_weight);
  const int64_t T = hidden.size(0), k = topk_idx.size(1);
  const int64_t P = group ? group->size() : 1;
  TITAN_CHECK(E % P == 0, "dispatch: ", E, " experts are not divisible by the ", P, " ranks of the expert-parallel group");
  auto h = std::make_shared<DispatchHandle>();
  h->group = P > 1 ? group : nullptr;
  h->num_tokens = T;
  h->num_experts = E;
  h->local_experts = E / P;
  // sort this rank's (token, k) pairs by expert (stable: token order within an expert)
  // Meta tensors (planning, simulation) have no routing: assume a balanced one,
  // pair i of the T*k (token, choice) pairs to expert i mod E.
  const bool meta = hidden.is_meta() || topk_idx.is_meta();
  // (on meta tensors only the counts: the rows' order is data a plan neither has nor reads, and T x k entries
  // filled per MoE layer and micro-batch were most of a large MoE plan's time)
  auto meta_index = [](int64_t n) { return empty({n}, DType::I64, Device::Meta); };
  std::vector<int64_t> counts(E, 0);
  Tensor order_t;
  if (meta) {  // pairs in expert order, as many per expert as the meta routing gives (balanced: i mod E)
    counts = meta_routed_counts(T * k, E, P, moe_layer);
    h->token_of_row = meta_index(T * k);
    order_t = meta_index(T * k);
  } else {
    const std::vector<int64_t> flat = topk_idx.to_vector<int64_t>();
    for (auto e : flat) {
      TITAN_CHECK(e >= 0 && e < E, "dispatch: expert index ", e, " outside [0, ", E, ")");
      ++counts[e];
    }
    std::vector<int64_t> order(T * k), token(T * k), at(E + 1, 0);
    for (int64_t e = 0; e < E; ++e) at[e + 1] = at[e] + counts[e];
    for (int64_t i = 0; i < T * k; ++i) {
      const int64_t pos = at[flat[i]]++;
      order[pos] = i;
      token[pos] = i / k;
    }
    h->token_of_row = index_tensor(token, false);
    order_t = index_tensor(order, false);
  }
  h->weight_of_row = index_select(topk_weight.reshape({-1}), 0, order_t).reshape({T * k, 1});
  Tensor rows = index_select(hidden, 0, h->token_of_row);  // [T*k, H], grouped by expert
  h->weights_on_inputs = weights_on_inputs;
  if (weights_on_inputs) rows = mul(rows, h->weight_of_row);  // [T*k, H] x [T*k, 1]
  Dispatched d;
  d.handle = h;
  if (P == 1) {
    d.expert_input = rows;
    d.tokens_per_local_expert = counts;
    return d;
  }
  // expert parallel: rank r owns experts [r*El, (r+1)*El)
  const int64_t El = h->local_experts;
  h->send_rows.assign(P, 0);
  for (int64_t e = 0; e < E; ++e) h->send_rows[e / El] += counts[e];
  // per-expert counts: rank r receives, from every source, the counts of its El experts
  Tensor cnt_send = index_tensor(counts, meta || group->is_fake());
  Tensor cnt_recv = group->all_to_all(cnt_send);  // [P * El]: source-major
  std::vector<int64_t> c(P * El);
  if (meta || group->is_fake()) {  // SPMD: every source routes as this rank does, so sends it what it sends itself
    for (int64_t s = 0; s < P; ++s)
      for (int64_t j = 0; j < El; ++j) c[s * El + j] = counts[group->rank() * El + j];
  } else {
    c = cnt_recv.to_vector<int64_t>();
  }
  h->recv_rows.assign(P, 0);
  d.tokens_per_local_expert.assign(El, 0);
  for (int64_t s = 0; s < P; ++s)
    for (int64_t j = 0; j < El; ++j) {
      h->recv_rows[s] += c[s * El + j];
      d.tokens_per_local_expert[j] += c[s * El + j];
    }
  Tensor recv = all_to_all_v_op(rows, h->send_rows, h->recv_rows, group);  // source-major, expert-sorted per source
  // regroup: (source, expert) -> (expert, source)
  const int64_t R = recv.size(0);
  if (meta) {
    h->regroup = meta_index(R);  // two tensors, as a run holds (both kept for the backward)
    h->ungroup = meta_index(R);
  } else {
    std::vector<int64_t> dest(R), start(El + 1, 0);
    for (int64_t j = 0; j < El; ++j) start[j + 1] = start[j] + d.tokens_per_local_expert[j];
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    std::vector<int64_t> gather_from(R);
    int64_t src_row = 0;
    for (int64_t s = 0; s < P; ++s)
      for (int64_t j = 0; j < El; ++j)
        for (int64_t i = 0; i < c[s * El + j]; ++i) {
          dest[src_row] = fill[j]++;
          gather_from[dest[src_row]] = src_row;
          ++src_row;
        }
    h->regroup = index_tensor(gather_from, false);  // grouped row g reads received row regroup[g]
    h->ungroup = index_tensor(dest, false);         // received row r sits at grouped row ungroup[r]
  }
  d.expert_input = index_select(recv, 0, h->regroup);
  return d;
}

Tensor combine(const Tensor& y, const DispatchHandle& h) {
  TITAN_CHECK(y.dim() == 2, "combine: expert_output must be [R, H], got ", shape_str(y.shape()));
  if (h.within) return detail::combine_by_host(y, h);
  Tensor rows = y;
  if (h.group) {
    Tensor back = index_select(y, 0, h.ungroup);                           // source-major again
    rows = all_to_all_v_op(back, h.recv_rows, h.send_rows, h.group);       // this rank's rows, expert-sorted
  }
  TITAN_CHECK(rows.size(0) == h.token_of_row.size(0), "combine: got ", rows.size(0), " rows for ",
              h.token_of_row.size(0), " dispatched (token, expert) pairs");
  Tensor weighted = h.weights_on_inputs ? rows : mul(rows, h.weight_of_row);  // [T*k, H]
  Tensor out = zeros({h.num_tokens, y.size(1)}, y.dtype(), y.device());
  return index_add(out, 0, h.token_of_row, weighted);  // rows in expert order: a fixed summation order
}

}  // namespace titan::comms
