// job/metrics_logger.h — what a run reports about its steps: TorchTitan's step line (loss, grad norm, lr,
// memory, tps, tflops, mfu; the experts' load, the communication share, across hosts a straggler link, the
// simulated figures of the layout), the rows of metrics.jsonl, the time to the first step, and the end-of-run memory and expert-load
// lines. Throughput is measured between step lines, without the time validation and checkpoints took.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comms/device_mesh.h"
#include "comms/link_probe.h"
#include "job/metrics.h"
#include "step/train_step.h"

namespace titan {

class MetricsLogger {
 public:
  // start: the step the run resumed after (metrics.jsonl rows past it are dropped: they are redone).
  MetricsLogger(const JobConfig& cfg, const comms::DeviceMesh& mesh, const TrainJob& job, std::string sim_suffix,
                int64_t start, double t_start);
  // One optimizer step done (its loss, norm, expert load at `lr`): the step line when it is due.
  void step(int64_t step, const StepResult& r, double lr);
  void validation(int64_t step, double loss);
  // Time spent since t0 that is not training (validation, checkpoints): left out of the throughput.
  void exclude_since(double t0);
  // The end-of-run lines: memory by category, the tokens per expert.
  void finish();

 private:
  const JobConfig& cfg_;
  const comms::DeviceMesh& mesh_;
  std::string sim_suffix_;
  int64_t start_;
  double t_start_, flops_per_token_, t_log_;
  double peak_tflops_;  // MFU's denominator: metrics.peak_tflops, or measured when it is 0
  bool warned_mfu_ = false;
  bool remeasured_ = false;  // the peak measured again once (a step line's MFU above 100%)
  int64_t accumulation_;
  DType compute_;  // the step's GEMM precision: the peak is measured in it
  int64_t tokens_since_log_ = 0;
  bool first_ = true;
  std::unique_ptr<JsonlWriter> jsonl_;
  MemoryStats run_peak_;  // per-category peaks over the whole run (log lines reset the tracker's)
  double load_min_ = 0, load_mean_ = 0, load_max_ = 0;
  int64_t load_steps_ = 0;
  std::vector<double> expert_total_;  // tokens per expert over the run, summed over MoE layers and ranks
  std::vector<std::vector<double>> expert_interval_;  // the same since the last step line (metrics.jsonl)
  std::vector<std::vector<double>> expert_by_layer_;  // the same per MoE layer (the per-layer routing line)
  // across hosts: the links timed at every step line (metrics.link_probe_mib per host, left out of the
  // throughput), the straggler named on the line ("straggler: h3's link: ...") and the times in metrics.jsonl
  comms::LinkProbe probe_;
  void fold_peak();
  double agreed_max(double v) const;  // the maximum of v over every rank (v itself on one rank)
};

}  // namespace titan
