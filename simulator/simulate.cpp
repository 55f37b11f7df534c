#include "simulator/simulate.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <future>
#include <limits>
#include <sstream>
#include <system_error>
#include <thread>

#include <omp.h>

#include "simulator/critical_path.h"
#include "simulator/schedule.h"
#include "src/log/log.h"
#include "src/tensor/error.h"

namespace titan {

namespace {
using namespace titan::sim;


// Loads the target hardware and checks that `world` ranks fit on it (before any planning).
void load_target(const JobConfig& cfg, int world, SystemSpec& sys, ChipSpec& chip, SimResult& r,
                 const std::vector<SpecEdit>& chip_edits, const std::vector<SpecEdit>& system_edits) {
  const auto& sc = cfg.simulation;
  try {
    sys = load_system(sc.system, system_edits);
    chip = load_chip(sc.chip.empty() ? sys.chip_name : sc.chip, chip_edits);
  } catch (const std::exception& e) {
    fail("simulation: ", e.what());
  }
  if (sc.kernel_model == JobConfig::Simulation::KernelModel::engines) {  // kernels as the chip's engines run them
    TITAN_CHECK(chip.engines.valid(), "simulation: simulation.kernel_model engines needs the chip's engines, but ",
                chip.name, " (", chip.file, ") has no 'engines:' section (Trainium specs have one); use "
                "simulation.kernel_model table");
    chip.price_by_engines = true;
  }
  if (!sc.attention_kernel.empty()) {  // the run's attention kernel, as the chip's spec prices it
    auto it = chip.attention_kernels.find(sc.attention_kernel);
    if (it == chip.attention_kernels.end()) {
      std::string known;
      for (auto& [k, v] : chip.attention_kernels) known += (known.empty() ? "" : ", ") + k;
      fail("simulation: simulation.attention_kernel '", sc.attention_kernel, "' is not listed for chip ", chip.name,
           " (", chip.file, "; attention_kernels: ", known.empty() ? "none" : known,
           "); drop the key for the chip's default kernel or add the kernel's published efficiency to the spec");
    }
    chip.attention_efficiency = it->second.efficiency;
    chip.attention_backward_efficiency = 0;  // a published kernel's one fraction, forward and backward,
    chip.attention_by_head_dim = it->second.by_head_dim;  // or its rows by head dim where the spec has them
  }
  // the run's attention as its stack computes it: a fused kernel, or its scores through memory
  chip.attention_materialized = sc.attention_scores == JobConfig::Simulation::AttentionScores::materialized;
  chip.attention_dropout = sc.attention_dropout;
  const int rpc = (int)sc.ranks_per_chip;
  TITAN_CHECK(world % rpc == 0, "simulation: world size ", world, " is not divisible by ranks_per_chip ", rpc,
              " (each chip holds ranks_per_chip ranks)");
  TITAN_CHECK(rpc <= chip.cores, "simulation: ranks_per_chip ", rpc, " exceeds the ", chip.cores, " cores of a ",
              chip.name, " (", chip.file, "); Trainium's LNC=2 gives cores / 2 ranks per chip");
  r.world = world;
  r.ranks_per_chip = rpc;
  r.chips = world / rpc;
  r.systems = (r.chips + sys.chips - 1) / sys.chips;
  const int64_t capacity = (int64_t)sys.chips * sc.num_systems;
  TITAN_CHECK(r.chips <= capacity, "simulation: ", world, " ranks at ", rpc, " ranks per chip need ", r.chips,
              " chips, but system '", sys.name, "' holds ", sys.chips, " chips x num_systems ", sc.num_systems, " = ",
              capacity, "; raise simulation.num_systems to ", r.systems,
              sys.has_scale_out ? "" : " (this system has no scale_out network: pick a larger system)",
              ", raise ranks_per_chip, or lower the world size");
  TITAN_CHECK(r.systems == 1 || sys.has_scale_out, "simulation: ", r.chips, " chips span ", r.systems,
              " systems of '", sys.name, "', which defines no scale_out network (", sys.file, ")");
}

// Plans every stage's rank (the first rank of each stage's slice of the world). The meta steps are independent
// (each counts its own memory and events: thread-local traces, a MetaTrackerScope per plan), so they run side by
// side on the process's threads (OpenMP's count: OMP_NUM_THREADS, what its kernels use), each stage's plan in
// its own slot: the result does not depend on the threads. Every plan runs on a fresh thread (none inherits the
// caller's thread-local scopes, whatever the count) whose own OpenMP regions take one thread (the helpers are
// the parallelism). A failure is the lowest failing stage's.
std::vector<StepPlan> plan_stages(const JobConfig& cfg, int world, int64_t pp, int ranks_per_host) {
  std::vector<StepPlan> plans((size_t)pp);
  std::vector<std::exception_ptr> failed((size_t)pp);
  std::atomic<int64_t> next{0};
  auto work = [&] {
    omp_set_num_threads(1);
    for (int64_t s; (s = next++) < pp;) {
      try {
        plans[(size_t)s] = plan_step(cfg, world, /*with_events=*/true, Device::Meta, (int)(s * (world / pp)),
                                     ranks_per_host);
      } catch (...) {
        failed[(size_t)s] = std::current_exception();
      }
    }
  };
  const int64_t threads = std::min<int64_t>(pp, std::max(1, omp_get_max_threads()));
  std::vector<std::thread> helpers;
  try {
    for (int64_t i = 0; i < threads; ++i) helpers.emplace_back(work);
  } catch (...) {  // no more threads: the ones started finish the work
    if (helpers.empty()) throw;
  }
  for (auto& t : helpers) t.join();
  for (auto& f : failed)
    if (f) std::rethrow_exception(f);
  return plans;
}
}  // namespace

SimResult simulate_step(const JobConfig& cfg, int world, const std::vector<SpecEdit>& chip_edits,
                        const std::vector<SpecEdit>& system_edits) {
  const auto& sc = cfg.simulation;
  SimResult r;
  SystemSpec sys;
  ChipSpec chip;
  load_target(cfg, world, sys, chip, r, chip_edits, system_edits);  // refuse a world the hardware cannot hold before planning anything
  // one planned rank per pipeline stage (the first rank of each stage's slice of the world); SPMD within a stage
  const int64_t pp = cfg.parallelism.pipeline_parallel_degree;
  TITAN_CHECK(world % pp == 0, "simulation: world size ", world, " is not divisible by pipeline_parallel_degree ", pp);
  // a system is a host: its chips' ranks share one (the hierarchical expert dispatch's hosts)
  std::vector<StepPlan> plans = plan_stages(cfg, world, pp, sys.chips * (int)sc.ranks_per_chip);
  const StepPlan& plan = plans[0];
  const int rpc = (int)sc.ranks_per_chip;
  r.chip = chip.name;
  r.system = sys.name + (r.systems > 1 ? " x" + std::to_string(r.systems) : "");
  r.mode = config::enum_name(sc.mode);
  r.layout = plan.layout;
  using Mode = JobConfig::Simulation::Mode;
  const ExecMode mode = sc.mode == Mode::eager      ? ExecMode::Eager
                        : sc.mode == Mode::compiled ? ExecMode::Compiled
                                                    : ExecMode::Graphs;
  using Precision = JobConfig::Training::Precision;  // the run's own: the meta step's values are float32
  const double act_scale = cfg.training.mixed_precision_param == Precision::bfloat16 ? 0.5 : 1.0;
  const double red_scale = cfg.training.mixed_precision_reduce == Precision::bfloat16 ? 0.5 : 1.0;
  for (const CostEvent& e : plan.events)  // the bytes as priced: gradients in the reduce dtype, the rest in the param dtype
    if (e.kind == CostEvent::Kind::CommStart) {
      r.collectives.push_back(e);
      r.collectives.back().bytes = priced_comm_bytes(e, act_scale, red_scale);
    }

  // ---- schedule: every stage's rank side by side ----
  std::vector<RankEvents> ranks;
  for (size_t s = 0; s < plans.size(); ++s) ranks.push_back({plans[s].rank, (int)s, &plans[s].events});
  std::vector<RankTimeline> lanes = schedule_ranks(ranks, chip, sys, rpc, mode, act_scale, red_scale,
                                                   /*fp32_compute=*/act_scale == 1.0, &r.algorithms);
  // the critical path across every lane (stage), worked out beside the bubble's windows below (both only read
  // the lanes' timelines; a second thread where one starts), before the spans move into the stages
  std::vector<const Timeline*> lane_spans;
  for (const auto& l : lanes) lane_spans.push_back(&l.r.spans);
  std::future<CriticalPath> path;
  try {
    path = std::async(std::launch::async, [&lane_spans] { return critical_path(lane_spans); });
  } catch (const std::system_error&) {  // no thread: worked out when it is asked for
    path = std::async(std::launch::deferred, [&lane_spans] { return critical_path(lane_spans); });
  }
  // the step's split (compute, exposed communication, host-bound, per class and kind) is the busiest stage's:
  // the one with the most work, which bounds the pipeline (all of them without pp; the first on a tie); its
  // timeline, memory over the step and links stay rank 0's (the first stage's); its end is the last lane's
  size_t busiest = 0;
  auto work = [](const SimResult& x) { return x.compute_s + x.exposed_comm_s + x.host_wait_s; };
  for (size_t s = 1; s < lanes.size(); ++s)
    if (work(lanes[s].r) > work(lanes[busiest].r)) busiest = s;
  r.busiest_stage = (int)busiest;
  {  // memory per chip as priced: rpc ranks, activations and buffers in the param dtype
    std::array<double, kNumMemoryCategories> per_chip{};
    for (int i = 0; i < kNumMemoryCategories; ++i)
      per_chip[i] = rpc * (i == (int)MemoryCategory::Activations || i == (int)MemoryCategory::Communication
                               ? act_scale
                               : 1.0);
    for (auto& l : lanes) l.r.memory_samples.scale(per_chip);
  }
  const SimResult& first = lanes[0].r;
  r.spans = first.spans;
  r.memory_samples = first.memory_samples;
  r.link_busy = first.link_busy;
  const SimResult& split = lanes[busiest].r;
  r.compute_s = split.compute_s;
  r.exposed_comm_s = split.exposed_comm_s;
  r.host_wait_s = split.host_wait_s;
  r.exposed_by_kind = split.exposed_by_kind;
  r.comm_busy_by_group = split.comm_busy_by_group;
  r.link_contention_s = split.link_contention_s;
  r.compute_by_class = split.compute_by_class;
  r.kernels = split.kernels;
  for (auto& l : lanes) r.step_s = std::max(r.step_s, l.r.step_s);
  // the bubble: each schedule's window runs from the first stage's start to the last stage's end; a stage's
  // bubble is its time in it neither computing nor waiting for its own collectives (exposed communication
  // stays exposed communication): waiting on its neighbours, or done before the others
  double window_total = 0;
  std::vector<double> idle(lanes.size(), 0);
  if (pp > 1) {
    const size_t n = lanes[0].marks.size();
    for (auto& l : lanes)
      TITAN_CHECK(l.marks.size() == n && n % 2 == 0, "simulation: the stages ran different numbers of schedules");
    // consecutive schedules (gradient accumulation) overlap across the stages: the last stage opens schedule
    // j + 1 while the first still drains j. A window opens no earlier than the one before it closed, so the
    // windows tile the step and no idle time is counted twice (before 2026-12-05 they overlapped: PP 2 with
    // three schedules reported a 0.138 s window in a 0.076 s step)
    std::vector<std::pair<double, double>> windows;  // [a, b), in time order, ends non-decreasing
    double closed = -std::numeric_limits<double>::infinity();
    for (size_t j = 0; j + 1 < n; j += 2) {
      double a = lanes[0].marks[j], b = lanes[0].marks[j + 1];
      for (auto& l : lanes) {
        a = std::min(a, l.marks[j]);
        b = std::max(b, l.marks[j + 1]);
      }
      a = std::max(a, closed);
      closed = b = std::max(a, b);
      window_total += b - a;
      windows.push_back({a, b});
    }
    // each lane's slices read once: a busy slice adds its part inside each window it overlaps (a window's sum
    // takes its slices in timeline order, as a scan per window did)
    for (size_t s = 0; s < lanes.size(); ++s) {
      std::vector<double> busy(windows.size(), 0.0);
      for (const SimSpan& sp : lanes[s].r.spans) {
        if (sp.category != "compute" && sp.category != "idle" && sp.category != "host") continue;
        const double end = sp.start + sp.dur;
        auto w = std::upper_bound(windows.begin(), windows.end(), sp.start,
                                  [](double t, const std::pair<double, double>& x) { return t < x.second; });
        for (; w != windows.end() && w->first < end; ++w) {
          const double part = std::min(end, w->second) - std::max(sp.start, w->first);
          if (part > 0) busy[(size_t)(w - windows.begin())] += part;
        }
      }
      for (size_t j = 0; j < windows.size(); ++j) idle[s] += (windows[j].second - windows[j].first) - busy[j];
    }
    r.critical = path.get();
    // the pipeline's bubble is the busiest stage's idle time; a lighter stage idles longer by its own imbalance
    r.bubble_s = idle[busiest];
    for (size_t s = 0; s < lanes.size(); ++s) {
      if (idle[s] > r.most_idle_s) r.most_idle_s = idle[s], r.most_idle_stage = (int)s;
      SimStage st;
      st.rank = plans[s].rank;
      st.compute_s = lanes[s].r.compute_s;
      st.exposed_comm_s = lanes[s].r.exposed_comm_s;
      st.host_wait_s = lanes[s].r.host_wait_s;
      st.bubble_s = idle[s];
      st.end_s = lanes[s].r.step_s;
      st.spans = std::move(lanes[s].r.spans);
      st.memory_samples = std::move(lanes[s].r.memory_samples);
      st.link_busy = std::move(lanes[s].r.link_busy);
      r.stages.push_back(std::move(st));
    }
  }
  if (path.valid()) r.critical = path.get();
  r.pipeline_s = window_total;
  r.bubble_fraction = window_total > 0 ? r.bubble_s / window_total : 0;

  // ---- throughput ----
  r.tokens_per_step = (double)plan.tokens_per_rank * (double)plan.dp_degree * (double)plan.cp_degree;
  r.tokens_per_s = r.step_s > 0 ? r.tokens_per_step / r.step_s : 0;
  r.tokens_per_s_per_chip = r.tokens_per_s / r.chips;
  r.tokens_per_s_per_rank = r.tokens_per_s / r.world;
  r.model_flops_per_token = plan.model_flops_per_token;
  r.tflops_per_chip = r.tokens_per_s * plan.model_flops_per_token / r.chips / 1e12;
  // MFU's denominator: the chip's peak in the fastest precision the step's GEMMs use (FP8 GEMMs: the FP8 peak,
  // so MFU stays below 100%)
  bool used[4] = {};  // the precisions the GEMMs use (GemmPrecision's values)
  for (const StepPlan& p : plans)
    p.events.for_each_recorded([&](const CostEvent& e, size_t) {
      if (e.gemm.batch > 0) used[(int)e.gemm.precision] = true;
    });
  GemmPrecision fastest = GemmPrecision::high;
  for (GemmPrecision q : {GemmPrecision::fp8, GemmPrecision::mxfp8})
    if (used[(int)q] && gemm_peak_tflops(chip, q) > gemm_peak_tflops(chip, fastest)) fastest = q;
  r.mfu_peak_tflops = chip.mfu_peak_tflops * gemm_peak_tflops(chip, fastest) / chip.peak_tflops;
  r.mfu_precision = fastest == GemmPrecision::high ? "" : fastest == GemmPrecision::fp8 ? "FP8" : "MXFP8";
  r.mfu = r.tflops_per_chip / r.mfu_peak_tflops;
  double flops = 0;  // per rank, averaged over the stages
  for (const StepPlan& p : plans) flops += p.flops / (double)plans.size();
  r.hardware_flops_per_rank = flops;
  r.hfu = r.step_s > 0 ? flops * rpc / r.step_s / 1e12 / r.mfu_peak_tflops : 0;

  // ---- memory per chip: each stage's peak; the step's is the fullest stage's ----
  for (size_t s = 0; s < plans.size(); ++s) {
    const auto& m = plans[s].memory;
    auto pk = [&](MemoryCategory c) { return (double)m.peak[(int)c] * rpc; };
    SimMemory mem;
    mem.params = pk(MemoryCategory::Parameters);
    mem.grads = pk(MemoryCategory::Gradients);
    mem.optimizer = pk(MemoryCategory::OptimizerState);
    mem.activations = pk(MemoryCategory::Activations) * act_scale;
    mem.communication = pk(MemoryCategory::Communication) * act_scale;
    mem.other = pk(MemoryCategory::Other);
    if (s < r.stages.size()) r.stages[s].memory = mem;
    if (s == 0 || mem.total() > r.memory.total()) r.memory = mem;
  }
  r.hbm_bytes = chip.hbm_gib * (double)(1LL << 30);
  r.oom = r.memory.total() > r.hbm_bytes;
  if (r.oom) {
    std::ostringstream a;
    const double over = r.memory.total() - r.hbm_bytes;
    a << "over by " << fmt("%.1f", over / (1 << 30)) << " GiB; ";
    if (cfg.activation_checkpoint.mode != JobConfig::ACMode::full && r.memory.activations > over)
      a << "activation_checkpoint.mode full would cut the " << fmt("%.1f", r.memory.activations / (1 << 30))
        << " GiB of activations; ";
    const double states = r.memory.params + r.memory.grads + r.memory.optimizer;
    if (plan.dp_degree > 0)
      a << "parameters + gradients + optimizer state (" << fmt("%.1f", states / (1 << 30))
        << " GiB) shrink with more data_parallel_shard ranks (more chips); ";
    a << "a smaller training.local_batch_size or seq_len shrinks activations; or a chip with more HBM";
    r.oom_advice = a.str();
  }
  return r;
}

}  // namespace titan
