// step/eval_step.h — mean next-token cross-entropy over batches of a loader.
#pragma once
#include "models/decoder/model.h"
#include "parallel/pipeline.h"
#include "src/data/loader.h"

namespace titan {

// Mean over `steps` batches (each B*S targets, so the mean over all tokens), no graph; through the
// pipeline's stages when one is given (every rank returns the loss). Context parallel (the model's
// sequence_shard; `mesh` needed): each rank its chunks, the loss over the cp group's tokens. `compute`: the
// training step's precision (TrainJob::compute: bf16 autocast's GEMMs, or float32).
double evaluate_loss(decoder::Decoder& model, DataLoader& loader, int64_t steps, parallel::Pipeline* pipeline = nullptr,
                     comms::DeviceMesh* mesh = nullptr, DType compute = DType::F32);

}  // namespace titan
