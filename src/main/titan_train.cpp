// titan-train --config configs/qwen3_debug.yaml [--section.key value ...]
#include <cstdio>
#include <iostream>

#include "src/train/trainer.h"
#include "src/train/metrics.h"

int main(int argc, char** argv) {
  titan::process_seconds();  // start the clock for "time to first step"
  try {
    titan::JobConfig cfg = titan::load_job_config(argc, argv);
    titan::train(cfg);
  } catch (const std::exception& e) {
    std::cerr << "[titan] error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
