#include "src/train/train_spec.h"

#include "models/decoder/args.h"

namespace titan {

namespace {
const std::vector<TrainSpec>& registry() {
  static const std::vector<TrainSpec> specs = [] {
    std::vector<TrainSpec> v;
    for (const char* name : {"qwen3", "qwen3_moe", "gpt_oss", "llama3"})
      v.push_back({name, [](const JobConfig::Model& m) { return build_model(m); },
                   [](const std::string& hf) { return build_model_from_hf(hf); }, parallel::parallelize});
    return v;
  }();
  return specs;
}
}  // namespace

std::vector<std::string> train_spec_names() {
  std::vector<std::string> n;
  for (const auto& s : registry()) n.push_back(s.name);
  return n;
}

const TrainSpec& train_spec(const std::string& name) {
  for (const auto& s : registry())
    if (s.name == name) return s;
  std::string known;
  for (const auto& n : train_spec_names()) known += (known.empty() ? "" : ", ") + n;
  fail("config error: model.name '", name, "' has no train spec (registered: ", known, ")");
}

const TrainSpec& train_spec_for_hf(const std::string& hf_config_json) {
  return train_spec(decoder::Args::from_hf_json(hf_config_json).family);
}

}  // namespace titan
