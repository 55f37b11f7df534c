// titan-calibrate: a simulator spec of the machine it runs on, from microbenchmarks of titan's own kernels
// and of its ranks' exchange, so the simulator can predict titan's own measured steps here (the closed
// loop: scripts/closed_loop.py).
//
//   titan-calibrate --out DIR [--name NAME] [--budget SECONDS]
//   mpirun --bind-to none -np 2 titan-calibrate --out DIR   # also the exchange between the ranks (MPI over
//                                                          # shared memory); --bind-to none: every core, not one
//
// Writes DIR/NAME.yaml (the chip: all of this machine's cores) and DIR/NAME-host.yaml (the system: one chip,
// ranks of an mpirun job sharing it; `chip: NAME.yaml`, found beside it). Use them with
//   titan-train ... --simulation.system DIR/NAME-host.yaml --simulation.ranks_per_chip 1
// (several ranks on this spec: each priced at its 1/N share of the all-core figures). Under mpirun -np N (N > 1) it also writes DIR/NAME-xN.yaml and DIR/NAME-xN-host.yaml: the same machine as N
// ranks share it, each kernel measured on every rank at once with cores / N threads each (what a rank of an
// N-rank job gets: the ranks contend for the memory and the caches, and a one-thread rank loses nothing to
// threading); the figures are one rank's times N, the GEMM table one rank's (gemm_efficiency_per: rank). For a
// job of N ranks on this machine: --simulation.system DIR/NAME-xN-host.yaml --simulation.ranks_per_chip N.
//
// What is measured (each figure the median of its repetitions, in two passes of half the budget, the faster
// pass's kept; first the kernels on rank 0 with every core's thread while the other ranks sleep, then, under
// mpirun, on every rank at once):
//   gemm_efficiency   titan's `linear` forward + backward (3 GEMMs of one size each) over token x model shapes
//                     from 0.001 to ~4 GFLOP per GEMM; peak_tflops = the fastest, the table its fractions (of
//                     the whole chip: gemm_efficiency_per chip)
//   hbm_tbps          `add` of two 32 MiB tensors (bytes as its cost record counts them; the best repetition)
//   vector_tflops     silu, exp, softmax and rms_norm forward + backward over a [4096, 256] tensor: the median of
//                     their recorded FLOPs per second (each at its repetitions' lower quartile)
//   attention         causal flash attention ([8, 256, 4 | 2 kv, D]), the forward and the backward kernel timed
//                     apart: each one's recorded FLOPs per second (lower quartile) over peak_tflops, at head dims
//                     D = 32, 64 and 128 (attention_by_head_dim; D = 64 also as attention_efficiency,
//                     attention_backward_efficiency)
//   *_launch_us       titan's per-op overhead: a chain of ops on one-element tensors, forward + backward, per op
//   local_comm_*      (2+ ranks) all_gather over every rank through titan's communication thread: the latency
//                     per step of the smallest (8 B per rank), the bandwidth (GB/s) of the largest (16 MiB)
//                     net of that latency, in the cost model's terms for ranks sharing a chip
#include <mpi.h>
#include <omp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <ctime>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <vector>

#include "comms/process_group.h"
#include "simulator/hardware.h"
#include "src/autograd/grad_mode.h"
#include "src/config/version.h"
#include "src/log/log.h"
#include "src/ops/ops.h"
#include "src/tensor/cost.h"
#include "src/tensor/error.h"

using namespace titan;
namespace fs = std::filesystem;

namespace {
// Seconds of `f` over repetitions after one warm-up, sorted: at least 3, at most `max_reps`, until `budget` s.
// With `each` (ranks measuring at once): exactly `max_reps`, `each` before every one (a barrier: every repetition
// runs beside the others' same one; the count cannot differ between ranks).
std::vector<double> times(const std::function<void()>& f, double budget, int max_reps = 50,
                          const std::function<void()>* each = nullptr) {
  f();
  std::vector<double> ts;
  const double t_end = wall_seconds() + budget;
  while ((int)ts.size() < max_reps && (each || ts.size() < 3 || wall_seconds() < t_end)) {
    if (each) (*each)();
    const double t0 = wall_seconds();
    f();
    ts.push_back(wall_seconds() - t0);
  }
  std::sort(ts.begin(), ts.end());
  return ts;
}
double median_time(const std::function<void()>& f, double budget, int max_reps = 50) {
  const std::vector<double> ts = times(f, budget, max_reps);
  return ts[ts.size() / 2];
}
// The lower quartile of sorted repetition times: a slow spell of a shared machine shorter than the measurement
// leaves it be (on this VM the median of the attention and elementwise kernels moved 10-15% between
// calibrations minutes apart, 2026-12-05, and moved every simulated layout with it).
double lower_quartile(const std::vector<double>& sorted) { return sorted[sorted.size() / 4]; }

// What one call of `f` records: FLOPs, bytes, ops (titan's cost records, as the simulator reads them).
OpCost recorded(const std::function<void()>& f) {
  CostScope scope;
  f();
  OpCost c;
  c.flops = scope.flops();
  c.bytes = scope.bytes();
  c.calls = scope.calls();
  return c;
}

struct GemmPoint {
  double gflop, tflops;
};

// sync: called before each measurement (ranks measuring at once start each kernel together).
std::vector<GemmPoint> measure_gemms(double budget, const std::function<void()>& sync) {
  struct S {
    int64_t m, k, n;
  };
  std::vector<S> shapes;
  for (int64_t m : {128, 512, 2048, 8192})
    for (auto [k, n] : std::vector<std::pair<int64_t, int64_t>>{{64, 64}, {128, 128}, {256, 256}, {256, 768},
                                                               {768, 256}, {512, 512}, {1024, 1024}})
      if (2.0 * m * k * n <= 9e9) shapes.push_back({m, k, n});
  std::vector<GemmPoint> out;
  Generator g(0);
  for (const S& s : shapes) {
    Tensor x = randn({s.m, s.k}, g).requires_grad_(true);
    Tensor w = randn({s.n, s.k}, g, DType::F32, 0.02).requires_grad_(true);
    Tensor dy = randn({s.m, s.n}, g);
    auto step = [&] {
      Tensor y = linear(x, w);
      y.backward(dy);
      x.zero_grad();
      w.zero_grad();
    };
    sync();
    const double t = median_time(step, budget / shapes.size());
    const double flops = 2.0 * s.m * s.k * s.n;
    out.push_back({flops / 1e9, 3 * flops / t / 1e12});
  }
  return out;
}

// FLOPs per second of forward + backward of `op` on x, as the cost records count them.
double op_rate(const std::function<Tensor(const Tensor&)>& op, const Tensor& x0, double budget,
               const std::function<void()>& sync) {
  Tensor x = x0.detach().requires_grad_(true);
  Tensor dy = ones(op(x0).shape());
  auto step = [&] {
    Tensor y = op(x);
    y.backward(dy);
    x.zero_grad();
  };
  const double flops = recorded(step).flops;
  sync();
  return flops / lower_quartile(times(step, budget));
}

struct Exchange {
  double latency_us = 0, gbps = 0;
};

// all_gather between the world's ranks through titan's communication thread (median of 41 / 21 after a barrier);
// rank 0's view. Every rank calls it.
Exchange measure_exchange() {
  comms::ProcessGroup world(MPI_COMM_WORLD, "world");
  comms::CommLog::get().enabled = false;
  auto gather = [&](int64_t floats, int reps) {
    Tensor x = full({floats}, 1.0);
    (void)world.all_gather(x);  // warm-up
    std::vector<double> ts;
    for (int r = 0; r < reps; ++r) {
      world.barrier();
      const double t0 = wall_seconds();
      (void)world.all_gather(x);
      ts.push_back(wall_seconds() - t0);
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
  };
  const int n = world.size();
  const double small = gather(2, 41);
  const int64_t floats = (16 << 20) / 4 / n;  // 16 MiB gathered
  const double big = gather(floats, 21);
  // the cost model's chip hop: an all-gather of S bytes over n ranks of a chip moves (n-1)/n S per rank, all n
  // ranks at once over the chip's exchange: (n-1) S / rate, plus its latency steps
  const bool pow2 = (n & (n - 1)) == 0;  // the cost model's chip hop: halving-doubling, else a ring
  const double steps = pow2 ? std::max(1.0, std::log2((double)n)) : n - 1.0;
  Exchange e;
  e.latency_us = small / steps * 1e6;
  const double S = 4.0 * floats * n;
  e.gbps = (n - 1) * S / std::max(1e-9, big - small) / 1e9;
  return e;
}

std::string num(double v) { return fmt("%.4g", v); }  // log.h's one number formatter

// The head dims attention is measured at (models use 32 to 256; 64 also gives attention_efficiency)
constexpr std::array<int64_t, 3> kAttentionHeadDims = {32, 64, 128};
// The kernels' figures on this rank's threads (omp_get_max_threads()); `sync` before each measurement (a barrier
// when every rank measures at once: each kernel then runs beside the same kernel on the others; `shared`: the
// bandwidth's repetitions are synchronized one by one too).
struct Kernels {
  std::vector<std::pair<double, double>> table;  // (GFLOP per GEMM, fraction of peak), quarter-decade means
  // TFLOP/s, TB/s, TFLOP/s, fractions of peak (attention forward, backward), us
  double peak = 0, hbm = 0, vector = 0, launch_us = 0;
  std::vector<sim::AttentionPoint> attention;  // by head dim (kAttentionHeadDims)
};
// One pass over every kernel: rates as measured (TFLOP/s, TB/s, us).
struct Pass {
  std::vector<GemmPoint> gemms;
  double hbm = 0, vector = 0, launch_us = 0;
  std::array<double, kAttentionHeadDims.size()> attn_fwd{}, attn_bwd{};  // TFLOP/s at each of kAttentionHeadDims
};
// Causal flash attention [8, 256, 4 | 2 kv, D]: the forward and the backward kernel timed apart (the backward
// recomputes the scores and reduces dK, dV: its own fraction of peak), each one's recorded FLOPs per second at
// the lower quartile of its repetitions (TFLOP/s).
std::pair<double, double> attention_rates(int64_t D, double budget, const std::function<void()>& sync, Generator& g) {
  Tensor q = randn({8, 256, 4, D}, g).requires_grad_(true), k = randn({8, 256, 2, D}, g).requires_grad_(true),
         v = randn({8, 256, 2, D}, g).requires_grad_(true);
  Tensor dyo = randn({8, 256, 4, D}, g);
  auto forward = [&] { return scaled_dot_product_attention(q, k, v, Tensor(), AttentionOptions{}); };
  auto backward = [&](const Tensor& o) {
    o.backward(dyo);
    q.zero_grad(), k.zero_grad(), v.zero_grad();
  };
  double fwd_flops = 0, all_flops = 0;
  {
    CostScope scope;
    Tensor o = forward();
    fwd_flops = scope.flops();
    backward(o);
    all_flops = scope.flops();
  }
  backward(forward());  // warm-up
  sync();
  std::vector<double> tf, tb;
  const double t_end = wall_seconds() + budget;
  while (tf.size() < 50 && (tf.size() < 5 || wall_seconds() < t_end)) {
    const double t0 = wall_seconds();
    Tensor o = forward();
    const double t1 = wall_seconds();
    backward(o);
    tf.push_back(t1 - t0);
    tb.push_back(wall_seconds() - t1);
  }
  std::sort(tf.begin(), tf.end());
  std::sort(tb.begin(), tb.end());
  return {fwd_flops / lower_quartile(tf) / 1e12, (all_flops - fwd_flops) / lower_quartile(tb) / 1e12};
}

Pass measure_pass(double budget, const std::function<void()>& sync, bool shared) {
  Pass P;
  P.gemms = measure_gemms(budget * 0.6, sync);
  Generator g(1);
  // memory bandwidth
  Tensor a = randn({8 << 20}, g), b = randn({8 << 20}, g);
  const OpCost add_cost = recorded([&] { NoGradGuard ng; (void)add(a, b); });
  sync();
  // the best repetition, as STREAM reports a bandwidth: on this VM a median moved between ~45 and ~110 GB/s from
  // one calibration to the next (2026-12-05) while the training steps it priced did not. Ranks measuring at
  // once run each repetition together (a rank's best is then never one it ran alone)
  const double t_add = times([&] { NoGradGuard ng; (void)add(a, b); }, budget * 0.06, shared ? 12 : 50,
                             shared ? &sync : nullptr).front();
  P.hbm = add_cost.bytes / t_add / 1e12;
  // elementwise / norm / softmax
  Tensor x = randn({4096, 256}, g);
  Tensor wn = ones({256});
  std::vector<double> rates = {op_rate([](const Tensor& t) { return silu(t); }, x, budget * 0.035, sync),
                               op_rate([](const Tensor& t) { return exp(mul(t, 0.1)); }, x, budget * 0.035, sync),
                               op_rate([](const Tensor& t) { return softmax(t, -1); }, x, budget * 0.035, sync),
                               op_rate([&](const Tensor& t) { return rms_norm(t, wn, 1e-6); }, x, budget * 0.035, sync)};
  std::sort(rates.begin(), rates.end());
  P.vector = 0.5 * (rates[1] + rates[2]) / 1e12;
  // attention at each head dim of kAttentionHeadDims
  for (size_t i = 0; i < kAttentionHeadDims.size(); ++i) {
    const auto [fwd, bwd] = attention_rates(kAttentionHeadDims[i], budget * 0.04, sync, g);
    P.attn_fwd[i] = fwd;
    P.attn_bwd[i] = bwd;
  }
  // per-op overhead: ops on one-element tensors, forward + backward
  Tensor s0 = full({1}, 1.0).requires_grad_(true);
  auto chain = [&] {
    Tensor y = s0;
    for (int i = 0; i < 100; ++i) y = mul(add(y, 1e-3), 0.999);
    y.backward(ones({1}));
    s0.zero_grad();
  };
  const OpCost chain_cost = recorded(chain);
  sync();
  P.launch_us = median_time(chain, budget * 0.06) / std::max<int64_t>(1, chain_cost.calls) * 1e6;
  return P;
}

// The kernels in two passes of half the budget each, every figure the faster pass's (each GEMM shape's too): a
// shared machine's slow spell only ever slows a measurement, and one shorter than the phase leaves a pass clean
// (2026-12-05 here: one calibration measured 38 GB/s and 10 GFLOP/s of vector rate against 69-82 and 17-18 in
// the runs before and after it, and every closed-loop layout came out 18-53% slow).
Kernels measure_kernels(double budget, const std::function<void()>& sync, bool shared) {
  std::vector<Pass> passes;
  for (int i = 0; i < 2; ++i) passes.push_back(measure_pass(budget / 2, sync, shared));
  Pass best = passes[0];
  for (const Pass& p : passes) {
    for (size_t i = 0; i < best.gemms.size(); ++i)
      best.gemms[i].tflops = std::max(best.gemms[i].tflops, p.gemms[i].tflops);
    best.hbm = std::max(best.hbm, p.hbm);
    best.vector = std::max(best.vector, p.vector);
    for (size_t i = 0; i < kAttentionHeadDims.size(); ++i) {
      best.attn_fwd[i] = std::max(best.attn_fwd[i], p.attn_fwd[i]);
      best.attn_bwd[i] = std::max(best.attn_bwd[i], p.attn_bwd[i]);
    }
    best.launch_us = std::min(best.launch_us, p.launch_us);
  }
  Kernels K;
  for (const auto& p : best.gemms) K.peak = std::max(K.peak, p.tflops);
  std::map<int, std::pair<double, int>> bins;  // quarter decades of GFLOP -> mean efficiency
  for (const auto& p : best.gemms) {
    auto& b = bins[(int)std::floor(std::log10(p.gflop) * 4)];
    b.first += p.tflops / K.peak;
    ++b.second;
  }
  for (const auto& [k, b] : bins) {
    double gf = 0;
    int n = 0;
    for (const auto& p : best.gemms)
      if ((int)std::floor(std::log10(p.gflop) * 4) == k) gf += std::log10(p.gflop), ++n;
    K.table.emplace_back(std::pow(10.0, gf / n), b.first / b.second);
  }
  K.hbm = best.hbm;
  K.vector = best.vector;
  for (size_t i = 0; i < kAttentionHeadDims.size(); ++i) {
    K.attention.push_back({kAttentionHeadDims[i], std::min(1.0, best.attn_fwd[i] / K.peak),
                           std::min(1.0, best.attn_bwd[i] / K.peak)});
  }
  K.launch_us = best.launch_us;
  return K;
}

// Writes the chip NAME.yaml and the system NAME-host.yaml: `K` is the whole chip's (ranks == 1: measured with
// every core) or one of `ranks` ranks' measured at once (the chip's figures are its times `ranks`, the GEMM table
// one rank's share). Returns the system file.
std::string write_spec(const std::string& out_dir, const std::string& name, const Kernels& K, int ranks, int threads,
                       int world, const Exchange& ex) {
  fs::create_directories(out_dir);
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const std::time_t tt = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&tt));
  const std::string chip_file = (fs::path(out_dir) / (name + ".yaml")).string();
  const double n = ranks;
  const std::string each = ranks == 1 ? "" : " (one of " + std::to_string(ranks) + " ranks at once, times " +
                                                 std::to_string(ranks) + ")";
  // head dim 64's row is also the single figures (attention_efficiency, attention_backward_efficiency)
  const sim::AttentionPoint a64 = *std::find_if(K.attention.begin(), K.attention.end(),
                                                [](const sim::AttentionPoint& a) { return a.head_dim == 64; });
  std::ofstream c(chip_file);
  c << "# " << name << ": written by titan-calibrate on " << host << " at " << when << " (" << threads
    << " threads" << (ranks == 1 ? "" : ", as " + std::to_string(ranks) + " ranks of " +
                                           std::to_string(std::max(1, threads / ranks)) +
                                           " threads each measured it at once")
    << "); every figure measured here (programs/titan_calibrate.cpp says how)\n"
    << "name: " << name << "\n"
    << "cores: " << threads << "\n"
    << "peak_tflops: " << num(n * K.peak) << "            # the fastest linear forward + backward measured" << each
    << "\n"
    << "fp32_tflops: " << num(n * K.peak) << "            # those linears are float32: a float32 run's rate\n"
    << "vector_tflops: " << num(n * K.vector) << "          # silu, exp, softmax, rms_norm (fwd + bwd): median" << each
    << "\n"
    << "hbm_gib: " << fmt("%.1f", (double)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE) / (1 << 30)) << "\n"
    << "hbm_tbps: " << num(n * K.hbm) << "               # add of two 32 MiB tensors" << each << "\n"
    << "memory_efficiency: 1\n"
    << "attention_efficiency: " << num(a64.forward) << "   # causal flash attention, the forward kernel (head dim 64)\n"
    << "attention_backward_efficiency: " << num(a64.backward) << "   # and its backward (head dim 64)\n"
    << "attention_by_head_dim:        # [head dim, forward, backward] fractions of peak_tflops\n";
  for (const auto& a : K.attention)
    c << "  - [" << a.head_dim << ", " << num(a.forward) << ", " << num(a.backward) << "]\n";
  c << "eager_launch_us: " << num(K.launch_us) << "         # titan's per-op overhead (fwd + bwd of tiny ops)\n"
    << "compiled_launch_us: " << num(K.launch_us) << "      # titan runs every op as it comes\n";
  if (world > 1)
    c << "local_comm_gbps: " << num(ex.gbps) << "        # all_gather between ranks (titan's comm thread)\n"
      << "local_comm_latency_us: " << num(ex.latency_us) << "\n";
  c << "gemm_tile: [1, 1, 1]          # the table is by measured size; no padding modelled\n"
    << (ranks == 1 ? "gemm_efficiency_per: chip     # measured with every core: a rank of several reads it at its share\n"
                   : "gemm_efficiency_per: rank     # measured as one rank's share, at the call's own size\n")
    << "gemm_efficiency:              # (GFLOP per GEMM, fraction of peak_tflops), quarter-decade means\n";
  for (const auto& [gf, eff] : K.table) c << "  - [" << num(gf) << ", " << num(eff) << "]\n";
  c.close();
  TITAN_CHECK(!c.fail(), "titan-calibrate: could not write ", chip_file);
  const std::string sys_file = (fs::path(out_dir) / (name + "-host.yaml")).string();
  std::ofstream s(sys_file);
  s << "# " << name << "-host: this machine as a system of one chip (written by titan-calibrate at " << when
    << "); the ranks of an mpirun job share the chip and exchange through its memory (local_comm_* in the chip)\n"
    << "name: " << name << "-host\n"
    << "chip: " << name << ".yaml\n"
    << "chips: 1\n"
    << "levels:\n"
    << "  - name: host\n    topology: switch\n    units: 1\n    bandwidth_gbps: " << num(std::max(ex.gbps, 1.0))
    << "\n    latency_us: " << num(std::max(ex.latency_us, 1.0)) << "\n    efficiency: 1\n";
  s.close();
  TITAN_CHECK(!s.fail(), "titan-calibrate: could not write ", sys_file);
  // the spec loads as the simulator reads it
  const sim::SystemSpec sys = sim::load_system(sys_file);
  const sim::ChipSpec chip = sim::load_chip(sys.chip_name);
  log_info("calibrate: peak " + num(chip.peak_tflops * 1e3) + " GFLOP/s, vector " + num(n * K.vector * 1e3) +
           " GFLOP/s, memory " + num(n * K.hbm * 1e3) + " GB/s, attention " + fmt("%.1f", 100 * a64.forward) +
           " / " + fmt("%.1f", 100 * a64.backward) + "% of peak (forward / backward), " + num(K.launch_us) +
           " us per op" + each + " [" + name + "]");
  return sys_file;
}
}  // namespace

int main(int argc, char** argv) {
  std::string out_dir, name = "this-machine";
  double budget = 20;
  CLI::App app{"titan-calibrate: a simulator chip + system spec of this machine from microbenchmarks of titan's "
               "kernels (GEMM efficiency by size, memory bandwidth, elementwise and attention throughput, per-op "
               "overhead) and, under mpirun -np 2+, of its ranks' exchange",
               "titan-calibrate"};
  app.set_version_flag("--version", version_string("titan-calibrate"));
  app.add_option("--out", out_dir, "folder for NAME.yaml (chip) and NAME-host.yaml (system)")->required();
  app.add_option("--name", name, "the spec's name");
  app.add_option("--budget", budget, "seconds of measuring, roughly")->check(CLI::Range(2.0, 3600.0));
  CLI11_PARSE(app, argc, argv);
  try {
    comms::init(&argc, &argv);
    const int rank = comms::world_rank(), world = comms::world_size();
    set_log_enabled(rank == 0);
    const int threads = omp_get_num_procs();  // the CPUs this process may run on
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    TITAN_CHECK(threads >= online, "titan-calibrate: rank ", rank, " may run on ", threads, " of the machine's ", online,
                " CPUs (mpirun binds each rank to a core when -np <= 2): the chip would be measured on a part of it; "
                "run mpirun with --bind-to none");
    Exchange ex;
    if (world > 1) {
      log_info("calibrate: the exchange between " + std::to_string(world) + " ranks (all_gather, 8 B and 16 MiB)");
      ex = measure_exchange();
      log_info("calibrate: exchange latency " + num(ex.latency_us) + " us per step, " + num(ex.gbps) + " GB/s");
    }
    // the kernels on rank 0 with every core (the chip as one rank holds it); the others sleep (not spin)
    const double solo_budget = world > 1 ? budget * 0.5 : budget * 0.85;
    std::string sys_file;
    if (rank == 0) {
      omp_set_num_threads(threads);
      log_info("calibrate: kernels on " + std::to_string(threads) + " threads, about " + fmt("%.0f", solo_budget) +
               " s");
      const Kernels K = measure_kernels(solo_budget, [] {}, false);
      log_info("calibrate: GEMMs peak " + num(K.peak * 1e3) + " GFLOP/s");
      sys_file = write_spec(out_dir, name, K, 1, threads, world, ex);
    }
    {
      MPI_Request req;
      MPI_Ibarrier(MPI_COMM_WORLD, &req);
      for (int done = 0; !done; usleep(2000)) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    }
    if (world > 1) {  // the same kernels on every rank at once, cores / world threads each
      const int each = std::max(1, threads / world);
      omp_set_num_threads(each);
      log_info("calibrate: kernels on " + std::to_string(world) + " ranks at once, " + std::to_string(each) +
               " threads each, about " + fmt("%.0f", budget * 0.35) + " s");
      const Kernels K = measure_kernels(budget * 0.35, [] { MPI_Barrier(MPI_COMM_WORLD); }, true);
      if (rank == 0) write_spec(out_dir, name + "-x" + std::to_string(world), K, world, threads, world, ex);
    }
    log_info("calibrate: wrote " + (fs::path(out_dir) / name).string() + "{.yaml,-host.yaml}" +
             (world > 1 ? " and the -x" + std::to_string(world) + " pair" : std::string()) + " (use: --simulation.system " +
             sys_file + " --simulation.ranks_per_chip 1" +
             (world > 1 ? "; a " + std::to_string(world) + "-rank job: --simulation.system " +
                              (fs::path(out_dir) / (name + "-x" + std::to_string(world) + "-host.yaml")).string() +
                              " --simulation.ranks_per_chip " + std::to_string(world)
                        : std::string()) + ")");
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    comms::finalize();
  } catch (const std::exception& e) {
    // one rank's failure ends every rank (the others may be in an exchange or waiting for rank 0)
    if (comms::initialized() && comms::world_size() > 1) comms::abort_job(e.what());
    std::fprintf(stderr, "[titan] error: %s\n", e.what());
    return 1;
  }
  return 0;
}
