#include "models/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "src/tensor/error.h"

namespace titan::moe {

Tensor limit_to_groups(const Tensor& choose, int64_t n_group, int64_t topk_group) {
  TITAN_CHECK(choose.dim() == 2 && n_group > 0 && choose.size(1) % n_group == 0 && choose.size(1) / n_group >= 2 &&
                  topk_group >= 1 && topk_group <= n_group,
              "limit_to_groups: scores ", shape_str(choose.shape()), " with ", n_group, " groups, ", topk_group,
              " kept: the groups must split the experts evenly, at least 2 each, and 1 <= kept <= groups");
  TITAN_CHECK(choose.dtype() == DType::F32, "limit_to_groups: scores must be float32, got ", dtype_name(choose.dtype()));
  if (choose.is_meta() || topk_group == n_group) return choose;
  const int64_t T = choose.size(0), E = choose.size(1), G = E / n_group;
  Tensor c = choose.contiguous();
  Tensor out = c.clone();
  const float* in = c.data<float>();
  float* o = out.data<float>();
  std::vector<float> score((size_t)n_group);
  std::vector<int64_t> order((size_t)n_group);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = in + t * E;
    for (int64_t g = 0; g < n_group; ++g) {  // the sum of the group's 2 best
      float a = -INFINITY, b = -INFINITY;
      for (int64_t e = g * G; e < (g + 1) * G; ++e) {
        if (row[e] > a) b = a, a = row[e];
        else if (row[e] > b) b = row[e];
      }
      score[(size_t)g] = a + b;
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return score[(size_t)x] > score[(size_t)y]; });
    for (int64_t r = topk_group; r < n_group; ++r)
      std::fill(o + t * E + order[(size_t)r] * G, o + t * E + (order[(size_t)r] + 1) * G, 0.0f);
  }
  return out;
}

}  // namespace titan::moe
