#include "models/converters.h"

#include "models/decoder/model.h"
#include "src/config/enum_names.h"
#include "src/nn/layers.h"
#include "src/tensor/error.h"

namespace titan::models {

namespace {
std::string join_names(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s + "]";
}
}  // namespace

Float8Conversion convert_to_float8(nn::Module& model, Float8Recipe recipe, const std::vector<std::string>& filter_fqns,
                                   const std::vector<std::string>& moe_fqns) {
  const Float8Casts casts = float8_casts(recipe);
  Float8Conversion r;
  if (!moe_fqns.empty())
    TITAN_CHECK(recipe == Float8Recipe::rowwise || casts.mx, "config error: float8.moe_fqns_prototype ",
                join_names(moe_fqns), " needs float8.recipe rowwise, mxfp8 or mxfp8_rceil (torchao's grouped GEMMs for "
                "MoE experts), got ", config::enum_name(recipe), "; set the recipe or drop the key");
  std::vector<bool> matched(moe_fqns.size(), false);
  for (auto& [name, m] : model.named_modules()) {
    if (auto* ex = dynamic_cast<decoder::Experts*>(m)) {
      bool named = false;
      for (size_t i = 0; i < moe_fqns.size(); ++i)
        if (name.find(moe_fqns[i]) != std::string::npos) named = matched[i] = true;
      if (!named) continue;
      const int64_t dim = ex->down_proj.size(2), hidden = ex->down_proj.size(1), align = casts.mx ? kMxBlock : 16;
      TITAN_CHECK(dim % align == 0 && hidden % align == 0, "config error: float8.moe_fqns_prototype: experts ", name,
                  " have dim ", dim, " and hidden size ", hidden, "; ", casts.mx ? "MX" : "FP8",
                  " grouped GEMMs need both to be multiples of ", align, " (drop the entry to leave them as they are)");
      ex->float8 = casts;
      r.experts.push_back(name);
      continue;
    }
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
  for (size_t i = 0; i < moe_fqns.size(); ++i)
    TITAN_CHECK(matched[i], "config error: float8.moe_fqns_prototype: '", moe_fqns[i],
                "' matches no MoE experts module of this model (their names end in mlp.experts; a dense model has "
                "none); drop the entry");
  return r;
}

}  // namespace titan::models
