// titan-train --config configs/qwen3_debug.yaml [--section.key value ...]
// Under mpirun the ranks form the device mesh of the parallelism.* degrees.
#include <iostream>

#include "comms/process_group.h"
#include "src/train/metrics.h"
#include "src/train/trainer.h"

int main(int argc, char** argv) {
  titan::process_seconds();  // start the clock for "time to first step"
  titan::comms::init(&argc, &argv);
  try {
    titan::JobConfig cfg = titan::load_job_config(argc, argv);
    titan::train(cfg);
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
