// The simulated UltraServer: cost formulas against hand-computed cases, spec
// files and their errors, meta runs against real ones, the published runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>

#include <omp.h>

#include "tests/error_of.h"
#include "simulator/compare.h"
#include "simulator/cost_model.h"
#include "simulator/engines.h"
#include "simulator/critical_path.h"
#include "simulator/trace.h"
#include "src/log/log.h"
#include "step/job_config.h"
#include "src/tensor/error.h"
#include "simulator/plan.h"
#include "simulator/schedule.h"
#include "simulator/simulate.h"
#include "simulator/what_if.h"
#include "comms/process_group.h"
#include "parallel/pipeline.h"
#include "src/tensor/cost_segment.h"
#include "src/tensor/event_stream.h"

using namespace titan;
using titan::testing::error_of;
using namespace titan::sim;
namespace fs = std::filesystem;

namespace {
ChipSpec test_chip() {
  ChipSpec c;
  c.name = "test";
  c.cores = 1;
  c.peak_tflops = c.mfu_peak_tflops = 100;
  c.vector_tflops = 10;
  c.hbm_gib = 10;
  c.hbm_tbps = 2;
  c.memory_efficiency = 0.5;
  c.attention_efficiency = 0.5;
  c.eager_launch_us = 10;
  c.compiled_launch_us = 1;
  c.gemm_tile = {128, 128, 128};
  c.gemm_efficiency = {{1, 0.5}, {100, 0.9}};
  return c;
}

// A chip spec file holding every required key (attention_efficiency 0.3) and `extra` (YAML lines) beside them.
void write_minimal_chip(const std::string& path, const std::string& extra) {
  std::ofstream(path) << "name: t\ncores: 1\npeak_tflops: 1\nvector_tflops: 1\nhbm_gib: 1\nhbm_tbps: 1\n"
                         "memory_efficiency: 1\nattention_efficiency: 0.3\neager_launch_us: 1\ncompiled_launch_us: 1\n"
                         "gemm_tile: [1, 1, 1]\ngemm_efficiency: [[1, 0.5]]\n"
                      << extra;
}

SystemSpec one_level(Topology t, int units, double gbps, int links, double latency_us, std::vector<int> shape = {}) {
  SystemSpec s;
  s.name = "test-system";
  s.chips = units;
  NetworkLevel l;
  l.name = "net";
  l.topology = t;
  l.units = units;
  l.shape = shape;
  l.bandwidth_gbps = gbps;
  l.links_per_chip = links;
  l.latency_us = latency_us;
  l.efficiency = 1.0;
  s.levels.push_back(l);
  return s;
}

std::vector<int> iota(int n, int stride = 1) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i * stride;
  return v;
}

JobConfig sim_config(const std::string& rel, const std::vector<std::string>& overrides = {}) {
  JobConfig c = load_job_config_file(std::string(TITAN_SOURCE_DIR) + "/" + rel, overrides);
  c.job.print_args = false;
  return c;
}

}  // namespace

// ---- kernels: roofline ------------------------------------------------------------
TEST(CostModel, RooflineGemmIsComputeBoundWithTableEfficiency) {
  ChipSpec c = test_chip();
  Kernel k;
  k.kind = KernelKind::Gemm;
  k.batch = 1;
  k.m = k.n = k.k = 4096;  // 137 GFLOP: the table's top efficiency 0.9
  k.flops = 2.0 * 4096 * 4096 * 4096;
  k.bytes = 3.0 * 4096 * 4096 * 2;
  KernelTime t = kernel_time(c, 1, k, ExecMode::Compiled);
  EXPECT_NEAR(t.compute_s, k.flops / (100e12 * 0.9), 1e-12);
  EXPECT_NEAR(t.memory_s, k.bytes / (2e12 * 0.5), 1e-12);
  EXPECT_NEAR(t.seconds, t.compute_s + 1e-6, 1e-12);
  // two ranks per chip: half the chip each
  EXPECT_NEAR(kernel_time(c, 2, k, ExecMode::Compiled).compute_s, 2 * t.compute_s, 1e-12);
  // tile padding: m = 1 costs a whole 128-row tile
  k.m = 1;
  k.flops = 2.0 * 4096 * 4096;
  KernelTime t1 = kernel_time(c, 1, k, ExecMode::Eager);
  const double eff = 0.5;  // 0.034 GFLOP: below the table, clamped to its first point
  EXPECT_NEAR(t1.compute_s, 2.0 * 128 * 4096 * 4096 / (100e12 * eff), 1e-12);
  EXPECT_NEAR(t1.overhead_s, 10e-6, 1e-15);
}

// A fused attention kernel at attention_efficiency; its backward at attention_backward_efficiency where the spec
// gives one (titan-calibrate times the two apart), else at the same fraction; a fraction above 1 is refused.
TEST(CostModel, AttentionBackwardHasItsOwnEfficiencyWhereGiven) {
  ChipSpec c = test_chip();
  Kernel k;
  k.kind = KernelKind::Attention;
  k.flops = 1e12;
  k.attention = AttentionShape{1e9, 64, 64, /*backward=*/false};
  const double fwd = kernel_time(c, 1, k, ExecMode::Compiled).compute_s;
  EXPECT_NEAR(fwd, 1e12 / (100e12 * 0.5), 1e-12);
  k.attention.backward = true;
  EXPECT_NEAR(kernel_time(c, 1, k, ExecMode::Compiled).compute_s, fwd, 1e-12);  // no backward figure: the same
  c.attention_backward_efficiency = 0.25;
  EXPECT_NEAR(kernel_time(c, 1, k, ExecMode::Compiled).compute_s, 1e12 / (100e12 * 0.25), 1e-12);
  k.attention.backward = false;
  EXPECT_NEAR(kernel_time(c, 1, k, ExecMode::Compiled).compute_s, fwd, 1e-12);  // the forward unchanged
  const std::string dir =
      (fs::temp_directory_path() / ("titan_attention_bwd_spec_" + std::to_string((long)::getpid()))).string();
  fs::create_directories(dir);
  const std::string chip = dir + "/chip.yaml";
  auto write = [&](const std::string& bwd) {
    write_minimal_chip(chip, "attention_backward_efficiency: " + bwd + "\n");
  };
  write("0.4");
  EXPECT_DOUBLE_EQ(load_chip(chip).attention_backward_efficiency, 0.4);
  write("1.4");
  const std::string e = error_of([&] { load_chip(chip); });
  EXPECT_NE(e.find("'attention_backward_efficiency' must be <= 1"), std::string::npos) << e;
  EXPECT_NE(e.find(chip), std::string::npos) << e;
  fs::remove_all(dir);
}

// Attention by head dim (titan-calibrate measures 32, 64 and 128: a small head dim does the same softmax and
// masking per pair of positions for fewer FLOPs): a kernel reads its head dim's row, between rows the line in
// log2(head dim), outside them the nearest row; forward and backward apart; no head dim: attention_efficiency.
// The table loads from a spec; an unsorted table, a fraction above 1 or a short row is refused naming the file.
TEST(CostModel, AttentionEfficiencyFollowsTheHeadDim) {
  ChipSpec c = test_chip();
  c.attention_efficiency = 0.45;  // the single figures, apart from every row
  c.attention_backward_efficiency = 0.35;
  c.attention_by_head_dim = {{32, 0.2, 0.3}, {64, 0.4, 0.5}, {128, 0.5, 0.6}};
  Kernel k;
  k.kind = KernelKind::Attention;
  k.flops = 1e12;
  auto eff = [&](int64_t d, bool bwd) {
    k.attention = AttentionShape{1e9, d, d, bwd};
    return 1e12 / (100e12 * kernel_time(c, 1, k, ExecMode::Compiled).compute_s);
  };
  EXPECT_NEAR(eff(32, false), 0.2, 1e-12);
  EXPECT_NEAR(eff(64, false), 0.4, 1e-12);
  EXPECT_NEAR(eff(64, true), 0.5, 1e-12);
  EXPECT_NEAR(eff(128, true), 0.6, 1e-12);
  EXPECT_NEAR(eff(45, false), 0.2 + 0.2 * (std::log2(45.0) - 5), 1e-12);  // between 32 and 64, in log2
  EXPECT_NEAR(eff(96, true), 0.5 + 0.1 * (std::log2(96.0) - 6), 1e-12);
  EXPECT_NEAR(eff(16, false), 0.2, 1e-12);  // below the table: its first row
  EXPECT_NEAR(eff(256, false), 0.5, 1e-12);  // above: its last
  EXPECT_NEAR(eff(0, false), 0.45, 1e-12);   // head dim unknown: attention_efficiency
  EXPECT_NEAR(eff(0, true), 0.35, 1e-12);    // and attention_backward_efficiency (the table has the rest)
  c.attention_by_head_dim.clear();
  EXPECT_NEAR(eff(32, false), 0.45, 1e-12);  // no table: the single figures at every head dim
  EXPECT_NEAR(eff(128, true), 0.35, 1e-12);
  const std::string dir =
      (fs::temp_directory_path() / ("titan_attention_hd_spec_" + std::to_string((long)::getpid()))).string();
  fs::create_directories(dir);
  const std::string chip = dir + "/chip.yaml";
  auto write = [&](const std::string& table) {
    write_minimal_chip(chip, "attention_by_head_dim: " + table + "\n");
  };
  write("[[32, 0.25, 0.3], [64, 0.32, 0.35], [128, 0.36, 0.37]]");
  const ChipSpec loaded = load_chip(chip);
  ASSERT_EQ(loaded.attention_by_head_dim.size(), 3u);
  EXPECT_EQ(loaded.attention_by_head_dim[1].head_dim, 64);
  EXPECT_DOUBLE_EQ(loaded.attention_by_head_dim[1].forward, 0.32);
  EXPECT_DOUBLE_EQ(loaded.attention_by_head_dim[2].backward, 0.37);
  for (const auto& [table, want] : std::vector<std::pair<std::string, std::string>>{
           {"[[64, 0.3, 0.3], [32, 0.2, 0.2]]", "sorted by increasing head dim (32 follows 64)"},
           {"[[32, 1.3, 0.3]]", "[32, 1.3, 0.3]: need a whole head dim >= 1 and fractions of peak in (0, 1]"},
           {"[[64.5, 0.3, 0.3]]", "[64.5, 0.3, 0.3]: need a whole head dim >= 1"},
           {"[[1e300, 0.3, 0.3]]", "[1e300, 0.3, 0.3]: need a whole head dim >= 1"},
           {"[[.nan, 0.3, 0.3]]", "[.nan, 0.3, 0.3]: need a whole head dim >= 1"},
           {"[[abc, 0.3, 0.3]]", "entry [abc, 0.3, 0.3]: 'abc' is not a number"},
           {"[[32, 0.3]]", "entries must be [head dim, forward, backward]"},
           {"[]", "must be a non-empty list of [head dim, forward, backward]"},
           {"0.3", "must be a non-empty list of [head dim, forward, backward]"}}) {
    write(table);
    const std::string e = error_of([&] { load_chip(chip); });
    EXPECT_NE(e.find(want), std::string::npos) << table << ": " << e;
    EXPECT_NE(e.find(chip), std::string::npos) << e;
  }
  fs::remove_all(dir);
}

// FP8 GEMMs: priced at peak x (FP8 headline / BF16 headline) with the same efficiency table and power limit;
// a precision the chip has no rate for is refused, naming the chip and the key.
TEST(CostModel, Fp8GemmsArePricedAtTheChipsFp8Rate) {
  ChipSpec c = test_chip();
  c.headline_tflops = 110;  // the priced peak (100) is below the headline: FP8 scales it by 220 / 110
  c.fp8_tflops = 220;
  c.gemm_power_limit_tflops = 80;
  Kernel k;
  k.kind = KernelKind::Gemm;
  k.m = k.n = k.k = 4096;
  k.flops = 2.0 * 4096 * 4096 * 4096;
  const KernelTime hi = kernel_time(c, 1, k, ExecMode::Compiled);
  EXPECT_NEAR(hi.compute_s, k.flops / 80e12, 1e-12);  // 0.9 x 100 capped at the power limit
  k.precision = GemmPrecision::fp8;
  const KernelTime f8 = kernel_time(c, 1, k, ExecMode::Compiled);
  EXPECT_NEAR(f8.compute_s, k.flops / 160e12, 1e-12);  // both scaled by 2
  EXPECT_NEAR(f8.efficiency, hi.efficiency, 1e-12);   // the same fraction of its own peak
  EXPECT_DOUBLE_EQ(gemm_peak_tflops(c, GemmPrecision::fp8), 200);
  // without fast accumulation (a backward GEMM of torchao's recipes): at the chip's split-accumulation rate; a
  // high-precision GEMM never is
  c.fp8_split_accumulation_rate = 0.8;
  k.split_accumulation = true;
  EXPECT_NEAR(kernel_time(c, 1, k, ExecMode::Compiled).compute_s, k.flops / (160e12 * 0.8), 1e-12);
  k.precision = GemmPrecision::high;
  EXPECT_NEAR(kernel_time(c, 1, k, ExecMode::Compiled).compute_s, hi.compute_s, 1e-12);
  k.precision = GemmPrecision::mxfp8;
  const std::string e = error_of([&] { kernel_time(c, 1, k, ExecMode::Compiled); });
  EXPECT_NE(e.find("chip test"), std::string::npos) << e;
  EXPECT_NE(e.find("mxfp8_tflops"), std::string::npos) << e;
}

TEST(CostModel, RooflineElementwiseIsMemoryBound) {
  ChipSpec c = test_chip();
  Kernel k;
  k.flops = 1e6;
  k.bytes = 1e9;
  KernelTime t = kernel_time(c, 1, k, ExecMode::Eager);
  EXPECT_NEAR(t.memory_s, 1e9 / 1e12, 1e-15);  // 2 TB/s at 50%
  EXPECT_NEAR(t.compute_s, 1e6 / 10e12, 1e-15);
  EXPECT_NEAR(t.seconds, 1e-3 + 10e-6, 1e-12);
}

TEST(CostModel, GemmEfficiencyInterpolatesInLogGflop) {
  ChipSpec c = test_chip();
  EXPECT_DOUBLE_EQ(gemm_efficiency(c, 0.01), 0.5);
  EXPECT_DOUBLE_EQ(gemm_efficiency(c, 1000), 0.9);
  EXPECT_NEAR(gemm_efficiency(c, 10), 0.7, 1e-12);  // halfway in log10 between 1 and 100
}

// A power-limited chip: no GEMM runs faster than gemm_power_limit_tflops, whatever its table says; GEMMs the
// table already prices below the limit are unchanged; ranks sharing the chip share the limit.
TEST(CostModel, GemmPowerLimitCapsTheSustainedThroughput) {
  ChipSpec c = test_chip();  // peak 100, table 0.9 at >= 100 GFLOP, 0.5 at <= 1 GFLOP
  c.gemm_power_limit_tflops = 60;
  Kernel k;
  k.kind = KernelKind::Gemm;
  k.batch = 1;
  k.m = k.n = k.k = 4096;
  k.flops = 2.0 * 4096 * 4096 * 4096;
  KernelTime t = kernel_time(c, 1, k, ExecMode::Compiled);
  EXPECT_NEAR(t.compute_s, k.flops / 60e12, 1e-12);  // not / 90e12
  EXPECT_NEAR(t.efficiency, 0.6, 1e-12);
  EXPECT_NEAR(kernel_time(c, 2, k, ExecMode::Compiled).compute_s, 2 * t.compute_s, 1e-12);
  k.m = k.n = k.k = 512;  // 0.27 GFLOP: the table's 0.5 x 100 = 50 < 60, so the limit does not bind
  k.flops = 2.0 * 512 * 512 * 512;
  EXPECT_NEAR(kernel_time(c, 1, k, ExecMode::Compiled).compute_s, k.flops / 50e12, 1e-12);
}

// A table measured on the whole chip (gemm_efficiency_per: chip, titan-calibrate's) is read at ranks_per_chip x
// the call's size for a rank holding 1/ranks_per_chip of it; a table of one rank's share (the default) at the
// call's size.
TEST(CostModel, AWholeChipTableIsReadAtTheRanksShare) {
  ChipSpec c = test_chip();  // table: 0.5 at <= 1 GFLOP, 0.9 at >= 100, linear in log10 between
  Kernel k;
  k.kind = KernelKind::Gemm;
  k.batch = 1;
  k.m = k.n = k.k = 1024;  // 2.1 GFLOP
  k.flops = 2.0 * 1024 * 1024 * 1024;
  const double g = k.flops / 1e9;
  auto eff = [&](double gf) { return 0.5 + 0.4 * std::log10(gf) / 2; };
  EXPECT_NEAR(kernel_time(c, 2, k, ExecMode::Compiled).efficiency, eff(g), 1e-9);  // per rank: the call's size
  c.gemm_table_per_chip = true;
  EXPECT_NEAR(kernel_time(c, 2, k, ExecMode::Compiled).efficiency, eff(2 * g), 1e-9);  // per chip: twice it
  EXPECT_NEAR(kernel_time(c, 1, k, ExecMode::Compiled).efficiency, eff(g), 1e-9);      // one rank: the chip
}

// ---- collectives ------------------------------------------------------------------
TEST(CostModel, RingAllReduceHandComputed) {
  ChipSpec c = test_chip();
  // 8 chips on a ring, 200 GB/s per chip over 2 links, 5 us per step
  SystemSpec s = one_level(Topology::Ring, 8, 200, 2, 5);
  GroupSpan g = group_span(s, 1, iota(8));
  ASSERT_EQ(g.size(), 8);
  const double S = 1e9;
  CollectiveTime t = collective_time(c, s, 1, Collective::AllReduce, S, g);
  // reduce-scatter + all-gather: 2 * ((n-1)/n * S / B + (n-1) * alpha)
  EXPECT_NEAR(t.seconds, 2 * (7.0 / 8 * S / 200e9 + 7 * 5e-6), 1e-12);
  EXPECT_NE(t.algorithm.find("ring"), std::string::npos);
  CollectiveTime ag = collective_time(c, s, 1, Collective::AllGather, S, g);
  EXPECT_NEAR(ag.seconds, 7.0 / 8 * S / 200e9 + 7 * 5e-6, 1e-12);
}

TEST(CostModel, SwitchUsesHalvingDoublingForPowersOfTwo) {
  ChipSpec c = test_chip();
  SystemSpec s = one_level(Topology::Switch, 8, 100, 1, 5);
  CollectiveTime t = collective_time(c, s, 1, Collective::ReduceScatter, 1e9, group_span(s, 1, iota(8)));
  EXPECT_NEAR(t.seconds, 7.0 / 8 * 1e9 / 100e9 + 3 * 5e-6, 1e-12);  // log2(8) steps
  EXPECT_NE(t.algorithm.find("halving-doubling"), std::string::npos);
}

TEST(CostModel, TorusAllToAllIsBisectionBound) {
  ChipSpec c = test_chip();
  // 4x4 torus, 1024 GB/s per chip over 4 links: bisection = 2 * 4 links of 256 GB/s each way
  SystemSpec s = one_level(Topology::Torus2D, 16, 1024, 4, 0, {4, 4});
  GroupSpan g = group_span(s, 1, iota(16));
  const double S = 1.6e9;             // sent per rank
  const double D = S * 15.0 / 16.0;   // leaving the chip
  CollectiveTime t = collective_time(c, s, 1, Collective::AllToAll, S, g);
  const double bisection = (16 * D / 4) / (8 * 256e9);
  EXPECT_GT(bisection, D / 1024e9);  // the injection bound is the looser one
  EXPECT_NEAR(t.seconds, bisection, 1e-12);
  EXPECT_NE(t.algorithm.find("bisection-bound"), std::string::npos);
  // torus all-gather uses all 4 links: rings along x and y
  CollectiveTime ag = collective_time(c, s, 1, Collective::AllGather, S, g);
  EXPECT_NEAR(ag.seconds, 15.0 / 16 * S / 1024e9, 1e-12);
  // a group along one row of the torus (4 chips, x) gets only that ring's 2 links
  GroupSpan row = group_span(s, 1, iota(4));
  EXPECT_EQ(row.torus_extent[0], (std::vector<int>{4, 1}));
  EXPECT_NEAR(collective_time(c, s, 1, Collective::AllGather, S, row).seconds, 3.0 / 4 * S / 512e9, 1e-12);
}

TEST(CostModel, HierarchicalAllGatherSendsSmallChunksOverTheSlowLevel) {
  ChipSpec c = test_chip();
  SystemSpec s = one_level(Topology::Switch, 4, 400, 1, 0);
  s.has_scale_out = true;
  s.scale_out = s.levels[0];
  s.scale_out.name = "scale-out";
  s.scale_out.units = 1;
  s.scale_out.bandwidth_gbps = 50;
  // 2 ranks per chip, 2 systems: 16 ranks = 2 (chip) x 4 (switch) x 2 (systems)
  GroupSpan g = group_span(s, 2, iota(16));
  EXPECT_EQ(g.ranks_on_chip, 2);
  EXPECT_EQ(g.units[0], 4);
  EXPECT_EQ(g.systems, 2);
  const double S = 1.6e9;
  const double chip_bw = 2e12 * 0.5 / 2;  // copies through HBM: read + write
  const double expect = (1.0 / 2) * S / chip_bw * 2            // chip: (2-1)/2 S, both ranks of the chip
                        + (3.0 / 8) * S * 2 / 400e9             // switch: (4-1) S / (2*4)
                        + (1.0 / 16) * S * 2 / 50e9             // scale-out: (2-1) S / 16
                        + 1e-6;                                 // on-chip step latency
  CollectiveTime t = collective_time(c, s, 2, Collective::AllGather, S, g);
  EXPECT_NEAR(t.seconds, expect, 1e-9);
}

// ---- spec files --------------------------------------------------------------------
TEST(HardwareSpecs, ShippedSpecsLoad) {
  for (const auto& n : known_chips()) EXPECT_NO_THROW(load_chip(n)) << n;
  for (const auto& n : known_systems()) {
    SystemSpec s = load_system(n);
    EXPECT_NO_THROW(load_chip(s.chip_name)) << n;
  }
  ChipSpec t2 = load_chip("trainium2");
  EXPECT_EQ(t2.cores, 8);
  EXPECT_DOUBLE_EQ(t2.mfu_peak_tflops, 632);
  EXPECT_DOUBLE_EQ(t2.headline_tflops, 667);
  EXPECT_DOUBLE_EQ(t2.hbm_gib, 96);
  SystemSpec us = load_system("trn2-ultraserver");
  EXPECT_EQ(us.chips, 64);
  ASSERT_EQ(us.levels.size(), 2u);
  EXPECT_EQ(us.levels[0].topology, Topology::Torus2D);
  EXPECT_DOUBLE_EQ(us.levels[1].bandwidth_gbps, 256);
  // the chips of the published runs (issue 11): Trainium1 in trn1.32xlarge, Meta's 500 W HBM2e H100
  ChipSpec t1 = load_chip("trainium1");
  EXPECT_EQ(t1.cores, 2);
  EXPECT_DOUBLE_EQ(t1.peak_tflops, 190);
  SystemSpec trn1 = load_system("trn1-instance");
  EXPECT_EQ(trn1.chips, 16);
  EXPECT_DOUBLE_EQ(trn1.scale_out.bandwidth_gbps, 6.25);  // 800 Gb/s per 16 chips
  SystemSpec gt = load_system("grand-teton");
  ChipSpec h500 = load_chip(gt.chip_name);
  EXPECT_DOUBLE_EQ(h500.hbm_tbps, 2.4);
  EXPECT_DOUBLE_EQ(h500.mfu_peak_tflops, 989);  // TorchTitan's denominator for these runs
  EXPECT_GT(h500.gemm_power_limit_tflops, 0);
  EXPECT_LT(h500.gemm_power_limit_tflops, h500.peak_tflops);
}

// simulation.attention_scores materialized: an attention record becomes the kernels of an eager matmul - softmax
// - matmul over its whole score matrix (N = B x Hq x sq x skv, a causal mask skips none): forward QK^T, softmax,
// dropout (when p > 0: its N-byte mask), PV; backward dO V^T, P'^T dO, dropout', softmax', dS K, dS^T Q. The GEMMs
// carry 4 N d FLOPs forward and 8 N d backward; the passes move (4e + 1) N and (5e + 1) N bytes (e bytes an
// element); compiled fuses the softmax and the dropout into one pass each way.
TEST(CostModel, MaterializedAttentionIsAnEagerMatmulSoftmaxMatmul) {
  Kernel k;
  k.kind = KernelKind::Attention;
  k.element_bytes = 2;
  const double N = 32.0 * 1024 * 1024, e = 2;  // 32 (batch x heads) score matrices of 1024 x 1024
  k.attention = AttentionShape{N / 2, 64, 64, /*backward=*/false, N, 1024, 1024};
  auto split = [&](double p, ExecMode mode, int& gemms, double& gemm_flops, double& pass_bytes) {
    const std::vector<Kernel> parts = materialized_attention(k, p, mode);
    gemms = 0, gemm_flops = 0, pass_bytes = 0;
    for (const Kernel& x : parts) {
      if (x.kind == KernelKind::Gemm) {
        ++gemms;
        gemm_flops += x.flops;
        EXPECT_EQ(x.batch, 32);
        EXPECT_NEAR(x.flops, 2.0 * x.batch * x.m * x.n * x.k, 1);
      } else {
        EXPECT_EQ(x.kind, KernelKind::Other);
        pass_bytes += x.bytes;
      }
    }
    return parts.size();
  };
  int gemms = 0;
  double flops = 0, bytes = 0;
  EXPECT_EQ(split(0.1, ExecMode::Eager, gemms, flops, bytes), 4u);
  EXPECT_EQ(gemms, 2);
  EXPECT_NEAR(flops, 4 * N * 64, 1);
  EXPECT_NEAR(bytes, (4 * e + 1) * N, 1);  // softmax 2eN, dropout (2e + 1) N
  const std::vector<Kernel> fwd = materialized_attention(k, 0.1, ExecMode::Eager);
  EXPECT_EQ(fwd[0].m, 1024);  // S = Q K^T: [1024, 64] x [64, 1024]
  EXPECT_EQ(fwd[0].n, 1024);
  EXPECT_EQ(fwd[0].k, 64);
  EXPECT_EQ(split(0, ExecMode::Eager, gemms, flops, bytes), 3u);
  EXPECT_NEAR(bytes, 2 * e * N, 1);
  EXPECT_EQ(split(0.1, ExecMode::Compiled, gemms, flops, bytes), 3u);
  EXPECT_NEAR(bytes, (2 * e + 1) * N, 1);  // one pass: reads S, writes P' and the mask
  k.attention.backward = true;
  EXPECT_EQ(split(0.1, ExecMode::Eager, gemms, flops, bytes), 6u);
  EXPECT_EQ(gemms, 4);
  EXPECT_NEAR(flops, 8 * N * 64, 1);
  EXPECT_NEAR(bytes, (5 * e + 1) * N, 1);  // dropout' (2e + 1) N, softmax' 3eN
  EXPECT_EQ(split(0, ExecMode::Eager, gemms, flops, bytes), 5u);
  EXPECT_NEAR(bytes, 3 * e * N, 1);
  EXPECT_EQ(split(0.1, ExecMode::Graphs, gemms, flops, bytes), 5u);
  EXPECT_NEAR(bytes, (3 * e + 1) * N, 1);
  // priced as kernels: on the test chip a pass is memory-bound, each one launch
  const ChipSpec c = test_chip();
  const KernelTime softmax = kernel_time(c, 1, fwd[1], ExecMode::Eager);
  EXPECT_NEAR(softmax.seconds, 2 * e * N / (2e12 * 0.5) + 10e-6, 1e-12);
  // a record without its score matrix cannot be materialized
  k.attention.scores = 0;
  const std::string err = error_of([&] { materialized_attention(k, 0, ExecMode::Eager); });
  EXPECT_NE(err.find("materialized attention needs an attention kernel with its score matrix"), std::string::npos)
      << err;
}

// A run's attention as its stack computed it: Megatron-LM's GPT 1.7B (SC21 Table 1, its scores materialized,
// attention dropout 0.1) against the same job with a flash kernel: every attention record becomes its eager
// kernels (a block's two forwards, full recomputation, 3 more launches each, its backward 4 more: 240 over 24
// blocks), the GEMMs outside attention are unchanged, the attention takes longer (its scores through memory),
// dropout adds its passes, compiled mode fuses them; the knobs are refused where they do not apply.
TEST(Simulation, MaterializedAttentionPricesTheScoresThroughMemory) {
  const std::string cfg = "configs/validation/megatron_gpt_a100.yaml";
  const SimResult mat = simulate_step(sim_config(cfg), 32);
  const SimResult flash =
      simulate_step(sim_config(cfg, {"simulation.attention_scores", "fused", "simulation.attention_dropout", "0"}), 32);
  const SimResult nodrop = simulate_step(sim_config(cfg, {"simulation.attention_dropout", "0"}), 32);
  const SimResult compiled = simulate_step(sim_config(cfg, {"simulation.mode", "compiled"}), 32);
  EXPECT_EQ(mat.kernels - flash.kernels, 24 * (2 * 3 + 4));
  EXPECT_EQ(nodrop.kernels - flash.kernels, 24 * (2 * 2 + 3));
  EXPECT_NEAR(mat.compute_by_class.at("gemm"), flash.compute_by_class.at("gemm"), 1e-9);
  EXPECT_GT(mat.compute_by_class.at("attention"), 3 * flash.compute_by_class.at("attention"));
  EXPECT_GT(mat.compute_by_class.at("attention"), nodrop.compute_by_class.at("attention"));
  EXPECT_GT(mat.step_s, nodrop.step_s);
  EXPECT_GT(nodrop.step_s, flash.step_s);
  EXPECT_LT(compiled.compute_by_class.at("attention"), mat.compute_by_class.at("attention"));
  std::string e = error_of([&] { sim_config(cfg, {"simulation.attention_scores", "fused"}); });
  EXPECT_NE(e.find("simulation.attention_dropout (0.1) prices a dropout pass over materialized attention "
                   "probabilities; it applies only with simulation.attention_scores materialized"),
            std::string::npos)
      << e;
  e = error_of([&] { sim_config(cfg, {"simulation.attention_dropout", "1.5"}); });
  EXPECT_NE(e.find("simulation.attention_dropout must be in [0, 1), got 1.5"), std::string::npos) << e;
  e = error_of([&] { sim_config(cfg, {"simulation.attention_kernel", "cudnn"}); });
  EXPECT_NE(e.find("simulation.attention_kernel 'cudnn' names a fused kernel, and simulation.attention_scores is "
                   "materialized"),
            std::string::npos)
      << e;
  e = error_of([&] { sim_config(cfg, {"simulation.kernel_model", "engines"}); });
  EXPECT_NE(e.find("simulation.attention_scores materialized is priced by the chip's tables"), std::string::npos)
      << e;
  e = error_of([&] { sim_config("configs/qwen3_debug.yaml", {"simulation.attention_scores", "materialized"}); });
  EXPECT_NE(e.find("simulation.attention_scores materialized shapes the simulated step only"), std::string::npos)
      << e;
}

// simulation.attention_kernel picks one of the kernels a chip's spec lists (the run's software: PyTorch's
// flash SDPA is the default FlashAttention-2, Transformer Engine runs cuDNN's); one it does not list is
// refused naming the chip and what it lists; without a simulated system the key is refused.
TEST(HardwareSpecs, AttentionKernelIsTheRunsAndListedByTheChip) {
  ChipSpec h = load_chip("h100-sxm");
  ASSERT_EQ(h.attention_kernels.count("cudnn"), 1u);
  EXPECT_GT(h.attention_kernels["cudnn"].efficiency, h.attention_efficiency);
  JobConfig c = sim_config("configs/validation/llama3_8b_a100x64.yaml", {"simulation.system", "h100-hgx",
                                                                      "simulation.num_systems", "8"});
  SimResult fa2 = simulate_step(c, 64);
  c.simulation.attention_kernel = "cudnn";
  SimResult cud = simulate_step(c, 64);
  ASSERT_GT(fa2.compute_by_class.at("attention"), 0);
  EXPECT_NEAR(cud.compute_by_class.at("attention") / fa2.compute_by_class.at("attention"),
              h.attention_efficiency / h.attention_kernels["cudnn"].efficiency, 0.02);
  EXPECT_NEAR(cud.compute_by_class.at("gemm"), fa2.compute_by_class.at("gemm"), 1e-9);
  c.simulation.attention_kernel = "flash9";
  std::string e = error_of([&] { simulate_step(c, 64); });
  EXPECT_NE(e.find("'flash9' is not listed for chip h100-sxm"), std::string::npos) << e;
  EXPECT_NE(e.find("cudnn, flash3"), std::string::npos) << e;
  c.simulation.system = "a100-hgx";  // the A100 lists no other kernel
  c.simulation.attention_kernel = "cudnn";
  e = error_of([&] { simulate_step(c, 64); });
  EXPECT_NE(e.find("attention_kernels: none"), std::string::npos) << e;
  e = error_of([&] { sim_config("configs/qwen3_debug.yaml", {"simulation.attention_kernel", "cudnn"}); });
  EXPECT_NE(e.find("simulation.attention_kernel shapes the simulated step only"), std::string::npos) << e;
}

// A listed kernel may carry its figures by head dim ([fa3-hd]: cuDNN at head dim 64 and 128, forward and backward
// apart): the run picking it prices its attention at its own head dim. The same model with 64 heads of 64 (16 kv
// heads: the same FLOPs and GEMMs) takes cuDNN's 64 row: (1/0.367 + 2.5/0.422) / (1/0.524 + 2.5/0.505) = 1.261x
// the attention time
// (the backward kernel does 2.5x the forward's FLOPs), and ~2% more for the softmax of twice the heads' scores.
TEST(HardwareSpecs, AttentionKernelsArePricedByHeadDimWhereListed) {
  const ChipSpec h = load_chip("h100-sxm");
  ASSERT_EQ(h.attention_kernels.at("cudnn").by_head_dim.size(), 2u);
  EXPECT_EQ(h.attention_kernels.at("cudnn").by_head_dim[0].head_dim, 64);
  EXPECT_DOUBLE_EQ(h.attention_kernels.at("cudnn").by_head_dim[0].backward, 0.422);
  std::vector<std::string> keys = {"simulation.system", "h100-hgx", "simulation.num_systems", "8",
                                   "simulation.attention_kernel", "cudnn"};
  SimResult d128 = simulate_step(sim_config("configs/validation/llama3_8b_a100x64.yaml", keys), 64);
  keys.insert(keys.end(), {"model.n_heads", "64", "model.n_kv_heads", "16", "model.head_dim", "64"});
  SimResult d64 = simulate_step(sim_config("configs/validation/llama3_8b_a100x64.yaml", keys), 64);
  EXPECT_NEAR(d64.compute_by_class.at("attention") / d128.compute_by_class.at("attention"),
              1.02 * (1 / 0.367 + 2.5 / 0.422) / (1 / 0.524 + 2.5 / 0.505), 0.02);
  EXPECT_NEAR(d64.compute_by_class.at("gemm"), d128.compute_by_class.at("gemm"), 1e-9);
  const fs::path dir = fs::temp_directory_path() / ("titan_attention_kernels_" + std::to_string((long)::getpid()));
  fs::create_directories(dir);
  const std::string chip = (dir / "chip.yaml").string();
  write_minimal_chip(chip, "attention_kernels:\n  k:\n    efficiency: 0.5\n    by_headdim: [[64, 0.4, 0.4]]\n");
  const std::string err = error_of([&] { load_chip(chip); });
  EXPECT_NE(err.find("by_headdim"), std::string::npos) << err;
  EXPECT_NE(err.find(chip), std::string::npos) << err;
  write_minimal_chip(chip, "attention_kernels:\n  k:\n    by_head_dim: [[64, 0.4, 0.4]]\n");
  const std::string err2 = error_of([&] { load_chip(chip); });
  EXPECT_NE(err2.find("attention_kernels.k needs 'efficiency'"), std::string::npos) << err2;
  fs::remove_all(dir);
}

// simulation.what_if on an attention figure of a spec that also has it by head dim: a scaled figure scales its
// rows alike (forward and backward; the backward figure the backward column), a set one replaces them (then it
// prices every head dim); a published kernel's likewise through its `efficiency`; naming the kernel's map itself
// is refused, saying which key to name. Never a what-if that silently changes nothing.
TEST(HardwareSpecs, AttentionWhatIfsEditTheRowsByHeadDim) {
  auto edit = [](const std::string& path, double v, bool scale) {
    return SpecEdit{path, v, scale, "chip." + path + (scale ? "*" : "=") + std::to_string(v)};
  };
  const ChipSpec h = load_chip("h100-sxm");
  ASSERT_EQ(h.attention_by_head_dim.size(), 2u);
  const ChipSpec x2 = load_chip("h100-sxm", {edit("attention_efficiency", 2, true)});
  EXPECT_DOUBLE_EQ(x2.attention_efficiency, 2 * h.attention_efficiency);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_DOUBLE_EQ(x2.attention_by_head_dim[i].forward, 2 * h.attention_by_head_dim[i].forward);
    EXPECT_DOUBLE_EQ(x2.attention_by_head_dim[i].backward, 2 * h.attention_by_head_dim[i].backward);
  }
  const ChipSpec set = load_chip("h100-sxm", {edit("attention_efficiency", 0.6, false)});
  EXPECT_TRUE(set.attention_by_head_dim.empty());
  EXPECT_NEAR(attention_efficiency(set, 64, false), 0.6, 1e-12);
  EXPECT_NEAR(attention_efficiency(set, 64, true), 0.6, 1e-12);
  const ChipSpec k = load_chip("h100-sxm", {edit("attention_kernels.cudnn.efficiency", 1.5, true)});
  const AttentionKernel &a = h.attention_kernels.at("cudnn"), &b = k.attention_kernels.at("cudnn");
  EXPECT_DOUBLE_EQ(b.efficiency, 1.5 * a.efficiency);
  EXPECT_DOUBLE_EQ(b.by_head_dim[0].forward, 1.5 * a.by_head_dim[0].forward);
  EXPECT_DOUBLE_EQ(b.by_head_dim[1].backward, 1.5 * a.by_head_dim[1].backward);
  const std::string e = error_of([&] { load_chip("h100-sxm", {edit("attention_kernels.cudnn", 1.2, true)}); });
  EXPECT_NE(e.find("'cudnn' is a map of figures: name one (attention_kernels.cudnn.<key>)"), std::string::npos) << e;
  // a picked kernel without rows clears the chip's default rows: its one figure prices every head dim
  JobConfig c = sim_config("configs/validation/llama3_8b_a100x64.yaml",
                           {"simulation.system", "h100-hgx", "simulation.num_systems", "8", "model.n_heads", "64",
                            "model.n_kv_heads", "16", "model.head_dim", "64"});
  const SimResult fa2 = simulate_step(c, 64);  // FlashAttention-2's 64 row: 0.276, 0.279
  c.simulation.what_if = "";
  c.simulation.attention_kernel = "cudnn";
  const SimResult cud = simulate_what_if(c, parse_what_if("chip.attention_kernels.cudnn.efficiency=0.276"));
  EXPECT_NEAR(cud.compute_by_class.at("attention") / fa2.compute_by_class.at("attention"),
              (1 / 0.276 + 2.5 / 0.276) / (1 / 0.276 + 2.5 / 0.279), 0.005);
}

TEST(HardwareSpecs, ErrorsNameTheFileAndKey) {
  const fs::path dir = fs::temp_directory_path() / "titan_specs_test";
  fs::create_directories(dir);
  const std::string good = std::string(TITAN_SOURCE_DIR) + "/simulator/specs/chips/trainium2.yaml";
  std::string text;
  {
    std::ifstream in(good);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& name, const std::string& t) {
    const std::string p = (dir / name).string();
    std::ofstream(p) << t;
    return p;
  };
  std::string missing = text;
  missing.erase(missing.find("hbm_tbps:"), missing.find('\n', missing.find("hbm_tbps:")) - missing.find("hbm_tbps:"));
  const std::string p1 = write("missing.yaml", missing);
  std::string e = error_of([&] { load_chip(p1); });
  EXPECT_NE(e.find("missing.yaml"), std::string::npos) << e;
  EXPECT_NE(e.find("'hbm_tbps'"), std::string::npos) << e;
  std::string neg = text;
  neg.replace(neg.find("hbm_gib: 96"), 11, "hbm_gib: -96");
  const std::string p2 = write("negative.yaml", neg);
  e = error_of([&] { load_chip(p2); });
  EXPECT_NE(e.find("negative.yaml"), std::string::npos) << e;
  EXPECT_NE(e.find("'hbm_gib' must be > 0"), std::string::npos) << e;
  // the keys of the host, the chip's exchange and the table's axis: misspelled or half-given, refused by name
  std::string half = text + "local_comm_gbps: 10\n";
  e = error_of([&] { load_chip(write("half.yaml", half)); });
  EXPECT_NE(e.find("'local_comm_gbps' and 'local_comm_latency_us' go together"), std::string::npos) << e;
  e = error_of([&] { load_chip(write("per.yaml", text + "gemm_efficiency_per: core\n")); });
  EXPECT_NE(e.find("'gemm_efficiency_per': 'core' is not one of rank, chip"), std::string::npos) << e;
  e = error_of([&] { load_chip(write("typo.yaml", text + "eager_hosts_us: 8\n")); });
  EXPECT_NE(e.find("eager_hosts_us"), std::string::npos) << e;
  std::string sys_text;
  {
    std::ifstream in(std::string(TITAN_SOURCE_DIR) + "/simulator/specs/systems/h100-hgx.yaml");
    sys_text.assign(std::istreambuf_iterator<char>(in), {});
  }
  sys_text.replace(sys_text.find("collective_library: nccl"), 24, "collective_library: rccl");
  e = error_of([&] { load_system(write("lib.yaml", sys_text)); });
  EXPECT_NE(e.find("lib.yaml"), std::string::npos) << e;
  EXPECT_NE(e.find("'collective_library': 'rccl' is not a known library (generic, nccl)"), std::string::npos) << e;
  // in-switch reduction: a switch level's property, a fraction
  sys_text.replace(sys_text.find("collective_library: rccl"), 24, "collective_library: nccl");
  auto edited = [&](const std::string& file, const std::string& from, const std::string& to) {  // h100-hgx, one edit
    std::string t = sys_text;
    t.replace(t.find(from), from.size(), to);
    return write(file, t);
  };
  e = error_of([&] { load_system(edited("nvls.yaml", "nvls_efficiency: 0.69", "nvls_efficiency: 1.5")); });
  EXPECT_NE(e.find("levels[0].nvls_efficiency must be <= 1, got 1.5"), std::string::npos) << e;
  e = error_of([&] { load_system(edited("nvls_ring.yaml", "topology: switch", "topology: ring")); });
  EXPECT_NE(e.find("nvls_efficiency: in-switch reduction (NVLink SHARP) is a property of a switch level"),
            std::string::npos) << e;
  EXPECT_NE(e.find("not of a ring level"), std::string::npos) << e;
  e = error_of([&] {
    load_system(edited("nvls_out.yaml", "  efficiency: 0.94", "  efficiency: 0.94\n  nvls_efficiency: 0.5"));
  });
  EXPECT_NE(e.find("not of a scale_out network"), std::string::npos) << e;
  e = error_of([&] {
    load_system(edited("nvls_generic.yaml", "collective_library: nccl", "collective_library: generic"));
  });
  EXPECT_NE(e.find("level 'nvlink': nvls_efficiency needs collective_library: nccl"), std::string::npos) << e;
  const SystemSpec zero = load_system(edited("nvls_zero.yaml", "nvls_efficiency: 0.69", "nvls_efficiency: 0"));
  EXPECT_EQ(zero.levels[0].nvls_efficiency, 0.0);  // 0: none, as absent
  e = error_of([&] { load_chip("trainium9"); });
  EXPECT_NE(e.find("unknown chip 'trainium9'"), std::string::npos) << e;
  EXPECT_NE(e.find("trainium2"), std::string::npos) << e;  // lists the known ones
  EXPECT_NE(e.find("h100-sxm"), std::string::npos) << e;
  e = error_of([&] { load_system("trn4-ultraserver"); });
  EXPECT_NE(e.find("known systems"), std::string::npos) << e;
  EXPECT_NE(e.find("trn2-ultraserver"), std::string::npos) << e;
  fs::remove_all(dir);
}

// The planner builds the step that runs on meta tensors: a 32B model on 64 ranks without a byte of weights.
TEST(Simulation, Qwen3_32BOn64RanksPlansOnMetaTensors) {
  JobConfig c = load_job_config_file(std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_32b.yaml",
                                     {"parallelism.tensor_parallel_degree", "1", "parallelism.data_parallel_shard_degree",
                                      "-1"});
  c.job.print_args = false;
  StepPlan p = plan_step(c, 64);  // FSDP over 64 fake ranks, seq 4096, activation checkpointing
  const double params = 32762123264.0;
  auto gib = [](int64_t b) { return (double)b; };
  EXPECT_NEAR(gib(p.memory.current[(int)MemoryCategory::Parameters]), params * 4 / 64, params * 4 / 64 * 0.01);
  EXPECT_NEAR(gib(p.memory.current[(int)MemoryCategory::OptimizerState]), params * 8 / 64, params * 8 / 64 * 0.01);
  const double ratio = p.flops / (p.model_flops_per_token * (double)p.tokens_per_rank);
  EXPECT_GT(ratio, 1.25);  // full activation checkpointing recomputes the forward: ~8/6
  EXPECT_LT(ratio, 1.45);
  EXPECT_GT(p.memory.peak[(int)MemoryCategory::Activations], 0);
  c.activation_checkpoint.mode = JobConfig::ACMode::none;
  StepPlan q = plan_step(c, 64);
  const double r2 = q.flops / (q.model_flops_per_token * (double)q.tokens_per_rank);
  EXPECT_GT(r2, 0.95);
  EXPECT_LT(r2, 1.15);
  EXPECT_GT(q.memory.peak[(int)MemoryCategory::Activations], 2 * p.memory.peak[(int)MemoryCategory::Activations]);
  // gradient accumulation is in the planned step: k micro-batches (k x the work and tokens), one optimizer
  // step, the same peak; a global batch the trainer would refuse is refused here too
  c.training.global_batch_size = 3 * c.training.local_batch_size * q.dp_degree;
  StepPlan a = plan_step(c, 64);
  EXPECT_EQ(a.accumulation, 3);
  EXPECT_EQ(a.tokens_per_rank, 3 * q.tokens_per_rank);
  EXPECT_NEAR(a.flops / q.flops, 3.0, 0.05);
  EXPECT_NEAR((double)a.memory.peak[(int)MemoryCategory::Activations],
              (double)q.memory.peak[(int)MemoryCategory::Activations], 1024.0);  // a scalar loss or two
  c.training.global_batch_size += 1;
  try {
    plan_step(c, 64);
    ADD_FAILURE() << "an invalid global batch was planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training.global_batch_size"), std::string::npos) << e.what();
  }
}

// A new member plans at its published size: Mixtral-8x22B (141B) over 64 meta ranks, TP 8 x FSDP 8 with 8-way EP
// (one expert per EP rank, split by TP: every rank holds 1/64 of the model). FSDP cuts dim 0 only, so a layout
// whose FSDP degree over the experts exceeds their count (8 experts, dp_shard 64) leaves some ranks without them.
TEST(Simulation, Mixtral8x22BPlansOnMetaTensors) {
  JobConfig c = load_job_config_file("", {"model.name", "mixtral", "model.flavor", "8x22b", "training.seq_len", "4096",
                                          "training.local_batch_size", "1", "parallelism.data_parallel_shard_degree", "8",
                                          "parallelism.tensor_parallel_degree", "8", "parallelism.expert_parallel_degree",
                                          "8", "activation_checkpoint.mode", "full"});
  c.job.print_args = false;
  StepPlan p = plan_step(c, 64);
  const double params = 140630071296.0;
  EXPECT_NEAR((double)p.memory.current[(int)MemoryCategory::Parameters], params * 4 / 64, params * 4 / 64 * 0.01);
  // MFU's FLOPs per token count the routed experts only: 6 x 38.96B active matmul weights (the head included,
  // the embedding's lookup not) + attention
  EXPECT_NEAR((double)c.model.num_matmul_params() / 1e9, 38.96, 0.01);
  EXPECT_GT(p.model_flops_per_token, 6.0 * (double)c.model.num_matmul_params());
  // a tp rank does 1/8 of its tokens' work; full activation checkpointing recomputes the forward (~8/6)
  const double ratio = p.flops * 8 / (p.model_flops_per_token * (double)p.tokens_per_rank);
  EXPECT_GT(ratio, 1.2);
  EXPECT_LT(ratio, 1.5);
}

// Gemma 3 27B (text, tied, 5 sliding : 1 full) over 64 meta ranks, TP 8 x FSDP 8: 1/64 of the weights per rank; the
// sliding layers' attention FLOPs count their window (1024 of the 4096 tokens). OLMo 2's projection-wide QK-norm
// under TP needs every KV head split: tp 2 over the debug flavor's 2 KV heads plans, tp 4 is refused naming the key.
TEST(Simulation, Gemma3AndOlmo2PlanOnMetaTensors) {
  JobConfig c = load_job_config_file("", {"model.name", "gemma3", "model.flavor", "27b", "training.seq_len", "4096",
                                          "training.local_batch_size", "1", "parallelism.data_parallel_shard_degree", "8",
                                          "parallelism.tensor_parallel_degree", "8", "activation_checkpoint.mode", "full"});
  c.job.print_args = false;
  StepPlan p = plan_step(c, 64);
  const double params = (double)c.model.num_params();
  EXPECT_NEAR(params / 1e9, 27.009, 0.001);
  EXPECT_NEAR((double)p.memory.current[(int)MemoryCategory::Parameters], params * 4 / 64, params * 4 / 64 * 0.01);
  const auto& m = c.model;
  const double attn = 12.0 * m.n_heads * m.head_dim * (52 * 1024.0 + 10 * 4096.0);  // 52 sliding, 10 full layers
  EXPECT_NEAR(c.model.flops_per_token(4096), 6.0 * (double)m.num_matmul_params() + attn, 1.0);
  for (const char* tp : {"2", "4"}) {  // the debug flavor's 2 KV heads
    JobConfig o = load_job_config_file("", {"model.name", "olmo2", "model.flavor", "debug", "training.seq_len", "256",
                                            "training.local_batch_size", "1", "parallelism.tensor_parallel_degree", tp,
                                            "parallelism.data_parallel_shard_degree", "1"});
    o.job.print_args = false;
    try {
      plan_step(o, std::stoi(tp));
      EXPECT_EQ(std::string(tp), "2");
    } catch (const Error& e) {
      EXPECT_EQ(std::string(tp), "4") << e.what();
      EXPECT_NE(std::string(e.what()).find("model.qk_norm_scope projection"), std::string::npos) << e.what();
    }
  }
}

// DeepSeek-V3 671B as DeepSeek trained it (PP 16 x EP 64 over 2048 GPUs, the dense rest data-parallel) and Kimi K2
// (1.04T) under EP 64 x FSDP: planned on meta tensors, MLA's attention in the FLOPs, the experts split over EP.
TEST(Simulation, DeepseekV3AndKimiK2PlanOnMetaTensors) {
  JobConfig c = load_job_config_file("", {"model.name", "deepseek_v3", "model.flavor", "671b", "training.seq_len",
                                          "4096", "training.local_batch_size", "1", "parallelism.pipeline_parallel_degree",
                                          "16", "parallelism.pipeline_parallel_microbatch_size", "1",
                                          "parallelism.data_parallel_shard_degree", "128",
                                          "parallelism.expert_parallel_degree", "64", "activation_checkpoint.mode",
                                          "full"});
  c.job.print_args = false;
  const auto& m = c.model;
  EXPECT_DOUBLE_EQ(m.flops_per_token(4096), 6.0 * (double)m.num_matmul_params() +
                                                6.0 * 61 * 128 * (128 + 64 + 128) * 4096.0);
  StepPlan p = plan_step(c, 2048);
  // rank 0: stage 0 (the embedding and blocks 0-3: 61 over 16 stages of at most 4; blocks 0-2 dense), of its one MoE
  // layer 4 of the 256 experts (EP 64), each sharded over the 2 ranks holding the same experts; the rest over 128
  const double held = (double)p.memory.current[(int)MemoryCategory::Parameters] / 4;  // float32
  const double expert = 3.0 * 7168 * 2048, dense_block = 3.0 * 7168 * 18432 + 190e6;  // MLP + MLA (~187M)
  EXPECT_GT(held, 4 * expert / 2);
  EXPECT_LT(held, 4 * expert / 2 + (129280.0 * 7168 + 4 * dense_block) / 128);
  JobConfig k = load_job_config_file("", {"model.name", "deepseek_v3", "model.flavor", "kimi-k2", "training.seq_len",
                                          "4096", "training.local_batch_size", "1", "parallelism.data_parallel_shard_degree",
                                          "64", "parallelism.expert_parallel_degree", "64", "activation_checkpoint.mode",
                                          "full"});
  k.job.print_args = false;
  StepPlan q = plan_step(k, 64);
  const double kimi = (double)k.model.num_params();
  EXPECT_NEAR(kimi / 1e12, 1.026, 0.001);
  // every parameter sharded 64 ways (the experts by EP, the rest by FSDP)
  EXPECT_NEAR((double)q.memory.current[(int)MemoryCategory::Parameters], kimi * 4 / 64, kimi * 4 / 64 * 0.02);
}

// Llama 4 Maverick (400B: 128 experts in every second layer, top-1 plus a shared expert) planned on meta tensors at
// 16k tokens: its FLOPs count the chunked layers' 8192 keys and the NoPE layers' whole sequence; every parameter is
// sharded 128 ways (the experts by EP 128, one per rank; the rest by FSDP)
TEST(Simulation, Llama4MaverickPlansOnMetaTensors) {
  JobConfig c = load_job_config_file("", {"model.name", "llama4", "model.flavor", "maverick", "training.seq_len",
                                          "16384", "training.local_batch_size", "1",
                                          "parallelism.data_parallel_shard_degree", "128",
                                          "parallelism.expert_parallel_degree", "128", "activation_checkpoint.mode",
                                          "full"});
  c.job.print_args = false;
  const auto& m = c.model;
  EXPECT_NEAR((double)m.num_params() / 1e9, 400.7, 0.1);        // Meta's card: 400B total
  EXPECT_NEAR((double)m.num_active_params() / 1e9, 16.2, 0.1);  // 17B with the embedding
  EXPECT_DOUBLE_EQ(m.flops_per_token(16384),
                   6.0 * (double)m.num_matmul_params() + 6.0 * 40 * (128 + 128) * (36 * 8192.0 + 12 * 16384.0));
  StepPlan p = plan_step(c, 128);
  const double total = (double)m.num_params();
  EXPECT_NEAR((double)p.memory.current[(int)MemoryCategory::Parameters], total * 4 / 128, total * 4 / 128 * 0.02);
}

TEST(Simulation, BadLayoutsAreRefusedWithTheNumbers) {
  JobConfig c = sim_config("configs/qwen3_32b.yaml");
  c.simulation.world_size = 128;  // 32 chips at 4 per chip: a 16-chip instance cannot hold them
  c.parallelism.data_parallel_shard_degree = -1;
  std::string e = error_of([&] { simulate_step(c, 128); });
  EXPECT_NE(e.find("need 32 chips"), std::string::npos) << e;
  EXPECT_NE(e.find("holds 16 chips"), std::string::npos) << e;
  EXPECT_NE(e.find("num_systems to 2"), std::string::npos) << e;
  JobConfig many = c;
  many.simulation.ranks_per_chip = 16;
  e = error_of([&] { simulate_step(many, 64); });
  EXPECT_NE(e.find("exceeds the 8 cores"), std::string::npos) << e;
  e = error_of([&] { simulate_step(c, 62); });
  EXPECT_NE(e.find("not divisible by ranks_per_chip 4"), std::string::npos) << e;
  c.simulation.system = "nope";
  e = error_of([&] { simulate_step(c, 64); });
  EXPECT_NE(e.find("unknown system 'nope'"), std::string::npos) << e;
  // a layout that does not fit the ranks
  JobConfig d = sim_config("configs/qwen3_32b.yaml", {"parallelism.tensor_parallel_degree", "3"});
  e = error_of([&] { simulate_step(d, 64); });
  EXPECT_NE(e.find("world size 64"), std::string::npos) << e;
}

// ---- meta runs against real ones ---------------------------------------------------
TEST(Simulation, MetaCountsEqualTheRealModel) {
  JobConfig c = sim_config("configs/qwen3_debug.yaml", {"training.local_batch_size", "2", "training.seq_len", "64"});
  StepPlan meta = plan_step(c, 1, /*with_events=*/true, Device::Meta);
  StepPlan real = plan_step(c, 1, /*with_events=*/true, Device::CPU);
  EXPECT_EQ(meta.num_params, real.num_params);
  EXPECT_DOUBLE_EQ(meta.flops, real.flops);
  EXPECT_DOUBLE_EQ(meta.bytes, real.bytes);
  ASSERT_EQ(meta.events.size(), real.events.size());
  for (size_t i = 0; i < meta.events.size(); ++i) {
    EXPECT_STREQ(meta.events[i].op, real.events[i].op) << i;
    EXPECT_EQ(meta.events[i].gemm.m, real.events[i].gemm.m) << i;
  }
  // the memory model: parameters, gradients and optimizer state exactly, activations to 5%
  for (auto cat : {MemoryCategory::Parameters, MemoryCategory::Gradients, MemoryCategory::OptimizerState})
    EXPECT_EQ(meta.memory.peak[(int)cat], real.memory.peak[(int)cat]) << (int)cat;
  const double am = (double)meta.memory.peak[(int)MemoryCategory::Activations];
  const double ar = (double)real.memory.peak[(int)MemoryCategory::Activations];
  EXPECT_GT(ar, 0);
  EXPECT_NEAR(am, ar, 0.05 * ar);
  EXPECT_NEAR((double)meta.memory.total_peak, (double)real.memory.total_peak, 0.05 * (double)real.memory.total_peak);
}

TEST(Simulation, SelectiveCheckpointingSitsBetweenNoneAndFull) {
  auto run = [](const std::string& mode, const std::string& opt) {
    JobConfig c = sim_config("configs/qwen3_32b.yaml", {"model.n_layers", "8", "activation_checkpoint.mode", mode,
                                                    "activation_checkpoint.selective_ac_option", opt});
    return plan_step(c, 64);
  };
  StepPlan none = run("none", "2"), sel = run("selective", "2"), full = run("full", "2");
  auto act = [](const StepPlan& p) { return p.memory.peak[(int)MemoryCategory::Activations]; };
  EXPECT_LT(act(full), act(sel));
  EXPECT_LT(act(sel), act(none));
  EXPECT_LT(none.flops, sel.flops);  // half the blocks recompute their forward
  EXPECT_LT(sel.flops, full.flops);
  EXPECT_NEAR(sel.flops - none.flops, (full.flops - none.flops) / 2, 0.01 * (full.flops - none.flops));
  // op-level (TorchTitan's "op"): every block checkpointed, the matmuls' outputs but every second one and the
  // attention and TP reduce-scatter outputs kept: memory between full and none, and only the unkept
  // matmuls (about half the GEMM FLOPs) and the elementwise ops recomputed
  StepPlan op = run("selective", "op");
  EXPECT_LT(act(full), act(op));
  EXPECT_LT(act(op), act(none));
  EXPECT_LT(none.flops, op.flops);
  EXPECT_LT(op.flops, full.flops);
  EXPECT_GT(op.flops - none.flops, 0.3 * (full.flops - none.flops));
  EXPECT_LT(op.flops - none.flops, 0.7 * (full.flops - none.flops));
  int rs_full = 0, rs_op = 0;  // the kept TP reduce-scatters are not re-run in the recompute
  for (const auto& e : plan_step(sim_config("configs/qwen3_32b.yaml", {"model.n_layers", "8", "activation_checkpoint.mode",
                                                                    "full"}), 64, true).events)
    rs_full += e.kind == CostEvent::Kind::CommStart && std::string(e.op) == "reduce_scatter";
  for (const auto& e : plan_step(sim_config("configs/qwen3_32b.yaml", {"model.n_layers", "8", "activation_checkpoint.mode",
                                                                    "selective", "activation_checkpoint.selective_ac_option",
                                                                    "op"}), 64, true).events)
    rs_op += e.kind == CostEvent::Kind::CommStart && std::string(e.op) == "reduce_scatter";
  EXPECT_LT(rs_op, rs_full);
  std::string e = error_of([&] { run("selective", "0"); });
  EXPECT_NE(e.find("positive integer"), std::string::npos) << e;
}

// Flex attention priced over its visible tiles; a score_mod costs an eager step
// its own kernels over the scores, a compiled step nothing but its arithmetic.
TEST(Simulation, FlexAttentionVariantsArePricedByVisibleTilesAndMode) {
  auto run = [](std::vector<std::string> kv, const std::string& mode) {
    std::vector<std::string> base = {"model.n_layers", "4", "simulation.mode", mode};
    base.insert(base.end(), kv.begin(), kv.end());
    return simulate_step(sim_config("configs/qwen3_32b.yaml", base), 64);
  };
  auto count = [](const SimResult& r, const std::string& op) {
    int n = 0;
    for (const auto& s : r.spans) n += s.name == op;
    return n;
  };
  const SimResult causal = run({}, "eager");
  const SimResult window = run({"model.attn_mask_type", "sliding_window", "model.sliding_window", "256"}, "eager");
  // seq 4096 in 128-tiles: causal computes 528 tiles, a window of 256 at most 3 per row of tiles (93)
  EXPECT_NEAR(window.compute_by_class.at("attention") / causal.compute_by_class.at("attention"), 93.0 / 528.0, 0.02);
  const SimResult alibi_eager = run({"model.attn_bias", "alibi"}, "eager");
  const SimResult alibi_comp = run({"model.attn_bias", "alibi"}, "compiled");
  const SimResult plain_comp = run({}, "compiled");
  EXPECT_EQ(count(causal, "flex_score_mod"), 0);
  // one per attention forward (recomputes included: the config checkpoints), one per layer's backward
  EXPECT_EQ(count(alibi_eager, "flex_score_mod"), count(alibi_eager, "flex_attention"));
  EXPECT_GE(count(alibi_eager, "flex_score_mod"), 4);
  EXPECT_EQ(count(alibi_eager, "flex_score_mod_backward"), 4);
  EXPECT_EQ(count(alibi_comp, "flex_score_mod"), 0);
  EXPECT_GT(alibi_eager.step_s, causal.step_s);
  EXPECT_NEAR(alibi_comp.step_s, plain_comp.step_s, 0.01 * plain_comp.step_s);  // fused: arithmetic only
}

TEST(Simulation, Qwen3_32BParameterCountIsThePublishedOne) {
  JobConfig c = sim_config("configs/qwen3_32b.yaml");
  StepPlan p = plan_step(c, 64);
  EXPECT_EQ(p.num_params, 32762123264LL);
}

// ---- the published runs --------------------------------------------------------------
// SemiAnalysis: Qwen3-32B, TorchTitan, 16 Trainium2 chips (64 LNC=2 ranks), seq 4096:
// 11,099 tokens/s (23.89% MFU) eager, 14,156 tokens/s (30.47%) compiled. Bar: +-10%.
TEST(Simulation, ReproducesTheTrainium2Qwen3_32BRun) {
  JobConfig c = sim_config("configs/qwen3_32b.yaml");
  SimResult eager = simulate_step(c, 64);
  EXPECT_EQ(eager.chips, 16);
  EXPECT_FALSE(eager.oom);
  EXPECT_EQ(eager.tokens_per_step, 16 * 4096);  // FSDP 16 x TP 4, local batch 1
  EXPECT_DOUBLE_EQ(eager.tokens_per_s_per_rank, eager.tokens_per_s / 64);  // TorchTitan's per-device tps
  EXPECT_NEAR(eager.tokens_per_s, 11099, 0.10 * 11099);
  EXPECT_NEAR(eager.mfu, 0.2389, 0.10 * 0.2389);
  // the step times the article's first-step ratios imply: 184.6 s / ~31x and 255.7 s / ~55x
  EXPECT_NEAR(eager.step_s, 65536.0 / 11099, 0.10 * 65536.0 / 11099);
  c.simulation.mode = JobConfig::Simulation::Mode::compiled;
  SimResult comp = simulate_step(c, 64);
  EXPECT_NEAR(comp.tokens_per_s, 14156, 0.10 * 14156);
  EXPECT_NEAR(comp.mfu, 0.3047, 0.10 * 0.3047);
  EXPECT_NEAR(comp.step_s, 65536.0 / 14156, 0.10 * 65536.0 / 14156);
  EXPECT_LT(comp.kernels, eager.kernels);  // fusion
}

// TorchTitan docs/performance.md (64 A100 80GB, FSDP): Llama 3 70B full AC 331 WPS; Llama 3 8B selective layer
// 2904; Llama 2 13B no AC, batch 2, seq 4096: 2162 WPS; 128 H100 (Meta's 500 W HBM2e part), FSDP x TP: Llama 3.1
// 405B 109 WPS. Same cost model, chip figures from datasheets and microbenchmarks (simulator/specs; the 500 W
// part's GEMM power limit is the one figure chosen after seeing its rows, docs/simulator.md). Bar: +-15%.
// scripts/validate_simulator.py (ctest validate_simulator) runs every published row.
TEST(Simulation, ReproducesPublishedGpuRuns) {
  SimResult l3 = simulate_step(sim_config("configs/validation/llama3_70b_a100x64.yaml"), 64);
  EXPECT_NEAR(l3.tokens_per_s_per_chip, 331, 0.15 * 331);
  SimResult l8 = simulate_step(sim_config("configs/validation/llama3_8b_a100x64.yaml"), 64);
  EXPECT_NEAR(l8.tokens_per_s_per_chip, 2904, 0.15 * 2904);
  SimResult l2 = simulate_step(sim_config("configs/validation/llama2_13b_a100x64.yaml"), 64);
  EXPECT_NEAR(l2.tokens_per_s_per_chip, 2162, 0.15 * 2162);
  EXPECT_EQ(l2.systems, 8);  // 8 HGX nodes joined by InfiniBand
  // Llama 3.1 405B, 128 H100, FSDP 16 x TP 8 (sequence parallel), batch 2, seq 8192, full AC: 109 WPS
  SimResult l405 = simulate_step(sim_config("configs/validation/llama31_405b_h100x128.yaml"), 128);
  EXPECT_NEAR(l405.tokens_per_s_per_chip, 109, 0.15 * 109);
  EXPECT_GT(l405.comm_busy_by_group.count("tp"), 0u);
  EXPECT_FALSE(l405.oom);
}

// float8 (model.converters): the step's linear GEMMs priced at the chip's FP8 rate, their casts as kernels,
// MFU against the FP8 peak (never above 100%); a chip without FP8 refuses the step, naming itself.
// A float32 run (titan's default precision) prices its GEMMs and attention at the chip's FP32 rate (PyTorch's
// float32 matmul on GPUs: CUDA cores, no TF32), not the bf16 tensor cores' rate; a chip without the figure refuses
// it, naming the key.
TEST(Simulation, Float32RunPricesGemmsAtTheFp32Rate) {
  const std::string cfg = "configs/validation/llama31_8b_h100x8.yaml";
  SimResult bf = simulate_step(sim_config(cfg, {"simulation.mode", "compiled"}), 8);
  SimResult f32 = simulate_step(
      sim_config(cfg, {"simulation.mode", "compiled", "training.mixed_precision_param", "float32"}), 8);
  // compute-bound at either rate: BF16's time x 989 / 67 (the H100's BF16 : FP32 headlines)
  const double ratio = 989.0 / 67.0;
  EXPECT_NEAR(f32.compute_by_class.at("gemm") / bf.compute_by_class.at("gemm"), ratio, 1e-6 * ratio);
  EXPECT_NEAR(f32.compute_by_class.at("attention") / bf.compute_by_class.at("attention"), ratio, 1e-6 * ratio);
  EXPECT_GT(f32.step_s, 5 * bf.step_s);
  EXPECT_LT(f32.mfu, 67.0 / 989.0);  // against the BF16 denominator (TorchTitan's convention), below FP32's share
  EXPECT_GT(f32.mfu, 0.0);
  std::string e = error_of([&] {
    simulate_step(sim_config(cfg, {"training.mixed_precision_param", "float32", "simulation.system", "gb300-nvl72"}), 8);
  });
  EXPECT_NE(e.find("gb300"), std::string::npos) << e;
  EXPECT_NE(e.find("fp32_tflops"), std::string::npos) << e;
  EXPECT_NE(e.find("mixed_precision_param"), std::string::npos) << e;
}

// FSDP's all-gathers priced as the step moves them (FsdpMixedPrecision.* holds the step's bytes): a bf16 run's
// gathers carry their own (typed) bytes, the GEMM weights at 2 bytes, the embedding and norms at 4, so a block's
// gather is about half the float32 run's and the root's (the embedding) more than half; nothing is halved twice.
TEST(Simulation, Bf16AllGathersArePricedAsTheStepMovesThem) {
  const std::string cfg = "configs/validation/llama31_8b_h100x8.yaml";
  SimResult bf = simulate_step(sim_config(cfg, {"model.n_layers", "2"}), 8);
  SimResult f32 = simulate_step(sim_config(cfg, {"model.n_layers", "2", "training.mixed_precision_param", "float32"}), 8);
  auto gathers = [](const SimResult& r) {
    std::vector<CostEvent> g;
    for (const CostEvent& e : r.collectives)
      if (std::string(e.op) == "all_gather") g.push_back(e);
    return g;
  };
  const auto b = gathers(bf), f = gathers(f32);
  ASSERT_EQ(b.size(), f.size());
  ASSERT_GE(b.size(), 3u);  // root, block 0, block 1
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_TRUE(b[i].typed) << i;
    EXPECT_FALSE(f[i].typed) << i;
  }
  // the root (embedding 128256 x 4096 float32, lm_head bf16, the final norm float32): 6/8 of float32's bytes
  EXPECT_NEAR(b[0].bytes / f[0].bytes, 0.75, 1e-4);
  // a block: its norms' 2 x 4096 elements at 4 bytes beside ~218M GEMM weights at 2
  EXPECT_GT(b[1].bytes / f[1].bytes, 0.5);
  EXPECT_LT(b[1].bytes / f[1].bytes, 0.5001);
  // a bucket without a GEMM weight (the first pipeline stage's root: the embedding alone) moves, and is priced
  // at, its float32 bytes
  SimResult pp = simulate_step(sim_config(cfg, {"model.n_layers", "2", "parallelism.pipeline_parallel_degree", "2",
                                                "parallelism.data_parallel_shard_degree", "4"}), 8);
  const auto g = gathers(pp);
  ASSERT_FALSE(g.empty());
  for (const CostEvent& e : g) EXPECT_TRUE(e.typed);
  EXPECT_NEAR(g[0].bytes, 4.0 * 128256 * 4096, 1.0);  // [128256, 4096] float32, 4 ranks of 32064 rows
}

// Under bf16 a tensor-parallel step moves its activations and their gradients as bf16 (the vocab-parallel
// embedding's reduction, sequence parallel's gathers and reduce-scatters, forward and backward: typed, 2 bytes an
// element); the replicated norm weights' gradients are summed from float32 (untyped: priced, as every float32
// stand-in, in the parameter dtype). A float32 run moves them all in float32 (untyped).
TEST(Simulation, TensorParallelActivationsTravelInTheComputeDtype) {
  const std::string cfg = "configs/validation/llama31_8b_h100x8.yaml";
  const std::vector<std::string> tp = {"model.n_layers", "2", "parallelism.tensor_parallel_degree", "2",
                                       "parallelism.enable_sequence_parallel", "true",
                                       "parallelism.data_parallel_shard_degree", "4"};
  std::vector<std::string> f32 = tp;
  f32.insert(f32.end(), {"training.mixed_precision_param", "float32"});
  SimResult bf = simulate_step(sim_config(cfg, tp), 8), fl = simulate_step(sim_config(cfg, f32), 8);
  auto on_tp = [](const SimResult& r) {
    std::vector<CostEvent> v;
    for (const CostEvent& e : r.collectives)
      if (e.group.name == "tp") v.push_back(e);
    return v;
  };
  const auto b = on_tp(bf), f = on_tp(fl);
  ASSERT_EQ(b.size(), f.size());
  std::map<std::string, int> activations;
  int norm_grads = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(std::string(b[i].op), std::string(f[i].op)) << i;
    EXPECT_FALSE(f[i].typed) << i;
    if (f[i].bytes < 1e6) {  // a norm weight's gradient: [4096] float32
      EXPECT_EQ(std::string(b[i].op), "all_reduce") << i;
      EXPECT_FALSE(b[i].typed) << i;
      ++norm_grads;
    } else {  // [2, 8192 (/ 2), 4096] activations
      EXPECT_TRUE(b[i].typed) << i << " " << b[i].op;
      EXPECT_EQ(b[i].bytes * 2, f[i].bytes) << i << " " << b[i].op;
      ++activations[b[i].op];
    }
  }
  // per block, attention's and the MLP's gather and reduce-scatter, each with its adjoint in the backward
  EXPECT_GE(activations["all_gather"], 2 * 2 * 2);
  EXPECT_GE(activations["reduce_scatter"], 2 * 2 * 2);
  EXPECT_GE(norm_grads, 2 * 2);
}

// ... and so do a pipeline's hidden states and their gradients (point-to-point), context parallel's keys / values
// and their gradients' reduce-scatter, and the expert dispatch / combine rows: typed, 2 bytes an element, against
// the float32 run's 4 (untyped). Only the dispatch's count exchange (int64) is typed in both.
TEST(Simulation, PipelineContextAndExpertTransfersTravelInTheComputeDtype) {
  struct Case {
    std::string cfg, group;
    std::vector<std::string> keys;
    int world;
    std::map<std::string, int> at_least;  // op -> transfers expected on the group
  };
  const std::vector<Case> cases = {
      {"configs/validation/llama31_8b_h100x8.yaml", "pp_p2p",
       {"model.n_layers", "2", "parallelism.pipeline_parallel_degree", "2", "parallelism.data_parallel_shard_degree",
        "4", "parallelism.pipeline_parallel_microbatch_size", "1"},
       8, {{"send", 2}, {"recv", 2}}},
      {"configs/validation/llama31_8b_h100x8.yaml", "cp",
       {"model.n_layers", "2", "parallelism.context_parallel_degree", "2", "parallelism.data_parallel_shard_degree",
        "4"},
       8, {{"all_gather", 2 * 2 * 2}, {"reduce_scatter", 2 * 2}}},
      {"configs/validation/qwen3_30b_a3b_h100x8.yaml", "ep",  // (the hierarchical dispatch moves its weights in float32)
       {"model.n_layers", "2", "parallelism.expert_parallel_comm_backend", "standard"}, 8, {{"all_to_all", 2 * 4}}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> f32 = c.keys;
    f32.insert(f32.end(), {"training.mixed_precision_param", "float32"});
    SimResult bf = simulate_step(sim_config(c.cfg, c.keys), c.world), fl = simulate_step(sim_config(c.cfg, f32), c.world);
    auto on = [&](const SimResult& r) {
      std::vector<CostEvent> v;
      for (const CostEvent& e : r.collectives)
        if (e.group.name == c.group) v.push_back(e);
      return v;
    };
    const auto b = on(bf), f = on(fl);
    ASSERT_EQ(b.size(), f.size()) << c.group;
    std::map<std::string, int> seen;
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(std::string(b[i].op), std::string(f[i].op)) << c.group << " " << i;
      if (f[i].typed) {  // the dispatch's counts: int64 in both
        EXPECT_TRUE(b[i].typed) << c.group << " " << i;
        EXPECT_EQ(b[i].bytes, f[i].bytes) << c.group << " " << i;
        continue;
      }
      EXPECT_TRUE(b[i].typed) << c.group << " " << i << " " << b[i].op;
      EXPECT_EQ(b[i].bytes * 2, f[i].bytes) << c.group << " " << i << " " << b[i].op;
      ++seen[b[i].op];
    }
    for (auto& [op, n] : c.at_least) EXPECT_GE(seen[op], n) << c.group << " " << op;
  }
}

// Op-level SAC under async TP (the fused ops, comms/collective_matmul.h): the column-parallel float8 projections
// (q, k, v, the FFN's gate and up) are recomputed, being float8 GEMMs, which TorchTitan's save list does not keep;
// the row-parallel ones (o, down) are kept with the reduce-scatter that ends them, which the list keeps. So the
// recompute's FP8 GEMM FLOPs are the column-parallel share of the forward's: 2/3 for qwen3_debug
// (256 x (256 + 2 x 128) + 2 x 256 x 768 against 256 x 256 + 768 x 256). The forward is a third of the step's
// FP8 FLOPs without checkpointing (its two backward GEMMs each as large).
TEST(Simulation, OpSacRecomputesTheFloat8ProjectionsAsyncTpDoesNotKeep) {
  auto fp8_flops = [](const std::vector<std::string>& ac) {
    std::vector<std::string> o = {"parallelism.tensor_parallel_degree", "2", "parallelism.enable_async_tensor_parallel",
                                  "true", "model.converters", "float8", "float8.recipe", "tensorwise",
                                  "float8.filter_fqns", "lm_head"};
    o.insert(o.end(), ac.begin(), ac.end());
    const StepPlan plan = plan_step(sim_config("configs/qwen3_debug.yaml", o), 2, true, Device::Meta, 0);
    double f = 0;
    for (const CostEvent& e : plan.events.materialize())
      if (e.kind == CostEvent::Kind::Compute && e.gemm.m > 0 && e.gemm.precision == GemmPrecision::fp8) f += e.flops;
    return f;
  };
  const double none = fp8_flops({"activation_checkpoint.mode", "none"});
  const double op =
      fp8_flops({"activation_checkpoint.mode", "selective", "activation_checkpoint.selective_ac_option", "op"});
  ASSERT_GT(none, 0);
  const double col = 256.0 * (256 + 2 * 128) + 2 * 256.0 * 768, row = 256.0 * 256 + 768.0 * 256;
  EXPECT_NEAR((op - none) / (none / 3), col / (col + row), 1e-9);
}

// TorchTitan's float8 tensor parallel (tensorwise): sequence parallel's gathers move FP8 codes, one byte an element,
// where the rowwise recipe's move bf16 (two): the planned step's tensor-parallel all-gathers carry half the bytes,
// and the gathered input is cast once per block on its shard, not once per projection on the whole
TEST(Simulation, Float8TensorParallelGathersMoveFp8Codes) {
  const std::string cfg = "configs/validation/llama31_8b_h100x8.yaml";
  auto run = [&](const char* recipe) {
    return simulate_step(sim_config(cfg, {"simulation.mode", "compiled", "model.converters", "float8", "float8.recipe",
                                          recipe, "float8.filter_fqns", "lm_head", "parallelism.tensor_parallel_degree",
                                          "8", "parallelism.data_parallel_shard_degree", "1",
                                          "training.local_batch_size", "2"}), 8);
  };
  auto tp_gathered = [](const SimResult& r) {
    double b = 0;
    int n = 0;
    for (const CostEvent& e : r.collectives)
      if (e.group.name == "tp" && std::string(e.op) == "all_gather") b += e.bytes, ++n;
    EXPECT_GT(n, 0);
    return b;
  };
  const SimResult tw = run("tensorwise"), row = run("rowwise");
  // an FP8 GEMM moves one-byte operands and a bf16 output (this config's activations): a projection's forward
  // [M, K] x [K, N] is priced at M K + K N + 2 M N bytes, not the meta step's float32 stand-ins
  {
    const JobConfig c = sim_config(cfg, {"training.local_batch_size", "2"});
    const double M = (double)c.training.local_batch_size * (double)c.training.seq_len, H = 4096, N = 1024 / 8;
    // k_proj's three GEMMs (this rank's 128 of its 1,024 outputs): forward [M, H] x [H, N], grad_input
    // [M, N] x [N, H], grad_weight [N, M] x [M, H]: the same FLOPs, each its own traffic
    const std::set<double> traffic = {M * H + H * N + 2 * M * N, M * N + N * H + 2 * M * H, N * M + M * H + 2 * N * H};
    int seen = 0;
    for (const SimSpan& sp : tw.spans)
      if (sp.kernel_class == "gemm" && std::abs(sp.flops - 2 * M * H * N) < 1) {
        ++seen;
        EXPECT_TRUE(traffic.count(sp.bytes)) << sp.name << " " << sp.bytes;
      }
    EXPECT_GT(seen, 0);
  }
  // (the output layer's input, its gather outside the blocks, travels as bf16 in both: 0.505 here)
  EXPECT_GT(tp_gathered(tw) / tp_gathered(row), 0.5);
  EXPECT_LT(tp_gathered(tw) / tp_gathered(row), 0.51);
  EXPECT_LT(tw.exposed_by_kind.at("all_gather"), 0.6 * row.exposed_by_kind.at("all_gather"));
}

// FSDP's float8 all-gather (float8.enable_fsdp_float8_all_gather): the planned step's FSDP all-gathers move the FP8
// weights at one byte an element (bf16's two without it), each shard's cast and its amax all-reduce priced; the
// precomputed scales take one all-reduce a step instead of one per weight and gather
TEST(Simulation, FsdpFloat8AllGatherMovesCodes) {
  const std::string cfg = "configs/validation/llama31_8b_h100x8.yaml";
  auto run = [&](std::vector<std::string> more) {
    std::vector<std::string> o = {"simulation.mode", "compiled", "model.converters", "float8", "float8.recipe",
                                  "tensorwise", "float8.filter_fqns", "lm_head"};
    o.insert(o.end(), more.begin(), more.end());
    return simulate_step(sim_config(cfg, o), 8);
  };
  auto fsdp = [](const SimResult& r, const char* kind) {
    double b = 0;
    int n = 0;
    for (const CostEvent& e : r.collectives)
      if (e.group.name == "dp_shard" && std::string(e.op) == kind) b += e.bytes, ++n;
    return std::pair{b, n};
  };
  const SimResult bf = run({}), f8 = run({"float8.enable_fsdp_float8_all_gather", "true"}),
                  pre = run({"float8.enable_fsdp_float8_all_gather", "true",
                             "float8.precompute_float8_dynamic_scale_for_fsdp", "true"});
  const double ratio = fsdp(f8, "all_gather").first / fsdp(bf, "all_gather").first;
  EXPECT_GT(ratio, 0.5);  // the embedding, norms and the bf16 output layer stay as they were
  EXPECT_LT(ratio, 0.6);
  EXPECT_DOUBLE_EQ(fsdp(pre, "all_gather").first, fsdp(f8, "all_gather").first);
  // the amax all-reduces over the FSDP group: one per FP8 weight and gather, or one a step
  EXPECT_EQ(fsdp(bf, "all_reduce").second, 0);
  EXPECT_GT(fsdp(f8, "all_reduce").second, 32 * 7);
  EXPECT_EQ(fsdp(pre, "all_reduce").second, 1);
}

TEST(Simulation, Float8StepPricesItsGemmsAtTheFp8Rate) {
  const std::string cfg = "configs/validation/llama31_8b_h100x8.yaml";
  // under full activation checkpointing (the config's op SAC recomputes every float8 GEMM but every second bf16
  // one: Float8.SelectiveCheckpointingRecomputesEveryFloat8Gemm) both steps run the same GEMMs
  auto run = [&](std::vector<std::string> o, const std::vector<sim::SpecEdit>& edits = {}) {
    for (const char* v : {"simulation.mode", "compiled", "activation_checkpoint.mode", "full",
                          "activation_checkpoint.selective_ac_option", "2"})
      o.push_back(v);
    return simulate_step(sim_config(cfg, o), 8, edits);
  };
  const std::vector<std::string> tensorwise = {"model.converters", "float8", "float8.recipe", "tensorwise"};
  SimResult bf = run({}), f8 = run(tensorwise);
  // every GEMM of a dense Llama is a linear layer: the GEMM time is BF16's x 989 / 1979 (the 500 W part's
  // peak scaled by the H100's FP8 : BF16 headlines) where every FP8 GEMM accumulates fast; torchao's backward
  // GEMMs (two of a linear's three) accumulate split, at the spec's 0.87 of that rate
  const std::vector<sim::SpecEdit> fast = {{"fp8_split_accumulation_rate", 1.0, false, "fp8_split_accumulation_rate=1"}};
  SimResult f8_fast = run(tensorwise, fast);
  EXPECT_NEAR(f8_fast.compute_by_class.at("gemm") / bf.compute_by_class.at("gemm"), 989.0 / 1979.0, 1e-9);
  const double split = f8.compute_by_class.at("gemm") / f8_fast.compute_by_class.at("gemm");
  EXPECT_GT(split, 1.0 + 0.4 * (1 / 0.87 - 1));  // about half the GEMM time is backward (the other half the
  EXPECT_LT(split, 1.0 + 0.6 * (1 / 0.87 - 1));  // forward and its recompute)
  EXPECT_GT(f8.compute_by_class.at("elementwise"), bf.compute_by_class.at("elementwise"));  // the casts
  EXPECT_GT(f8.kernels, bf.kernels);
  EXPECT_DOUBLE_EQ(f8.compute_by_class.at("attention"), bf.compute_by_class.at("attention"));
  EXPECT_LT(f8.step_s, bf.step_s);
  EXPECT_EQ(f8.mfu_precision, "FP8");
  EXPECT_NEAR(f8.mfu_peak_tflops, 989.0 * 1979.0 / 989.0, 1e-9);
  EXPECT_GT(f8.mfu, 0.1);
  EXPECT_LT(f8.mfu, 1.0);
  EXPECT_LT(f8.mfu, bf.mfu);  // more tokens per second against twice the peak
  EXPECT_EQ(bf.mfu_precision, "");
  std::string e = error_of([&] {
    simulate_step(sim_config("configs/validation/llama3_8b_a100x64.yaml", {"model.converters", "float8"}), 64);
  });
  EXPECT_NE(e.find("a100"), std::string::npos) << e;
  EXPECT_NE(e.find("no FP8 GEMM rate"), std::string::npos) << e;
  e = error_of([&] {
    simulate_step(sim_config(cfg, {"model.converters", "float8", "float8.recipe", "mxfp8"}), 8);
  });
  EXPECT_NE(e.find("no MXFP8 GEMM rate"), std::string::npos) << e;
  // tensor parallel beyond the KV heads replicates k / v with summed gradients: refused, naming the layer
  e = error_of([&] {
    simulate_step(sim_config(cfg, {"model.converters", "float8", "parallelism.tensor_parallel_degree", "16",
                                   "parallelism.data_parallel_shard_degree", "1", "simulation.world_size", "16",
                                   "simulation.num_systems", "2"}), 16);
  });
  EXPECT_NE(e.find("k_proj is replicated"), std::string::npos) << e;
  EXPECT_NE(e.find("float8.filter_fqns"), std::string::npos) << e;
  SimResult tp = simulate_step(sim_config(cfg, {"model.converters", "float8", "float8.filter_fqns", "k_proj,v_proj",
                                                "parallelism.tensor_parallel_degree", "16",
                                                "parallelism.data_parallel_shard_degree", "1",
                                                "simulation.world_size", "16", "simulation.num_systems", "2"}), 16);
  EXPECT_GT(tp.step_s, 0);
  SimResult mx = simulate_step(sim_config(cfg, {"model.converters", "float8", "float8.recipe", "mxfp8",
                                                "simulation.system", "b200-hgx"}), 8);
  EXPECT_EQ(mx.mfu_precision, "MXFP8");
  EXPECT_LT(mx.mfu, 1.0);
}

// Gradient accumulation is in the simulated step: k micro-batches, each backward reducing its FSDP units
// (FSDP2's default), or, with parallelism.fsdp_reduce_every_microbatch false, one reduction per step of the
// gradients added up unsharded (less communication, the unsharded gradients' memory).
TEST(Simulation, AccumulationPricesKMicroBatchesAndTheReductions) {
  auto rs = [](const StepPlan& p) {
    int n = 0;
    for (const auto& e : p.events) n += e.kind == CostEvent::Kind::CommStart && std::string(e.op) == "reduce_scatter";
    return n;
  };
  const std::vector<std::string> base = {"parallelism.data_parallel_shard_degree", "2", "training.local_batch_size",
                                         "2", "training.seq_len", "64"};
  auto with = [&](std::vector<std::string> o) {
    o.insert(o.begin(), base.begin(), base.end());
    return sim_config("configs/qwen3_debug.yaml", o);
  };
  const StepPlan one = plan_step(with({}), 2, true);
  const StepPlan every = plan_step(with({"training.global_batch_size", "12"}), 2, true);
  const StepPlan once = plan_step(with({"training.global_batch_size", "12", "parallelism.fsdp_reduce_every_microbatch",
                                        "false"}), 2, true);
  EXPECT_EQ(one.accumulation, 1);
  EXPECT_EQ(every.accumulation, 3);
  EXPECT_EQ(rs(one), 5);  // 4 blocks + the root: one flat reduce-scatter per unit
  EXPECT_EQ(rs(every), 3 * rs(one));
  EXPECT_EQ(rs(once), rs(one));
  EXPECT_NEAR(every.flops / one.flops, 3.0, 0.1);
  EXPECT_NEAR(once.flops / one.flops, 3.0, 0.1);
  // one reduction holds the unsharded gradients across micro-batches: more gradient memory
  EXPECT_GT(once.memory.peak[(int)MemoryCategory::Gradients], every.memory.peak[(int)MemoryCategory::Gradients]);
  // and the simulated step communicates less
  JobConfig a = with({"training.global_batch_size", "12", "simulation.system", "trn2-instance"});
  JobConfig b = a;
  b.parallelism.fsdp_reduce_every_microbatch = false;
  double busy_a = 0, busy_b = 0;
  for (auto& [g, t] : simulate_step(a, 2).comm_busy_by_group) busy_a += t;
  for (auto& [g, t] : simulate_step(b, 2).comm_busy_by_group) busy_b += t;
  EXPECT_LT(busy_b, busy_a);
}

// Routing per MoE layer: the ranks meet at every layer's all-to-alls, so each layer is priced at its own busiest
// rank. A hot expert that moves from rank to rank over the layers costs what a hot expert that stays on one rank
// does (each layer's busiest rank holds it; measured 5.504 vs 5.505 s), far more than the layers' sum (balanced over
// the ranks, 3.276 s) says; every
// layer alike is the single list. Lists of the wrong count or length are refused naming the key.
TEST(Simulation, PerLayerRoutingPricesEachLayersBusiestRank) {
  const std::string cfg = "configs/simulation/gpt_oss_20b_trn2.yaml";  // 24 MoE layers, 32 experts over EP 8
  const JobConfig base = sim_config(cfg);
  const int64_t E = base.model.moe_num_experts, L = base.model.n_layers, P = base.parallelism.expert_parallel_degree;
  ASSERT_EQ(L % P, 0);
  auto list = [&](int64_t hot) {  // expert `hot` takes 9 of every 40 tokens, the others 1
    std::string h;
    for (int64_t e = 0; e < E; ++e) h += (e ? "," : "") + std::string(e == hot ? "9" : "1");
    return h;
  };
  std::string moving, fixed, zipf_layers, zipf;
  for (int64_t e = 0; e < E; ++e) zipf += (e ? "," : "") + std::to_string(1e6 / (double)(e + 1));
  for (int64_t l = 0; l < L; ++l) {
    moving += (l ? ";" : "") + list((l % P) * (E / P));  // the hot expert on rank l mod P
    fixed += (l ? ";" : "") + list(0);
    zipf_layers += (l ? ";" : "") + zipf;
  }
  std::string summed;  // the moving routing summed over the layers: every rank's block alike
  for (int64_t e = 0; e < E; ++e) summed += (e ? "," : "") + std::to_string(L + (e % (E / P) == 0 ? 8 * L / P : 0));
  auto step = [&](const std::string& h) {
    return simulate_step(sim_config(cfg, {"simulation.moe_routing_histogram", h}), 64).step_s;
  };
  const double per_layer = step(moving), one_rank = step(fixed), sum = step(summed), balanced = step("");
  std::printf("gpt-oss-20B on 16 Trn2 (EP 8), a hot expert (9 of 40 tokens) per layer: on rank l mod 8 %.3f s, "
              "always on rank 0 %.3f s, the layers' sum %.3f s, balanced %.3f s\n", per_layer, one_rank, sum,
              balanced);
  EXPECT_NEAR(per_layer, one_rank, 1e-3 * one_rank);  // the same but for where the other blocks' tokens go
  EXPECT_GT(per_layer, 1.05 * sum);
  EXPECT_NEAR(step(zipf_layers), step(zipf), 1e-9 * per_layer);
  EXPECT_NE(error_of([&] { step(list(0) + ";" + list(1)); }).find("gives 2 lists (one per MoE layer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { sim_config(cfg, {"simulation.moe_routing_histogram", list(0) + ";1,2"}); })
                .find("MoE layer 1 lists 2 experts, layer 0 lists 32"),
            std::string::npos);
}

// Uneven MoE routing in simulation: the meta step routes by a Zipf skew or a real run's tokens-per-expert
// histogram and is priced at the busiest rank (the dispatch / combine all-to-alls and its grouped GEMMs).
TEST(Simulation, SkewedRoutingRaisesTheMoETimeMonotonically) {
  const std::string cfg = "configs/simulation/gpt_oss_20b_trn2.yaml";
  double last_step = 0, last_a2a = 0, balanced_gemm = 0;
  for (const char* skew : {"0", "0.25", "0.5", "1", "2"}) {
    SimResult r = simulate_step(sim_config(cfg, {"simulation.moe_routing_skew", skew}), 64);
    double gemm = r.compute_by_class.count("gemm") ? r.compute_by_class.at("gemm") : 0.0;
    const double a2a = r.exposed_by_kind.count("all_to_all") ? r.exposed_by_kind.at("all_to_all") : 0.0;
    if (std::string(skew) == "0") balanced_gemm = gemm;
    EXPECT_GT(r.step_s, last_step) << "skew " << skew;
    EXPECT_GT(a2a, last_a2a) << "skew " << skew;
    EXPECT_GE(gemm, balanced_gemm) << "skew " << skew;
    last_step = r.step_s;
    last_a2a = a2a;
  }
  // a histogram with the Zipf shares is the same routing; expert order does not matter, the busiest rank does
  std::string hist, reversed;
  const int64_t E = sim_config(cfg).model.moe_num_experts;
  std::vector<std::string> items;
  for (int64_t e = 0; e < E; ++e) items.push_back(std::to_string(1e6 / (double)(e + 1)));
  for (int64_t e = 0; e < E; ++e) hist += (e ? "," : "") + items[e];
  for (int64_t e = E - 1; e >= 0; --e) reversed += (e != E - 1 ? "," : "") + items[e];
  const double zipf = simulate_step(sim_config(cfg, {"simulation.moe_routing_skew", "1"}), 64).step_s;
  EXPECT_NEAR(simulate_step(sim_config(cfg, {"simulation.moe_routing_histogram", hist}), 64).step_s, zipf, 1e-3 * zipf);
  EXPECT_NEAR(simulate_step(sim_config(cfg, {"simulation.moe_routing_histogram", reversed}), 64).step_s, zipf,
              1e-3 * zipf);
  // refused: a histogram of the wrong length, both keys, a dense model, nothing simulated
  EXPECT_NE(error_of([&] { simulate_step(sim_config(cfg, {"simulation.moe_routing_histogram", "1,2,3"}), 64); })
                .find("simulation.moe_routing_histogram gives 3 counts"),
            std::string::npos);
  EXPECT_NE(error_of([&] { sim_config(cfg, {"simulation.moe_routing_histogram", "1,x"}); }).find("'x'"), std::string::npos)
      << "parsed at load";
  EXPECT_NE(error_of([&] {
              sim_config(cfg, {"simulation.moe_routing_skew", "1", "simulation.moe_routing_histogram", hist});
            }).find("both set"),
            std::string::npos);
  EXPECT_NE(error_of([&] { sim_config("configs/qwen3_32b.yaml", {"simulation.moe_routing_skew", "1"}); })
                .find("needs MoE layers"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              sim_config("configs/gpt_oss_debug.yaml", {"simulation.moe_routing_skew", "1"});
            }).find("nothing is simulated"),
            std::string::npos);
}

TEST(Simulation, OutOfMemoryIsReportedWithTheBreakdown) {
  JobConfig c = sim_config("configs/qwen3_32b.yaml", {"activation_checkpoint.mode", "none", "training.local_batch_size",
                                                  "2"});
  SimResult r = simulate_step(c, 64);
  EXPECT_TRUE(r.oom);
  EXPECT_GT(r.memory.total(), r.hbm_bytes);
  EXPECT_NE(r.oom_advice.find("activation_checkpoint.mode full"), std::string::npos) << r.oom_advice;
  bool reported = false;
  for (const auto& l : describe_simulation(r)) reported |= l.find("OUT OF MEMORY") != std::string::npos;
  EXPECT_TRUE(reported);
}

TEST(Simulation, ExpertParallelMoEStepRunsOnMeta) {
  JobConfig c = sim_config("configs/simulation/gpt_oss_120b_trn3x144.yaml");
  SimResult r = simulate_step(c, 576);
  EXPECT_EQ(r.chips, 144);
  EXPECT_FALSE(r.oom);
  EXPECT_GT(r.comm_busy_by_group.count("ep"), 0u);     // dispatch / combine all-to-alls
  EXPECT_GT(r.exposed_by_kind.count("all_to_all"), 0u);  // waited on in the critical path
  EXPECT_GT(r.mfu, 0.05);
  EXPECT_LT(r.mfu, 0.8);
}

// The hierarchical expert dispatch, planned over hosts (a system is a host): its all-to-alls run on groups
// across and within hosts, the expert rows (so the expert GEMMs) are the standard dispatch's, and it moves
// less between hosts (DeepSeek-V3's experts in 8 groups, a token's in 4 of them: one 8-GPU HGX per group at EP 64);
// on one host each token reaches each rank once. Refused without expert parallel.
TEST(Simulation, HierarchicalExpertDispatchCrossesHostsOncePerToken) {
  const std::vector<std::string> small = {"model.n_layers", "5", "parallelism.pipeline_parallel_degree", "1",
                                          "training.local_batch_size", "1", "training.global_batch_size", "64",
                                          "simulation.world_size", "64", "simulation.num_systems", "8",
                                          "parallelism.expert_parallel_comm_backend"};
  auto with = [&](const char* backend, std::vector<std::string> more = {}) {
    std::vector<std::string> o = more;
    for (const auto& x : {"parallelism.pipeline_parallel_schedule", "1F1B", "parallelism.pipeline_parallel_microbatch_size",
                          "1", "parallelism.pipeline_parallel_layers_per_stage", "-1",
                          "parallelism.pipeline_parallel_first_stage_less_layers", "0",
                          "parallelism.pipeline_parallel_last_stage_less_layers", "0"})
      o.push_back(x);
    o.insert(o.end(), small.begin(), small.end());
    o.push_back(backend);
    return simulate_step(sim_config("configs/validation/deepseek_v3_671b_h100x256.yaml", o), 64);
  };
  const SimResult standard = with("standard"), hier = with("hierarchical");
  EXPECT_GT(hier.comm_busy_by_group.count("ep_across_hosts"), 0u);
  EXPECT_GT(hier.comm_busy_by_group.count("ep_within_host"), 0u);
  EXPECT_EQ(hier.comm_busy_by_group.count("ep"), 0u);  // the expert rows never cross the whole group at once
  EXPECT_GT(standard.comm_busy_by_group.count("ep"), 0u);
  EXPECT_NEAR(hier.compute_by_class.at("gemm"), standard.compute_by_class.at("gemm"),
              1e-9 * standard.compute_by_class.at("gemm"));
  // between hosts: <= 4 rows per token instead of the standard dispatch's 8 (7 of them to other hosts)
  const double across = hier.comm_busy_by_group.at("ep_across_hosts"), all = standard.comm_busy_by_group.at("ep");
  EXPECT_LT(across, 0.65 * all) << across << " s across hosts vs " << all << " s";
  EXPECT_LT(hier.exposed_by_kind.at("all_to_all"), standard.exposed_by_kind.at("all_to_all"));
  // skewed routing (Zipf 2: a third of the pairs on one expert, more than a token's distinct experts allow at
  // balance) plans and waits longer on its all-to-alls, as the standard dispatch does
  const SimResult skewed = with("hierarchical", {"simulation.moe_routing_skew", "2"});
  EXPECT_GT(skewed.exposed_by_kind.at("all_to_all"), hier.exposed_by_kind.at("all_to_all"));
  EXPECT_GT(skewed.step_s, hier.step_s);
  EXPECT_NE(error_of([] {
              sim_config("configs/qwen3_32b.yaml", {"parallelism.expert_parallel_comm_backend", "hierarchical"});
            }).find("parallelism.expert_parallel_comm_backend (hierarchical) applies only with "
                    "parallelism.expert_parallel_degree > 1"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              sim_config("configs/qwen3_32b.yaml", {"parallelism.expert_parallel_comm_backend", "deepep"});
            }).find("standard, hierarchical"),
            std::string::npos);
  // an ep group over hosts of unequal shares (3 ranks a host: group 0-3 on hosts 0,0,0,1) is refused, naming them
  const std::string e = error_of([] {
    plan_step(sim_config("configs/validation/qwen3_30b_a3b_h100x8.yaml",
                         {"model.n_layers", "2", "parallelism.data_parallel_shard_degree", "12",
                          "parallelism.expert_parallel_degree", "4", "training.global_batch_size", "48"}),
              12, false, Device::Meta, 0, /*ranks_per_host=*/3);
  });
  EXPECT_NE(e.find("needs every host to hold the same number of each expert-parallel group's ranks"), std::string::npos) << e;
  EXPECT_NE(e.find("sits on hosts [0,0,0,1]"), std::string::npos) << e;
}

TEST(Simulation, ChromeTraceIsValidJsonWithTheExpectedTracks) {
  JobConfig c = sim_config("configs/qwen3_32b.yaml", {"model.n_layers", "4"});
  SimResult r = simulate_step(c, 64);
  const std::string path = (fs::temp_directory_path() / "titan_sim_trace.json").string();
  write_chrome_trace(r, path, TraceLayout(2));
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);  // throws on invalid JSON
  std::set<std::string> procs, threads, binds;
  int flow_out = 0, flow_in = 0, idle = 0, comm = 0, steps = 0, pairs = 0;
  for (const auto& e : j["traceEvents"]) {
    EXPECT_GE(e["pid"].get<int>(), 1);
    if (e["ph"] == "M" && e["name"] == "process_name") procs.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "M" && e["name"] == "thread_name") threads.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "X" && e.contains("bind_id")) {
      flow_out += e.value("flow_out", false);
      flow_in += e.value("flow_in", false);
      binds.insert(e["bind_id"].get<std::string>());
    }
    if (e["ph"] == "X" && e["cat"] == "idle" && e["tid"] == 1) ++idle;
    if (e["ph"] == "X" && e["cat"] == "comm") ++comm;
    if (e["ph"] == "X" && e["name"] == "ProfilerStep#1") ++steps;
    if (e["ph"] == "f" && e["cat"] == "dep") ++pairs;  // a stall that began before its collective (queued)
  }
  EXPECT_EQ(procs.size(), 2u);
  EXPECT_TRUE(procs.count("chip 0 (trainium2)"));
  EXPECT_TRUE(threads.count("rank 0 compute"));
  EXPECT_TRUE(threads.count("rank 3 compute"));
  EXPECT_TRUE(threads.count("comm:dp_shard"));
  EXPECT_GT(comm, 0);
  EXPECT_GT(idle, 0);
  EXPECT_EQ(steps, 5);  // chip 0's four ranks, chip 1's first
  EXPECT_EQ(j["distributedInfo"]["world_size"], 64);
  // every stall of each chip's first rank has its arrow from the collective it waited for, bound to both slices
  // (or, when the stall began first, an s / f pair a viewer does not drop)
  EXPECT_EQ(flow_in, flow_out);
  EXPECT_EQ((int)binds.size(), flow_in);
  EXPECT_EQ(flow_in + pairs, idle);
  const auto problems = check_chrome_trace(path);
  EXPECT_TRUE(problems.empty()) << problems.front();
  fs::remove(path);
}

// What a viewer trips on is found: a pid 0, slices that overlap on a track without nesting, a flow bound at one
// end only, a repeated flow id, no step or rank marks; and two files holding the same rank are not merged.
TEST(Simulation, TraceCheckFindsWhatViewersTripOn) {
  const fs::path dir = fs::temp_directory_path() / "titan_trace_check";
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream((dir / name).string()) << text;
    return (dir / name).string();
  };
  const std::string bad = write("bad.json", R"({"traceEvents":[
    {"ph":"X","pid":0,"tid":1,"name":"a","ts":0,"dur":10},
    {"ph":"X","pid":1,"tid":1,"name":"b","ts":0,"dur":10},
    {"ph":"X","pid":1,"tid":1,"name":"c","ts":5,"dur":10,"bind_id":"0x1","flow_out":true},
    {"ph":"s","pid":1,"tid":1,"id":7,"ts":1},{"ph":"f","bp":"e","pid":1,"tid":2,"id":7,"ts":1},
    {"ph":"s","pid":1,"tid":1,"id":7,"ts":2},
    {"ph":"X","pid":1,"tid":3,"name":"stall","ts":20,"dur":5,"bind_id":"0x2","flow_in":true},
    {"ph":"X","pid":1,"tid":4,"name":"collective","ts":22,"dur":3,"bind_id":"0x2","flow_out":true},
    7, {"ph":1,"pid":"x","ts":"5"}]})");
  const auto p = check_chrome_trace(bad);
  auto has = [&](const std::string& what) {
    return std::any_of(p.begin(), p.end(), [&](const std::string& l) { return l.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(has("pid 0 (< 1)"));
  EXPECT_TRUE(has("'c' at 5.000 us overlaps 'b'"));
  EXPECT_TRUE(has("bind_id 0x1: 1 flow_out and 0 flow_in"));
  EXPECT_TRUE(has("flow 7: its 'f' end is on no slice"));
  EXPECT_TRUE(has("flow id 7 has 2 starts"));
  EXPECT_TRUE(has("bind_id 0x2: its flow_in slice starts before its flow_out slice"));
  EXPECT_TRUE(has("is not an object"));
  EXPECT_TRUE(has("has no ph"));
  EXPECT_TRUE(has("no ProfilerStep#"));
  EXPECT_TRUE(has("no distributedInfo"));
  const std::string one = write("one.json", R"({"traceEvents":[{"ph":"X","pid":1,"tid":1,"name":"a","ts":0,"dur":1}]})");
  const std::string e = error_of([&] { merge_chrome_traces({one, one}, (dir / "m.json").string()); });
  EXPECT_NE(e.find("both hold process 1"), std::string::npos) << e;
  const std::string other = write("other.json", R"({"distributedInfo":{"rank":0,"world_size":8},"traceEvents":[]})");
  const std::string w = error_of([&] { merge_chrome_traces({other}, (dir / "m.json").string(), 2); });
  EXPECT_NE(w.find("a job of 8 ranks, not of this one (2)"), std::string::npos) << w;
  fs::remove_all(dir);
}

// A measured step of 2 ranks (collectives that overlap on one stream: lanes), written per rank and merged:
// one file, ranks as processes 1 and 2, every flow bound to its two slices, ids unique across the ranks.
TEST(Simulation, PerRankMeasuredTracesMergeIntoOneCheckedFile) {
  const fs::path dir = fs::temp_directory_path() / "titan_trace_merge";
  fs::create_directories(dir);
  CommGroupRef g{"dp_shard", 1, std::make_shared<std::vector<int>>(std::vector<int>{0, 1})};
  std::vector<std::string> files;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<CostEvent> ev;
    auto compute = [&](const char* op, double t) {
      CostEvent e;
      e.op = op;
      e.t = t;
      ev.push_back(e);
    };
    auto comm = [&](CostEvent::Kind k, int64_t id, double t) {
      CostEvent e;
      e.kind = k;
      e.op = "reduce_scatter";
      e.comm_id = id;
      e.group = g;
      e.t = t;
      ev.push_back(e);
    };
    compute("linear_backward", 0.000);
    comm(CostEvent::Kind::CommStart, 0, 0.001);  // two reduce-scatters in flight at once on one stream
    compute("linear_backward", 0.002);
    comm(CostEvent::Kind::CommStart, 1, 0.003);
    compute("linear_backward", 0.004);
    comm(CostEvent::Kind::CommWait, 0, 0.005 + 0.001 * rank);
    compute("adamw", 0.007);
    comm(CostEvent::Kind::CommWait, 1, 0.008);
    compute("adamw", 0.009);
    files.push_back((dir / ("profile_trace_rank" + std::to_string(rank) + ".json")).string());
    write_chrome_trace(measured_timeline(ev, 0.010, "this CPU", 2), files.back(), TraceLayout(1, rank, 3));
    const auto p = check_chrome_trace(files.back());
    EXPECT_TRUE(p.empty()) << p.front();
  }
  const std::string merged = (dir / "profile_trace.json").string();
  merge_chrome_traces(files, merged);
  const auto p = check_chrome_trace(merged);
  EXPECT_TRUE(p.empty()) << p.front();
  std::ifstream in(merged);
  nlohmann::json j = nlohmann::json::parse(in);
  std::set<int> pids;
  std::set<std::string> lanes;
  int binds = 0;
  for (const auto& e : j["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "M" && e["name"] == "thread_name") lanes.insert(e["args"]["name"].get<std::string>());
    binds += e.contains("bind_id");
  }
  EXPECT_EQ(pids, (std::set<int>{1, 2}));
  EXPECT_TRUE(lanes.count("comm:dp_shard (lane 2)"));
  EXPECT_EQ(binds, 8);  // 2 ranks x 2 collectives x (flow_out, flow_in)
  EXPECT_EQ(j["distributedInfo"]["world_size"], 2);
  fs::remove_all(dir);
}

// A rank delayed on purpose is named the straggler: two measured ranks issue the same three all-reduces, the
// delayed one 4 ms after the other each time; the merge puts both on one clock (their step starts 1 ms apart on
// the system clock), links each collective across its members, names the delayed rank in every member's slice
// and in the summary, and draws an arrow from its arrival to the rank it held.
TEST(Simulation, MergedRanksLinkEachCollectiveAndNameTheStraggler) {
  const fs::path dir = fs::temp_directory_path() / "titan_straggler";
  fs::create_directories(dir);
  CommGroupRef g{"dp_shard", 1, std::make_shared<std::vector<int>>(std::vector<int>{0, 1})};
  for (int delayed : {1, 0}) {
    std::vector<std::string> files;
    for (int rank = 0; rank < 2; ++rank) {
      const double late = rank == delayed ? 0.004 : 0.0, start = 1000.0 + 0.001 * rank;  // system clock
      std::vector<CostEvent> ev;
      const double local = 1000.0 - start;  // absolute (seconds past 1000 on the system clock) -> this rank's time
      for (int k = 0; k < 3; ++k) {
        CostEvent c;
        c.op = "linear";
        c.t = 0.001 + k * 0.010 + local;
        ev.push_back(c);
        CostEvent a;
        a.kind = CostEvent::Kind::CommStart;
        a.op = "all_reduce";
        a.comm_id = k;
        a.group = g;
        a.t = 0.002 + late + k * 0.010 + local;  // issued at 2 ms into its block, the delayed rank 4 ms later
        ev.push_back(a);
        CostEvent w = a;
        w.kind = CostEvent::Kind::CommWait;
        w.t = 0.007 + k * 0.010 + local;  // both done once the late one has arrived
        ev.push_back(w);
      }
      SimResult m = measured_timeline(ev, 0.030 + local, "this CPU", 2);
      m.start_unix_s = start;
      files.push_back((dir / ("r" + std::to_string(rank) + ".json")).string());
      write_chrome_trace(m, files.back(), TraceLayout(1, rank, 2));
    }
    const std::string merged = (dir / "all.json").string();
    const auto summary = merge_chrome_traces(files, merged, 2);
    ASSERT_EQ(summary.size(), 1u);
    EXPECT_NE(summary[0].find("collectives linked across ranks: 3"), std::string::npos) << summary[0];
    EXPECT_NE(summary[0].find("the straggler: rank " + std::to_string(delayed)), std::string::npos) << summary[0];
    const auto p = check_chrome_trace(merged);
    EXPECT_TRUE(p.empty()) << p.front();
    std::ifstream in(merged);
    const nlohmann::json j = nlohmann::json::parse(in);
    int members = 0, arrows = 0;
    for (const auto& e : j["traceEvents"]) {
      if (e["ph"] == "X" && e.contains("args") && e["args"].contains("straggler_rank")) {
        ++members;
        EXPECT_EQ(e["args"]["straggler_rank"], delayed);
        EXPECT_NEAR(e["args"]["arrival_spread_ms"].get<double>(), 4.0, 1e-6);  // on one clock: 4 ms, not 3 or 5
        EXPECT_NEAR(e["args"]["waited_for_straggler_ms"].get<double>(), e["args"]["rank"] == delayed ? 0.0 : 4.0, 1e-6);
      }
      arrows += e["ph"] == "s" && e["cat"] == "collective";
    }
    EXPECT_EQ(members, 6);  // 3 collectives x 2 members
    EXPECT_EQ(arrows, 3);   // one per collective: the straggler to the rank it held
  }
  fs::remove_all(dir);
}

TEST(Simulation, MeasuredTimelineOfARealStepUsesTheSameFormat) {
  JobConfig c = sim_config("configs/qwen3_debug.yaml", {"training.local_batch_size", "1", "training.seq_len", "32"});
  CostTrace trace(/*timed=*/true);
  plan_step(c, 1, /*with_events=*/false, Device::CPU);  // a real step on this CPU
  const double end = trace.elapsed();
  std::vector<CostEvent> ev = trace.take();
  ASSERT_GT(ev.size(), 10u);
  for (size_t i = 1; i < ev.size(); ++i) EXPECT_GE(ev[i].t, ev[i - 1].t);
  SimResult r = measured_timeline(ev, end, "this CPU");
  double sum = 0;
  for (const auto& s : r.spans) sum += s.dur;
  EXPECT_NEAR(sum, end - ev.front().t, 1e-9);  // the ops tile the step
  const std::string path = (fs::temp_directory_path() / "titan_measured_trace.json").string();
  write_chrome_trace(r, path);
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  int linear = 0;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X" && e["name"] == "linear") ++linear;
  EXPECT_GT(linear, 0);
  fs::remove(path);
}

// A profiled real step beside the same step simulated on this machine's spec (issue: measured and simulated on
// one axis): every op the step recorded is a row with both times; each measured slice carries its simulated
// time and each simulated slice its measured one; a GEMM is priced as the cost model prices it on one kernel
// (titan's engine: no eager decomposition); the two timelines merge into one checked file.
TEST(Simulation, AProfiledStepSideBySideHasEveryOpWithBothTimes) {
  JobConfig c = sim_config("configs/qwen3_debug.yaml", {"training.local_batch_size", "1", "training.seq_len", "32"});
  CostTrace trace(/*timed=*/true);
  plan_step(c, 1, /*with_events=*/false, Device::CPU);
  const double end = trace.elapsed();
  const std::vector<CostEvent> ev = trace.take();
  const sim::SystemSpec sys = sim::load_system("cpu-host");
  const sim::ChipSpec chip = sim::load_chip(sys.chip_name);
  const StepComparison cmp = compare_step(ev, end, chip, sys, 1);
  int64_t ops = 0, calls = 0;
  std::map<std::string, int64_t> by_op, rows_by_op;
  for (const CostEvent& e : ev)
    if (e.kind != CostEvent::Kind::CommWait) ++ops, ++by_op[e.op];
  double measured = 0, simulated = 0;
  for (const OpComparison& r : cmp.rows) {
    calls += r.calls;
    rows_by_op[r.op] += r.calls;
    measured += r.measured_s;
    simulated += r.simulated_s;
  }
  EXPECT_EQ(calls, ops);  // every op (and collective) of the step is in the table
  EXPECT_EQ(rows_by_op, by_op);
  for (size_t i = 1; i < cmp.rows.size(); ++i)  // largest error first
    EXPECT_GE(std::abs(cmp.rows[i - 1].simulated_s - cmp.rows[i - 1].measured_s),
              std::abs(cmp.rows[i].simulated_s - cmp.rows[i].measured_s));
  double meas_spans = 0, sim_spans = 0;
  std::map<int64_t, double> sim_of;
  for (const SimSpan& s : cmp.simulated.spans)
    if (s.event >= 0) sim_spans += s.dur, sim_of[s.event] += s.dur;
  int gemms = 0;
  for (const SimSpan& s : cmp.measured.spans) {
    if (s.event < 0) continue;
    meas_spans += s.dur;
    EXPECT_NEAR(s.other_s, sim_of.count(s.event) ? sim_of[s.event] : 0.0, 1e-12) << s.name;
    const CostEvent& e = ev[(size_t)s.event];
    if (e.gemm.batch > 0 && s.category == "compute") {
      sim::Kernel k;
      k.kind = sim::KernelKind::Gemm;
      k.flops = e.flops;
      k.bytes = e.bytes;
      k.batch = e.gemm.batch, k.m = e.gemm.m, k.n = e.gemm.n, k.k = e.gemm.k;
      EXPECT_NEAR(sim_of[s.event], sim::kernel_time(chip, 1, k, sim::ExecMode::Eager).seconds, 1e-12) << s.name;
      ++gemms;
    }
  }
  EXPECT_GT(gemms, 10);
  EXPECT_NEAR(measured, meas_spans, 1e-9);
  EXPECT_NEAR(simulated, sim_spans, 1e-9);
  EXPECT_GT(cmp.simulated.step_s, 0.0);
  EXPECT_GT(cmp.measured.memory_samples.size(), 10u);  // the memory over the measured step (its counter track)
  EXPECT_GT(cmp.simulated.memory_samples.size(), 10u);
  const auto lines = describe_comparison(cmp, 5);
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_NE(lines[0].find("measured vs simulated (cpu-epyc-zen4-2c in cpu-host"), std::string::npos) << lines[0];
  // one axis: the measured rank 0 (pid 1) and its simulation (pid 2) in one checked file
  const fs::path dir = fs::temp_directory_path() / "titan_side_by_side";
  fs::create_directories(dir);
  const std::string a = (dir / "m.json").string(), b = (dir / "s.json").string(), m = (dir / "all.json").string();
  write_chrome_trace(cmp.measured, a, TraceLayout(1, 0, 2));
  write_chrome_trace(cmp.simulated, b, TraceLayout(1, 0, 2, 1, "rank 0 simulated (cpu-epyc-zen4-2c)"));
  merge_chrome_traces({a, b}, m, 1);
  const auto p = check_chrome_trace(m);
  EXPECT_TRUE(p.empty()) << p.front();
  std::ifstream in(m);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::set<int> pids;
  int with_both = 0;
  for (const auto& e : j["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "X" && e.contains("args") && e["args"].contains("sim_error_pct")) ++with_both;
  }
  EXPECT_EQ(pids, (std::set<int>{1, 2}));
  EXPECT_GT(with_both, 2 * gemms - 1);
  fs::remove_all(dir);
  // untimed events (a meta plan) cannot be compared
  std::vector<CostEvent> untimed = ev;
  for (CostEvent& e : untimed) e.t = 0;
  EXPECT_NE(error_of([&] { compare_step(untimed, 0, chip, sys, 1); }).find("carry no times"), std::string::npos);
}

// The critical path of a hand-built 2-rank schedule (issue: critical path across ranks): rank 0 runs GEMM A,
// sends to rank 1, runs GEMM B; rank 1 receives (a stall: the pipeline's bubble), then runs GEMM C. When C is
// the longer tail the path is A -> send -> C across both ranks (the stall replaced by the send it waited for);
// when B is, it is A -> B on rank 0 alone. The dependencies the scheduler recorded are typed, and the trace
// draws them as flows of their kind plus the path as its own track.
TEST(Simulation, CriticalPathOfAHandBuilt2RankScheduleIsTheKnownOne) {
  const sim::SystemSpec sys = sim::load_system("h100-hgx");
  const sim::ChipSpec chip = sim::load_chip(sys.chip_name);
  CommGroupRef pp{"pp", 7, std::make_shared<std::vector<int>>(std::vector<int>{0, 1})};
  auto gemm = [](const char* op, int64_t n) {
    CostEvent e;
    e.op = op;
    e.gemm = {1, n, n, n};
    e.flops = 2.0 * n * n * n;
    e.bytes = 3.0 * n * n * 4;
    return e;
  };
  auto p2p = [&](bool send, int peer, int64_t id, double bytes) {
    CostEvent e;
    e.kind = CostEvent::Kind::CommStart;
    e.op = send ? "send" : "recv";
    e.bytes = bytes;
    e.comm_id = id;
    e.group = pp;
    e.peer = peer;
    e.send = send;
    e.tag = 0;
    return e;
  };
  auto wait = [](int64_t id) {
    CostEvent e;
    e.kind = CostEvent::Kind::CommWait;
    e.comm_id = id;
    return e;
  };
  auto price = [&](int64_t n) {
    sim::Kernel k;
    k.kind = sim::KernelKind::Gemm;
    k.flops = 2.0 * n * n * n;
    k.bytes = 3.0 * n * n * 4;
    k.m = k.n = k.k = n;
    return sim::kernel_time(chip, 1, k, sim::ExecMode::Graphs).seconds;
  };
  const double bytes = 64e6;
  for (bool c_longer : {true, false}) {
    const int64_t nb = c_longer ? 1024 : 8192, nc = c_longer ? 8192 : 1024;
    const std::vector<CostEvent> r0 = {gemm("A", 4096), p2p(true, 1, 0, bytes), gemm("B", nb)};  // the send: in flight
    const std::vector<CostEvent> r1 = {p2p(false, 0, 0, bytes), wait(0), gemm("C", nc)};
    const EventStream e0(r0), e1(r1);
    auto lanes = schedule_ranks({RankEvents{0, 0, &e0}, RankEvents{1, 1, &e1}}, chip, sys, 1, sim::ExecMode::Graphs,
                                1.0, 1.0);
    const auto& s0 = lanes[0].r.spans;
    const auto& s1 = lanes[1].r.spans;
    // rank 0: A, the send (on its p2p stream), B; rank 1: the stall, C
    ASSERT_EQ(s0.size(), 3u);
    ASSERT_EQ(s1.size(), 2u);
    const double ta = price(4096), tsend = s0[1].dur;
    EXPECT_NEAR(s0[0].dur, ta, 1e-12);
    EXPECT_EQ(s0[1].name, "send");
    EXPECT_EQ(s0[1].dep_kind, DepKind::data);  // sends what A produced
    EXPECT_EQ(s0[1].dep.span, 0);
    EXPECT_EQ(s1[0].category, "bubble");
    EXPECT_EQ(s1[0].dep_kind, DepKind::pipeline);
    EXPECT_EQ(s1[0].dep.lane, 0);
    EXPECT_EQ(s1[0].dep.span, 1);
    EXPECT_EQ(s1[1].dep_kind, DepKind::stream);
    const CriticalPath path = critical_path({&s0, &s1});
    std::vector<std::string> names;
    for (const PathSegment& g : path.segments) names.push_back(g.span.valid() ? std::string((g.span.lane == 0 ? s0 : s1)[(size_t)g.span.span].name) : "?");
    if (c_longer) {
      EXPECT_EQ(names, (std::vector<std::string>{"A", "send", "C"}));
      EXPECT_NEAR(path.length, ta + tsend + price(nc), 1e-12);
      EXPECT_NEAR(path.by_what.at("pipeline pp"), tsend, 1e-12);
      EXPECT_NEAR(path.by_lane.at(1), price(nc), 1e-12);
    } else {
      EXPECT_EQ(names, (std::vector<std::string>{"A", "B"}));
      EXPECT_NEAR(path.length, ta + s0[2].dur, 1e-12);  // B, slowed where the send overlaps it (interference)
      EXPECT_GE(s0[2].dur, price(nb));
      EXPECT_EQ(path.by_lane.count(1), 0u);
    }
    double sum = 0;
    for (const PathSegment& g : path.segments) sum += g.dur;
    EXPECT_NEAR(sum, path.length, 1e-12);  // the segments tile the step
    // the kernels' time, their launch overhead charged apart (the graph mode's per-kernel launch)
    const double launch = path.by_what.count("launch overhead") ? path.by_what.at("launch overhead") : 0.0;
    EXPECT_NEAR(launch, 2 * chip.compiled_launch_us * 1e-6, 1e-12);
    EXPECT_NEAR(path.by_what.at("gemm") + launch, path.length - (c_longer ? tsend : 0.0), 1e-9);
  }
}

// The stages are planned side by side on the process's threads: the same step whatever their number (each
// plan counts its own memory and events), and a planned step leaves nothing in the process's comm log.
TEST(Simulation, StagesPlannedOnThreadsGiveTheSameStep) {
  JobConfig c = sim_config("configs/simulation/qwen3_32b_trn2x64.yaml",
                           {"model.n_layers", "8", "parallelism.pipeline_parallel_degree", "4",
                            "training.local_batch_size", "4", "parallelism.pipeline_parallel_microbatch_size", "1"});
  const int threads = omp_get_max_threads();
  comms::CommLog::get().clear();
  omp_set_num_threads(1);
  const SimResult one = simulate_step(c, 64);
  omp_set_num_threads(3);
  const SimResult three = simulate_step(c, 64);
  omp_set_num_threads(threads);
  EXPECT_TRUE(comms::CommLog::get().take().empty());  // fake collectives are not this process's traffic
  EXPECT_EQ(one.step_s, three.step_s);
  EXPECT_EQ(one.bubble_s, three.bubble_s);
  EXPECT_EQ(one.memory.total(), three.memory.total());
  EXPECT_GT(one.memory.activations, 0);
  ASSERT_EQ(one.stages.size(), 4u);
  ASSERT_EQ(three.stages.size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(one.stages[s].end_s, three.stages[s].end_s) << "stage " << s;
    EXPECT_EQ(one.stages[s].memory.total(), three.stages[s].memory.total()) << "stage " << s;
    ASSERT_EQ(one.stages[s].spans.size(), three.stages[s].spans.size()) << "stage " << s;
    for (size_t i = 0; i < one.stages[s].spans.size(); ++i) {
      const SimSpan &a = one.stages[s].spans[i], &b = three.stages[s].spans[i];
      ASSERT_TRUE(a.name == b.name && a.stream == b.stream && a.start == b.start && a.dur == b.dur)
          << "stage " << s << " slice " << i << ": " << a.name << " vs " << b.name;
    }
  }
  // a stage whose plan fails reports its own error (the lowest failing stage's), not a crash on a helper thread
  JobConfig bad = c;
  bad.model.n_layers = 2;  // too few blocks for 4 stages: every stage's plan fails (inside its meta step)
  const std::string err = titan::testing::error_of([&] { simulate_step(bad, 64); });
  EXPECT_NE(err.find("model.n_layers (2) cannot fill 4 pipeline stages"), std::string::npos) << err;
}

// A pipelined step's trace draws the path as a track and the dependencies as typed flows; the file checks.
TEST(Simulation, PipelinedTraceDrawsTheCriticalPathAndTypedDependencies) {
  JobConfig c = sim_config("configs/simulation/qwen3_32b_trn2x64.yaml",
                           {"model.n_layers", "8", "parallelism.pipeline_parallel_degree", "4",
                            "training.local_batch_size", "4", "parallelism.pipeline_parallel_microbatch_size", "1"});
  SimResult r = simulate_step(c, 64);
  ASSERT_FALSE(r.critical.segments.empty());
  EXPECT_NEAR(r.critical.length, r.step_s, 1e-9);
  EXPECT_EQ(r.critical.by_lane.size(), 4u);  // the path crosses every stage
  double sum = 0;
  for (const auto& [w, v] : r.critical.by_what) sum += v;
  EXPECT_NEAR(sum, r.step_s, 1e-9);
  bool described = false;
  for (const auto& l : describe_simulation(r)) described = described || l.rfind("sim critical path: ", 0) == 0;
  EXPECT_TRUE(described);
  const std::string path = (fs::temp_directory_path() / "titan_pp_trace.json").string();
  write_chrome_trace(r, path, TraceLayout(64));
  const auto p = check_chrome_trace(path);
  EXPECT_TRUE(p.empty()) << p.front();
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::set<std::string> cats;
  double on_track = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "s") cats.insert(e["cat"].get<std::string>());
    if (e["ph"] == "X" && e["cat"] == "critical_path") on_track += e["dur"].get<double>();
  }
  EXPECT_TRUE(cats.count("data") && cats.count("pipeline") && cats.count("collective")) << cats.size();
  EXPECT_NEAR(on_track * 1e-6, r.step_s, 1e-6);
  // collapsed (simulation.trace_chips 0, the default): one process per stage, standing for its 4 chips alike
  write_chrome_trace(r, path, TraceLayout(0));
  const auto q = check_chrome_trace(path);
  EXPECT_TRUE(q.empty()) << q.front();
  std::ifstream in2(path);
  const nlohmann::json k = nlohmann::json::parse(in2);
  std::vector<std::string> procs;
  for (const auto& e : k["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") procs.push_back(e["args"]["name"].get<std::string>());
  ASSERT_EQ(procs.size(), 4u);
  EXPECT_EQ(procs[3].rfind("chips 12-15 (trainium2, pipeline stage 3; 4 alike, drawn once", 0), 0u) << procs[3];
  fs::remove(path);
}

// What-if (issue: one flag changes a spec figure or a degree): twice the link bandwidth (every level of the
// system and its scale-out) shortens a communication-bound step (Qwen3-32B, 4 blocks, FSDP over 64 H100 in 8
// systems x TP 4, one 512-token sequence per rank) and leaves a compute-bound one (FSDP over one system's NVLink, 2 x
// 4096 tokens per rank), and says what moved: the dp_shard collectives on the critical path, not the kernels.
TEST(Simulation, WhatIfTwiceTheLinkBandwidthShortensACommBoundStepOnly) {
  const WhatIf twice = parse_what_if("system.levels.*.bandwidth_gbps*2; system.scale_out.bandwidth_gbps*2");
  ASSERT_EQ(twice.system.size(), 2u);
  EXPECT_TRUE(twice.system[0].scale);
  const std::vector<std::string> common = {"model.n_layers", "4", "simulation.enabled", "true", "simulation.system",
                                           "h100-hgx"};
  auto job = [&](std::vector<std::string> more) {
    more.insert(more.begin(), common.begin(), common.end());
    return sim_config("configs/qwen3_32b.yaml", more);
  };
  const JobConfig comm = job({"training.local_batch_size", "1", "training.seq_len", "512", "simulation.world_size",
                              "64", "simulation.num_systems", "8"});  // the config's FSDP 16 x TP 4
  const JobConfig compute = job({"training.local_batch_size", "2", "training.seq_len", "4096",
                                 "simulation.world_size", "8", "simulation.num_systems", "1",
                                 "parallelism.tensor_parallel_degree", "1", "parallelism.data_parallel_shard_degree",
                                 "-1"});
  const SimResult comm0 = simulate_step(comm, 64), comm1 = simulate_what_if(comm, twice);
  const SimResult comp0 = simulate_step(compute, 8), comp1 = simulate_what_if(compute, twice);
  EXPECT_GT(comm0.exposed_comm_s, 0.3 * comm0.step_s);  // communication-bound as planned
  EXPECT_LT(comm1.step_s, 0.8 * comm0.step_s);
  EXPECT_LT(comm1.exposed_comm_s, 0.6 * comm0.exposed_comm_s);
  EXPECT_LT(comp0.exposed_comm_s, 0.03 * comp0.step_s);  // compute-bound as planned
  EXPECT_LE(comp1.step_s, comp0.step_s);
  EXPECT_GT(comp1.step_s, 0.99 * comp0.step_s);
  // the kernels: as before, but for the little interference of collectives they overlap (now shorter)
  EXPECT_NEAR(comp1.critical.by_what.at("gemm"), comp0.critical.by_what.at("gemm"), 0.01 * comp0.step_s);
  const auto lines = describe_what_if(comm0, comm1, twice.as_written);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].rfind("what if system.levels.*.bandwidth_gbps*2; system.scale_out.bandwidth_gbps*2: step ", 0), 0u)
      << lines[0];
  EXPECT_NE(lines[2].find("what moved on the critical path: communication dp_shard -"), std::string::npos) << lines[2];
}

// A what-if's changes: a spec figure set or scaled, a config key set (a degree: the layout changes with it);
// what cannot apply is refused naming the change as written, and the knob is refused outside a planned job.
TEST(Simulation, WhatIfChangesApplyOrAreRefusedByName) {
  JobConfig c = sim_config("configs/simulation/qwen3_32b_trn2x64.yaml");
  const SimResult base = simulate_step(c, (int)c.simulation.world_size);
  const SimResult hbm = simulate_what_if(c, parse_what_if("chip.hbm_tbps*2"));
  EXPECT_LT(hbm.step_s, base.step_s);  // elementwise kernels are memory-bound
  EXPECT_NEAR(hbm.critical.by_what.at("gemm"), base.critical.by_what.at("gemm"), 1e-9);
  const SimResult tp8 = simulate_what_if(c, parse_what_if("parallelism.tensor_parallel_degree=8"));
  EXPECT_NE(tp8.layout, base.layout);
  EXPECT_NE(tp8.layout.find("tp 8"), std::string::npos) << tp8.layout;
  auto refused = [&](const std::string& w) {
    return error_of([&] { simulate_what_if(c, parse_what_if(w)); });
  };
  EXPECT_NE(refused("chip.hbm_tbps").find("write <key>=<value> or <key>*<factor>"), std::string::npos);
  EXPECT_NE(refused("parallelism.tensor_parallel_degree*2").find("a config key is set (=), not scaled"),
            std::string::npos);
  EXPECT_NE(refused("chip.hbm_tb*2").find("'chip.hbm_tb*2': the spec gives no 'hbm_tb' to scale"), std::string::npos);
  EXPECT_NE(refused("system.levels.nvlink.bandwidth_gbps*2").find("no entry of 'levels' named 'nvlink' (neuronlink"),
            std::string::npos);
  EXPECT_NE(refused("chip.hbm_tbps*x").find("'x' is not a number"), std::string::npos);
  EXPECT_NE(refused("parallelism.tensor_parallel_degree=7").find("simulation.what_if 'parallelism.tensor_parallel_"
                                                                 "degree=7': config error"),
            std::string::npos);
  EXPECT_NE(refused("chip.memory_efficiency*3").find("'memory_efficiency' must be <= 1"), std::string::npos);
  EXPECT_NE(error_of([&] { sim_config("configs/qwen3_debug.yaml", {"simulation.what_if", "chip.hbm_tbps*2"}); })
                .find("needs simulation.enabled true"),
            std::string::npos);
}

// Utilization counters on the step's axis (issue: memory by category, link utilization per level, achieved
// FLOP/s per stream): each within its physical bounds — memory never above the planned peak per chip, the
// compute stream never above the chip's peak, a level's links busy 0 or 1 — and a communication stream's rate
// is its collectives' bytes over their time.
TEST(Simulation, UtilizationCountersStayWithinTheirPhysicalBounds) {
  JobConfig c = sim_config("configs/simulation/qwen3_32b_trn2x64.yaml", {"model.n_layers", "4"});
  SimResult r = simulate_step(c, (int)c.simulation.world_size);
  ASSERT_FALSE(r.memory_samples.empty());
  double top = 0;
  for (const MemorySample& m : r.memory_samples) {
    double t = 0;
    for (double b : m.bytes) t += b;
    top = std::max(top, t);
  }
  EXPECT_LE(top, r.memory.total() * (1 + 1e-9));  // the peak falls inside an op, between records
  EXPECT_GT(top, 0.5 * r.memory.total());
  ASSERT_FALSE(r.link_busy.empty());
  const std::string path = (fs::temp_directory_path() / "titan_counters.json").string();
  write_chrome_trace(r, path);
  const auto p = check_chrome_trace(path);
  EXPECT_TRUE(p.empty()) << p.front();
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  const sim::ChipSpec chip = sim::load_chip("trainium2");
  std::map<std::string, int> seen;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "C") continue;
    const std::string name = e["name"].get<std::string>();
    ++seen[name];
    if (name == "memory GiB") {
      EXPECT_EQ(e["args"].size(), 6u);
    } else {
      const double v = e["args"]["value"].get<double>();
      EXPECT_GE(v, 0.0) << name;
      if (name == "compute TFLOP/s") EXPECT_LE(v, chip.peak_tflops * (1 + 1e-3)) << name;
      if (name.rfind("link ", 0) == 0) EXPECT_TRUE(v == 0.0 || v == 1.0) << name << " " << v;
    }
  }
  EXPECT_GT(seen["memory GiB"], 10);
  EXPECT_GT(seen["compute TFLOP/s"], 100);
  EXPECT_GT(seen["comm:dp_shard GB/s"], 10);
  EXPECT_GT(seen["link neuronlink busy"], 10);
  fs::remove(path);
}

// A GEMM tile's engine schedule equals the hand computation from the spec's figures (issue: the chip's
// engines): one 128 x 512 output tile of a 128 x 128 x 512 bf16 GEMM on one Trainium2 core is four stages one
// after another — its operands' DMA (both blocks: (128 + 512) x 128 x 2 bytes), one matmul instruction of
// max(min(64, 128), 512) = 512 Tensor cycles at 2.4 GHz, the PSUM evacuation on Scalar (max(64, 512) cycles at
// 1.2 GHz), the output's DMA (128 x 512 x 2 bytes) — loads and stores sharing the core's HBM bandwidth by their
// bytes, plus one DMA instruction's latency. A large GEMM is Tensor-bound at the core's peak; at M = 1 it is
// bound by streaming the weights.
TEST(Engines, AGemmTilesScheduleIsTheHandComputation) {
  const sim::ChipSpec chip = sim::load_chip("trainium2");
  const sim::EngineSpec& e = chip.engines;
  ASSERT_TRUE(e.valid());
  const sim::EngineSchedule s = sim::schedule_gemm(e, 1, 1, 128, 512, 128, 2.0, 2.0, /*keep_slices=*/true);
  const double in = (128.0 + 512.0) * 128 * 2, out = 128.0 * 512 * 2, bw = e.dma_gbps * 1e9;
  const double t_in = in / (bw * in / (in + out)), t_tensor = 512 / (e.tensor_ghz * 1e9);
  const double t_evac = 512 / (e.scalar_ghz * 1e9), t_out = out / (bw * out / (in + out));
  EXPECT_EQ(s.jobs, 1);
  ASSERT_EQ(s.slices.size(), 4u);
  EXPECT_EQ(s.slices[0].engine, sim::Engine::Dma);
  EXPECT_EQ(s.slices[1].engine, sim::Engine::Tensor);
  EXPECT_EQ(s.slices[2].engine, sim::Engine::Scalar);
  EXPECT_EQ(s.slices[3].engine, sim::Engine::Dma);
  EXPECT_NEAR(s.slices[0].end, t_in, 1e-15);
  EXPECT_NEAR(s.slices[1].end - s.slices[1].start, t_tensor, 1e-15);
  EXPECT_NEAR(s.slices[2].end - s.slices[2].start, t_evac, 1e-15);
  EXPECT_NEAR(s.seconds, t_in + t_tensor + t_evac + t_out + e.dma_latency_us * 1e-6, 1e-15);
  EXPECT_NEAR(t_tensor, 213.333e-9, 1e-12);  // 512 cycles at 2.4 GHz
  // 2048 x 4096 x 4096: 16 x 8 tiles of 32 instructions x 512 cycles = the FLOPs at 128 x 128 x 2 x 2.4 GHz
  const sim::EngineSchedule big = sim::schedule_gemm(e, 1, 1, 2048, 4096, 4096, 2.0, 2.0);
  const double peak_s = 2.0 * 2048 * 4096 * 4096 / (2.0 * 128 * 128 * e.tensor_ghz * 1e9);
  EXPECT_NEAR(big.busy[(int)sim::Engine::Tensor], peak_s, 1e-12);
  EXPECT_LT(big.seconds, 1.04 * peak_s);  // the pipeline hides the DMA and the evacuations but its fill
  // M = 1: the weights (4096 x 4096 x 2 bytes) streamed at the core's bandwidth bound it
  const sim::EngineSchedule one = sim::schedule_gemm(e, 1, 1, 1, 4096, 4096, 2.0, 2.0);
  EXPECT_GT(one.seconds, 4096.0 * 4096 * 2 / bw);
  EXPECT_LT(one.seconds, 1.1 * (4096.0 * 4096 * 2 + 2 * 4096 * 2) / bw + 2e-6);
  // two cores take the tiles in turn: twice as fast on a Tensor-bound GEMM
  EXPECT_NEAR(sim::schedule_gemm(e, 2, 1, 2048, 4096, 4096, 2.0, 2.0).busy[(int)sim::Engine::Tensor],
              big.busy[(int)sim::Engine::Tensor], 1e-12);
  EXPECT_LT(sim::schedule_gemm(e, 2, 1, 2048, 4096, 4096, 2.0, 2.0).seconds, 0.52 * big.seconds);
}

// An attention tile's schedule from the spec's figures: 128 queries x 512 keys, head dims 128: S = Q K^T (one
// instruction of max(min(64, 128), 512) cycles), P transposed in four 128 x 128 blocks (128 cycles each),
// O += P V (four instructions of max(64, 128) cycles) on Tensor; exp on Scalar (max(64, 512) cycles); row max,
// row sum (512 each) and O's rescale (128) on Vector; DMA in and out around them. FP8 GEMMs run the Tensor
// engine at the chip's FP8 : BF16 rate on 1-byte operands.
TEST(Engines, AnAttentionTilesScheduleAndFp8GemmsFollowTheSpec) {
  const sim::ChipSpec chip = sim::load_chip("trainium2");
  const sim::EngineSpec& e = chip.engines;
  const double bytes = 1e6, bw = e.dma_gbps * 1e9;
  const sim::EngineSchedule a = sim::schedule_attention(e, 1, 128.0 * 512, 128, 128, false, bytes, true);
  EXPECT_EQ(a.jobs, 1);
  const double tensor = (512.0 + 4 * 128 + 4 * 128) / (e.tensor_ghz * 1e9), scalar = 512 / (e.scalar_ghz * 1e9);
  const double vector = (2 * 512.0 + 128) / (e.vector_ghz * 1e9);
  EXPECT_NEAR(a.busy[(int)sim::Engine::Tensor], tensor, 1e-15);
  EXPECT_NEAR(a.busy[(int)sim::Engine::Scalar], scalar, 1e-15);
  EXPECT_NEAR(a.busy[(int)sim::Engine::Vector], vector, 1e-15);
  EXPECT_NEAR(a.seconds, bytes / bw + tensor + scalar + vector + bytes / bw + e.dma_latency_us * 1e-6, 1e-12);
  EXPECT_NEAR(a.busy[(int)sim::Engine::Dma], 2 * bytes / bw * 0.5, 1e-15);  // 3 : 1 shares of the HBM's time
  // the backward does more Tensor work per tile than the forward
  EXPECT_GT(sim::schedule_attention(e, 1, 128.0 * 512, 128, 128, true, bytes).busy[(int)sim::Engine::Tensor],
            2 * tensor);
  // FP8: a Tensor-bound GEMM at the chip's FP8 : BF16 ratio (1299 / 667)
  sim::ChipSpec c = chip;
  c.price_by_engines = true;
  sim::Kernel k;
  k.kind = sim::KernelKind::Gemm;
  k.m = 4096, k.n = 4096, k.k = 4096, k.batch = 1;
  k.flops = 2.0 * 4096 * 4096 * 4096;
  k.element_bytes = 2;
  const double bf16 = sim::kernel_time(c, 1, k, sim::ExecMode::Compiled).seconds;
  k.precision = GemmPrecision::fp8;
  const double fp8 = sim::kernel_time(c, 1, k, sim::ExecMode::Compiled).seconds;
  EXPECT_LT(fp8, 0.6 * bf16);
  EXPECT_GT(fp8, 0.45 * bf16);
}

// simulation.kernel_model engines: the step's GEMM, attention and elementwise kernels take their engine schedules' time
// (never faster than the Tensor engines' peak: MFU stays below 100%), the trace draws the engines as rows of
// the first chip, the article's three batch regimes order as its sweep (M = 1 << 128 < 2048), and a chip
// without engines is refused, naming it.
TEST(Engines, KernelModelEnginesPricesTheStepAndDrawsTheEngines) {
  JobConfig c = sim_config("configs/simulation/qwen3_32b_trn2x64.yaml",
                           {"model.n_layers", "4", "simulation.kernel_model", "engines"});
  const SimResult r = simulate_step(c, (int)c.simulation.world_size);
  EXPECT_GT(r.mfu, 0.0);
  EXPECT_LT(r.mfu, 1.0);
  const sim::ChipSpec chip = sim::load_chip("trainium2");
  int gemms = 0;
  for (const SimSpan& s : r.spans)
    if (s.kernel_class == "gemm") {
      ++gemms;
      EXPECT_GT(s.engine_busy[0], 0.f);
      // 4 ranks per chip: 2 cores each, 2 x 79 TFLOP/s
      EXPECT_GE(s.dur * 2 * 2.0 * 128 * 128 * chip.engines.tensor_ghz * 1e9, s.flops * (1 - 1e-9)) << s.name;
    }
  EXPECT_GT(gemms, 10);
  int attention = 0;  // attention kernels carry their problem: their exp runs on Scalar
  for (const SimSpan& s : r.spans)
    if (s.kernel_class == "attention") attention += s.engine_busy[(int)sim::Engine::Scalar] > 0;
  EXPECT_GT(attention, 0);
  const std::string path = (fs::temp_directory_path() / "titan_engines.json").string();
  write_chrome_trace(r, path, TraceLayout(0));
  const auto p = check_chrome_trace(path);
  EXPECT_TRUE(p.empty()) << p.front();
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::set<std::string> rows;
  for (const auto& ev : j["traceEvents"])
    if (ev["ph"] == "M" && ev["name"] == "thread_name") rows.insert(ev["args"]["name"].get<std::string>());
  EXPECT_TRUE(rows.count("NeuronCore Tensor engine (rank 0, per core)"));
  EXPECT_TRUE(rows.count("NeuronCore DMA queues (rank 0, per core)"));
  fs::remove(path);
  sim::ChipSpec t3 = sim::load_chip("trainium3");
  t3.price_by_engines = true;
  auto mfu = [&](long long m) {  // one LNC=2 logical core, llama3-8b's q_proj
    sim::Kernel k;
    k.kind = sim::KernelKind::Gemm;
    k.m = m, k.n = 4096, k.k = 4096, k.batch = 1;
    k.flops = 2.0 * m * 4096 * 4096;
    k.element_bytes = 2;
    return k.flops / sim::kernel_time(t3, 4, k, sim::ExecMode::Compiled).seconds / (t3.mfu_peak_tflops * 1e12 / 4);
  };
  EXPECT_LT(mfu(1), 0.02);
  EXPECT_LT(mfu(1) * 20, mfu(128));
  EXPECT_LT(mfu(128), mfu(2048));
  EXPECT_LT(mfu(2048), 1.0);
  JobConfig h = sim_config("configs/qwen3_32b.yaml", {"simulation.system", "h100-hgx", "simulation.world_size", "8",
                                                      "simulation.ranks_per_chip", "1",
                                                      "parallelism.data_parallel_shard_degree", "8",
                                                      "parallelism.tensor_parallel_degree", "1",
                                                      "simulation.kernel_model", "engines"});
  EXPECT_NE(error_of([&] { simulate_step(h, 8); }).find("h100-sxm"), std::string::npos);
}

// A pipeline stage's profiled step beside its simulation: rank 1 receives rank 0's activations; the sender is
// not simulated, so the receive arrives when it did in the measured step, and the simulated step goes on from
// there (not a deadlock, not a symmetric exchange).
TEST(Simulation, AProfiledPipelineStageIsSimulatedWithItsMeasuredArrivals) {
  CommGroupRef pp{"pp_p2p", 3, std::make_shared<std::vector<int>>(std::vector<int>{0, 1})};
  std::vector<CostEvent> ev;
  CostEvent r;
  r.kind = CostEvent::Kind::CommStart;
  r.op = "recv";
  r.bytes = 1e6;
  r.comm_id = 0;
  r.group = pp;
  r.peer = 0;
  r.send = false;
  r.tag = 5;
  r.t = 0.0;
  ev.push_back(r);
  CostEvent w = r;
  w.kind = CostEvent::Kind::CommWait;
  w.t = 0.001;
  ev.push_back(w);
  CostEvent g;
  g.op = "linear";
  g.gemm = {1, 256, 256, 256};
  g.flops = 2.0 * 256 * 256 * 256;
  g.bytes = 3.0 * 256 * 256 * 4;
  g.t = 0.030;  // the receive's wait ended here: the activations arrived at 30 ms
  ev.push_back(g);
  const sim::SystemSpec sys = sim::load_system("cpu-host");
  const sim::ChipSpec chip = sim::load_chip(sys.chip_name);
  const StepComparison c = compare_step(ev, 0.031, chip, sys, 2, 2, /*rank=*/1);
  std::optional<SimSpan> linear;
  for (const SimSpan& s : c.simulated.spans)
    if (s.name == "linear") linear = s;
  ASSERT_TRUE(linear.has_value());
  EXPECT_NEAR(linear->start, 0.030, 1e-12);  // after the measured arrival
  EXPECT_EQ(c.rows.size(), 2u);              // the receive and the linear
}

TEST(Simulation, CollectivesSlowTheKernelsTheyOverlapByTheChipsInterference) {
  const fs::path dir = fs::temp_directory_path() / "titan_interference";
  fs::create_directories(dir);
  std::string text;
  {
    std::ifstream in(std::string(TITAN_SOURCE_DIR) + "/simulator/specs/chips/a100-sxm.yaml");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("comm_interference: 0.1");
  ASSERT_NE(at, std::string::npos);
  auto variant = [&](const std::string& value) {
    std::string t = text;
    t.replace(at, std::string("comm_interference: 0.1").size(), "comm_interference: " + value);
    const std::string p = (dir / ("a100_" + value + ".yaml")).string();
    std::ofstream(p) << t;
    JobConfig c = sim_config("configs/validation/llama3_70b_a100x64.yaml", {"model.n_layers", "4", "simulation.chip", p});
    return simulate_step(c, 64);
  };
  SimResult none = variant("0"), half = variant("0.5");
  EXPECT_EQ(none.compute_by_class.count("comm interference"), 0u);
  ASSERT_GT(half.compute_by_class.count("comm interference"), 0u);
  EXPECT_GT(half.compute_by_class.at("comm interference"), 0);
  EXPECT_NEAR(half.compute_s - none.compute_s, half.compute_by_class.at("comm interference"), 1e-9);
  EXPECT_GT(half.step_s, none.step_s);
  fs::remove_all(dir);
}

// ---- pipeline parallel ------------------------------------------------------------
// Every schedule is complete (each micro-batch's forward and backward once per stage, forward first) and
// cannot deadlock: run abstractly, a stage's forward needs the previous stage's forward of that micro-batch,
// its backward the next stage's backward; ranks only block on those receives.
TEST(Pipeline, SchedulesAreCompleteAndDeadlockFree) {
  using parallel::PipelineAction;
  using parallel::PipelineSchedule;
  for (PipelineSchedule sc : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB, PipelineSchedule::Interleaved1F1B})
    for (int64_t pp : {2, 3, 4})
      for (int64_t v : {1, 2, 3})
        for (int64_t m : {1, 2, 4, 6, 8, 12}) {
          if (sc != PipelineSchedule::Interleaved1F1B && v > 1) continue;
          if (sc == PipelineSchedule::Interleaved1F1B && m % pp != 0) continue;
          const int64_t S = pp * v;
          std::vector<std::vector<PipelineAction>> acts;
          for (int64_t r = 0; r < pp; ++r) acts.push_back(parallel::pipeline_actions(sc, pp, S, m, r));
          for (int64_t r = 0; r < pp; ++r) {
            std::set<std::pair<int64_t, int64_t>> f, b;
            for (auto& a : acts[r]) {
              ASSERT_EQ(a.stage % pp, r);
              if (a.kind == PipelineAction::Forward) EXPECT_TRUE(f.insert({a.stage, a.microbatch}).second);
              else {
                EXPECT_TRUE(f.count({a.stage, a.microbatch})) << "backward before forward";
                EXPECT_TRUE(b.insert({a.stage, a.microbatch}).second);
              }
            }
            EXPECT_EQ((int64_t)f.size(), v * m);
            EXPECT_EQ((int64_t)b.size(), v * m);
          }
          std::set<std::tuple<int, int64_t, int64_t>> done;  // (kind, stage, mb)
          std::vector<size_t> at(pp, 0);
          for (bool moved = true; moved;) {
            moved = false;
            for (int64_t r = 0; r < pp; ++r)
              while (at[r] < acts[r].size()) {
                const auto& a = acts[r][at[r]];
                const bool fwd = a.kind == PipelineAction::Forward;
                const bool ready = fwd ? (a.stage == 0 || done.count({0, a.stage - 1, a.microbatch}))
                                       : (a.stage == S - 1 || done.count({1, a.stage + 1, a.microbatch}));
                if (!ready) break;
                done.insert({fwd ? 0 : 1, a.stage, a.microbatch});
                ++at[r];
                moved = true;
              }
          }
          for (int64_t r = 0; r < pp; ++r)
            EXPECT_EQ(at[r], acts[r].size()) << "deadlock: pp " << pp << " v " << v << " m " << m << " rank " << r;
        }
}

TEST(Pipeline, LayoutSplitsBlocksAndRefusesWhatCannotRun) {
  using parallel::PipelineSchedule;
  auto l = parallel::pipeline_layout(10, 4, PipelineSchedule::OneFOneB, -1);
  ASSERT_EQ(l.stages.size(), 4u);
  EXPECT_EQ(l.stages[0].end - l.stages[0].begin, 3);  // 3, 3, 2, 2
  EXPECT_EQ(l.stages[3].end, 10);
  EXPECT_TRUE(l.stages[0].first && !l.stages[0].last && l.stages[3].last);
  auto v = parallel::pipeline_layout(8, 2, PipelineSchedule::Interleaved1F1B, -1);
  EXPECT_EQ(v.stages.size(), 4u);
  EXPECT_EQ(v.stages_of(1), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(parallel::pipeline_layout(8, 2, PipelineSchedule::Interleaved1F1B, 1).stages.size(), 8u);
  EXPECT_NE(error_of([] { parallel::pipeline_layout(8, 2, PipelineSchedule::OneFOneB, 2); }).find("one stage per rank"),
            std::string::npos);
  EXPECT_NE(error_of([] { parallel::pipeline_layout(8, 2, PipelineSchedule::GPipe, 3); }).find("must divide"),
            std::string::npos);
  EXPECT_NE(error_of([] { parallel::pipeline_layout(2, 4, PipelineSchedule::OneFOneB, -1); }).find("needs a block"),
            std::string::npos);
  // TorchTitan's split: the embedding and the head counted as blocks (first / last_stage_less_layers), the
  // stages ceil((L + first + last) / layers_per_stage), uneven by at most one; the edge stages may hold none
  auto sizes = [](const parallel::PipelineLayout& x) {
    std::vector<int64_t> n;
    for (const auto& c : x.stages) n.push_back(c.end - c.begin);
    return n;
  };
  EXPECT_EQ(sizes(parallel::pipeline_layout(10, 4, PipelineSchedule::OneFOneB, -1, 1, 1)),
            (std::vector<int64_t>{2, 3, 3, 2}));
  EXPECT_EQ(sizes(parallel::pipeline_layout(4, 2, PipelineSchedule::OneFOneB, -1, 0, 2)), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(sizes(parallel::pipeline_layout(3, 1, PipelineSchedule::Interleaved1F1B, -1, 2, 2)),
            (std::vector<int64_t>{2, 1}));  // TorchTitan's docstring example: 7 effective blocks over 2 stages
  // Llama 3.1 405B: 126 blocks over 16 ranks with 8 virtual stages each (128 stages of one block, the first and
  // last holding only the embedding and the head) — not writable while stages had to divide the blocks
  const auto l405 = parallel::pipeline_layout(126, 16, PipelineSchedule::Interleaved1F1B, 1, 1, 1);
  ASSERT_EQ(l405.stages.size(), 128u);
  EXPECT_EQ(l405.stages_per_rank(), 8);
  EXPECT_EQ(l405.stages[0].end - l405.stages[0].begin, 0);
  EXPECT_TRUE(l405.stages[0].first && l405.stages[127].last);
  EXPECT_EQ(l405.stages[127].end - l405.stages[127].begin, 0);
  EXPECT_EQ(l405.stages[126].end, 126);
  const auto even8 = parallel::pipeline_layout(126, 16, PipelineSchedule::OneFOneB, 8);  // 16 stages: 8 x 14, 7 x 2
  EXPECT_EQ(sizes(even8).front(), 8);
  EXPECT_EQ(sizes(even8).back(), 7);
  EXPECT_NE(error_of([] { parallel::pipeline_layout(4, 2, PipelineSchedule::OneFOneB, -1, 5, 0); })
                .find("must not exceed the 4 blocks"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              sim_config("configs/qwen3_debug.yaml", {"parallelism.pipeline_parallel_last_stage_less_layers", "1"});
            }).find("only with parallelism.pipeline_parallel_degree > 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { parallel::pipeline_actions(parallel::PipelineSchedule::Interleaved1F1B, 4, 8, 6, 0); })
                .find("multiple of pipeline_parallel_degree"),
            std::string::npos);
  // config: pipeline keys without a pipeline, tied embeddings, a micro-batch size that does not divide the batch
  EXPECT_NE(error_of([] {
              sim_config("configs/qwen3_debug.yaml", {"parallelism.pipeline_parallel_schedule", "GPipe"});
            }).find("only with parallelism.pipeline_parallel_degree > 1"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              sim_config("configs/qwen3_debug.yaml",
                     {"parallelism.pipeline_parallel_degree", "2", "model.enable_weight_tying", "true"});
            }).find("enable_weight_tying"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              sim_config("configs/qwen3_debug.yaml", {"parallelism.pipeline_parallel_degree", "2",
                                                  "parallelism.pipeline_parallel_microbatch_size", "3"});
            }).find("pipeline_parallel_microbatch_size"),
            std::string::npos);
}

namespace {
// A pipeline of uniform stages: 8 wide blocks each, a tiny vocabulary (head and embedding ~0.1% of a stage; the
// activations sent between stages take ~0.5% of a stage's time),
// trn2 (no interference from transfers in flight), compiled mode (few launches).
JobConfig uniform_pipeline(int64_t pp, int64_t m, const std::string& schedule) {
  return sim_config("configs/qwen3_debug.yaml",
                {"model.dim", "2048", "model.n_heads", "16", "model.n_kv_heads", "8", "model.head_dim", "128",
                 "model.hidden_dim", "8192", "model.n_layers", std::to_string(8 * pp), "model.vocab_size", "256",
                 "training.seq_len", "2048", "training.local_batch_size", std::to_string(m),
                 "parallelism.pipeline_parallel_degree", std::to_string(pp), "parallelism.pipeline_parallel_schedule",
                 schedule, "simulation.system", "trn2-instance", "simulation.mode", "compiled",
                 "training.mixed_precision_param", "bfloat16"});
}
}  // namespace

// The bubble of a uniform 1F1B pipeline is (p - 1) / (m + p - 1) of the step; GPipe's is the same, and its
// stages hold the activations of all m micro-batches (1F1B: at most p - stage), so GPipe's peak memory is higher.
TEST(Simulation, PipelineBubbleIsTheTextbookFraction) {
  for (auto [pp, m] : std::vector<std::pair<int, int>>{{4, 8}, {2, 4}, {4, 4}}) {
    const SimResult r = simulate_step(uniform_pipeline(pp, m, "1F1B"), pp);
    ASSERT_EQ((int)r.stages.size(), pp);
    const double want = (double)(pp - 1) / (double)(m + pp - 1);
    EXPECT_NEAR(r.bubble_fraction / want, 1.0, 0.02) << "pp " << pp << " m " << m << ": bubble " << r.bubble_fraction
                                                      << " vs " << want;
    // the trace shows the stages: every stage's compute and its waits
    for (const auto& st : r.stages) EXPECT_GT(st.compute_s, 0);
    // a stage done early waits for the others in the collectives that span the stages (the loss and gradient
    // norm all-reduces): bubble, not exposed communication, so every stage of a uniform pipeline reports about
    // the same exposed communication and bubble (before, stage k's exposed grew by k backward passes)
    for (const auto& st : r.stages) {
      EXPECT_NEAR(st.exposed_comm_s, r.stages[0].exposed_comm_s, 0.02 * r.step_s) << "pp " << pp << " m " << m;
      EXPECT_NEAR(st.bubble_s, r.stages[0].bubble_s, 0.05 * r.stages[0].bubble_s + 0.02 * r.step_s)
          << "pp " << pp << " m " << m;
    }
  }
  // gradient accumulation: three schedules a step, each with its own fill and drain, so the same fraction; the
  // schedules' windows tile the step (consecutive schedules overlap across the stages: counted once)
  JobConfig acc = uniform_pipeline(2, 4, "1F1B");
  acc.training.global_batch_size = 3 * acc.training.local_batch_size;
  const SimResult three = simulate_step(acc, 2);
  EXPECT_NEAR(three.bubble_fraction / 0.2, 1.0, 0.03) << three.bubble_fraction;
  EXPECT_LE(three.pipeline_s, three.step_s * (1 + 1e-9));
  EXPECT_LT(three.bubble_s, three.step_s);
  const SimResult one = simulate_step(uniform_pipeline(4, 8, "1F1B"), 4);
  const SimResult gpipe = simulate_step(uniform_pipeline(4, 8, "GPipe"), 4);
  EXPECT_NEAR(gpipe.bubble_fraction / one.bubble_fraction, 1.0, 0.05);
  EXPECT_GT(gpipe.stages[0].memory.activations, 1.5 * one.stages[0].memory.activations);
  // 1F1B: the first stage keeps p micro-batches in flight, the last one
  EXPECT_GT(one.stages[0].memory.activations, 2.0 * one.stages[3].memory.activations);
  // interleaving (2 virtual stages per rank) shrinks the bubble
  const SimResult inter = simulate_step(uniform_pipeline(4, 8, "Interleaved1F1B"), 4);
  EXPECT_LT(inter.bubble_fraction, 0.75 * one.bubble_fraction);
}

// parallelism.fsdp_gather_stage_at_start: a pipeline stage that keeps its weights gathered through its schedule
// issues every unit's gather as the schedule starts. Where a unit's gather outlasts its forward (PP 4 x FSDP 8,
// the links inside a Trn2 instance at 2% of their rate), a later stage's weights arrive while the stages before
// it fill the pipeline instead of each stage's first micro-batch waiting for its gathers one by one: the step
// shortens (1.13 -> 0.91 s when written); on the links as they are, a unit's gather is shorter than its
// forward and nothing moves (within 1%). The knob is refused where it cannot apply. Its losses and gradients
// equal one rank's: the parity matrix's pp2_interleaved_fsdp2_gather_at_start.
TEST(Simulation, StageGatheredAtScheduleStartFillsThePipelineSooner) {
  std::vector<std::string> keys = {
      "model.dim", "2048", "model.n_heads", "16", "model.n_kv_heads", "8", "model.head_dim", "128",
      "model.hidden_dim", "8192", "model.n_layers", "32", "model.vocab_size", "256", "training.seq_len", "2048",
      "training.local_batch_size", "8", "parallelism.pipeline_parallel_degree", "4", "simulation.system",
      "trn2-instance", "simulation.num_systems", "2", "simulation.mode", "compiled", "training.mixed_precision_param",
      "bfloat16", "parallelism.data_parallel_shard_degree", "8", "simulation.world_size", "32"};
  const JobConfig lazy = sim_config("configs/qwen3_debug.yaml", keys);
  keys.insert(keys.end(), {"parallelism.fsdp_gather_stage_at_start", "true"});
  const JobConfig eager = sim_config("configs/qwen3_debug.yaml", keys);
  const WhatIf slow = parse_what_if("system.levels.*.bandwidth_gbps*0.02");
  const SimResult lazy_slow = simulate_what_if(lazy, slow), eager_slow = simulate_what_if(eager, slow);
  EXPECT_LT(eager_slow.step_s, 0.9 * lazy_slow.step_s) << eager_slow.step_s << " vs " << lazy_slow.step_s;
  EXPECT_LT(eager_slow.bubble_s, lazy_slow.bubble_s);
  const SimResult lazy_fast = simulate_step(lazy, 32), eager_fast = simulate_step(eager, 32);
  EXPECT_NEAR(eager_fast.step_s / lazy_fast.step_s, 1.0, 0.01);
  std::string e = error_of([] {
    sim_config("configs/qwen3_debug.yaml", {"parallelism.fsdp_gather_stage_at_start", "true"});
  });
  EXPECT_NE(e.find("parallelism.fsdp_gather_stage_at_start applies only to a pipeline stage that keeps its weights "
                   "gathered through its schedule (pipeline_parallel_degree > 1, it is 1"),
            std::string::npos)
      << e;
  e = error_of([] {
    sim_config("configs/qwen3_debug.yaml", {"parallelism.fsdp_gather_stage_at_start", "true",
                                            "parallelism.pipeline_parallel_degree", "2",
                                            "parallelism.fsdp_reshard_after_forward", "always"});
  });
  EXPECT_NE(e.find("fsdp_reshard_after_forward default or never, it is always"), std::string::npos) << e;
}

namespace {
// Events for the scheduler alone (schedule_events): a group of world ranks, a collective or a send starting,
// the wait for it; and a system of two levels of 2 chips each (a group inside a node and one across nodes
// use different links).
CommGroupRef comm_group(const std::string& name, uint64_t id, std::vector<int> ranks) {
  return CommGroupRef{name, id, std::make_shared<const std::vector<int>>(std::move(ranks))};
}
CostEvent comm_start(const char* op, const CommGroupRef& g, int64_t id, double bytes) {
  CostEvent e;
  e.kind = CostEvent::Kind::CommStart;
  e.op = op;
  e.bytes = bytes;
  e.comm_id = id;
  e.group = g;
  return e;
}
CostEvent comm_wait(int64_t id) {
  CostEvent e;
  e.kind = CostEvent::Kind::CommWait;
  e.comm_id = id;
  return e;
}
SystemSpec two_levels() {
  SystemSpec two = one_level(Topology::Switch, 2, 100, 1, 1.0);
  NetworkLevel outer = two.levels[0];
  outer.name = "outer";
  two.levels.push_back(outer);
  two.chips = 4;
  return two;
}
}  // namespace

// Collectives of different groups in flight at once share the links of the levels they both use: two
// all-gathers over two groups of the same 4 chips take longer together than either alone (and, their
// transfers sharing the one level equally, about twice one's transfer); over groups on different levels
// they do not slow each other.
TEST(Simulation, ConcurrentCollectivesShareTheLinksTheyBothUse) {
  ChipSpec chip = test_chip();
  SystemSpec sys = one_level(Topology::Switch, 4, 100, 1, 1.0);
  auto group = comm_group;
  auto start = [](const CommGroupRef& g, int64_t id, double bytes) { return comm_start("all_gather", g, id, bytes); };
  auto wait = comm_wait;
  const double B = 1e9;
  const CommGroupRef a = group("a", 1, {0, 1, 2, 3}), b = group("b", 2, {0, 1, 2, 3});
  const SimResult one = schedule_events({start(a, 0, B), wait(0)}, chip, sys, 1, sim::ExecMode::Eager);
  const SimResult both = schedule_events({start(a, 0, B), start(b, 1, B), wait(0), wait(1)}, chip, sys, 1, sim::ExecMode::Eager);
  const CollectiveTime alone = collective_time(chip, sys, 1, Collective::AllGather, B, group_span(sys, 1, {0, 1, 2, 3}));
  EXPECT_NEAR(one.step_s, alone.seconds, 1e-9);
  EXPECT_GT(both.step_s, one.step_s * 1.5);
  EXPECT_NEAR(both.step_s, 2 * alone.levels.back().transfer_s + alone.levels.back().latency_s, 1e-6);
  EXPECT_GT(both.link_contention_s, 0.4 * one.step_s);
  // in sequence (the first waited for before the second starts): no sharing
  const SimResult seq = schedule_events({start(a, 0, B), wait(0), start(b, 1, B), wait(1)}, chip, sys, 1, sim::ExecMode::Eager);
  EXPECT_NEAR(seq.step_s, 2 * one.step_s, 1e-9);
  EXPECT_EQ(seq.link_contention_s, 0);
  // two levels: a group inside a node and one across nodes use different links
  const SystemSpec two = two_levels();
  const CommGroupRef in = group("in", 3, {0, 1}), across = group("across", 4, {0, 2});
  const SimResult inner_alone = schedule_events({start(in, 0, B), wait(0)}, chip, two, 1, sim::ExecMode::Eager);
  const SimResult apart = schedule_events({start(in, 0, B), start(across, 1, B), wait(0), wait(1)}, chip, two, 1, sim::ExecMode::Eager);
  EXPECT_NEAR(apart.step_s, inner_alone.step_s, 1e-9);
  EXPECT_EQ(apart.link_contention_s, 0);
}

// A pipeline stage's send and a data-parallel reduction in flight at once on the same level's links share its
// bandwidth (NCCL's channels progress together), not a queue: the send runs beside the reduction at half the
// rate, ending long before it, and the reduction ends later by as much as the send moved; on different
// levels (the stage's neighbour inside the node, the reduction across nodes) neither waits for the other.
TEST(Simulation, APipelineSendSharesALinkWithAReductionInsteadOfQueueingBehindIt) {
  ChipSpec chip = test_chip();
  SystemSpec sys = one_level(Topology::Switch, 4, 100, 1, 1.0);
  auto group = comm_group;
  auto reduce = [](const CommGroupRef& g, int64_t id, double bytes) {
    CostEvent e = comm_start("all_reduce", g, id, bytes);
    e.gradients = true;
    return e;
  };
  auto send = [](const CommGroupRef& g, int64_t id, int peer, double bytes) {
    CostEvent e = comm_start("send", g, id, bytes);
    e.send = true;
    e.peer = peer;
    e.tag = 7;
    return e;
  };
  auto wait = comm_wait;
  auto end_of = [](const SimResult& r, const std::string& op) {
    for (const auto& sp : r.spans)
      if (sp.name == op) return sp.start + sp.dur;
    return -1.0;
  };
  const double big = 4e9, small = 1e7;
  const CommGroupRef dp = group("dp", 1, {0, 1, 2, 3}), pp = group("pp", 2, {0, 1});
  const SimResult reduction = schedule_events({reduce(dp, 0, big), wait(0)}, chip, sys, 1, sim::ExecMode::Eager);
  const SimResult alone = schedule_events({send(pp, 1, 1, small), wait(1)}, chip, sys, 1, sim::ExecMode::Eager);
  const double t_send = end_of(alone, "send"), t_reduce = end_of(reduction, "all_reduce");
  ASSERT_GT(t_send, 0);
  ASSERT_GT(t_reduce, 100 * t_send);
  const SimResult both =
      schedule_events({reduce(dp, 0, big), send(pp, 1, 1, small), wait(1), wait(0)}, chip, sys, 1, sim::ExecMode::Eager);
  const CollectiveTime p2p = p2p_time(chip, sys, small, group_span(sys, 1, {0, 1}));
  const double transfer = p2p.levels.back().transfer_s, latency = p2p.levels.back().latency_s;
  EXPECT_NEAR(end_of(both, "send"), 2 * transfer + latency, 1e-9);  // beside the reduction, at half the rate
  EXPECT_LT(end_of(both, "send"), 0.01 * t_reduce);                 // not behind it
  EXPECT_NEAR(end_of(both, "all_reduce"), t_reduce + transfer, 1e-9);  // the link's bytes are conserved
  EXPECT_NEAR(both.step_s, t_reduce + transfer, 1e-9);
  // the send's neighbour inside the node, the reduction across nodes: different links, no interference
  const SystemSpec two = two_levels();
  const CommGroupRef across = group("dp_across", 3, {0, 2});
  const SimResult apart_alone = schedule_events({reduce(across, 0, big), wait(0)}, chip, two, 1, sim::ExecMode::Eager);
  const SimResult send_alone = schedule_events({send(pp, 1, 1, small), wait(1)}, chip, two, 1, sim::ExecMode::Eager);
  const SimResult apart = schedule_events({reduce(across, 0, big), send(pp, 1, 1, small), wait(1), wait(0)}, chip,
                                          two, 1, sim::ExecMode::Eager);
  EXPECT_NEAR(end_of(apart, "send"), end_of(send_alone, "send"), 1e-12);
  EXPECT_NEAR(end_of(apart, "all_reduce"), end_of(apart_alone, "all_reduce"), 1e-12);
}

// Megatron-LM's sequence-parallel layout (parallelism.sequence_parallel_regather): each attention / MLP
// block keeps its rank's [B, S/tp, H] shard instead of the gathered [B, S, H] input, and gathers it again
// when its backward begins: (tp-1)/tp of those activations saved, one more all-gather per block, nothing
// recomputed. The knob is refused where it would do nothing.
TEST(Simulation, SequenceParallelRegatherKeepsTheShardAndGathersAgainInBackward) {
  const int64_t L = 8;
  auto cfg = [&](bool regather, const std::string& ac = "none") {
    return sim_config("configs/qwen3_32b.yaml", {"model.n_layers", std::to_string(L), "activation_checkpoint.mode", ac,
                                             "parallelism.sequence_parallel_regather", regather ? "true" : "false"});
  };
  const JobConfig base = cfg(false);
  StepPlan off = plan_step(base, 64, true), on = plan_step(cfg(true), 64, true);
  auto act = [](const StepPlan& p) { return p.memory.peak[(int)MemoryCategory::Activations]; };
  const int64_t tp = base.parallelism.tensor_parallel_degree;
  ASSERT_GT(tp, 1);
  // per block and micro-batch: two gathered inputs (attention, MLP) of B x S x H (the meta run is float32;
  // the report scales it to the run's param_dtype), less the shard kept
  const double full = (double)base.training.local_batch_size * base.training.seq_len * base.model.dim * 4;
  const double want = 2.0 * L * full * (tp - 1) / tp;
  EXPECT_NEAR(act(off) - act(on), want, 0.05 * want) << act(off) << " vs " << act(on);
  EXPECT_DOUBLE_EQ(on.flops, off.flops);  // nothing recomputed
  auto gathers = [](const StepPlan& p) {
    int n = 0;
    for (const auto& e : p.events) n += e.kind == CostEvent::Kind::CommStart && std::string(e.op) == "all_gather";
    return n;
  };
  EXPECT_EQ(gathers(on) - gathers(off), 2 * L);
  std::string e = error_of([&] { cfg(true, "full"); });
  EXPECT_NE(e.find("parallelism.sequence_parallel_regather"), std::string::npos) << e;
  EXPECT_NE(e.find("activation_checkpoint.mode full"), std::string::npos) << e;
  e = error_of([&] {
    sim_config("configs/qwen3_32b.yaml", {"parallelism.tensor_parallel_degree", "1", "parallelism.data_parallel_shard_degree",
                                      "64", "parallelism.sequence_parallel_regather", "true"});
  });
  EXPECT_NE(e.find("needs sequence parallel"), std::string::npos) << e;
  e = error_of([&] {
    sim_config("configs/qwen3_32b.yaml", {"parallelism.enable_sequence_parallel", "false",
                                      "parallelism.sequence_parallel_regather", "true"});
  });
  EXPECT_NE(e.find("enable_sequence_parallel: true (it is false)"), std::string::npos) << e;
}

// Async tensor parallel (parallelism.enable_async_tensor_parallel): each block's all-gather and reduce-scatter run as
// rings of neighbour sends over tp_p2p, each step's GEMM on the shard at hand: the plan carries no block collective
// over tp, 4 (tp - 1) sends per block and micro-batch (the forward's gather and reduce-scatter, the backward's
// reduce-scatter and gather), the same FLOPs in more, smaller GEMMs; the simulated step hides the exchanges the
// unfused step waits for. Refused where it cannot apply.
TEST(Simulation, AsyncTensorParallelOverlapsTheRingWithTheGemms) {
  const int64_t L = 4;
  auto cfg = [&](bool async, std::vector<std::string> more = {}) {
    // Llama 3.1 70B's blocks on one 8-GPU H100 node, TP 8 alone (nothing else to wait for), compiled
    std::vector<std::string> o = {"model.n_layers", std::to_string(L), "activation_checkpoint.mode", "none",
                                  "training.local_batch_size", "1", "parallelism.data_parallel_shard_degree", "1",
                                  "simulation.world_size", "8", "simulation.num_systems", "1",
                                  "parallelism.enable_async_tensor_parallel", async ? "true" : "false"};
    o.insert(o.end(), more.begin(), more.end());
    return sim_config("configs/validation/llama31_70b_h100x256.yaml", o);
  };
  const JobConfig base = cfg(false);
  const int64_t tp = base.parallelism.tensor_parallel_degree, mb = base.training.local_batch_size;
  ASSERT_GT(tp, 1);
  ASSERT_EQ(tp, 8);
  StepPlan off = plan_step(base, 8, true), on = plan_step(cfg(true), 8, true);
  auto count = [](const StepPlan& p, const char* op, const std::string& group) {
    int k = 0;
    for (const auto& e : p.events)
      k += e.kind == CostEvent::Kind::CommStart && std::string(e.op) == op && e.group.name == group &&
           (std::string(op) != "send" || e.send);
    return k;
  };
  auto gemms = [](const StepPlan& p) {
    std::pair<int, double> k{0, 0.0};  // GEMM kernels, their FLOPs
    for (const auto& e : p.events)
      if (e.kind == CostEvent::Kind::Compute && e.gemm.m > 0) {
        k.first += 1;
        k.second += e.flops;
      }
    return k;
  };
  // unfused: a gather and a reduce-scatter per block (2 per layer), forward and backward; fused: none left over tp
  // but the embedding's / head's, and the ring's sends instead
  const int blocks = 2 * (int)L;
  EXPECT_EQ(count(off, "all_gather", "tp") - count(on, "all_gather", "tp"), 2 * blocks);
  EXPECT_EQ(count(off, "reduce_scatter", "tp") - count(on, "reduce_scatter", "tp"), 2 * blocks);
  EXPECT_EQ(count(off, "send", "tp_p2p"), 0);
  EXPECT_EQ(count(on, "send", "tp_p2p"), 4 * blocks * (int)(tp - 1)) << "micro-batch " << mb;
  EXPECT_NEAR(gemms(on).second, gemms(off).second, 1e-9 * gemms(off).second);  // the same GEMMs, cut into shards
  EXPECT_GT(gemms(on).first, gemms(off).first + blocks * (int)(tp - 1));
  const SimResult a = simulate_step(base, 8), b = simulate_step(cfg(true), 8);
  auto tp_exposed = [](const SimResult& r) {
    double t = 0;
    for (const char* k : {"all_gather", "reduce_scatter", "send", "recv"})
      if (r.exposed_by_kind.count(k)) t += r.exposed_by_kind.at(k);
    return t;
  };
  EXPECT_LT(tp_exposed(b), 0.3 * tp_exposed(a)) << tp_exposed(a) << " -> " << tp_exposed(b);
  EXPECT_LT(b.step_s, a.step_s);
  // op-level selective checkpointing recomputes the fused column-parallel projections as it does the unfused GEMMs
  // (every second one kept, counted through the fused op); the fused row-parallel GEMM + reduce-scatter is kept as
  // the unfused reduce-scatter is, so the unfused recompute of o_proj (each layer's 4th matmul, not kept), whose
  // output only feeds that kept reduce-scatter, is not repeated (as a compiled graph drops it)
  const std::vector<std::string> sac = {"activation_checkpoint.mode", "selective",
                                        "activation_checkpoint.selective_ac_option", "op"};
  const auto g_off = gemms(plan_step(cfg(false, sac), 8, true)), g_on = gemms(plan_step(cfg(true, sac), 8, true));
  EXPECT_GT(g_off.second, gemms(off).second * 1.05);  // something recomputed
  const auto& m = base.model;
  const double o_proj = 2.0 * base.training.seq_len * (m.n_heads * m.head_dim) * m.dim / tp;  // micro-batch 1
  EXPECT_NEAR(g_off.second - g_on.second, L * o_proj, 1e-9 * g_off.second);
  // FP8 projections (torchao's tensorwise recipe, the head in bf16): the fused per-shard GEMMs are FP8 GEMMs, the
  // same FP8 FLOPs as the unfused ones', and the fused step is still the faster
  const std::vector<std::string> f8 = {"model.converters", "float8", "float8.recipe", "tensorwise",
                                       "float8.filter_fqns", "lm_head"};
  auto fp8_gemm_flops = [](const StepPlan& p) {
    double f = 0;
    for (const auto& ev : p.events)
      if (ev.kind == CostEvent::Kind::Compute && ev.gemm.m > 0 && ev.gemm.precision == GemmPrecision::fp8) f += ev.flops;
    return f;
  };
  const StepPlan f8_off = plan_step(cfg(false, f8), 8, true), f8_on = plan_step(cfg(true, f8), 8, true);
  EXPECT_GT(fp8_gemm_flops(f8_off), 0.5 * gemms(f8_off).second);  // the blocks' projections (4 blocks beside the head)
  EXPECT_NEAR(fp8_gemm_flops(f8_on), fp8_gemm_flops(f8_off), 1e-9 * fp8_gemm_flops(f8_off));
  EXPECT_EQ(count(f8_on, "send", "tp_p2p"), 4 * blocks * (int)(tp - 1));
  EXPECT_LT(simulate_step(cfg(true, f8), 8).step_s, simulate_step(cfg(false, f8), 8).step_s);
  std::string e = error_of([&] {
    cfg(true, {"parallelism.enable_sequence_parallel", "false"});
  });
  EXPECT_NE(e.find("parallelism.enable_async_tensor_parallel"), std::string::npos) << e;
  EXPECT_NE(e.find("enable_sequence_parallel: true (it is false)"), std::string::npos) << e;
  e = error_of([&] { plan_step(sim_config("configs/qwen3_moe_debug.yaml", {"parallelism.tensor_parallel_degree", "2",
                                                                        "parallelism.enable_async_tensor_parallel", "true"}),
                               2); });
  EXPECT_NE(e.find("mixture of experts"), std::string::npos) << e;
  // multi-head latent attention's latent projections read the gathered input too (DeepSeek-V3's debug model:
  // layer 0 is dense, moe_first_dense 1, so its latent attention is what is named)
  e = error_of([&] { plan_step(sim_config("configs/deepseek_v3_debug.yaml", {"parallelism.tensor_parallel_degree", "2",
                                                                           "parallelism.enable_async_tensor_parallel", "true"}),
                               2); });
  EXPECT_NE(e.find("enable_async_tensor_parallel"), std::string::npos) << e;
  EXPECT_NE(e.find("layer 0 has multi-head latent attention"), std::string::npos) << e;
}

// ---- context parallel ----------------------------------------------------------------------------------
namespace {
JobConfig cp_config(int64_t cp, const std::string& method = "allgather", std::vector<std::string> more = {},
                    int64_t layers = 4) {
  std::vector<std::string> o = {"model.n_layers", std::to_string(layers), "training.seq_len", "16384",
                                "training.local_batch_size", "1", "activation_checkpoint.mode", "none",
                                "parallelism.data_parallel_shard_degree", std::to_string(16 / cp),
                                "parallelism.tensor_parallel_degree", "4", "parallelism.context_parallel_degree",
                                std::to_string(cp)};
  if (cp > 1) o.insert(o.end(), {"parallelism.context_parallel_rotate_method", method});
  o.insert(o.end(), more.begin(), more.end());
  return sim_config("configs/qwen3_32b.yaml", o);
}
double activations(const StepPlan& p) { return (double)p.memory.peak[(int)MemoryCategory::Activations]; }
double op_flops(const StepPlan& p, const std::string& name) {
  auto it = p.by_op.find(name);
  return it == p.by_op.end() ? 0.0 : it->second.flops;
}
}  // namespace

// The meta step of a context-parallel job: each rank holds S / cp tokens (each block's activations 1/cp), does 1/cp
// of the causal attention work (the head-tail balance: every rank alike), and the K/V exchange is priced on
// its own stream of the cp group (all-gathers, or the ring's sends and receives), overlapping the attention
// of the block already held.
TEST(Simulation, ContextParallelShardsTheSequenceAndPricesTheExchange) {
  const StepPlan one = plan_step(cp_config(1), 64);
  // what four more blocks add to the peak: the blocks' activations (the rest, e.g. the unsharded embedding
  // and head gradients of the backward, does not depend on the sequence split)
  const double per_block_1 = activations(plan_step(cp_config(1, "allgather", {}, 8), 64)) - activations(one);
  for (int64_t cp : {2, 4}) {
    SCOPED_TRACE("cp " + std::to_string(cp));
    const StepPlan p = plan_step(cp_config(cp), 64);
    EXPECT_EQ(p.tokens_per_rank * cp, one.tokens_per_rank);
    EXPECT_EQ(p.cp_degree, cp);
    const double per_block = activations(plan_step(cp_config(cp, "allgather", {}, 8), 64)) - activations(p);
    EXPECT_NEAR(per_block * (double)cp, per_block_1, 0.02 * per_block_1) << per_block << " vs " << per_block_1;
    EXPECT_LT(activations(p), activations(one));
    // causal attention: this rank's share of the visible tiles (diagonal tiles count whole: within 1%)
    const double a1 = op_flops(one, "flex_attention") + op_flops(one, "flex_attention_backward");
    const double ap = op_flops(p, "flex_attention") + op_flops(p, "flex_attention_backward");
    EXPECT_NEAR(ap * (double)cp, a1, 0.01 * a1);
    // the GEMMs split with the tokens
    EXPECT_NEAR(op_flops(p, "linear") * (double)cp, op_flops(one, "linear"), 1e-6 * op_flops(one, "linear"));
  }
  // the whole step on the system: the exchange on the cp group's stream, in the trace as its own row
  const fs::path dir = fs::temp_directory_path() / "titan_cp_sim";
  fs::create_directories(dir);
  for (const std::string method : {"allgather", "alltoall"}) {
    SCOPED_TRACE(method);
    JobConfig c = cp_config(4, method, {"simulation.enabled", "true", "simulation.system", "trn2-ultraserver",
                                        "simulation.world_size", "64"});
    const SimResult r = simulate_step(c, 64);
    const std::string group = method == "allgather" ? "cp" : "cp_p2p";
    ASSERT_TRUE(r.comm_busy_by_group.count(group)) << r.algorithms;
    EXPECT_GT(r.comm_busy_by_group.at(group), 0.0);
    const std::string trace = (dir / ("trace_" + method + ".json")).string();
    write_chrome_trace(r, trace);
    std::ifstream f(trace);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find(method == "allgather" ? "comm:cp" : "p2p:cp_p2p"), std::string::npos);
    EXPECT_LT(r.memory.activations, simulate_step(cp_config(1, "allgather", {"simulation.enabled", "true",
                                                                            "simulation.system", "trn2-ultraserver",
                                                                            "simulation.world_size", "64"}),
                                                  64)
                                        .memory.activations);
  }
  fs::remove_all(dir);
}

// Llama 3's long-context stage as a plan: Llama 3.1 405B (126 blocks over 16 stages as TorchTitan splits them:
// 7 + 8 x 14 + 7, the embedding and head counted as a block each) at 131,072 tokens, TP 8 x CP 16 x PP 16 x
// FSDP 8 on 16,384 H100 (Meta's hosts), one micro-batch per schedule: planned in under a second, the ranks of
// a cp group priced once (their ring / gather peers alike).
TEST(Simulation, LongContextPlanOn16kChipsIsQuick) {
  JobConfig c = sim_config("configs/validation/llama31_405b_h100x128.yaml",
                       {"training.seq_len", "131072", "training.local_batch_size", "1",
                        "parallelism.data_parallel_shard_degree", "8", "parallelism.context_parallel_degree", "16",
                        "parallelism.pipeline_parallel_degree", "16", "parallelism.pipeline_parallel_first_stage_less_layers",
                        "1", "parallelism.pipeline_parallel_last_stage_less_layers", "1", "simulation.num_systems",
                        "2048", "simulation.world_size", "16384"});
  const double t0 = process_seconds();
  const SimResult r = simulate_step(c, 16384);
  const double secs = process_seconds() - t0;
  std::printf("405B, 131072 tokens, TP 8 x CP 16 x PP 16 x FSDP 8 on 16384 H100: planned in %.2f s, step %.2f s, "
              "%.1f GiB per chip\n", secs, r.step_s, r.memory.total() / (1 << 30));
  EXPECT_LT(secs, 1.0);
  EXPECT_GT(r.step_s, 0);
  EXPECT_FALSE(r.oom);
  EXPECT_GT(r.comm_busy_by_group.count("cp"), 0u);
}

namespace {
struct PlanTimer {  // min(wall, this process's CPU time) since construction
  static double cpu() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
  }
  double wall0 = process_seconds(), cpu0 = cpu();
  double seconds() const { return std::min(process_seconds() - wall0, cpu() - cpu0); }
};
}  // namespace

// The 405B layout Meta trained on 16,384 H100 (TP 8 x PP 16 interleaved, 8 virtual stages of one block each,
// the embedding and the head alone on the edge stages, x FSDP 128, seq 8192, 16 micro-batches): planned in
// under 2 s (one rank per stage is played; FSDP's per-rank gradient copies are skipped on meta tensors, their
// cost recorded once per bucket as on real ones), and its pipeline sends no longer wait behind the reductions
// (the bubble stays below half the step).
TEST(Simulation, PipelinedPlanOn16kChipsIsQuick) {
  JobConfig c = sim_config("configs/validation/llama31_405b_h100x128.yaml",
                           {"training.local_batch_size", "16", "activation_checkpoint.mode", "none",
                            "parallelism.data_parallel_shard_degree", "128", "parallelism.pipeline_parallel_degree", "16",
                            "parallelism.pipeline_parallel_schedule", "Interleaved1F1B",
                            "parallelism.pipeline_parallel_layers_per_stage", "1",
                            "parallelism.pipeline_parallel_first_stage_less_layers", "1",
                            "parallelism.pipeline_parallel_last_stage_less_layers", "1", "simulation.system",
                            "meta-h100-roce", "simulation.num_systems", "2048", "simulation.world_size", "16384"});
  // the planner's own time: the CPU time this process ran, or the wall when shorter (a parallel test or another
  // job on the machine slows the wall clock of a run, not the work it does)
  PlanTimer t0;
  const SimResult r = simulate_step(c, 16384);
  const double secs = t0.seconds();
  std::printf("405B, TP 8 x PP 16 (x8 virtual) x FSDP 128 on 16384 H100: planned in %.2f s, step %.2f s, bubble "
              "%.1f%%, MFU %.1f%%\n", secs, r.step_s, 100 * r.bubble_fraction, 100 * r.mfu);
  EXPECT_LT(secs, 2.0);
  EXPECT_GT(r.step_s, 0);
  EXPECT_EQ(r.stages.size(), 16u);
  EXPECT_LT(r.bubble_fraction, 0.5);
  // the issue's largest pipeline: PP 64 interleaved (2 virtual stages each, the embedding and the head counted
  // as blocks) x TP 4 x FSDP 64 on 16384 H100, 64 micro-batches, full AC
  JobConfig d = sim_config("configs/validation/llama31_405b_h100x128.yaml",
                           {"training.local_batch_size", "64", "activation_checkpoint.mode", "full",
                            "parallelism.tensor_parallel_degree", "4", "parallelism.data_parallel_shard_degree", "64",
                            "parallelism.pipeline_parallel_degree", "64",
                            "parallelism.pipeline_parallel_schedule", "Interleaved1F1B",
                            "parallelism.pipeline_parallel_first_stage_less_layers", "1",
                            "parallelism.pipeline_parallel_last_stage_less_layers", "1", "simulation.system",
                            "meta-h100-roce", "simulation.num_systems", "2048", "simulation.world_size", "16384",
                            "simulation.allow_oom", "true"});
  PlanTimer t1;
  const SimResult r64 = simulate_step(d, 16384);
  const double secs64 = t1.seconds();
  std::printf("405B, TP 4 x PP 64 (x2 virtual) x FSDP 64 on 16384 H100: planned in %.2f s, step %.2f s, bubble "
              "%.1f%%\n", secs64, r64.step_s, 100 * r64.bubble_fraction);
  // the issue's target is 2 s; measured 1.64-1.75 s on one CI machine, 1.8-2.2 s on another (alone), 3.8-5.5 s
  // on a third (2 cores of an AMD EPYC without AMX, 2026-12-04), and there 1.39-1.68 s after the work described in
  // docs/simulator.md's planner notes (slices, huge pages, groups worked out once), 0.9 s since repeated passes
  // are read by reference, 0.69-0.74 s since they are placed whole (2026-12-06); 1.23-1.31 s alone on 2 cores of
  // an AMD EPYC with AVX2 only, 2.04 s there beside another test under ctest -j 2 (2026-12-07). Held to the target
  // where ctest runs it alone (the test planner_16k_alone, RUN_SERIAL, sets TITAN_PLANNER_ALONE); beside other
  // tests the time is printed, the plan still checked
  if (std::getenv("TITAN_PLANNER_ALONE")) EXPECT_LT(secs64, 2.0);
  EXPECT_EQ(r64.stages.size(), 64u);
}

// Layouts context parallel cannot run are refused before anything is built, naming the key and what it expects.
TEST(Simulation, ContextParallelRefusals) {
  std::string e = error_of([] { plan_step(cp_config(4, "allgather", {"training.seq_len", "16380"}), 64); });
  EXPECT_NE(e.find("training.seq_len (16380) must be divisible by 2 x context_parallel_degree = 8"), std::string::npos) << e;
  e = error_of([] { plan_step(cp_config(4, "allgather", {"training.seq_len", "16392"}), 64); });  // 4098 / tp 4
  EXPECT_NE(e.find("/ context_parallel_degree (4) = 4098 must be divisible by tensor_parallel_degree (4)"),
            std::string::npos) << e;
  e = error_of([] { plan_step(cp_config(4), 48); });  // 48 / (4 x 4) = 3 = dp_shard, given as 4
  EXPECT_NE(e.find("context_parallel_degree 4"), std::string::npos) << e;
  EXPECT_NE(e.find("does not equal the world size"), std::string::npos) << e;
  e = error_of([] { cp_config(1, "allgather", {"parallelism.context_parallel_rotate_method", "alltoall"}); });
  EXPECT_NE(e.find("context_parallel_rotate_method (alltoall) applies only with parallelism.context_parallel_degree > 1"),
            std::string::npos) << e;
  e = error_of([] { cp_config(2, "ring"); });
  EXPECT_NE(e.find("context_parallel_rotate_method"), std::string::npos) << e;
  EXPECT_NE(e.find("alltoall"), std::string::npos) << e;
  e = error_of([] { sim_config("configs/qwen3_32b.yaml", {"parallelism.context_parallel_degree", "0"}); });
  EXPECT_NE(e.find("context_parallel_degree must be >= 1"), std::string::npos) << e;
}

// Uneven stages, simulated: each stage's compute follows the blocks it holds (the edge stages' embedding and
// head priced where they are).
TEST(Simulation, UnevenPipelineStagesTimesFollowTheirBlocks) {
  auto run = [](int64_t last_less) {
    JobConfig c = sim_config("configs/qwen3_32b.yaml",
                         {"model.n_layers", "8", "parallelism.pipeline_parallel_degree", "2",
                          "parallelism.pipeline_parallel_last_stage_less_layers", std::to_string(last_less),
                          "training.local_batch_size", "4", "parallelism.data_parallel_shard_degree", "8",
                          "simulation.world_size", "64"});
    return simulate_step(c, 64);
  };
  const SimResult even = run(0), uneven = run(4);  // 4 + 4 blocks, then 6 + 2 (the head counted as 4 blocks)
  ASSERT_EQ(even.stages.size(), 2u);
  ASSERT_EQ(uneven.stages.size(), 2u);
  // stage 0 holds the embedding (a lookup) and its blocks: its compute scales with them
  EXPECT_NEAR(uneven.stages[0].compute_s / even.stages[0].compute_s, 6.0 / 4.0, 0.05);
  EXPECT_LT(uneven.stages[1].compute_s, even.stages[1].compute_s);
  // the step's split and bubble are the busiest stage's (the 6 blocks'), whose compute, exposed communication
  // and bubble fill the schedules' windows; the lighter stage idles longer (its imbalance), reported beside it
  const SimStage& heavy = uneven.stages[0];
  EXPECT_EQ(uneven.busiest_stage, 0);
  EXPECT_EQ(uneven.compute_s, heavy.compute_s);
  EXPECT_EQ(uneven.exposed_comm_s, heavy.exposed_comm_s);
  EXPECT_EQ(uneven.bubble_s, heavy.bubble_s);
  EXPECT_LT(uneven.bubble_s, uneven.stages[1].bubble_s);
  EXPECT_EQ(uneven.most_idle_stage, 1);
  EXPECT_EQ(uneven.most_idle_s, uneven.stages[1].bubble_s);
  EXPECT_NEAR(heavy.compute_s + heavy.exposed_comm_s + heavy.host_wait_s + heavy.bubble_s, uneven.pipeline_s,
              0.01 * uneven.pipeline_s);
}

// Every shipped chip and system spec loads (its figures checked by the loader), and the systems published runs
// use carry their datasheet figures: H200 (141 GB HBM3e at 4.8 TB/s), GB200 NVL72 (72 GPUs in one NVLink
// domain), and Meta's 700 W HBM3 H100 hosts.
TEST(Specs, EveryShippedSpecLoadsAndTheNewSystemsCarryTheirDatasheets) {
  for (const auto& c : known_chips()) EXPECT_NO_THROW(load_chip(c)) << c;
  for (const auto& s : known_systems()) EXPECT_NO_THROW(load_system(s)) << s;
  const ChipSpec h200 = load_chip("h200"), h100 = load_chip("h100-sxm");
  EXPECT_NEAR(h200.hbm_gib * (1 << 30) / 1e9, 141.0, 0.1);
  EXPECT_EQ(h200.hbm_tbps, 4.8);
  EXPECT_EQ(h200.peak_tflops, h100.peak_tflops);  // the same die
  const SystemSpec nvl72 = load_system("gb200-nvl72");
  EXPECT_EQ(nvl72.chips, 72);
  ASSERT_EQ(nvl72.levels.size(), 1u);  // one NVLink domain, no second tier inside the rack
  EXPECT_EQ(nvl72.levels[0].units, 72);
  EXPECT_EQ(load_chip(nvl72.chip_name).peak_tflops, 2500);
  EXPECT_EQ(load_system("meta-h100-roce").chip_name, "h100-sxm");  // 700 W, 80 GB HBM3 (not grand-teton's 500 W)
}

// ---- fixed costs: the collective library's choice, the host's issue time ---------------------------------
// NCCL picks, per collective, the (algorithm, protocol) its tuning model predicts fastest: a tiny all-gather
// runs the ring (its only algorithm) with LL, whose latency is (N - nodes) NVLink steps and (nodes - 1)
// network steps, so it grows linearly with the ranks; a tiny all-reduce takes the tree, whose latency grows
// with log2(nodes); a large all-reduce the ring with Simple, at the links' full rate.
TEST(CostModel, NcclLatencyGrowsWithTheRanksAsTheChosenAlgorithmSays) {
  const ChipSpec c = load_chip("h100-sxm");
  const SystemSpec s = load_system("h100-hgx");
  ASSERT_EQ(s.library, CollectiveLibrary::nccl);
  auto t = [&](Collective k, double bytes, int nodes) {
    return collective_time(c, s, 1, k, bytes, group_span(s, 1, iota(8 * nodes)));
  };
  for (int nodes : {2, 16, 128}) {
    const CollectiveTime ag = t(Collective::AllGather, 64.0 * 8 * nodes, nodes);
    EXPECT_NE(ag.algorithm.find("nccl ring/LL over"), std::string::npos) << ag.algorithm;
    const int N = 8 * nodes;
    EXPECT_NEAR(ag.levels.front().latency_s, (3.6 + (N - nodes) * 0.47 * 1.8 + (nodes - 1) * 2.7) * 1e-6, 1e-12);
  }
  const double ag16 = t(Collective::AllGather, 64.0 * 128, 16).seconds;
  const double ag128 = t(Collective::AllGather, 64.0 * 1024, 128).seconds;
  EXPECT_GT(ag128 / ag16, 6.0);  // 8x the ranks: ~8x the ring's steps
  const CollectiveTime ar16 = t(Collective::AllReduce, 1024, 16), ar128 = t(Collective::AllReduce, 1024, 128);
  EXPECT_NE(ar128.algorithm.find("nccl tree/LL over"), std::string::npos) << ar128.algorithm;
  // the tree: 2 ((8 - 1) NVLink + log2(nodes) network steps): 16 -> 128 nodes adds 2 x 3 network steps of 5 us
  EXPECT_NEAR(ar128.levels.front().latency_s - ar16.levels.front().latency_s, 2 * 3 * 5.0e-6, 1e-12);
  EXPECT_LT(ar128.seconds / ar16.seconds, 2.0);
  // large: the ring with Simple, the transfer as the hierarchy prices it (the generic model's) plus NCCL's latency
  SystemSpec generic = s;
  generic.library = CollectiveLibrary::generic;
  const auto g16 = group_span(s, 1, iota(128));
  const CollectiveTime big = collective_time(c, s, 1, Collective::AllReduce, 4e9, g16);
  const CollectiveTime plain = collective_time(c, generic, 1, Collective::AllReduce, 4e9, g16);
  EXPECT_NE(big.algorithm.find("ring/Simple"), std::string::npos) << big.algorithm;
  double transfer = 0, plain_transfer = 0;
  for (const auto& l : big.levels) transfer += l.transfer_s;
  for (const auto& l : plain.levels) plain_transfer += l.transfer_s;
  EXPECT_NEAR(transfer, plain_transfer, 1e-12);
  EXPECT_NEAR(big.seconds, transfer + (8.4 + (254 - 30) * 3.4 + 30 * 9.6) * 1e-6, 1e-9);
  // a system without a library model keeps its levels' own steps
  EXPECT_EQ(load_system("trn2-instance").library, CollectiveLibrary::generic);
}

// NVLS: on an NVSwitch that reduces (NVLink SHARP), a large all-reduce inside the node moves (1 + 1/n) x its bytes
// each way per GPU at the level's nvls_efficiency of the line rate, where the ring moves 2 (n - 1) / n x them: on
// 8 H100 1.31x the ring's speed (nccl-tests: ~480 GB/s of bus bandwidth against ~370). A small one stays on the
// ring or tree with LL (NVLS's 25 us is more than their latency), a group across nodes is not NVLS (NVLSTree is not
// modelled), and a switch without in-network reduction (A100's) never is.
TEST(CostModel, NvlsAllReduceInsideANodeMovesEachByteOnceEachWay) {
  const ChipSpec c = load_chip("h100-sxm");
  const SystemSpec s = load_system("h100-hgx");
  ASSERT_NEAR(s.levels[0].nvls_efficiency, 0.69, 1e-12);
  const CollectiveTime big = collective_time(c, s, 1, Collective::AllReduce, 1e9, group_span(s, 1, iota(8)));
  EXPECT_NE(big.algorithm.find("nccl nvls/Simple over nvlink"), std::string::npos) << big.algorithm;
  EXPECT_NEAR(big.seconds, 25e-6 + 1e9 * (1 + 1.0 / 8) / (450e9 * 0.69), 1e-9);
  SystemSpec ring_only = s;
  ring_only.levels[0].nvls_efficiency = 0;
  const CollectiveTime ring = collective_time(c, ring_only, 1, Collective::AllReduce, 1e9, group_span(s, 1, iota(8)));
  EXPECT_NE(ring.algorithm.find("nccl ring/Simple"), std::string::npos) << ring.algorithm;
  EXPECT_NEAR(ring.seconds / big.seconds, (2.0 * 7 / 8 / 0.82) / (9.0 / 8 / 0.69), 0.01);
  const CollectiveTime small = collective_time(c, s, 1, Collective::AllReduce, 8, group_span(s, 1, iota(8)));
  EXPECT_EQ(small.algorithm.find("nvls"), std::string::npos) << small.algorithm;
  EXPECT_LT(small.seconds, 25e-6);
  // all-gather and reduce-scatter keep the ring (NCCL's model prices NVLS below it for them)
  const CollectiveTime ag = collective_time(c, s, 1, Collective::AllGather, 1e9, group_span(s, 1, iota(8)));
  EXPECT_NE(ag.algorithm.find("ring/Simple"), std::string::npos) << ag.algorithm;
  const CollectiveTime two_nodes = collective_time(c, s, 1, Collective::AllReduce, 1e9, group_span(s, 1, iota(16)));
  EXPECT_EQ(two_nodes.algorithm.find("nvls"), std::string::npos) << two_nodes.algorithm;
  const SystemSpec a100 = load_system("a100-hgx");
  const CollectiveTime amp =
      collective_time(load_chip("a100-sxm"), a100, 1, Collective::AllReduce, 1e9, group_span(a100, 1, iota(8)));
  EXPECT_NE(amp.algorithm.find("ring/Simple"), std::string::npos) << amp.algorithm;
}

// PAT: an all-gather or reduce-scatter over ranks one per node (an FSDP group beside TP 8) pays 8 us + 4 us per
// log2(nodes) + 2.8 us per rank at 0.75 of the ring's rate: it takes the mid-sized messages the ring's network
// steps (9.6 us each with Simple, 1/4 of the rate with LL) would slow, and the ring keeps the large ones.
TEST(CostModel, PatTakesMidSizedGathersOverOneRankPerNode) {
  const ChipSpec c = load_chip("h100-sxm");
  const SystemSpec s = load_system("h100-hgx");
  std::vector<int> one_per_node;
  for (int n = 0; n < 64; ++n) one_per_node.push_back(8 * n);
  const GroupSpan g = group_span(s, 1, one_per_node);
  ASSERT_EQ(g.systems, 64);
  const CollectiveTime mid = collective_time(c, s, 1, Collective::AllGather, 4e6, g);
  EXPECT_NE(mid.algorithm.find("nccl pat/Simple"), std::string::npos) << mid.algorithm;
  EXPECT_NEAR(mid.levels.front().latency_s, (8 + 6 * 4.0 + 64 * 2.8) * 1e-6, 1e-12);
  // its rate: 0.75 (n - 1) / n of the ring's transfer at the links' speed (the generic model's)
  SystemSpec plain = s;
  plain.library = CollectiveLibrary::generic;
  double ring = 0;
  for (const auto& l : collective_time(c, plain, 1, Collective::AllGather, 4e6, g).levels) ring += l.transfer_s;
  EXPECT_NEAR(mid.seconds, (8 + 6 * 4.0 + 64 * 2.8) * 1e-6 + ring / (0.75 * 63 / 64), 1e-10);
  const CollectiveTime big = collective_time(c, s, 1, Collective::ReduceScatter, 4e9, g);
  EXPECT_NE(big.algorithm.find("nccl ring/Simple"), std::string::npos) << big.algorithm;
  // the same size over 8 ranks a node (64 ranks on 8 nodes) has no PAT
  const CollectiveTime packed = collective_time(c, s, 1, Collective::AllGather, 4e6, group_span(s, 1, iota(64)));
  EXPECT_EQ(packed.algorithm.find("pat"), std::string::npos) << packed.algorithm;
}

// NCCL 2.7.5's conversion of bus rates to algorithm rates (tuning.cc, `ratio`): the ring's n / (2 (n - 1)) for an
// all-reduce, every other algorithm's 1/2 — so the tree moves an all-reduce at (n - 1) / n of the ring's rate
// besides its 0.9 and its protocol's share — and the ring's LL128 at 0.7 where a node holds fewer than 2 ranks.
TEST(CostModel, NcclConvertsTheTreesRateAndTheOneRankPerNodeRingsAs275Does) {
  bool tree_seen = false, ll128_seen = false;
  for (auto [ranks, nodes] : {std::pair{2, 1}, {8, 1}, {16, 2}, {256, 32}, {64, 64}})
    for (double t = 1e-7; t < 1e-2; t *= 1.3) {
      const LibraryChoice c = nccl_choice(Collective::AllReduce, ranks, nodes, t);
      const double n = ranks;
      if (c.algorithm.rfind("tree/", 0) == 0) {
        tree_seen = true;
        const double share = c.algorithm == "tree/LL" ? 1 / 3.8 : c.algorithm == "tree/LL128" ? (nodes == 1 ? 7.0 / 9 : 0.915) : 1.0;
        EXPECT_NEAR(c.bandwidth, 0.9 * share * (n - 1) / n, 1e-12) << ranks << " ranks, " << c.algorithm;
      }
      if (c.algorithm == "ring/LL128") {
        ll128_seen = true;
        EXPECT_DOUBLE_EQ(c.bandwidth, ranks < 2 * nodes ? 0.7 : 0.92) << ranks << " ranks on " << nodes << " nodes";
      }
    }
  EXPECT_TRUE(tree_seen && ll128_seen);
  // two A100 of one node, a 1 MB all-reduce: the tree at 0.45 of the ring's rate no longer beats the ring
  const SystemSpec a100 = load_system("a100-hgx");
  const CollectiveTime two =
      collective_time(load_chip("a100-sxm"), a100, 1, Collective::AllReduce, 1e6, group_span(a100, 1, iota(2)));
  EXPECT_NE(two.algorithm.find("nccl ring/"), std::string::npos) << two.algorithm;
}

// 128 GPUs on NVL72 racks fill one rack and 56 of the next: a group is counted by its members (the ranks NCCL
// sees), not by the product of the positions it spans (72 x 2), and between the racks each of the 56 takes in
// what the other 72 hold (72 / 128 of the data over 56 links, not 1/2 of it over 72).
TEST(CostModel, AGroupNotFillingItsLastSystemCountsItsMembers) {
  const ChipSpec c = load_chip("gb200");
  SystemSpec s = load_system("gb200-nvl72");
  const GroupSpan all = group_span(s, 1, iota(128));
  EXPECT_EQ(all.size(), 128);
  EXPECT_EQ(all.product(), 144);
  EXPECT_EQ(all.fewest_in_a_system, 56);
  std::vector<int> dp;  // the data-parallel group beside TP 8: 9 members in the first rack, 7 in the second
  for (int r = 0; r < 128; r += 8) dp.push_back(r);
  EXPECT_EQ(group_span(s, 1, dp).size(), 16);
  s.library = CollectiveLibrary::generic;  // the links' transfer alone
  const double bytes = 256.0 * (1 << 20);
  const double uneven = collective_time(c, s, 1, Collective::AllGather, bytes, all).levels.back().transfer_s;
  const double even = collective_time(c, s, 1, Collective::AllGather, bytes, group_span(s, 1, iota(144))).levels.back().transfer_s;
  EXPECT_NEAR(uneven / even, (72.0 / (128 * 56)) / (1.0 / 144), 1e-9);
}

// A small model's step on GPUs is bound by the host that issues its kernels (PyTorch eager: ~8 us per kernel,
// more than most of this step's kernels take): making every kernel twice as fast leaves the eager step where it
// was; compiled (fused kernels, 4 us each to issue) it is not host-bound and follows its kernels; captured as
// CUDA graphs (the host issues the step once) it follows them all the way.
TEST(Simulation, ASmallModelIsHostBoundInEagerAndNotCompiled) {
  const JobConfig cfg = sim_config("configs/qwen3_debug.yaml", {"simulation.system", "h100-hgx"});
  const StepPlan plan = plan_step(cfg, 8, /*with_events=*/true);
  const SystemSpec sys = load_system("h100-hgx");
  const ChipSpec chip = load_chip("h100-sxm");
  ChipSpec fast = chip;  // every kernel twice as fast: arithmetic, memory, the device's per-kernel gap
  fast.peak_tflops *= 2;
  fast.vector_tflops *= 2;
  fast.hbm_tbps *= 2;
  fast.eager_launch_us /= 2;
  fast.compiled_launch_us /= 2;
  auto step = [&](const ChipSpec& c, ExecMode m) { return schedule_events(plan.events, c, sys, 1, m); };
  const SimResult eager = step(chip, ExecMode::Eager), eager_fast = step(fast, ExecMode::Eager);
  EXPECT_GT(eager.host_wait_s, 0.1 * eager.step_s);
  EXPECT_NEAR(eager_fast.step_s / eager.step_s, 1.0, 0.03);  // host-bound: the kernels' speed does not show
  EXPECT_GE(eager.step_s, eager.kernels * chip.eager_host_us * 1e-6);  // the host issues every kernel
  const SimResult compiled = step(chip, ExecMode::Compiled), compiled_fast = step(fast, ExecMode::Compiled);
  std::printf("debug Qwen3 on 8 H100: eager %.3f ms (host-bound %.3f), 2x kernels %.3f ms; compiled %.3f ms (host-bound "
              "%.3f), 2x kernels %.3f ms\n", 1e3 * eager.step_s, 1e3 * eager.host_wait_s, 1e3 * eager_fast.step_s,
              1e3 * compiled.step_s, 1e3 * compiled.host_wait_s, 1e3 * compiled_fast.step_s);
  EXPECT_LT(compiled.host_wait_s, 0.05 * compiled.step_s);  // compiled: fewer, fused kernels outrun their issue
  EXPECT_LT(compiled_fast.step_s / compiled.step_s, 0.9);      // ... so the kernels' speed shows
  const SimResult graphs = step(chip, ExecMode::Graphs), graphs_fast = step(fast, ExecMode::Graphs);
  EXPECT_EQ(graphs.host_wait_s, 0);
  EXPECT_LT(graphs_fast.step_s / graphs.step_s, 0.65);  // the kernels' speed is the step's
  EXPECT_LT(graphs.step_s, 0.5 * eager.step_s);
  // a big step's kernels hide the host: Llama 3.1 8B on 8 H100 (the validation row) is not host-bound
  const JobConfig big = sim_config("configs/validation/llama31_8b_h100x8.yaml");
  const SimResult r = simulate_step(big, (int)big.simulation.world_size);
  EXPECT_LT(r.host_wait_s, 0.01 * r.step_s);
}

// A host sync (the MoE dispatch's counts, which the host needs to size its buffers): the host waits for the
// device to get there, so the next kernel waits for its issue; without it the host ran ahead and issued it
// during the long kernel. The plan of an expert-parallel step holds the count exchange and the sync (a real
// exchange records the same two, comms/process_group.cpp's all_to_all_v).
TEST(Simulation, AHostSyncMakesTheNextKernelWaitForItsIssue) {
  ChipSpec chip = test_chip();
  chip.eager_host_us = 10;
  const SystemSpec sys = one_level(Topology::Switch, 1, 100, 1, 1.0);
  auto kernel = [](double flops) {
    CostEvent e;
    e.op = "k";
    e.flops = flops;
    return e;
  };
  CostEvent sync;
  sync.op = "all_to_all_counts";
  sync.cls = KernelClass::HostSync;
  const double long_flops = 10e12 * 1e-3;  // 1 ms at the test chip's 10 TFLOP/s vector rate
  const SimResult free_run = schedule_events({kernel(long_flops), kernel(1e3)}, chip, sys, 1, ExecMode::Eager);
  const SimResult synced = schedule_events({kernel(long_flops), sync, kernel(1e3)}, chip, sys, 1, ExecMode::Eager);
  EXPECT_NEAR(free_run.host_wait_s, 10e-6, 1e-12);  // only the first kernel waits for its issue
  EXPECT_NEAR(synced.host_wait_s - free_run.host_wait_s, 10e-6, 1e-9);
  EXPECT_NEAR(synced.step_s - free_run.step_s, 10e-6, 1e-9);
  // the plan of an expert-parallel step holds the count exchange and the sync before each dispatch
  const JobConfig cfg = sim_config("configs/qwen3_moe_debug.yaml", {"parallelism.expert_parallel_degree", "2"});
  const StepPlan plan = plan_step(cfg, 2, /*with_events=*/true);
  int syncs = 0, small_all_to_alls = 0;
  for (const CostEvent& e : plan.events) {
    syncs += e.cls == KernelClass::HostSync && e.kind == CostEvent::Kind::Compute;
    small_all_to_alls += e.kind == CostEvent::Kind::CommStart && std::string(e.op) == "all_to_all" && e.bytes == 16;
  }
  EXPECT_GT(syncs, 0);
  EXPECT_EQ(syncs, small_all_to_alls);
}

// The per-stage memory of a pipeline counts the micro-batches its schedule holds in flight, not a fixed rule:
// 1F1B's rank r holds p - r micro-batches' activations; interleaved (v virtual stages of 1/v of a rank's blocks
// each) warms up with (v - 1) p + 2 (p - 1 - r) chunks (PyTorch's Interleaved1F1B, TorchTitan's), i.e. at
// p = 4, v = 2: rank 0 10 chunks = 5 micro-batches' worth, rank 3 4 chunks = 2; GPipe holds all m = 8.
TEST(Simulation, PipelineStageMemoryCountsTheMicroBatchesInFlight) {
  const SimResult one = simulate_step(uniform_pipeline(4, 8, "1F1B"), 4);
  const SimResult inter = simulate_step(uniform_pipeline(4, 8, "Interleaved1F1B"), 4);
  const SimResult gpipe = simulate_step(uniform_pipeline(4, 8, "GPipe"), 4);
  auto act = [](const SimResult& r, int s) { return r.stages[s].memory.activations; };
  const double unit = act(one, 3);  // 1F1B's last rank: one micro-batch in flight
  std::printf("activations per stage in micro-batches: 1F1B");
  for (int s = 0; s < 4; ++s) std::printf(" %.2f", act(one, s) / unit);
  std::printf("; interleaved");
  for (int s = 0; s < 4; ++s) std::printf(" %.2f", act(inter, s) / unit);
  std::printf("; GPipe %.2f\n", act(gpipe, 0) / unit);
  for (int s = 0; s < 4; ++s) EXPECT_NEAR(act(one, s) / unit, 4 - s, 0.15 * (4 - s)) << "1F1B rank " << s;
  // interleaved: 5, 4, 3, 2 micro-batches' worth (measured 5.27 / 4.32 / 3.38 / 2.43: each rank also holds part of
  // the chunk whose backward runs), one micro-batch (two chunks) less per rank
  for (int s = 0; s < 4; ++s) EXPECT_NEAR(act(inter, s) / unit, 5.0 - s, 0.5) << "interleaved rank " << s;
  for (int s = 0; s + 1 < 4; ++s) EXPECT_NEAR((act(inter, s) - act(inter, s + 1)) / unit, 1.0, 0.1);
  EXPECT_NEAR(act(gpipe, 0) / unit, 8.0, 1.2);
}

// An EventStream gives a repeated pass's events as their copies would be: the record's memory moved by the run's
// shifts (a kernel's and the others' apart), its collectives renumbered from the run's first id in the order the
// record first used them; by index, through a cursor read forwards and backwards, and copied out alike; and
// subtract_memory moves owned and repeated events alike.
TEST(EventStream, RepeatedPassesReadAsTheirCopies) {
  auto kernel = [](const char* op, int64_t held) {
    CostEvent e;
    e.op = op;
    e.flops = 1;
    e.memory[(int)MemoryCategory::Activations] = held;
    return e;
  };
  auto comm = [](CostEvent::Kind k, int64_t id) {
    CostEvent e;
    e.kind = k;
    e.op = "all_reduce";
    e.comm_id = id;
    return e;
  };
  auto seg = std::make_shared<CostSegment>();
  seg->events = {kernel("a", 10), comm(CostEvent::Kind::CommStart, 42), comm(CostEvent::Kind::CommStart, 7),
                 kernel("b", 30), comm(CostEvent::Kind::CommWait, 7), comm(CostEvent::Kind::CommWait, 42)};
  seg->id_ordinal = {-1, 0, 1, -1, 1, 0};
  seg->distinct_ids = 2;
  const std::vector<CostEvent> owned = {kernel("x", 1), kernel("y", 2), kernel("z", 3)};
  std::array<int64_t, kNumMemoryCategories> shift{}, other{};
  shift[(int)MemoryCategory::Activations] = 1000;
  other[(int)MemoryCategory::Activations] = -5;
  // x, run(100), run(200), y, z, run(300): two runs back to back, one at the end
  EventStream s(owned, {{1, seg, shift, other, 100}, {1, seg, shift, other, 200}, {3, seg, shift, other, 300}});
  ASSERT_EQ(s.size(), 3u + 3 * 6);
  // what the copies hold, written out by hand
  std::vector<CostEvent> want = {owned[0]};
  for (int64_t first : {100, 200, 300}) {
    if (first == 300) want.insert(want.end(), {owned[1], owned[2]});
    for (size_t k = 0; k < seg->events.size(); ++k) {
      CostEvent e = seg->events[k];
      const auto& by = e.kind == CostEvent::Kind::Compute ? shift : other;
      for (int c = 0; c < kNumMemoryCategories; ++c) e.memory[c] += by[c];
      if (e.kind != CostEvent::Kind::Compute) e.comm_id = first + seg->id_ordinal[k];
      want.push_back(e);
    }
  }
  ASSERT_EQ(want.size(), s.size());
  auto same = [](const CostEvent& a, const CostEvent& b) {
    return a.kind == b.kind && std::string(a.op) == b.op && a.comm_id == b.comm_id && a.memory == b.memory;
  };
  for (size_t i = 0; i < s.size(); ++i) EXPECT_TRUE(same(s[i], want[i])) << "event " << i;
  EXPECT_EQ(s[2].comm_id, 100);  // the record's first collective (42) -> the run's first id
  EXPECT_EQ(s[3].comm_id, 101);  // its second (7)
  EXPECT_EQ(s[5].comm_id, 101);  // 7's wait pairs with its start
  EXPECT_EQ(s[1].memory[(int)MemoryCategory::Activations], 1010);
  EXPECT_EQ(s[2].memory[(int)MemoryCategory::Activations], -5);
  const std::vector<CostEvent> out = s.materialize();
  ASSERT_EQ(out.size(), want.size());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(same(out[i], want[i])) << "copied event " << i;
  EventStream::Cursor c(&s);
  for (size_t i : {0, 5, 6, 7, 8, 14, 13, 2, 20, 1, 20, 0})
    EXPECT_TRUE(same(c.at(i), want[i])) << "cursor at " << i;
  std::array<int64_t, kNumMemoryCategories> held{};
  held[(int)MemoryCategory::Activations] = 4;
  s.subtract_memory(held);
  EXPECT_EQ(s[0].memory[(int)MemoryCategory::Activations], 1 - 4);
  EXPECT_EQ(s[1].memory[(int)MemoryCategory::Activations], 1010 - 4);
  EXPECT_EQ(s[2].memory[(int)MemoryCategory::Activations], -5 - 4);
  EXPECT_EQ(s[14].memory[(int)MemoryCategory::Activations], 3 - 4);
  EXPECT_THROW(s[s.size()], Error);
  EXPECT_THROW(EventStream::Cursor(&s).at(SIZE_MAX), Error);  // past the end, even where nothing was made yet
}

// A meta plan repeats a pipeline stage's steady forward and backward passes, and outside a pipeline the step's
// steady micro-batches, from their record (src/tensor/cost_segment.h) instead of tracing each one: every stage's
// plan is the plan that traces every pass,
// event by event (kind, op, FLOPs, bytes, GEMM and attention shapes, collectives, their groups and pairing, the
// memory held at each kernel), with the same memory (current and peak per category) and per-op costs; and the
// layouts whose passes are alike did repeat them (and hold the traced passes recorded alike as references).
TEST(Simulation, RepeatedMicroBatchesPlanAsTracedOnes) {
  struct Case {
    std::string name;
    JobConfig cfg;
    int world;
    bool repeats;  // steady passes: some are repeated
  };
  const std::vector<std::string> dense = {"model.n_layers", "8", "training.local_batch_size", "8",
                                          "training.mixed_precision_param", "bfloat16"};
  auto with = [&](const std::string& cfg, std::vector<std::string> more) {
    std::vector<std::string> o = dense;
    o.insert(o.end(), more.begin(), more.end());
    return sim_config(cfg, o);
  };
  const std::vector<Case> cases = {
      {"1F1B, PP 4, 12 micro-batches", uniform_pipeline(4, 12, "1F1B"), 4, true},
      {"Interleaved1F1B, PP 4", uniform_pipeline(4, 12, "Interleaved1F1B"), 4, true},
      {"GPipe, PP 2", uniform_pipeline(2, 8, "GPipe"), 2, true},
      {"PP 2 x FSDP 2 x TP 2, full AC, accumulation 2",
       with("configs/qwen3_debug.yaml",
            {"parallelism.pipeline_parallel_degree", "2", "parallelism.data_parallel_shard_degree", "2",
             "parallelism.tensor_parallel_degree", "2", "activation_checkpoint.mode", "full",
             "training.global_batch_size", "32"}),
       8, true},
      {"PP 2 x FSDP 2, reducing every micro-batch",
       with("configs/qwen3_debug.yaml",
            {"parallelism.pipeline_parallel_degree", "2", "parallelism.data_parallel_shard_degree", "2",
             "parallelism.fsdp_reduce_every_microbatch", "true", "parallelism.fsdp_reshard_after_forward",
             "always"}),
       4, false},
      {"MoE, PP 2 x EP 2", with("configs/qwen3_moe_debug.yaml",
                                {"parallelism.pipeline_parallel_degree", "2", "parallelism.data_parallel_shard_degree",
                                 "2", "parallelism.expert_parallel_degree", "2"}),
       4, true},
      // the model keeps the last forward's auxiliary loss (its graph): nothing may be repeated
      {"MoE with an auxiliary loss, PP 2 x EP 2",
       with("configs/qwen3_moe_debug.yaml",
            {"parallelism.pipeline_parallel_degree", "2", "parallelism.data_parallel_shard_degree", "2",
             "parallelism.expert_parallel_degree", "2", "model.moe_aux_loss_coeff", "0.01"}),
       4, false},
      {"PP 2 x CP 2 (all-gather) x TP 2, Float8",
       with("configs/qwen3_debug.yaml",
            {"parallelism.pipeline_parallel_degree", "2", "parallelism.context_parallel_degree", "2",
             "parallelism.tensor_parallel_degree", "2", "training.seq_len", "256",
             "model.converters", "float8", "float8.recipe", "tensorwise"}),
       8, true},
      {"PP 2 x CP 2 (ring)", with("configs/qwen3_debug.yaml",
                                  {"parallelism.pipeline_parallel_degree", "2", "parallelism.context_parallel_degree",
                                   "2", "parallelism.context_parallel_rotate_method", "alltoall", "training.seq_len",
                                   "256"}),
       4, true},
      // gradient accumulation without a pipeline: the step's micro-batches (train_step.cpp, MicroBatchRepeats)
      {"FSDP 2, accumulation 6", with("configs/qwen3_debug.yaml", {"parallelism.data_parallel_shard_degree", "2",
                                                                   "training.global_batch_size", "96"}),
       2, true},
      {"FSDP 2 x TP 2, full AC, accumulation 6, reducing every micro-batch",
       with("configs/qwen3_debug.yaml",
            {"parallelism.data_parallel_shard_degree", "2", "parallelism.tensor_parallel_degree", "2",
             "activation_checkpoint.mode", "full", "parallelism.fsdp_reduce_every_microbatch", "true",
             "training.global_batch_size", "96"}),
       4, true},
      {"HSDP 2 x 2 x CP 2 (ring), accumulation 6",
       with("configs/qwen3_debug.yaml",
            {"parallelism.data_parallel_replicate_degree", "2", "parallelism.data_parallel_shard_degree", "2",
             "parallelism.context_parallel_degree", "2", "parallelism.context_parallel_rotate_method", "alltoall",
             "training.seq_len", "256", "training.global_batch_size", "192"}),
       8, true},
      {"MoE, FSDP 2 x EP 2, Float8, accumulation 6",
       with("configs/qwen3_moe_debug.yaml",
            {"parallelism.data_parallel_shard_degree", "2", "parallelism.expert_parallel_degree", "2",
             "model.converters", "float8", "float8.recipe", "rowwise", "training.global_batch_size", "96"}),
       2, true},
      // two micro-batches: the first and the last, nothing between to repeat
      {"FSDP 2, accumulation 2", with("configs/qwen3_debug.yaml", {"parallelism.data_parallel_shard_degree", "2",
                                                                   "training.global_batch_size", "32"}),
       2, false},
  };
  struct Restore {
    ~Restore() { set_repeated_cost_segments(true); }
  } restore;
  for (const Case& c : cases) {
    const int64_t pp = c.cfg.parallelism.pipeline_parallel_degree;
    for (int64_t s = 0; s < pp; ++s) {
      const int rank = (int)(s * (c.world / pp));
      set_repeated_cost_segments(false);
      const StepPlan traced = plan_step(c.cfg, c.world, true, Device::Meta, rank);
      set_repeated_cost_segments(true);
      const int64_t before = repeated_cost_segment_count(), refused = refused_repeated_passes();
      const StepPlan repeated = plan_step(c.cfg, c.world, true, Device::Meta, rank);
      const int64_t n = repeated_cost_segment_count() - before;
      EXPECT_EQ(refused_repeated_passes(), refused) << c.name << ": made again tracing every pass";
      const std::string where = c.name + ", stage " + std::to_string(s);
      if (c.repeats) {
        EXPECT_GT(n, 0) << where << ": no pass repeated";
        // a traced pass recorded alike to its stage's last record is held as a reference to that record too
        EXPECT_GT(repeated.events.run_count(), (size_t)n) << where;
      } else {
        EXPECT_EQ(n, 0) << where;
      }
      ASSERT_EQ(repeated.events.size(), traced.events.size()) << where;
      CostSegment a, b;
      a.events = repeated.events.materialize();
      b.events = traced.events.materialize();
      if (!a.same_as(b)) {
        size_t i = 0;
        while (i < a.events.size() && CostSegment{{a.events[i]}}.same_as(CostSegment{{b.events[i]}})) ++i;
        ADD_FAILURE() << where << ": the plans differ (first at event " << i << " of " << a.events.size() << ": "
                      << (i < a.events.size() ? a.events[i].op : "?") << " / " << (i < b.events.size() ? b.events[i].op : "?")
                      << ", or in how collectives pair)";
      }
      EXPECT_EQ(repeated.memory.current, traced.memory.current) << where;
      EXPECT_EQ(repeated.memory.peak, traced.memory.peak) << where;
      EXPECT_EQ(repeated.memory.total_peak, traced.memory.total_peak) << where;
      EXPECT_EQ(repeated.flops, traced.flops) << where;
      EXPECT_EQ(repeated.bytes, traced.bytes) << where;
      ASSERT_EQ(repeated.by_op.size(), traced.by_op.size()) << where;
      for (const auto& [op, cost] : traced.by_op) {
        const OpCost& r = repeated.by_op.at(op);
        EXPECT_EQ(r.calls, cost.calls) << where << ": " << op;
        EXPECT_DOUBLE_EQ(r.flops, cost.flops) << where << ": " << op;
        EXPECT_DOUBLE_EQ(r.bytes, cost.bytes) << where << ": " << op;
      }
    }
  }
}

// A stage's repeated passes placed whole (schedule.h) give the timeline pricing every event gives: the same
// slices (stream, name, event, dependency; start and duration within 1e-9 s), memory samples, sums, bubble,
// critical path and the algorithms reported, on layouts with TP collectives in the passes, async TP's exchanges, FSDP, a host that holds the
// device back (eager), a context-parallel ring and MoE dispatch; and most passes of a long schedule are placed so.
// A pass's memory placed from its record reads as its kernels' memory added one by one, whatever the track held
// before it (the same bytes as its last sample, a sample at the same time, nothing) and after it (more adds,
// more copies); scaling applies to every sample.
TEST(MemoryTrack, PlacedRecordsReadAsSamplesAddedOneByOne) {
  std::mt19937 rng(7);
  auto bytes = [&](int v) {
    MemoryBytes b{};
    for (size_t c = 0; c < b.size(); ++c) b[c] = (int64_t)(c + 1) * v;
    return b;
  };
  int placed_whole = 0;
  for (int trial = 0; trial < 300; ++trial) {
    // a record: kernels at quarter-second offsets (repeats: same time), memory from a few levels (repeats: unchanged)
    std::vector<std::pair<double, MemoryBytes>> kernels;
    double t = 0;
    const int n = 1 + (int)(rng() % 12);
    for (int k = 0; k < n; ++k) {
      t += 0.25 * (double)(rng() % 3);
      kernels.push_back({t, bytes((int)(rng() % 4))});
    }
    auto record = std::make_shared<const MemoryTrack::Record>(kernels);
    MemoryTrack placed, added;
    double now = 0;
    for (int step = 0; step < 6; ++step) {
      if (rng() % 3 == 0) {  // a kernel of its own
        now += 0.25 * (double)(rng() % 2);
        const MemoryBytes b = bytes((int)(rng() % 4));
        placed.add(now, b);
        added.add(now, b);
      } else {  // a copy of the record, shifted
        const MemoryBytes shift = bytes((int)(rng() % 2));
        const size_t before = placed.placed_copies();
        placed.place(record, now, shift);
        for (const auto& [dt, b] : kernels) {
          MemoryBytes x = b;
          for (size_t c = 0; c < x.size(); ++c) x[c] += shift[c];
          added.add(now + dt, x);
        }
        placed_whole += placed.placed_copies() > before;
        now += kernels.back().first;
      }
    }
    std::array<double, kNumMemoryCategories> f{};
    for (size_t c = 0; c < f.size(); ++c) f[c] = 0.5 * (double)(c + 1);
    if (trial % 2) placed.scale(f), added.scale(f);
    ASSERT_EQ(placed.size(), added.size()) << "trial " << trial;
    size_t i = 0;
    for (const MemorySample& m : placed) {
      const MemorySample a = added[i], p = placed[i];
      ASSERT_EQ(m.t, a.t) << "trial " << trial << ", sample " << i;
      ASSERT_EQ(m.bytes, a.bytes) << "trial " << trial << ", sample " << i;
      ASSERT_EQ(p.t, a.t) << "trial " << trial << ", sample " << i << " indexed";
      ASSERT_EQ(p.bytes, a.bytes) << "trial " << trial << ", sample " << i << " indexed";
      ++i;
    }
  }
  EXPECT_GT(placed_whole, 100) << "copies placed by reference";
}

// A placed copy of a record reads as the slices the scheduler would have appended one by one: start shifted,
// its coded dependencies, flow and event indices made absolute; editing one writes its copy out and changes
// nothing else.
TEST(Timeline, PlacedCopiesReadAsAppendedSlices) {
  auto slice = [](std::string_view name, double start, double dur, SpanRef dep, int64_t flow_to, int64_t event) {
    SimSpan s{"compute", name, "compute", start, dur, 1, 2, flow_to, 3, event};
    s.dep = dep;
    s.dep_kind = dep.valid() || dep.lane < -1 ? DepKind::stream : DepKind::none;
    return s;
  };
  auto record = std::make_shared<std::vector<SimSpan>>(std::vector<SimSpan>{
      slice("a", 0.0, 1.0, {Timeline::kDepBeforeCompute, 0}, -1, 0),
      slice("b", 1.0, 0.5, {Timeline::kDepInPass, 0}, 2, -1),
      slice("c", 1.5, 0.25, {Timeline::kDepBeforeStream, 1}, -1, 4)});
  Timeline t;
  std::vector<SimSpan> want;  // the same slices appended one by one
  for (int i = 0; i < 2; ++i) {
    t.push_back(slice("own", i, 1, {7, i - 1}, -1, i));
    want.push_back(slice("own", i, 1, {7, i - 1}, -1, i));
  }
  auto place = [&](double t0, int64_t event0, int64_t before_compute, std::vector<int64_t> before_stream) {
    const int64_t at = (int64_t)t.size();
    want.push_back(slice("a", t0, 1.0, {7, before_compute}, -1, event0));
    want.push_back(slice("b", t0 + 1.0, 0.5, {7, at}, at + 2, -1));
    want.push_back(slice("c", t0 + 1.5, 0.25, {7, before_stream[1]}, -1, event0 + 4));
    t.place(record, t0, 7, event0, before_compute, before_stream);
  };
  place(10, 100, 1, {0, 1});
  t.push_back(slice("mid", 12, 1, {7, 4}, -1, 9));
  want.push_back(slice("mid", 12, 1, {7, 4}, -1, 9));
  place(20, 200, 5, {1, 5});
  t.place(std::make_shared<std::vector<SimSpan>>(), 30, 7, 0, -1, {});  // an empty record places nothing
  auto same = [](const SimSpan& x, const SimSpan& y) {
    return x.name == y.name && x.start == y.start && x.dur == y.dur && x.dep.lane == y.dep.lane &&
           x.dep.span == y.dep.span && x.flow_to == y.flow_to && x.event == y.event && x.stage == y.stage &&
           x.flops == y.flops && x.dep_kind == y.dep_kind;
  };
  auto check = [&](const char* when) {
    ASSERT_EQ(t.size(), want.size()) << when;
    size_t i = 0;
    for (const SimSpan& s : t) {  // in order
      EXPECT_TRUE(same(s, want[i])) << when << ": slice " << i << " iterated, " << s.name << " at " << s.start;
      EXPECT_TRUE(same(t[i], want[i])) << when << ": slice " << i << " indexed";
      ++i;
    }
    EXPECT_EQ(i, want.size()) << when;
  };
  check("placed");
  EXPECT_EQ(t.placed_copies(), 2u);
  t.edit(3).dur = 9;  // slice b of the first copy: that copy is written out, the second stays placed
  want[3].dur = 9;
  EXPECT_EQ(t.placed_copies(), 1u);
  check("edited");
  t.edit(t.size() - 1).flow_to = 1;  // the second copy's last slice
  want.back().flow_to = 1;
  EXPECT_EQ(t.placed_copies(), 0u);
  check("edited twice");
  t.place(record, 40, 7, 300, 2, {0, 3});
  want.push_back(slice("a", 40, 1.0, {7, 2}, -1, 300));
  want.push_back(slice("b", 41, 0.5, {7, (int64_t)want.size() - 1}, (int64_t)want.size() + 1, -1));
  want.push_back(slice("c", 41.5, 0.25, {7, 3}, -1, 304));
  const std::vector<SimSpan>& flat = t.flat();
  ASSERT_EQ(flat.size(), want.size());
  for (size_t i = 0; i < flat.size(); ++i) EXPECT_TRUE(same(flat[i], want[i])) << "flat: slice " << i;
  EXPECT_EQ(t.placed_copies(), 0u);
  check("flat");

  // copies first and back to back, then an owned slice: editing it leaves the copies placed
  t = Timeline();
  want.clear();
  place(0, 0, 7, {0, 0});
  place(2, 10, 2, {0, 1});
  t.push_back(slice("tail", 3, 1, {7, 5}, -1, 20));
  want.push_back(slice("tail", 3, 1, {7, 5}, -1, 20));
  check("back to back");
  t.edit(6).dur = 4;
  want[6].dur = 4;
  EXPECT_EQ(t.placed_copies(), 2u);
  check("owned slice after copies edited");
  t.edit(1).dur = 5;  // the first copy written out; the second stays placed, its indices unchanged
  want[1].dur = 5;
  EXPECT_EQ(t.placed_copies(), 1u);
  check("first of two copies edited");
}

TEST(Simulation, RepeatedPassesPlaceAsPricedOnes) {
  const std::vector<std::string> dense = {"model.n_layers", "8", "training.local_batch_size", "8",
                                          "training.mixed_precision_param", "bfloat16", "simulation.system",
                                          "h100-hgx"};
  auto with = [&](const std::string& cfg, std::vector<std::string> more) {
    std::vector<std::string> o = dense;
    o.insert(o.end(), more.begin(), more.end());
    return sim_config(cfg, o);
  };
  struct Case {
    std::string name;
    JobConfig cfg;
    int world;
    bool places = true;       // some passes are placed whole
    bool host_bound = false;  // the step waits for the host
  };
  const std::vector<Case> cases = {
      {"1F1B, PP 4, 12 micro-batches", uniform_pipeline(4, 12, "1F1B"), 4},
      {"Interleaved1F1B, PP 4, 16 micro-batches", uniform_pipeline(4, 16, "Interleaved1F1B"), 4},
      {"PP 2 x FSDP 2 x TP 2 (async), compiled, full AC, accumulation 2",
       with("configs/qwen3_debug.yaml",
            {"parallelism.pipeline_parallel_degree", "2", "parallelism.data_parallel_shard_degree", "2",
             "parallelism.tensor_parallel_degree", "2", "parallelism.enable_async_tensor_parallel", "true",
             "activation_checkpoint.mode", "full", "training.global_batch_size", "32", "simulation.mode",
             "compiled", "parallelism.pipeline_parallel_microbatch_size", "1"}),
       8},
      {"PP 4 x TP 2, eager (host-bound)",
       with("configs/qwen3_debug.yaml",
            {"parallelism.pipeline_parallel_degree", "4", "parallelism.tensor_parallel_degree", "2",
             "simulation.mode", "eager", "parallelism.pipeline_parallel_microbatch_size", "1"}),
       8, true, true},
      {"PP 2 x CP 2 (ring)", with("configs/qwen3_debug.yaml",
                                  {"parallelism.pipeline_parallel_degree", "2", "parallelism.context_parallel_degree",
                                   "2", "parallelism.context_parallel_rotate_method", "alltoall", "training.seq_len",
                                   "256", "parallelism.pipeline_parallel_microbatch_size", "1"}),
       4},
      {"MoE, PP 2 x EP 2", with("configs/qwen3_moe_debug.yaml",
                                {"parallelism.pipeline_parallel_degree", "2", "parallelism.data_parallel_shard_degree",
                                 "2", "parallelism.expert_parallel_degree", "2",
                                 "parallelism.pipeline_parallel_microbatch_size", "1"}),
       4, false},
  };
  for (const Case& c : cases) {
    SimResult priced;
    {
      PassReplaysOff off;
      priced = simulate_step(c.cfg, c.world);
    }
    const int64_t before = replayed_passes();
    const SimResult placed = simulate_step(c.cfg, c.world);
    const int64_t n = replayed_passes() - before;
    std::printf("%s: %lld passes placed whole\n", c.name.c_str(), (long long)n);
    const double tol = 1e-9;
    EXPECT_NEAR(placed.step_s, priced.step_s, tol) << c.name;
    EXPECT_NEAR(placed.compute_s, priced.compute_s, tol) << c.name;
    EXPECT_NEAR(placed.exposed_comm_s, priced.exposed_comm_s, tol) << c.name;
    EXPECT_NEAR(placed.host_wait_s, priced.host_wait_s, tol) << c.name;
    EXPECT_NEAR(placed.bubble_s, priced.bubble_s, tol) << c.name;
    EXPECT_NEAR(placed.link_contention_s, priced.link_contention_s, tol) << c.name;
    EXPECT_EQ(placed.kernels, priced.kernels) << c.name;
    EXPECT_EQ(placed.algorithms, priced.algorithms) << c.name;
    ASSERT_EQ(placed.compute_by_class.size(), priced.compute_by_class.size()) << c.name;
    for (const auto& [k, v] : priced.compute_by_class) EXPECT_NEAR(placed.compute_by_class.at(k), v, tol) << c.name << k;
    for (const auto& [k, v] : priced.exposed_by_kind) EXPECT_NEAR(placed.exposed_by_kind.at(k), v, tol) << c.name << k;
    for (const auto& [k, v] : priced.comm_busy_by_group)
      EXPECT_NEAR(placed.comm_busy_by_group.at(k), v, tol) << c.name << k;
    ASSERT_EQ(placed.critical.segments.size(), priced.critical.segments.size()) << c.name;
    for (const auto& [k, v] : priced.critical.by_what) EXPECT_NEAR(placed.critical.by_what.at(k), v, tol) << c.name << k;
    ASSERT_EQ(placed.stages.size(), priced.stages.size()) << c.name;
    // the slices less waits shorter than 1e-12 s (two sums of the same times can differ in the last bit, a
    // receive then waits for a rounding remainder or not), dependencies renumbered to match (one on such a
    // wait is not compared)
    auto kept = [](const Timeline& v) {
      std::vector<int64_t> at(v.size(), -1);
      std::vector<SimSpan> out;
      size_t i = 0;
      for (const SimSpan& s : v) {
        if (s.category == "compute" || s.category == "comm" || s.dur >= 1e-12) {
          at[i] = (int64_t)out.size();
          out.push_back(s);
        }
        ++i;
      }
      return std::make_pair(out, at);
    };
    std::vector<std::pair<std::vector<SimSpan>, std::vector<int64_t>>> kept_a, kept_b;  // per lane
    for (const auto& st : placed.stages) kept_a.push_back(kept(st.spans));
    for (const auto& st : priced.stages) kept_b.push_back(kept(st.spans));
    auto dep = [](const auto& lanes, SpanRef d) {  // a slice's place among its lane's kept ones
      return d.valid() ? lanes[(size_t)d.lane].second[(size_t)d.span] : (int64_t)-2;
    };
    for (size_t s = 0; s < priced.stages.size(); ++s) {
      const SimStage &a = placed.stages[s], &b = priced.stages[s];
      const std::string where = c.name + ", stage " + std::to_string(s);
      const auto &ka = kept_a[s].first, &kb = kept_b[s].first;
      EXPECT_EQ(ka.size(), kb.size()) << where;
      for (size_t i = 0; i < std::min(ka.size(), kb.size()); ++i) {
        const SimSpan &x = ka[i], &y = kb[i];
        const bool same = x.stream == y.stream && x.name == y.name && x.event == y.event && x.category == y.category &&
                          x.launches == y.launches && std::abs(x.start - y.start) <= tol &&
                          std::abs(x.dur - y.dur) <= tol && x.flops == y.flops &&
                          (dep(kept_a, x.dep) == dep(kept_b, y.dep) || dep(kept_a, x.dep) == -1 || dep(kept_b, y.dep) == -1);
        if (same) continue;
        ADD_FAILURE() << where << ", slice " << i << ": " << x.stream << " " << x.name << " at " << x.start << " for "
                      << x.dur << " / " << y.stream << " " << y.name << " at " << y.start << " for " << y.dur
                      << "; event " << x.event << " / " << y.event << ", dependency " << x.dep.lane << ":"
                      << dep(kept_a, x.dep) << " / " << y.dep.lane << ":" << dep(kept_b, y.dep);
        break;  // the first difference
      }
      ASSERT_EQ(a.memory_samples.size(), b.memory_samples.size()) << where;
      for (size_t i = 0; i < a.memory_samples.size(); ++i) {
        ASSERT_NEAR(a.memory_samples[i].t, b.memory_samples[i].t, tol) << where << ", sample " << i;
        ASSERT_EQ(a.memory_samples[i].bytes, b.memory_samples[i].bytes) << where << ", sample " << i;
      }
      ASSERT_EQ(a.link_busy.size(), b.link_busy.size()) << where;
      for (const auto& [level, iv] : b.link_busy) {
        const auto& jv = a.link_busy.at(level);
        ASSERT_EQ(jv.size(), iv.size()) << where << " " << level;
        for (size_t i = 0; i < iv.size(); ++i) {
          EXPECT_NEAR(jv[i].first, iv[i].first, tol) << where << " " << level << ", interval " << i;
          EXPECT_NEAR(jv[i].second, iv[i].second, tol) << where << " " << level << ", interval " << i;
        }
      }
    }
    if (c.places) {
      EXPECT_GT(n, 0) << c.name << ": no pass placed whole";
      size_t slices_by_reference = 0, samples_by_reference = 0;  // what the timeline holds as copies of a record
      for (const auto& st : placed.stages) {
        slices_by_reference += st.spans.placed_copies();
        samples_by_reference += st.memory_samples.placed_copies();
      }
      EXPECT_GT(slices_by_reference, 0u) << c.name;
      EXPECT_GT(samples_by_reference, 0u) << c.name;
    }
    if (c.host_bound) EXPECT_GT(priced.host_wait_s, 0) << c.name << ": not host-bound";
  }
  // a long schedule: most of a stage's passes are placed whole
  const int64_t before = replayed_passes();
  simulate_step(uniform_pipeline(4, 64, "1F1B"), 4);
  EXPECT_GT(replayed_passes() - before, 4 * 2 * 64 / 2) << "of 512 passes";
}

// PP x DP: each stage's data-parallel group inside one 8-GPU node (NVLink), the stages across nodes (the
// pipeline's sends over InfiniBand): the gradient reductions and the sends use different links, and the bubble
// stays the textbook (p - 1) / (m + p - 1).
TEST(Simulation, PipelineTimesDataParallelOnSeparateLinksKeepsTheTextbookBubble) {
  const JobConfig c = sim_config("configs/qwen3_debug.yaml",
                 {"model.dim", "2048", "model.n_heads", "16", "model.n_kv_heads", "8", "model.head_dim", "128",
                  "model.hidden_dim", "8192", "model.n_layers", "32", "model.vocab_size", "256", "training.seq_len",
                  "2048", "training.local_batch_size", "8", "parallelism.pipeline_parallel_degree", "4",
                  "parallelism.data_parallel_shard_degree", "8", "simulation.system", "h100-hgx",
                  "simulation.num_systems", "4", "simulation.mode", "compiled"});
  const SimResult r = simulate_step(c, 32);
  ASSERT_EQ(r.stages.size(), 4u);
  const double want = 3.0 / (8 + 3);
  std::printf("PP 4 x FSDP 8 on 4 HGX nodes: bubble %.1f%% (textbook %.1f%%); %s\n", 100 * r.bubble_fraction,
              100 * want, r.algorithms.c_str());
  EXPECT_NEAR(r.bubble_fraction / want, 1.0, 0.1);
  EXPECT_NE(r.algorithms.find("send/recv over pp_p2p: infiniband:p2p"), std::string::npos) << r.algorithms;
  const size_t rs = r.algorithms.find("reduce_scatter over dp_shard (8 ranks): nccl ");
  ASSERT_NE(rs, std::string::npos) << r.algorithms;
  EXPECT_EQ(r.algorithms.substr(rs, r.algorithms.find(';', rs) - rs).find("infiniband"), std::string::npos);
}
