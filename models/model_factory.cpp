#include "models/causal_lm.h"
#include "models/decoder/model.h"

namespace titan {

std::unique_ptr<CausalLM> build_model(const JobConfig::Model& m) {
  return std::make_unique<decoder::Decoder>(decoder::Args::from_job(m));
}

std::unique_ptr<CausalLM> build_model_from_hf(const std::string& text) {
  return std::make_unique<decoder::Decoder>(decoder::Args::from_hf_json(text));
}

}  // namespace titan
