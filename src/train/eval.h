// src/train/eval.h — mean next-token cross-entropy over batches of a loader.
#pragma once
#include "models/qwen3/model.h"
#include "src/data/loader.h"

namespace titan {

// Mean over `steps` batches (each B*S targets, so the mean over all tokens), no graph.
double evaluate_loss(qwen3::Qwen3& model, DataLoader& loader, int64_t steps);

}  // namespace titan
