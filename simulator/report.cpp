#include "simulator/report.h"

#include <cstdio>

#include "simulator/critical_path.h"
#include "src/log/log.h"

namespace titan {

std::vector<std::string> describe_simulation(const SimResult& r) {
  std::vector<std::string> out;
  auto gib = [](double b) { return fmt("%.2f", b / (1 << 30)); };
  out.push_back("simulated " + std::to_string(r.chips) + " x " + r.chip + " (" + r.system + "), " +
                std::to_string(r.world) + " ranks at " + std::to_string(r.ranks_per_chip) + " per chip, " + r.layout +
                ", " + r.mode + " mode");
  out.push_back("sim step: " + fmt("%.3f", r.step_s) + " s  tps: " + fmt("%.0f", r.tokens_per_s) + " (" +
                fmt("%.1f", r.tokens_per_s_per_chip) + " per chip)  tflops: " + fmt("%.1f", r.tflops_per_chip) +
                " per chip  mfu: " + fmt("%.2f", 100 * r.mfu) + "%  (hardware FLOPs incl. recompute: " +
                fmt("%.2f", 100 * r.hfu) + "%" +
                (r.mfu_precision.empty() ? std::string()
                                         : "; of the " + r.mfu_precision + " peak, " + fmt("%.0f", r.mfu_peak_tflops) +
                                               " TFLOP/s: the step's linear layers compute in " + r.mfu_precision) +
                ")");
  std::string cb = (r.stages.empty() ? std::string("sim time: compute ")
                                     : "sim time (busiest stage [" + std::to_string(r.busiest_stage) + "]): compute ") +
                   fmt("%.3f", r.compute_s) + " s (";
  bool first = true;
  for (auto& [k, v] : r.compute_by_class) {
    cb += (first ? "" : ", ") + k + " " + fmt("%.3f", v);
    first = false;
  }
  cb += "), " + std::to_string(r.kernels) + " kernels; exposed communication " + fmt("%.3f", r.exposed_comm_s) + " s";
  if (!r.exposed_by_kind.empty()) {
    cb += " (";
    first = true;
    for (auto& [k, v] : r.exposed_by_kind) {
      cb += (first ? "" : ", ") + k + " " + fmt("%.3f", v);
      first = false;
    }
    cb += ")";
  }
  if (r.host_wait_s > 0)
    cb += "; host-bound " + fmt("%.3f", r.host_wait_s) + " s (the device idle until the host issued its next kernel)";
  out.push_back(cb);
  std::string cm = "sim communication busy per stream:";
  for (auto& [g, v] : r.comm_busy_by_group) cm += " " + g + " " + fmt("%.3f", v) + " s";
  cm += " (of which " + fmt("%.3f", r.link_contention_s) + " s sharing links with other groups' transfers)";
  out.push_back(cm);
  out.push_back("sim collectives: " + r.algorithms);
  if (!r.critical.segments.empty()) out.push_back(describe_critical_path(r.critical));
  if (!r.stages.empty()) {
    std::string pl = "sim pipeline: bubble " + fmt("%.3f", r.bubble_s) + " s (" + fmt("%.1f", 100 * r.bubble_fraction) +
                     "% of the schedules' " + fmt("%.3f", r.pipeline_s) + " s) on the busiest stage [" +
                     std::to_string(r.busiest_stage) + "], whose split the step's figures above are";
    if (r.most_idle_s > r.bubble_s + 1e-3 * r.pipeline_s)
      pl += "; stage [" + std::to_string(r.most_idle_stage) + "] idles " + fmt("%.3f", r.most_idle_s) +
            " s (less work: the stages' imbalance)";
    pl += "; per stage (compute / exposed communication / bubble / end / memory):";
    for (size_t s = 0; s < r.stages.size(); ++s) {
      const SimStage& st = r.stages[s];
      pl += " [" + std::to_string(s) + "] " + fmt("%.3f", st.compute_s) + " / " + fmt("%.3f", st.exposed_comm_s) + " / " +
            fmt("%.3f", st.bubble_s) + " / " + fmt("%.3f", st.end_s) + " s / " + gib(st.memory.total()) + " GiB";
    }
    out.push_back(pl);
  }
  out.push_back("sim memory per chip: " + gib(r.memory.total()) + " / " + gib(r.hbm_bytes) + " GiB (parameters " +
                gib(r.memory.params) + ", gradients " + gib(r.memory.grads) + ", optimizer " +
                gib(r.memory.optimizer) + ", activations " + gib(r.memory.activations) + ", communication " +
                gib(r.memory.communication) + ", other " + gib(r.memory.other) + ")");
  if (r.oom) out.push_back("sim OUT OF MEMORY on " + r.chip + ": " + r.oom_advice);
  return out;
}

}  // namespace titan
