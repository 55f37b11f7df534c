#include "src/nn/attention_variants.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "src/ops/ops.h"
#include "src/tensor/error.h"

namespace titan::nn {

void AttentionVariant::validate(int64_t seq_len) const {
  TITAN_CHECK(softcap >= 0 && std::isfinite(softcap), "config error: model.attn_logit_softcap must be >= 0 (0 = off), got ",
              softcap);
  TITAN_CHECK(relative_max_distance >= 1, "config error: model.attn_relative_max_distance must be >= 1, got ",
              relative_max_distance);
  TITAN_CHECK(bias == ScoreBias::relative || relative_max_distance == AttentionVariant().relative_max_distance,
              "config error: model.attn_relative_max_distance (", relative_max_distance,
              ") applies only with model.attn_bias: relative (it is '", config::enum_name(bias), "')");
  if (mask == MaskKind::prefix_lm) {
    TITAN_CHECK(prefix_len > 0, "config error: model.attn_mask_type prefix_lm needs model.attn_prefix_len > 0 (the "
                                "tokens at the start of each sequence that every query sees)");
    TITAN_CHECK(seq_len <= 0 || prefix_len < seq_len, "config error: model.attn_prefix_len (", prefix_len,
                ") must be shorter than training.seq_len (", seq_len, ")");
  } else {
    TITAN_CHECK(prefix_len == 0, "config error: model.attn_prefix_len (", prefix_len,
                ") applies only with model.attn_mask_type: prefix_lm (it is '", config::enum_name(mask), "')");
  }
}

std::string AttentionVariant::describe() const {
  std::ostringstream o;
  o << config::enum_name(mask);
  if (mask == MaskKind::prefix_lm) o << " " << prefix_len;
  if (bias != ScoreBias::none)
    o << ", " << config::enum_name(bias) << (bias == ScoreBias::relative ? " " + std::to_string(relative_max_distance) : "");
  if (softcap > 0) o << ", softcap " << softcap;
  return o.str();
}

MaskMod layer_mask(const AttentionVariant& v, int64_t window, const Tensor& doc_ids, int64_t chunk) {
  MaskMod base;
  if (window > 0) base = sliding_window_mask(window);
  else if (v.mask == MaskKind::prefix_lm) base = prefix_lm_mask(v.prefix_len);
  else base = causal_mask();  // causal, and block_causal's causal part
  TITAN_CHECK(v.mask != MaskKind::sliding_window || window > 0,
              "attention: attn_mask_type sliding_window needs model.sliding_window > 0");
  if (chunk > 0) base = window > 0 || v.mask == MaskKind::prefix_lm ? and_masks(chunked_causal_mask(chunk), base)
                                                                    : chunked_causal_mask(chunk);
  if (v.mask != MaskKind::block_causal) return base;
  TITAN_CHECK(doc_ids.defined(), "attention: model.attn_mask_type block_causal needs the document ids of the batch "
                                 "(the data loader's /doc_starts); none were passed to the model's forward");
  return and_masks(document_causal_mask(doc_ids), base);
}

ScoreMod softcap_mod(double cap) {
  TITAN_CHECK(cap > 0, "softcap_mod: cap must be > 0, got ", cap);
  return ScoreMod("softcap", {}, [cap](auto s, const auto&, ScoreIndex) { return cap * flex::tanh(s / cap); }, 4);
}

ScoreMod alibi_mod(const Tensor& slopes) {
  return ScoreMod("alibi", {slopes},
                  [](auto s, const auto& c, ScoreIndex i) { return s + c(0, i.h) * double(i.kv - i.q); }, 2);
}

ScoreMod relative_bias_mod(const Tensor& table, int64_t R) {
  TITAN_CHECK(table.dim() == 2 && table.size(1) == 2 * R - 1, "relative_bias_mod: table must be [H, ", 2 * R - 1,
              "] for max distance ", R, ", got ", shape_str(table.shape()));
  return ScoreMod("relative_bias", {table}, [R](auto s, const auto& c, ScoreIndex i) {
    return s + c(0, i.h, std::clamp<int64_t>(i.q - i.kv, -(R - 1), R - 1) + R - 1);
  }, 1);
}

ScoreMod layer_score_mod(const AttentionVariant& v, const Tensor& bias_param) {
  const double cap = v.softcap;
  const int64_t R = v.relative_max_distance;
  if (v.bias == ScoreBias::none) return cap > 0 ? softcap_mod(cap) : ScoreMod();
  TITAN_CHECK(bias_param.defined(), "attention: attn_bias ", config::enum_name(v.bias), " without its slopes/table tensor");
  if (cap <= 0) return v.bias == ScoreBias::alibi ? alibi_mod(bias_param) : relative_bias_mod(bias_param, R);
  if (v.bias == ScoreBias::alibi)
    return ScoreMod("alibi+softcap", {bias_param}, [cap](auto s, const auto& c, ScoreIndex i) {
      return cap * flex::tanh((s + c(0, i.h) * double(i.kv - i.q)) / cap);
    }, 6);
  return ScoreMod("relative_bias+softcap", {bias_param}, [cap, R](auto s, const auto& c, ScoreIndex i) {
    return cap * flex::tanh((s + c(0, i.h, std::clamp<int64_t>(i.q - i.kv, -(R - 1), R - 1) + R - 1)) / cap);
  }, 5);
}

Tensor variant_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sinks,
                         const AttentionVariant& variant, int64_t window, const Tensor& doc_ids, const Tensor& bias,
                         const AttendFn& attend, double scale, int64_t chunk, BlockMaskCache* masks) {
  FlexOptions f;
  f.scale = scale;
  f.mask_mod = layer_mask(variant, window, doc_ids, chunk);
  f.score_mod = layer_score_mod(variant, bias.defined() && bias.dtype() != q.dtype() ? bias.to(q.dtype()) : bias);
  f.sinks = sinks;
  if (!attend && masks && !f.mask_mod.per_batch() && q.dim() == 4 && k.dim() == 4) {  // [B, S, H, D]; no data read
    const AttentionVariantKey key{variant, window, chunk, q.size(0), q.size(2), q.size(1), k.size(1)};
    f.block_mask = masks->get(key, [&] { return create_block_mask(f.mask_mod, key.B, key.H, key.q_len, key.kv_len); });
  }
  // (under bf16 autocast both read q / k / v as bf16 and return a bf16 output, as PyTorch's CPU flash attention
  // for bf16)
  return attend ? attend(q, k, v, f) : flex_attention(q, k, v, f);
}

const BlockMask& BlockMaskCache::get(const AttentionVariantKey& key, const std::function<BlockMask()>& build) {
  for (const auto& [k, m] : masks_)
    if (k == key) return m;
  masks_.emplace_back(key, build());
  return masks_.back().second;
}

std::vector<int64_t> SequenceShard::positions(int64_t local_len) const {
  TITAN_CHECK(parts >= 1 && index >= 0 && index < parts, "SequenceShard: rank ", index, " of ", parts, " parts");
  std::vector<int64_t> p((size_t)local_len);
  if (parts == 1) {
    for (int64_t i = 0; i < local_len; ++i) p[(size_t)i] = i;
    return p;
  }
  TITAN_CHECK(local_len % 2 == 0, "SequenceShard: a context-parallel rank holds two equal chunks; its ", local_len,
              " tokens do not split in two");
  const int64_t c = local_len / 2;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t i = 0; i < c; ++i) p[(size_t)(a * c + i)] = chunk(a) * c + i;
  return p;
}

Tensor attention_bias_tensor(const AttentionVariant& v, int64_t n_heads) {
  if (v.bias == ScoreBias::alibi)
    return default_device() == Device::Meta ? empty({n_heads}, DType::F32) : alibi_slopes(n_heads);
  if (v.bias == ScoreBias::relative) return zeros({n_heads, 2 * v.relative_max_distance - 1});
  return Tensor();
}

Tensor alibi_slopes(int64_t n) {
  TITAN_CHECK(n > 0, "alibi_slopes: need at least one head, got ", n);
  const int64_t cp = (int64_t)1 << (int64_t)std::floor(std::log2((double)n));
  std::vector<float> s;
  const double base = std::pow(2.0, -8.0 / (double)cp);
  for (int64_t p = 1; p <= cp; ++p) s.push_back((float)std::pow(base, (double)p));
  const double extra = std::pow(2.0, -4.0 / (double)cp);
  for (int64_t p = 1; (int64_t)s.size() < n; p += 2) s.push_back((float)std::pow(extra, (double)p));
  return from_vector<float>(s, {n});
}

}  // namespace titan::nn
