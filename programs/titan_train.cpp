// titan-train --config NAME|PATH [--section.key value ...]
// Under mpirun the ranks form the device mesh of the parallelism.* degrees.
// Without --config it prints its usage (it never starts a default job).
#include <csignal>
#include <cstring>
#include <iostream>

#include "comms/process_group.h"
#include "src/config/version.h"
#include "job/metrics.h"
#include "job/trainer.h"

namespace {
const char* kUsage =
    "usage: titan-train --config NAME|PATH [--section.key value ...]\n"
    "\n"
    "  --config      a YAML job config: a path, or a name under configs/ (e.g. qwen3_debug, qwen3_32b)\n"
    "  --section.key overrides one config key (e.g. --training.steps 20); --help lists every key\n"
    "  --version     prints the version\n"
    "\n"
    "examples:\n"
    "  titan-train --config qwen3_debug                      # train the debug Qwen3 on this machine\n"
    "  titan-train --config qwen3_32b                        # simulate Qwen3-32B on 16 Trainium2\n"
    "  mpirun -np 4 titan-train --config qwen3_debug --parallelism.tensor_parallel_degree 2\n"
    "  (as root mpirun needs --allow-run-as-root; more ranks than cores need --oversubscribe)\n";

bool has_arg(int argc, char** argv, const char* a) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], a) == 0 || std::strncmp(argv[i], (std::string(a) + "=").c_str(), std::strlen(a) + 1) == 0)
      return true;
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  titan::process_seconds();  // start the clock for "time to first step"
  std::signal(SIGXFSZ, SIG_IGN);  // a file-size limit makes writes fail (EFBIG, reported), not kill the job
  if (has_arg(argc, argv, "--version")) {
    std::cout << titan::version_string("titan-train") << std::endl;
    return 0;
  }
  if (!has_arg(argc, argv, "--help") && !has_arg(argc, argv, "-h") && !has_arg(argc, argv, "--config") &&
      !has_arg(argc, argv, "--job.config_file")) {
    std::cerr << kUsage;
    return 2;
  }
  titan::comms::init(&argc, &argv);
  // The config and the layout: every rank reads and checks the same (no communication yet), so a mistake there
  // is reported once, by the lowest rank that found it, and every rank exits cleanly (no MPI_Abort banner).
  titan::JobConfig cfg;
  std::string refused;
  try {
    cfg = titan::load_job_config(argc, argv);
    titan::check_layout(cfg, titan::comms::world_rank(), titan::comms::world_size());
    if (!cfg.simulation.enabled)  // the data files exist, the data and the model fit
      titan::check_fits(titan::with_data_found(cfg, nullptr), titan::comms::world_size());
  } catch (const std::exception& e) {
    refused = e.what();
  }
  const int first = titan::comms::lowest_failing_rank(!refused.empty());
  if (first >= 0) {
    if (titan::comms::world_rank() == first)
      std::cerr << "[titan] error" << (first > 0 ? " (rank " + std::to_string(first) + ")" : std::string()) << ": "
                << refused << std::endl;
    titan::comms::finalize();
    return 1;
  }
  try {
    const titan::TrainResult r = titan::train(cfg);
    if (r.stopped_by_signal != 0) {  // preempted: the checkpoint is written; the exit status says terminated
      titan::comms::finalize();
      return 128 + r.stopped_by_signal;
    }
  } catch (const std::exception& e) {
    // one rank failing ends the whole job promptly (MPI_Abort), never a hang
    if (titan::comms::world_size() > 1) titan::comms::abort_job(e.what());
    std::cerr << "[titan] error: " << e.what() << std::endl;
    titan::comms::finalize();
    return 1;
  }
  titan::comms::finalize();
  return 0;
}
