// src/config/model_families.h — the decoder family's members as config data.
//
// model.name picks a member of titan's one decoder family (qwen3, qwen3_moe,
// gpt_oss, llama3). A member is a preset: the values it gives the model keys
// the YAML and command line leave unset. Every model key applies to every
// member, except where the configuration has nothing for it to act on (MoE
// keys without MoE layers, YaRN keys without YaRN, ...): such a key, when
// given, is refused naming the key and why (a knob applies or is refused),
// and the saved config.yaml leaves it out.
#pragma once
#include <string>

#include "src/config/job_config.h"

namespace titan {

// Sets the family's value of every key not in m.given.
void apply_model_family(JobConfig::Model& m);
// "" when model.<key> acts on this configuration, else why it does not.
std::string model_key_inapplicable(const JobConfig::Model& m, const std::string& key);
// Refuses every given key that does not act, and values no member could run.
void check_model_keys(const JobConfig::Model& m);

}  // namespace titan
