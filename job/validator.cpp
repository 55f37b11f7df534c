#include "job/validator.h"

#include "job/metrics.h"
#include "step/eval_step.h"

namespace titan {

Validator::Validator(const JobConfig& cfg, comms::DeviceMesh& mesh) : cfg_(cfg), mesh_(mesh) {
  if (!cfg.validation.enabled) return;
  val_ = std::make_unique<DataLoader>(cfg.validation.dataset_path, cfg.training.local_batch_size,
                                      cfg.training.seq_len, mesh.dp_rank(), mesh.dp_size());
  val_->check_ids(cfg.model.vocab_size, mesh.world > 1 ? comms::world_comm() : nullptr);
}

bool Validator::due(int64_t step) const {
  return val_ && (step % cfg_.validation.freq == 0 || step == cfg_.training.steps);
}

double Validator::run(TrainJob& job, int64_t step) {
  const double t0 = wall_seconds();
  val_->reset();
  const int64_t steps = cfg_.validation.steps < 0 ? val_->steps_left() : cfg_.validation.steps;
  double loss = evaluate_loss(*job.model, *val_, steps, job.pipeline.get(), &mesh_, job.compute);
  if (mesh_.dp_size() > 1)
    loss = mesh_.dp->all_reduce(from_vector<double>({loss}, {1}), comms::ReduceOp::Avg).to_vector<double>()[0];
  log_info("validation: step: " + std::to_string(step) + "  loss: " + fmt("%.5f", loss) + "  (" +
           std::to_string(steps) + " batches per rank, " + fmt("%.2f", wall_seconds() - t0) + " s)");
  return loss;
}

}  // namespace titan
