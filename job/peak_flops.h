// job/peak_flops.h — the peak MFU divides by when metrics.peak_tflops is 0 (the default): what this rank's
// threads reach on a large GEMM, measured at the start of the job.
#pragma once
#include "src/tensor/dtype.h"

namespace titan {

struct PeakFlops {
  double tflops;    // the fastest of a few linear forward + backward passes, [1024, 1024] x [1024, 1024]
  int threads;      // the OpenMP threads this rank ran them on (the job's)
  double seconds;   // time spent measuring
};
// About 0.1-0.5 s on a CPU core. Every rank measures at once (as they will train: sharing the memory bus). Timed
// by the CPU time its threads ran (or the wall, when shorter): other work on the machine does not lower it.
// `compute`: the step's GEMM precision (DType::BF16: the probe runs under bf16 autocast, on the bf16 kernel a
// bf16 step runs, so MFU divides by the bf16 peak on a CPU with bf16 instructions).
PeakFlops measure_peak_flops(DType compute = DType::F32);

}  // namespace titan
