#include "models/hf_layout.h"

#include "src/autograd/grad_mode.h"
#include "src/ops/ops.h"

namespace titan {

HfLayout same_layout(const std::vector<Region>& params) {
  HfLayout l;
  l.regions = params;
  return l;
}

HfLayout per_expert_layout(const std::vector<Region>& params, const ExpertNames& names) {
  HfLayout l;
  for (const Region& r : params) {
    const std::string& n = r.name;
    const size_t at = n.find(".mlp.experts.");
    const std::string proj = at == std::string::npos ? "" : n.substr(at + 13);
    if (proj != "gate_proj" && proj != "up_proj" && proj != "down_proj") {
      l.regions.push_back(r);
      const size_t router = n.find(".mlp.gate.");  // the router moves with its module
      if (router != std::string::npos) l.regions.back().name = n.substr(0, router) + "." + names.module + n.substr(router + 4);
      const std::string bias = ".mlp.expert_bias";
      if (!names.route_bias.empty() && n.size() > bias.size() && n.compare(n.size() - bias.size(), bias.size(), bias) == 0)
        l.regions.back().name = n.substr(0, n.size() - bias.size()) + "." + names.module + "." + names.route_bias;
      continue;
    }
    TITAN_CHECK(r.full_shape.size() == 3, "per_expert_layout: ", n, " is not stacked [E, in, out]");
    const std::string prefix = n.substr(0, at) + "." + names.module + ".experts.";
    const std::string hf_proj = proj == "gate_proj" ? names.gate : proj == "up_proj" ? names.up : names.down;
    Tensor* local = r.local;
    const int64_t n0 = local->size(0);
    // every rank lists every expert, in one order (collective writers create the same tensors on all
    // ranks): the experts held elsewhere (expert parallel) as empty blocks
    for (int64_t e = 0; e < r.full_shape[0]; ++e) {
      const std::string hf = prefix + std::to_string(e) + "." + hf_proj + ".weight";
      const Shape hf_shape{r.full_shape[2], r.full_shape[1]};
      const int64_t i = e - r.offset[0];
      if (i < 0 || i >= n0) {
        l.copies.push_back(empty({0, 0}, local->dtype(), local->device()));
        l.regions.push_back({hf, &l.copies.back(), hf_shape, Shape{0, 0}, false});
        continue;
      }
      Tensor block;  // this expert's [in, out] block, as HF's [out, in]
      {
        NoGradGuard ng;
        block = transpose(local->slice(0, i, i + 1).squeeze(0), 0, 1).contiguous().clone();
      }
      l.copies.push_back(block);
      Tensor* copy = &l.copies.back();
      l.regions.push_back({hf, copy, hf_shape, Shape{r.offset[2], r.offset[1]}, r.writer});
      l.writes.push_back([local, copy, i]() {
        NoGradGuard ng;
        Tensor dst = local->slice(0, i, i + 1).squeeze(0);  // a view of the parameter
        copy_(dst, transpose(*copy, 0, 1));
      });
    }
  }
  return l;
}

HfLayout fused_halves_layout(const std::vector<Region>& params, const FusedExpertNames& names) {
  HfLayout l;
  for (const Region& r : params) {
    Region out = r;
    const size_t at = r.name.find(".mlp.");
    if (at != std::string::npos) {
      const std::string prefix = r.name.substr(0, at) + "." + names.module + ".";
      const std::string rest = r.name.substr(at + 5);
      if (rest == "experts.gate_proj" || rest == "experts.up_proj") {
        TITAN_CHECK(r.full_shape.size() == 3, "fused_halves_layout: ", r.name, " is not stacked [E, in, out]");
        const int64_t I = r.full_shape[2];
        out.name = prefix + "experts." + names.fused;
        out.full_shape = {r.full_shape[0], r.full_shape[1], 2 * I};
        if (rest == "experts.up_proj") out.offset[2] += I;  // the second half
      } else if (rest.rfind("gate.", 0) == 0) {
        out.name = prefix + names.router + rest.substr(4);
      } else {
        out.name = prefix + rest;
      }
    }
    l.regions.push_back(out);
  }
  return l;
}

}  // namespace titan
