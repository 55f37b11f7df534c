// models/decoder/presets.h — the decoder family's members as data, and the rule that a knob applies or is
// refused.
//
// model.name picks a member of titan's one decoder family (qwen3, qwen3_moe,
// gpt_oss, llama3, mixtral, olmo2, gemma3). A member is a preset: the values it gives the knobs the
// YAML and command line leave unset. Every knob applies to every member,
// except where the configuration has nothing for it to act on (MoE keys
// without MoE layers, YaRN keys without YaRN, ...): such a key, when given, is
// refused naming the key and why, and the saved config.yaml leaves it out.
#pragma once
#include <map>
#include <set>
#include <vector>
#include <string>

#include "models/decoder/args.h"

namespace titan::decoder {

// titan's preset of a member: one initializer each (presets.cpp).
const Args& preset(Family f);
// Hugging Face's class defaults of a member (what a config.json that omits a field means).
Args hf_defaults(Family f);

// Every knob not in `given` takes the preset of a.name (and the experts' size follows hidden_dim when every
// layer is MoE and moe_hidden_dim is not given: gpt-oss's intermediate_size names it).
void apply_preset(Args& a, const std::set<std::string>& given);
// model.flavor: a named size of a member (qwen3 0.6b ... 32b, gpt_oss 20b / 120b, ...), the knobs it sets
// (presets.cpp's table). `where` maps each given key to where it was written ("FILE:LINE" or "--model.KEY").
// The flavor sets its knobs where they were given earlier (the YAML under a --model.flavor) or not at all;
// a knob given later (--model.n_layers 2 under the YAML's flavor) overrides it and the flavor becomes
// "custom" (returned: one line saying so); a knob given in the same place (one file, or both flags) that
// disagrees is refused, as is a flavor the member does not have (listing the ones it has). "custom": no
// flavor, the knobs as given. The flavor's knobs join `given`.
std::string apply_flavor(Args& a, const std::map<std::string, std::string>& where, std::set<std::string>& given);
std::vector<std::string> flavors(Family f);

// "key value, ..." for every knob that acts and differs from model.name's preset, the size keys left out
// (Args::describe prints them): what an ablation changed, for the log. "" when none.
std::string knobs_beyond_preset(const Args& a);

// "" when model.<key> acts on this configuration, else why it does not.
std::string knob_inapplicable(const Args& a, const std::string& key);
// Refuses every given key that does not act (naming it and why).
void refuse_inapplicable(const Args& a, const std::set<std::string>& given);

}  // namespace titan::decoder
