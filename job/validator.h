// job/validator.h — validation.*: the mean loss over the validation split every validation.freq steps and
// at the last step, the same batches each time (the loader is reset), averaged over the data-parallel ranks.
#pragma once
#include <memory>

#include "comms/device_mesh.h"
#include "src/data/loader.h"
#include "step/train_step.h"

namespace titan {

class Validator {
 public:
  // Opens validation.dataset_path (when enabled) and checks its ids against the model's vocabulary.
  Validator(const JobConfig& cfg, comms::DeviceMesh& mesh);
  bool due(int64_t step) const;
  // The loss at this step (logged with its batches and time).
  double run(TrainJob& job, int64_t step);

 private:
  const JobConfig& cfg_;
  comms::DeviceMesh& mesh_;
  std::unique_ptr<DataLoader> val_;
};

}  // namespace titan
