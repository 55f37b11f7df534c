// src/train/eval.h — mean next-token cross-entropy over batches of a loader.
#pragma once
#include "models/causal_lm.h"
#include "src/data/loader.h"

namespace titan {

// Mean over `steps` batches (each B*S targets, so the mean over all tokens), no graph.
double evaluate_loss(CausalLM& model, DataLoader& loader, int64_t steps);

}  // namespace titan
