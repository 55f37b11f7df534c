#include "job/peak_flops.h"

#include <omp.h>

#include <algorithm>

#include "src/autograd/grad_mode.h"
#include "src/log/log.h"
#include "src/ops/ops.h"

namespace titan {

PeakFlops measure_peak_flops() {
  const double t0 = wall_seconds();
  constexpr int64_t M = 1024, K = 1024, N = 1024;  // larger than the GEMMs of the small models this CPU trains
  Generator g(0);
  Tensor x = randn({M, K}, g).requires_grad_(true);  // [M, K]
  Tensor w = randn({N, K}, g, DType::F32, 0.02).requires_grad_(true);  // [N, K]
  Tensor dy = randn({M, N}, g);  // [M, N]
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {  // the first warms the caches and the thread pool; the fastest counts
    const double s = wall_seconds();
    Tensor y = linear(x, w);  // forward 2MKN, backward 4MKN: the step's FLOP count per weight
    y.backward(dy);
    x.zero_grad();
    w.zero_grad();
    if (rep > 0) best = std::min(best, wall_seconds() - s);
  }
  return {6.0 * M * K * N / best / 1e12, omp_get_max_threads(), wall_seconds() - t0};
}

}  // namespace titan
