// job/trainer.h — the training loop behind titan-train.
#pragma once
#include <vector>

#include "step/job_config.h"

namespace titan {

struct TrainResult {
  std::vector<double> losses;  // per step run by this invocation
  std::vector<std::pair<int64_t, double>> val_losses;
  int64_t first_step = 1;
  int stopped_by_signal = 0;  // SIGTERM / SIGINT: the loop checkpointed and returned early
};

// Runs the job described by `cfg` (resuming from its checkpoint folder when
// checkpoints exist). Throws titan::Error on bad input.
TrainResult train(const JobConfig& cfg);

}  // namespace titan
