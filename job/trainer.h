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
// The job's layout as rank `rank` of `world` would build it, on meta tensors with a fake mesh: no memory, no
// communication. Throws the error building the job would (degrees that do not fit the world, a sequence or a
// head count the degrees do not divide, ...). Nothing to check for a simulated job (its world is the config's).
void check_layout(const JobConfig& cfg, int rank, int world);
// The job fits its data and this machine: the token file's vocabulary within model.vocab_size, and weights +
// gradients + AdamW state of `world` ranks within this machine's memory (cfg's data paths as found:
// with_data_found). Reads one attribute; allocates nothing.
void check_fits(const JobConfig& cfg, int world);

}  // namespace titan
