#include "simulator/engines.h"

#include <algorithm>
#include <cmath>

#include "src/tensor/error.h"

namespace titan::sim {

const char* engine_name(Engine e) {
  switch (e) {
    case Engine::Tensor: return "Tensor";
    case Engine::Vector: return "Vector";
    case Engine::Scalar: return "Scalar";
    case Engine::GpSimd: return "GpSimd";
    default: return "DMA";
  }
}

namespace {
long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// One job (a tile): DMA in, its compute stages in order (engine, seconds), DMA out.
struct Job {
  double in_s = 0, out_s = 0;
  std::vector<std::pair<Engine, double>> stages;
  // loads and stores run side by side, each at its share of the core's HBM bandwidth: the DMA's busy time is
  // each stage's duration times its share (the HBM's time, not the two queues' sum)
  double in_share = 1, out_share = 1;
};

// The flow shop: jobs round-robin over `cores`, each core's engines running their stages in job order.
EngineSchedule run(const EngineSpec& e, int cores, const std::vector<Job>& jobs, bool keep) {
  EngineSchedule s;
  s.jobs = (int)jobs.size();
  struct Free {
    double in = 0, out = 0;
    std::array<double, kEngines> engine{};
  };
  std::vector<Free> free((size_t)std::max(1, cores));
  double end = 0;
  auto stage = [&](int core, Engine eng, double& busy_until, double ready, double dur, double share = 1.0) {
    const double a = std::max(busy_until, ready), b = a + dur;
    busy_until = b;
    s.busy[(int)eng] += dur * share;
    if (keep && dur > 0) s.slices.push_back({core, eng, a, b});
    return b;
  };
  for (size_t q = 0; q < jobs.size(); ++q) {
    const Job& j = jobs[q];
    const int core = (int)(q % free.size());
    Free& f = free[(size_t)core];
    double t = stage(core, Engine::Dma, f.in, 0.0, j.in_s, j.in_share);
    for (const auto& [eng, dur] : j.stages) t = stage(core, eng, f.engine[(int)eng], t, dur);
    t = stage(core, Engine::Dma, f.out, t, j.out_s, j.out_share);
    end = std::max(end, t);
  }
  s.seconds = end + e.dma_latency_us * 1e-6;
  return s;
}
}  // namespace

EngineSchedule schedule_gemm(const EngineSpec& e, int cores, long long batch, long long m, long long n, long long k,
                             double in_bytes, double out_bytes, bool keep_slices, double tensor_rate) {
  TITAN_CHECK(e.valid(), "schedule_gemm: the chip spec has no engines");
  TITAN_CHECK(m > 0 && n > 0 && k > 0, "schedule_gemm: a GEMM of ", m, " x ", n, " x ", k, " has an empty dimension");
  const long long P = e.array, F = e.moving_max;
  // the operand whose side is cut into stationary tiles of <= P columns and the one streamed in <= F columns
  auto cycles = [&](long long stat, long long mov) {  // tensor cycles of the whole GEMM with that orientation
    double c = 0;
    for (long long i = 0; i < ceil_div(stat, P); ++i)
      for (long long j = 0; j < ceil_div(mov, F); ++j) {
        const double st = (double)std::min(P, stat - i * P), mv = (double)std::min(F, mov - j * F);
        c += std::max(std::min(e.stationary_min, st), mv);
      }
    return c * (double)ceil_div(k, P);
  };
  const bool m_stationary = cycles(m, n) <= cycles(n, m);
  const long long stat = m_stationary ? m : n, mov = m_stationary ? n : m;
  const long long ns = ceil_div(stat, P), nm = ceil_div(mov, F), kt = ceil_div(k, P);
  // DMA: each operand block read once (its first job), the output tile written once; loads and stores share the
  // core's bandwidth in proportion to their bytes
  const double total_in = (double)batch * (double)(m + n) * (double)k * in_bytes;
  const double total_out = (double)batch * (double)m * (double)n * out_bytes;
  const double bw = e.dma_gbps * 1e9;
  const double in_bw = bw * total_in / (total_in + total_out), out_bw = bw * total_out / (total_in + total_out);
  std::vector<Job> jobs;
  jobs.reserve((size_t)(batch * ns * nm));
  const int C = std::max(1, cores);
  // each core's SBUF: the operand blocks it has loaded (a block another core loaded is loaded again)
  std::vector<std::vector<char>> have_stat((size_t)C, std::vector<char>((size_t)ns, 0));
  std::vector<std::vector<char>> have_mov((size_t)C, std::vector<char>((size_t)nm, 0));
  for (long long b = 0; b < batch; ++b) {
    for (auto& v : have_stat) std::fill(v.begin(), v.end(), 0);
    for (auto& v : have_mov) std::fill(v.begin(), v.end(), 0);
    for (long long j = 0; j < nm; ++j)
      for (long long i = 0; i < ns; ++i) {
        const double st = (double)std::min(P, stat - i * P), mv = (double)std::min(F, mov - j * F);
        const size_t core = jobs.size() % (size_t)C;  // run() gives job q to core q % cores
        Job job;
        double in = 0;
        if (!have_stat[core][(size_t)i]) in += st * (double)k * in_bytes, have_stat[core][(size_t)i] = 1;
        if (!have_mov[core][(size_t)j]) in += mv * (double)k * in_bytes, have_mov[core][(size_t)j] = 1;
        job.in_s = in / in_bw;
        job.in_share = in_bw / bw;
        job.out_share = out_bw / bw;
        job.stages.push_back({Engine::Tensor, (double)kt * std::max(std::min(e.stationary_min, st), mv) /
                                                  (e.tensor_ghz * 1e9 * tensor_rate)});
        const bool scalar = jobs.size() % 2 == 0;  // evacuations alternate between Scalar and Vector
        job.stages.push_back({scalar ? Engine::Scalar : Engine::Vector,
                              std::max(e.min_ii, mv) / ((scalar ? e.scalar_ghz : e.vector_ghz) * 1e9)});
        job.out_s = st * mv * out_bytes / out_bw;
        jobs.push_back(job);
      }
  }
  return run(e, cores, jobs, keep_slices);
}

EngineSchedule schedule_elementwise(const EngineSpec& e, int cores, double elements, double bytes, double flops,
                                    bool keep_slices) {
  TITAN_CHECK(e.valid(), "schedule_elementwise: the chip spec has no engines");
  const double tile = (double)e.array * (double)e.moving_max;  // elements per tile: 128 partitions x 512
  const long long n = std::max(1LL, (long long)std::ceil(std::max(1.0, elements) / tile));
  const bool scalar = elements > 0 && flops / elements > 4;  // activation-like work: the Scalar engine's
  const Engine eng = scalar ? Engine::Scalar : Engine::Vector;
  const double ghz = scalar ? e.scalar_ghz : e.vector_ghz;
  const double bw = e.dma_gbps * 1e9;
  std::vector<Job> jobs((size_t)n);
  for (long long q = 0; q < n; ++q) {
    const double el = std::min(tile, std::max(1.0, elements) - (double)q * tile);
    Job& j = jobs[(size_t)q];
    j.stages.push_back({eng, std::max(e.min_ii, std::ceil(el / (double)e.array)) / (ghz * 1e9)});
    j.in_s = bytes * (2.0 / 3.0) / (double)n / (bw * 2.0 / 3.0);  // reads and writes share the bandwidth 2 : 1
    j.out_s = bytes / 3.0 / (double)n / (bw / 3.0);
    j.in_share = 2.0 / 3.0;
    j.out_share = 1.0 / 3.0;
  }
  return run(e, cores, jobs, keep_slices);
}

EngineSchedule schedule_attention(const EngineSpec& e, int cores, double pairs, long long d, long long dv,
                                  bool backward, double bytes, bool keep_slices) {
  TITAN_CHECK(e.valid(), "schedule_attention: the chip spec has no engines");
  TITAN_CHECK(d > 0 && dv > 0, "schedule_attention: head dims ", d, " and ", dv, " must be positive");
  const double P = e.array, F = e.moving_max, tile = P * F;  // a tile: 128 queries x 512 keys
  const long long n = std::max(1LL, (long long)std::ceil(pairs / tile));
  auto mm = [&](double stationary, double moving) {  // one matmul instruction's cycles
    return std::max(std::min(e.stationary_min, stationary), moving);
  };
  auto chunks = [&](long long x) { return (double)((x + (long long)P - 1) / (long long)P); };
  const double blocks = F / P;  // the tile's keys in 128-row blocks (P^T, dS^T as stationary operands)
  double tensor = 0, scalar = 0, vector = 0;  // cycles per tile
  // forward: S = Q K^T, P transposed (block by block), O += P V; exp on Scalar; row max and sum, O's rescale on
  // Vector
  tensor = chunks(d) * mm(P, F) + blocks * mm(P, P) + blocks * mm(P, (double)dv);
  scalar = std::max(e.min_ii, F);
  vector = 2 * std::max(e.min_ii, F) + std::max(e.min_ii, (double)dv);
  if (backward) {  // recompute S and P; dP = dO V^T; dS = P (dP - delta); dV += P^T dO; dQ += dS K; dK += dS^T Q
    tensor = chunks(d) * mm(P, F) + chunks(dv) * mm(P, F) + 2 * blocks * mm(P, P) + blocks * mm(P, (double)dv) +
             blocks * mm(P, (double)d) + blocks * mm(P, (double)d);
    scalar = std::max(e.min_ii, F);
    vector = 3 * std::max(e.min_ii, F);
  }
  const double bw = e.dma_gbps * 1e9;
  std::vector<Job> jobs((size_t)n);
  for (Job& j : jobs) {
    j.stages = {{Engine::Tensor, tensor / (e.tensor_ghz * 1e9)},
                {Engine::Scalar, scalar / (e.scalar_ghz * 1e9)},
                {Engine::Vector, vector / (e.vector_ghz * 1e9)}};
    j.in_s = bytes * 0.75 / (double)n / (bw * 0.75);  // Q, K, V (and dO) in; O (dQ, dK, dV) out: 3 : 1
    j.out_s = bytes * 0.25 / (double)n / (bw * 0.25);
    j.in_share = 0.75;
    j.out_share = 0.25;
  }
  return run(e, cores, jobs, keep_slices);
}

}  // namespace titan::sim
