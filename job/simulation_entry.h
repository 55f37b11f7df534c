// job/simulation_entry.h — a job that is planned, not run: simulation.enabled (one process plays
// simulation.world_size ranks on meta tensors and prints the simulated step line, the report, the trace), and
// the simulated figures a real run prints next to its measured ones (simulation.system without `enabled`).
#pragma once
#include <string>

#include "comms/device_mesh.h"
#include "job/trainer.h"
#include "simulator/result.h"

namespace titan {

// simulation.enabled: the whole job (rank 0 of an mpirun plays every rank; the others return at once).
TrainResult run_simulated_job(const JobConfig& cfg, double t_start);

// The job a simulation priced, one line: model and parameters, sequence and tokens per step, activation
// checkpointing, the dtypes, the mode.
std::string describe_simulated_job(const JobConfig& cfg, const SimResult& sim);

// A real run with simulation.system set: rank 0 prices this job's own layout once, logs the report and returns
// the suffix of every step line ("  sim[chip]: tps N mfu M%"); "" on other ranks or without a system.
std::string simulated_figures(const JobConfig& cfg, const comms::DeviceMesh& mesh);

}  // namespace titan
