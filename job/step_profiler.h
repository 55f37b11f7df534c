// job/step_profiler.h — profiling.*: step profiling.profile_step timed op by op (the per-op table of time,
// FLOPs and bytes), its collectives listed and written (collectives_rankR.tsv), its measured timeline
// as a Chrome trace (profile_trace_rankR.json) and, with profiling.simulate_system, the same step simulated on
// that spec beside it (profile_sim_trace_rankR.json; every op's two times in profile_vs_sim_rankR.tsv, the
// largest errors logged: simulator/compare.h), merged by rank 0 into one file for the job
// (profile_trace.json) at the end of the run (finish(): no rank waits on it in a collective) when every rank's
// file of this job is in its dump folder (one host, or a shared folder; else `titan-trace merge` joins them).
#pragma once
#include <memory>

#include "comms/device_mesh.h"
#include "simulator/hardware.h"
#include "src/tensor/cost.h"
#include "step/job_config.h"

namespace titan {

class StepProfiler {
 public:
  // Loads profiling.simulate_system's spec (a wrong name fails here, naming the key).
  StepProfiler(const JobConfig& cfg, const comms::DeviceMesh& mesh);
  ~StepProfiler();
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
  double start_unix_s_ = 0;  // the profiled step's start on the system clock (merged ranks share one axis)
  int64_t merge_step_ = -1;  // the profiled step whose per-rank traces rank 0 merges in finish()
  std::unique_ptr<CostScope> scope_;
  std::unique_ptr<CostTrace> trace_;
  std::unique_ptr<sim::SystemSpec> sim_system_;  // profiling.simulate_system (null: "")
  std::unique_ptr<sim::ChipSpec> sim_chip_;
  std::string sim_trace_path(int rank) const;
};

}  // namespace titan
