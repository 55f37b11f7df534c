#include "models/converters.h"

#include "src/config/enum_names.h"
#include "src/nn/layers.h"
#include "src/tensor/error.h"

namespace titan::models {

Float8Conversion convert_to_float8(nn::Module& model, Float8Recipe recipe, const std::vector<std::string>& filter_fqns) {
  const Float8Casts casts = float8_casts(recipe);
  Float8Conversion r;
  for (auto& [name, m] : model.named_modules()) {
    auto* lin = dynamic_cast<nn::Linear*>(m);
    if (!lin) continue;
    bool filtered = false;
    for (const std::string& f : filter_fqns) filtered = filtered || name.find(f) != std::string::npos;
    if (filtered) {
      r.filtered.push_back(name);
      continue;
    }
    const int64_t out = lin->weight.size(0), in = lin->weight.size(1);
    if (in % 16 != 0 || out % 16 != 0) {
      r.unaligned.push_back(name);
      continue;
    }
    TITAN_CHECK(!casts.mx || (in % kMxBlock == 0 && out % kMxBlock == 0), "config error: float8.recipe ",
                config::enum_name(recipe), ": linear layer ", name, " has weight [", out, ", ", in,
                "]; MX blocks of ", kMxBlock, " need both features to be multiples of ", kMxBlock,
                " (add '", name, "' or a part of its name to float8.filter_fqns to leave it in float32)");
    lin->float8 = casts;
    r.converted.push_back(name);
  }
  return r;
}

}  // namespace titan::models
