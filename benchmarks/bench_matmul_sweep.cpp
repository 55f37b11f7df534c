// titan-bench: the SemiAnalysis matmul sweep. nn.functional.linear on the
// projection shapes of open-weight models (Qwen3, Llama 3, gpt-oss,
// DeepSeek-V3), at M = 1, 128 and 2048 rows (batch-size regimes): measured
// GFLOP/s and MFU of titan's `linear` on this CPU, next to the simulated MFU
// of the same call on simulated chips (simulator/cost_model.h; Trainium as one
// LNC=2 logical core = a quarter chip, as the article measured it).
//
//   ./build/titan-bench [--csv out.csv] [--max-gflop G] [--chips trainium3,gb300,b200]
//   /usr/bin/python3 scripts/plot_matmul_sweep.py out.csv sweep.png
//
// CPU timings: best of a few repetitions (fewer for big calls); shapes above
// --max-gflop (default 20) are simulated only (a 500-GFLOP call takes
// seconds here). The CPU's MFU is against simulator/specs/chips/cpu-epyc-zen4-2c.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "simulator/cost_model.h"
#include "src/autograd/grad_mode.h"
#include "src/config/version.h"
#include "src/ops/ops.h"

using namespace titan;

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) out.push_back(x);
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  std::string csv, chips_arg = "trainium3,trainium3+engines,trainium2,trainium2+engines,gb300,b200,h100-sxm";
  double max_gflop = 20;
  CLI::App app{"titan-bench: the matmul sweep. `linear` on open-weight projection shapes at M = 1, 128, 2048: "
               "measured GFLOP/s and MFU on this CPU next to the simulated MFU on other chips",
               "titan-bench"};
  app.set_version_flag("--version", version_string("titan-bench"));
  app.add_option("--csv", csv, "also write the table as CSV (plot: scripts/plot_matmul_sweep.py)");
  app.add_option("--max-gflop", max_gflop, "measure calls up to this many GFLOP on the CPU (larger: simulated only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--chips", chips_arg,
                 "simulated chips, comma-separated (simulator/specs/chips); NAME+engines: priced by the schedule of "
                 "its engines (simulator/engines.h) instead of its GEMM table");
  CLI11_PARSE(app, argc, argv);
  const double t_start = now();
  struct Proj {
    const char* model;
    const char* name;
    int64_t in, out;
  };
  const std::vector<Proj> projs = {
      {"qwen3-32b", "q_proj", 5120, 8192},       {"qwen3-32b", "kv_proj", 5120, 1024},
      {"qwen3-32b", "o_proj", 8192, 5120},       {"qwen3-32b", "gate/up_proj", 5120, 25600},
      {"qwen3-32b", "down_proj", 25600, 5120},   {"qwen3-0.6b", "gate/up_proj", 1024, 3072},
      {"qwen3-0.6b", "q_proj", 1024, 2048},      {"llama3-70b", "gate/up_proj", 8192, 28672},
      {"llama3-70b", "down_proj", 28672, 8192},  {"llama3-8b", "q_proj", 4096, 4096},
      {"llama3-8b", "gate/up_proj", 4096, 14336}, {"gpt-oss-120b", "qkv_proj", 2880, 5120},
      {"gpt-oss-120b", "expert gate_up", 2880, 5760}, {"gpt-oss-120b", "expert down", 2880, 2880},
      {"gpt-oss-120b", "router", 2880, 128},     {"deepseek-v3", "q_a_proj", 7168, 1536},
      {"deepseek-v3", "expert gate/up", 7168, 2048}, {"deepseek-v3", "lm_head", 7168, 129280},
  };
  std::vector<sim::ChipSpec> chips;
  sim::ChipSpec cpu;
  try {
    cpu = sim::load_chip("cpu-epyc-zen4-2c");
    for (const auto& n : split(chips_arg)) {
      const size_t plus = n.find("+engines");
      chips.push_back(sim::load_chip(n.substr(0, plus)));
      if (plus != std::string::npos) {
        if (!chips.back().engines.valid())
          throw std::runtime_error("chip '" + n.substr(0, plus) + "' has no engines: section to schedule");
        chips.back().price_by_engines = true;
        chips.back().name += "+engines";
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan-bench: %s\n", e.what());
    return 2;
  }
  std::ofstream out;
  if (!csv.empty()) {
    out.open(csv);
    out << "model,proj,M,K,N,gflop,cpu_gflops,cpu_mfu";
    for (auto& c : chips) out << "," << c.name << "_mfu";
    out << "\n";
  }
  std::printf("%-14s %-15s %5s %6s %7s %9s %10s %8s", "model", "projection", "M", "K", "N", "GFLOP", "cpu GF/s",
              "cpu MFU");
  for (auto& c : chips) std::printf(" %10.10s", (c.name + " MFU").c_str());
  std::printf("\n");
  NoGradGuard ng;
  const size_t n_rows = 3 * projs.size();
  size_t row = 0;
  double measured_gflop_total = 0, measured_gflop_done = 0;  // the ETA is paced by the FLOPs still to measure
  for (int64_t M : {1, 128, 2048})
    for (const auto& p : projs)
      if (2.0 * M * p.in * p.out / 1e9 <= max_gflop) measured_gflop_total += 2.0 * M * p.in * p.out / 1e9;
  for (int64_t M : {1, 128, 2048})
    for (const auto& p : projs) {
      const double gflop = 2.0 * M * p.in * p.out / 1e9;
      double gfs = 0;
      if (gflop <= max_gflop) {
        Generator g(0);
        Tensor x = randn({M, p.in}, g);
        Tensor w = randn({p.out, p.in}, g, DType::F32, 0.02);
        const int reps = gflop > 5 ? 2 : gflop > 0.5 ? 4 : 20;
        double best = 1e30;
        for (int r = 0; r < reps + 1; ++r) {
          const double t0 = now();
          Tensor y = linear(x, w, Tensor());
          const double t = now() - t0;
          if (r > 0) best = std::min(best, t);
        }
        gfs = gflop / best;
        measured_gflop_done += gflop;
      }
      std::printf("%-14s %-15s %5lld %6lld %7lld %9.3f", p.model, p.name, (long long)M, (long long)p.in,
                  (long long)p.out, gflop);
      if (gfs > 0) std::printf(" %10.1f %7.1f%%", gfs, 100.0 * gfs / (cpu.peak_tflops * 1e3));
      else std::printf(" %10s %8s", "-", "-");
      if (out.is_open()) {
        out << p.model << "," << p.name << "," << M << "," << p.in << "," << p.out << "," << gflop << ",";
        if (gfs > 0) out << gfs << "," << gfs / (cpu.peak_tflops * 1e3);
        else out << ",";
      }
      for (auto& c : chips) {
        // bf16 operands: x [M, K], w [N, K], y [M, N]
        sim::Kernel k;
        k.kind = sim::KernelKind::Gemm;
        k.flops = 2.0 * M * p.in * p.out;
        k.bytes = 2.0 * ((double)M * p.in + (double)p.in * p.out + (double)M * p.out);
        k.batch = 1;
        k.m = M;
        k.n = p.out;
        k.k = p.in;
        k.element_bytes = 2;
        const int rpc = c.engines.valid() ? std::max(1, c.cores / 2) : 1;  // Trainium: one LNC=2 logical core
        const auto t = sim::kernel_time(c, rpc, k, sim::ExecMode::Compiled);
        const double mfu = k.flops / t.seconds / (c.mfu_peak_tflops * 1e12 / rpc);
        std::printf(" %9.1f%%", 100 * mfu);
        if (out.is_open()) out << "," << mfu;
      }
      const double spent = now() - t_start;
      const double left = measured_gflop_done > 0
                              ? spent / measured_gflop_done * (measured_gflop_total - measured_gflop_done) : 0.0;
      std::printf("   [%zu/%zu, %.0f s, ETA %.0f s]\n", ++row, n_rows, spent, left);
      if (out.is_open()) out << "\n";
      std::fflush(stdout);
    }
  if (!csv.empty()) std::printf("wrote %s (plot: /usr/bin/python3 scripts/plot_matmul_sweep.py %s sweep.png)\n", csv.c_str(), csv.c_str());
  return 0;
}
