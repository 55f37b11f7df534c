#include "job/peak_flops.h"

#include <omp.h>

#include <time.h>

#include <algorithm>

#include "src/autograd/grad_mode.h"
#include "src/log/log.h"
#include "src/ops/autocast.h"
#include "src/ops/ops.h"

namespace titan {

namespace {
double process_cpu_seconds() {  // every thread of this process
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
}  // namespace

PeakFlops measure_peak_flops(DType compute) {
  AutocastScope autocast(compute);
  const double t0 = wall_seconds();
  constexpr int64_t M = 1024, K = 1024, N = 1024;  // larger than the GEMMs of the small models this CPU trains
  Generator g(0);
  Tensor x = randn({M, K}, g).requires_grad_(true);  // [M, K]
  Tensor w = randn({N, K}, g, DType::F32, 0.02).requires_grad_(true);  // [N, K]
  Tensor dy = randn({M, N}, g);  // [M, N]
  const int threads = omp_get_max_threads();
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {  // the first warms the caches and the thread pool; the fastest counts
    const double s = wall_seconds(), c = process_cpu_seconds();
    Tensor y = linear(x, w);  // forward 2MKN, backward 4MKN: the step's FLOP count per weight
    y.backward(dy);
    x.zero_grad();
    w.zero_grad();
    // the time the threads ran, not the wall: a machine busy with other work (another job, a parallel test)
    // slows the wall clock of the probe, not the rate of the cores while they run it, so the peak is not
    // underestimated (which would put a quiet step's MFU above 100%)
    const double ran = std::min(wall_seconds() - s, (process_cpu_seconds() - c) / threads);
    if (rep > 0) best = std::min(best, ran);
  }
  return {6.0 * M * K * N / best / 1e12, threads, wall_seconds() - t0};
}

}  // namespace titan
