#include "job/step_profiler.h"

#include <algorithm>

#include "simulator/trace.h"
#include "src/log/log.h"
#include "step/collectives.h"

namespace titan {

namespace {
// Per-op table of one step: time (attributed between op records), FLOPs, bytes.
void print_profile(CostScope& cs, double seconds) {
  cs.flush_time();
  std::vector<std::pair<std::string, OpCost>> ops(cs.by_op().begin(), cs.by_op().end());
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

void StepProfiler::begin(int64_t step) {
  if (!cfg_.profiling.enable_profiling || step != cfg_.profiling.profile_step) return;
  scope_ = std::make_unique<CostScope>(/*timed=*/true);
  trace_ = std::make_unique<CostTrace>(/*timed=*/true);
  t0_ = wall_seconds();
}

void StepProfiler::end(int64_t step) {
  if (!scope_) return;
  print_profile(*scope_, wall_seconds() - t0_);
  const double end = trace_->elapsed();
  std::vector<CostEvent> events = trace_->take();
  for (const auto& l : describe_collectives(events, rank_, "float32, as sent")) log_info(l);
  const std::string dump = cfg_.job.dump_folder;
  write_collectives(events, dump + "/collectives_rank" + std::to_string(rank_) + ".tsv");
  const std::string path = dump + "/profile_trace_rank" + std::to_string(rank_) + ".json";
  write_chrome_trace(measured_timeline(events, end, "this CPU"), path, 1, rank_);
  log_info("measured timeline of step " + std::to_string(step) + " (Chrome trace): " + path);
  trace_.reset();
  scope_.reset();
}

}  // namespace titan
