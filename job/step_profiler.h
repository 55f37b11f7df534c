// job/step_profiler.h — profiling.*: step profiling.profile_step timed op by op (the per-op table of time,
// FLOPs and bytes), its collectives listed and written (collectives_rankR.tsv), and its measured timeline
// as a Chrome trace (profile_trace_rankR.json), merged by rank 0 into one file for the job
// (profile_trace.json) at the end of the run (finish(): no rank waits on it in a collective) when every rank's
// file of this job is in its dump folder (one host, or a shared folder; else `titan-trace merge` joins them).
#pragma once
#include <memory>

#include "comms/device_mesh.h"
#include "src/tensor/cost.h"
#include "step/job_config.h"

namespace titan {

class StepProfiler {
 public:
  StepProfiler(const JobConfig& cfg, const comms::DeviceMesh& mesh) : cfg_(cfg), mesh_(mesh) {}
  // Starts timing when `step` is the profiled one.
  void begin(int64_t step);
  // Ends it: the table, the collectives and the trace.
  void end(int64_t step);
  // The run is over: rank 0 merges the ranks' traces of the profiled step (a failure is a warning, never the
  // job's end: the per-rank files are written).
  void finish();
  // Drops it (the step was skipped: nothing to report).
  void cancel() {
    trace_.reset();
    scope_.reset();
  }

 private:
  const JobConfig& cfg_;
  const comms::DeviceMesh& mesh_;
  double t0_ = 0;
  int64_t merge_step_ = -1;  // the profiled step whose per-rank traces rank 0 merges in finish()
  std::unique_ptr<CostScope> scope_;
  std::unique_ptr<CostTrace> trace_;
};

}  // namespace titan
