// titan-bench-collectives: titan's reduce-scatter and all-reduce (comms/ring.h: NCCL's ring over MPI point-to-point on
// the communication thread) against Open MPI's own nonblocking collectives (polled to completion as titan polls), by
// size, measured in one run, as ratios. Run under mpirun:  mpirun -np 2 ./build/titan-bench-collectives [--reps N]
// [--max-mib M]  Each figure is the median of 3 rounds of N repetitions pooled, the rounds interleaved (N of titan's, N
// of MPI's, ...) so a slow spell of the machine hits both alike (call by call, one library's calls slowed the other's:
// the first titan call after an MPI one took twice its time); each repetition starts at a barrier. The transfer's floor
// on a ring: (p - 1) / p of the buffer sent per rank (twice for an all-reduce).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <vector>

#include "comms/process_group.h"
#include "src/ops/ops.h"

using namespace titan;
using namespace titan::comms;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
void poll(MPI_Request& req) {
  int done = 0;
  while (!done) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
}
}  // namespace

int main(int argc, char** argv) {
  int reps = 10;
  double max_mib = 16;
  CLI::App app{"titan-bench-collectives: titan's ring reduce-scatter and all-reduce vs Open MPI's, by size"};
  app.add_option("--reps", reps, "repetitions per size (median)")->check(CLI::Range(1, 1000));
  app.add_option("--max-mib", max_mib, "largest buffer, MiB")->check(CLI::Range(0.0625, 1024.0));
  CLI11_PARSE(app, argc, argv);
  init(&argc, &argv);
  {
    ProcessGroup pg(MPI_COMM_WORLD, "world");
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    const int p = pg.size();
    if (pg.rank() == 0)
      std::printf("%d ranks; median of 3 x %d; ms per call (titan / Open MPI: below 1 titan is faster)\n%10s  %-28s  "
                  "%-28s\n%10s  %8s %8s %8s    %8s %8s %8s\n",
                  p, reps, "", "reduce_scatter", "all_reduce", "bytes", "titan", "MPI", "ratio", "titan", "MPI",
                  "ratio");
    for (int64_t bytes = 64 << 10; bytes <= (int64_t)(max_mib * (1 << 20)); bytes *= 4) {
      const int64_t n = bytes / 4 / p * p;
      Tensor x = full({n}, 1.0 + pg.rank(), DType::F32);
      Tensor out = empty({n}, DType::F32);
      std::vector<int> counts(p, (int)(n / p));
      std::vector<double> t_rs, m_rs, t_ar, m_ar;
      auto timed = [&](std::vector<double>& into, auto&& f) {
        for (int k = 0; k < reps; ++k) {
          MPI_Barrier(comm);
          const double t0 = MPI_Wtime();
          f();
          into.push_back(MPI_Wtime() - t0);
        }
      };
      for (int round = 0; round < 3; ++round) {
        timed(t_rs, [&] { pg.reduce_scatter(x, 0); });
        timed(m_rs, [&] {
          MPI_Request req;
          MPI_Ireduce_scatter(x.raw_data(), out.raw_data(), counts.data(), MPI_FLOAT, MPI_SUM, comm, &req);
          poll(req);
        });
        timed(t_ar, [&] { pg.all_reduce(x); });
        timed(m_ar, [&] {
          MPI_Request req;
          MPI_Iallreduce(x.raw_data(), out.raw_data(), (int)n, MPI_FLOAT, MPI_SUM, comm, &req);
          poll(req);
        });
      }
      // the results agree: rank q holds 1 + q everywhere, so every sum is p (p + 1) / 2
      const double want = p * (p + 1) / 2.0;
      const float rs = pg.reduce_scatter(x, 0).data<float>()[0], ar = pg.all_reduce(x).data<float>()[n - 1];
      if (rs != want || ar != want) {
        std::fprintf(stderr, "titan-bench-collectives: rank %d, %lld bytes: reduce_scatter gave %g, all_reduce %g, "
                     "not %g\n", pg.rank(), (long long)(n * 4), rs, ar, want);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      if (pg.rank() == 0) {
        const double a = median(t_rs), b = median(m_rs), c = median(t_ar), d = median(m_ar);
        std::printf("%10lld  %8.3f %8.3f %8.2f    %8.3f %8.3f %8.2f\n", (long long)(n * 4), a * 1e3, b * 1e3, a / b,
                    c * 1e3, d * 1e3, c / d);
      }
    }
    MPI_Comm_free(&comm);
  }
  finalize();
  return 0;
}
