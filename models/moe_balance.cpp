#include "models/moe_balance.h"

#include "src/ops/ops.h"

namespace titan::moe {

Tensor switch_aux_loss(const Tensor& probs, const std::vector<int64_t>& routed, double coeff) {
  const int64_t E = probs.size(1);
  int64_t total = 0;
  for (auto c : routed) total += c;
  std::vector<float> f(E);
  for (int64_t e = 0; e < E; ++e) f[e] = total ? (float)routed[e] / (float)total : 0.0f;
  Tensor P = mean(probs, {0});  // [E]
  // a meta step (the planner) routes nothing: the fractions' buffer, no values (a cpu one beside meta failed)
  const Tensor F = probs.is_meta() ? empty({E}, DType::F32, Device::Meta) : from_vector<float>(f, {E});  // [E]
  return mul(sum(mul(P, F)), coeff * (double)E);
}

void update_bias(Tensor& bias, const std::vector<double>& load, double rate) {
  if (rate <= 0 || load.empty()) return;
  double mean_load = 0;
  for (double c : load) mean_load += c / (double)load.size();
  float* pb = bias.data<float>();
  for (size_t e = 0; e < load.size(); ++e)
    pb[e] += (float)(rate * (load[e] < mean_load ? 1.0 : load[e] > mean_load ? -1.0 : 0.0));
}

std::vector<int64_t> count_routed(const Tensor& idx, int64_t E) {
  std::vector<int64_t> c(E, 0);
  if (idx.is_meta()) return c;
  for (auto e : idx.to_vector<int64_t>()) ++c[e];
  return c;
}

}  // namespace titan::moe
