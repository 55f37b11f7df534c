#include "job/step_profiler.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "comms/hosts.h"
#include "simulator/compare.h"
#include "simulator/trace.h"
#include "src/log/log.h"
#include "step/collectives.h"

namespace titan {
namespace fs = std::filesystem;

namespace {
// Per-op table of one step: time (attributed between op records), FLOPs, bytes.
void print_profile(CostScope& cs, double seconds) {
  cs.flush_time();
  const std::map<std::string, OpCost> by_op = cs.by_op();
  std::vector<std::pair<std::string, OpCost>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
  log_info("profile of one step: " + fmt("%.3f", seconds) + " s, " + fmt("%.3f", cs.flops() / 1e12) + " TFLOP, " +
           fmt("%.3f", cs.bytes() / 1e9) + " GB moved");
  log_info("  op                          calls     time(ms)   share    GFLOP   GFLOP/s      GB");
  for (auto& [name, c] : ops) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-26s %6lld %12.2f %6.1f%% %8.3f %9.1f %7.3f", name.c_str(),
                  (long long)c.calls, c.seconds * 1e3, 100.0 * c.seconds / seconds, c.flops / 1e9,
                  c.seconds > 0 ? c.flops / c.seconds / 1e9 : 0.0, c.bytes / 1e9);
    log_info(line);
  }
}
}  // namespace

StepProfiler::StepProfiler(const JobConfig& cfg, const comms::DeviceMesh& mesh) : cfg_(cfg), mesh_(mesh) {
  const std::string& sys = cfg.profiling.simulate_system;
  if (!cfg.profiling.enable_profiling || sys.empty()) return;
  try {  // loaded now: a wrong name fails before training, not at the profiled step
    sim_system_ = std::make_unique<sim::SystemSpec>(sim::load_system(sys));
    sim_chip_ = std::make_unique<sim::ChipSpec>(sim::load_chip(sim_system_->chip_name));
  } catch (const std::exception& e) {
    fail("config error: profiling.simulate_system '", sys, "': ", e.what(), " (\"\" profiles without simulating)");
  }
}

StepProfiler::~StepProfiler() = default;

void StepProfiler::begin(int64_t step) {
  if (!cfg_.profiling.enable_profiling || step != cfg_.profiling.profile_step) return;
  scope_ = std::make_unique<CostScope>(/*timed=*/true);
  trace_ = std::make_unique<CostTrace>(/*timed=*/true);
  t0_ = wall_seconds();
  start_unix_s_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void StepProfiler::end(int64_t step) {
  if (!scope_) return;
  print_profile(*scope_, wall_seconds() - t0_);
  const double end = trace_->elapsed();
  std::vector<CostEvent> events = trace_->take();
  trace_.reset();
  scope_.reset();
  const int rank = mesh_.rank, world = mesh_.world;
  for (const auto& l : describe_collectives(events, rank, "float32, as sent")) log_info(l);
  const std::string dump = cfg_.job.dump_folder, r = std::to_string(rank);
  write_collectives(events, dump + "/collectives_rank" + r + ".tsv");
  const std::string path = dump + "/profile_trace_rank" + r + ".json";
  std::unique_ptr<StepComparison> c;
  if (sim_system_) {  // the same step simulated on the spec of this machine, op by op beside the measured one
    const auto& h = comms::hosts();
    const int host = rank < (int)h.host_of.size() ? h.host_of[(size_t)rank] : 0;
    const int on_host = h.host_of.empty() ? world : (int)std::count(h.host_of.begin(), h.host_of.end(), host);
    try {  // the ranks of this host share its CPU
      c = std::make_unique<StepComparison>(compare_step(events, end, *sim_chip_, *sim_system_, world, on_host, rank));
    } catch (const std::exception& e) {
      log_info(std::string("warning: the profiled step was not simulated beside the measured one: ") + e.what());
    }
  }
  if (c) {
    for (const auto& l : describe_comparison(*c, 10)) log_info(l);
    write_comparison(*c, dump + "/profile_vs_sim_rank" + r + ".tsv");
    c->measured.start_unix_s = start_unix_s_;
    c->simulated.start_unix_s = start_unix_s_;  // both of this rank's timelines on the job's one clock
    write_chrome_trace(c->measured, path, TraceLayout(1, rank, step));
    write_chrome_trace(c->simulated, sim_trace_path(rank),
                       TraceLayout(1, rank, step, world, "rank " + r + " simulated (" + c->simulated.chip + ")"));
    log_info("every op measured and simulated: " + dump + "/profile_vs_sim_rank" + r + ".tsv");
  } else {
    SimResult m = measured_timeline(events, end, "this CPU", world);
    m.start_unix_s = start_unix_s_;
    write_chrome_trace(m, path, TraceLayout(1, rank, step));
    std::error_code ec;  // no simulated file of an earlier run left to be merged with this one
    fs::remove(sim_trace_path(rank), ec);
  }
  log_info("measured timeline of step " + std::to_string(step) + " (Chrome trace): " + path);
  if (world > 1) mesh_.world_pg->barrier();  // every rank's file is written (the same step on every rank: no hang)
  merge_step_ = step;
}

std::string StepProfiler::sim_trace_path(int rank) const {
  return cfg_.job.dump_folder + "/profile_sim_trace_rank" + std::to_string(rank) + ".json";
}

void StepProfiler::finish() {
  if (merge_step_ < 0 || mesh_.rank != 0) return;
  const std::string dump = cfg_.job.dump_folder;
  std::vector<std::string> files;
  for (int r = 0; r < mesh_.world; ++r) files.push_back(dump + "/profile_trace_rank" + std::to_string(r) + ".json");
  bool simulated = sim_system_ != nullptr;  // every rank's step simulated (a rank that could not be: none merged)
  for (int r = 0; simulated && r < mesh_.world; ++r) simulated = fs::exists(sim_trace_path(r));
  for (int r = 0; simulated && r < mesh_.world; ++r) files.push_back(sim_trace_path(r));
  const auto missing = std::find_if(files.begin(), files.end(), [](const std::string& f) { return !fs::exists(f); });
  if (missing != files.end()) {
    log_info("the ranks' traces are not all in this dump folder (" + *missing + " is elsewhere: another host's); "
             "join them with: titan-trace merge -o profile_trace.json profile_trace_rank*.json "
             "profile_sim_trace_rank*.json");
    return;
  }
  try {
    for (const auto& l : merge_chrome_traces(files, dump + "/profile_trace.json", mesh_.world)) log_info(l);
    log_info("timeline of step " + std::to_string(merge_step_) + ", every rank" +
             (simulated ? ", measured and simulated on one axis" : std::string()) + " (Chrome trace): " + dump +
             "/profile_trace.json");
  } catch (const std::exception& e) {
    log_info(std::string("warning: the ranks' traces were not merged (the per-rank files stand): ") + e.what());
  }
}

}  // namespace titan
