#include "models/decoder/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace titan::decoder {

namespace {
// HF _compute_yarn_parameters (float32 tensors, python-float corrections)
std::vector<float> yarn(std::vector<float> pos_freq, int64_t D, double base, const RopeScaling& r) {
  auto correction_dim = [&](double rotations) {
    return (double)D * std::log((double)r.original_max_position_embeddings / (rotations * 2 * M_PI)) /
           (2 * std::log(base));
  };
  double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, (double)(D - 1));
  if (low == high) high += 0.001;
  std::vector<float> inv(pos_freq.size());
  for (size_t i = 0; i < inv.size(); ++i) {
    const float extrap = 1.0f / pos_freq[i], interp = 1.0f / ((float)r.factor * pos_freq[i]);
    float ramp = ((float)i - (float)low) / (float)(high - low);
    ramp = std::min(1.0f, std::max(0.0f, ramp));
    const float extrap_factor = 1.0f - ramp;
    inv[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
  }
  return inv;
}

// HF _compute_llama3_parameters (float32)
std::vector<float> llama3(std::vector<float> inv, const RopeScaling& r) {
  const float factor = (float)r.factor, lo = (float)r.low_freq_factor, hi = (float)r.high_freq_factor;
  const float old_ctx = (float)r.original_max_position_embeddings;
  const float low_wavelen = old_ctx / lo, high_wavelen = old_ctx / hi;
  for (auto& f : inv) {
    const float wavelen = 2.0f * (float)M_PI / f;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    const float smooth = (old_ctx / wavelen - lo) / (hi - lo);
    const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? smoothed : scaled;
  }
  return inv;
}
}  // namespace

std::pair<Tensor, Tensor> rope_tables(int64_t S, int64_t D, double theta, const RopeScaling& r, Device d) {
  std::vector<int64_t> pos((size_t)S);
  for (int64_t i = 0; i < S; ++i) pos[(size_t)i] = i;
  return rope_tables(pos, D, theta, r, d);
}

std::pair<Tensor, Tensor> rope_tables(const std::vector<int64_t>& positions, int64_t D, double theta,
                                      const RopeScaling& r, Device d) {
  const int64_t h = D / 2, S = (int64_t)positions.size();
  Tensor c = empty({S, h}, DType::F32, d), s = empty({S, h}, DType::F32, d);
  if (d == Device::Meta) return {c, s};
  std::vector<float> pos_freq(h), inv(h);
  for (int64_t i = 0; i < h; ++i) {  // as HF: theta ** (arange(0, D, 2) / D) in float32
    pos_freq[i] = std::pow((float)theta, (float)(2 * i) / (float)D);
    inv[i] = 1.0f / pos_freq[i];
  }
  float attention_factor = 1.0f;
  if (r.type == RopeScalingType::yarn) {
    inv = yarn(pos_freq, D, theta, r);
    // HF: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are given (DeepSeek), else
    // get_mscale(factor)
    auto m = [&](double s) { return r.factor <= 1 ? 1.0 : 0.1 * s * std::log(r.factor) + 1.0; };
    attention_factor = (float)(r.mscale > 0 && r.mscale_all_dim > 0 ? m(r.mscale) / m(r.mscale_all_dim) : m(1.0));
  } else if (r.type == RopeScalingType::llama3) {
    inv = llama3(inv, r);
  } else if (r.type == RopeScalingType::linear) {  // HF _compute_linear_scaling_rope_parameters
    for (auto& f : inv) f /= (float)r.factor;
  }
  float* pc = c.data<float>();
  float* ps = s.data<float>();
  for (int64_t p = 0; p < S; ++p)
    for (int64_t i = 0; i < h; ++i) {
      const float ang = (float)positions[(size_t)p] * inv[i];
      pc[p * h + i] = attention_factor == 1.0f ? std::cos(ang) : std::cos(ang) * attention_factor;
      ps[p * h + i] = attention_factor == 1.0f ? std::sin(ang) : std::sin(ang) * attention_factor;
    }
  return {c, s};
}

}  // namespace titan::decoder
