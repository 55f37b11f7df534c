// src/train/train_spec.h — what a model name brings to a job (TorchTitan's
// TrainSpec): the builder of its model and its parallel plan. titan-train,
// the meta planner and titan-eval look both up here; a new model registers
// one entry in train_spec.cpp. Today every entry is a member of the one
// decoder family (models/decoder) with its plan (parallel/parallelize.h).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comms/device_mesh.h"
#include "models/causal_lm.h"
#include "parallel/parallelize.h"

namespace titan {

struct TrainSpec {
  std::string name;  // model.name
  std::function<std::unique_ptr<CausalLM>(const JobConfig::Model&)> build;
  std::function<std::unique_ptr<CausalLM>(const std::string& hf_config_json)> build_from_hf;
  std::function<parallel::ParallelModel(CausalLM&, comms::DeviceMesh&, const parallel::ParallelOptions&)> parallelize;
};

// The spec of model.name (an error lists the registered names).
const TrainSpec& train_spec(const std::string& model_name);
// The spec a config.json describes (its model_type / titan_decoder family).
const TrainSpec& train_spec_for_hf(const std::string& hf_config_json);
std::vector<std::string> train_spec_names();

}  // namespace titan
