// job/checkpointer.h — the job's policy over src/checkpoint's mechanisms: what a run resumes from, when it
// saves, what it keeps, what it exports.
//
// Checkpoints are users' weeks of compute: a resume takes the newest checkpoint that verifies (checksums, or
// finite values for files written before checksums), says which newer ones it skipped and why, refuses a
// changed model/optimizer config unless checkpoint.resume_with_changed_config, and refuses to start over
// when none verifies. A save is read back before older checkpoints are pruned (keep_latest_k never deletes
// the last verified one); partial writes of an earlier run (.tmp) are removed at start.
#pragma once
#include <string>
#include <vector>

#include "comms/device_mesh.h"
#include "src/checkpoint/checkpoint.h"
#include "src/data/loader.h"
#include "step/train_step.h"

namespace titan {

class Checkpointer {
 public:
  // cfg_text: the effective config (dump_job_config), stored in every checkpoint and compared on resume.
  Checkpointer(const JobConfig& cfg, comms::DeviceMesh& mesh, TrainJob& job, std::string cfg_text);
  // The step to continue after (0: a fresh start): loads the newest verified checkpoint into the job's
  // parameters, buffers and AdamW state, the loader's position and `rng`.
  int64_t resume(DataLoader& loader, Generator& rng);
  // Whether this step ends with a checkpoint (every checkpoint.interval steps, the last step, or a stop).
  bool due(int64_t step, bool stopping) const;
  // Writes step-N.h5, reads it back, prunes to keep_latest_k; returns the seconds it took.
  double save(int64_t step, const DataLoader& loader, const Generator& rng);
  // checkpoint.export_at_end: <dump>/export/ (config.json + HF-named weights + the tokenizer.json of the
  // training data: byte-level, or the BPE file its token file records, when its content hash still matches).
  void export_model(const DataLoader& data);

 private:
  const JobConfig& cfg_;
  comms::DeviceMesh& mesh_;
  TrainJob& job_;
  std::string cfg_text_, dir_;
  std::vector<Region> regions_;  // parameters, then buffers (the expert biases)
  MPI_Comm comm_;
};

}  // namespace titan
