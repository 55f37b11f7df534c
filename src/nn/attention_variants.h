// src/nn/attention_variants.h — the attention variants a model config selects
// (model.attn_mask_type, attn_logit_softcap, attn_bias), built from flex
// attention's score_mod / mask_mod. Each is a few lines; a new variant is a
// new function here (or a lambda at the call site).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/config/enum_names.h"
#include "src/ops/flex_attention.h"

namespace titan::nn {

// An attention of this rank's queries over the whole sequence: q [B, S_local, Hq, D], k/v [B, S_local, Hkv, D]
// -> [B, S_local, Hq, D], with opt's mask, score_mod and sinks read at global positions.
using AttendFn = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v, const FlexOptions& opt)>;

// How this rank holds each sequence. Context parallel cuts a sequence of S tokens into 2 x parts chunks of
// S / (2 parts) and gives rank `index` of the group chunks index and 2 parts - 1 - index (the head-tail
// balance of causal attention's work); `attend` is the plan's attention over the whole sequence (its K/V
// exchange). Default: the whole sequence on this rank, flex attention.
struct SequenceShard {
  int64_t parts = 1, index = 0;
  AttendFn attend;
  bool sharded() const { return parts > 1; }
  // The global chunk of local chunk a (0 or 1).
  int64_t chunk(int64_t a) const { return a == 0 ? index : 2 * parts - 1 - index; }
  // The global positions of this rank's local_len tokens (2 chunks of local_len / 2), in local order.
  std::vector<int64_t> positions(int64_t local_len) const;
  // The global sequence length of a local one.
  int64_t global_len(int64_t local_len) const { return local_len * parts; }
};

class BlockMaskCache;

// What every attention layer of one forward reads: the RoPE tables
// [S, head_dim/2] (rows: this rank's positions), the document index of every token of the whole sequence,
// int64 [B, S_global] (block_causal; undefined when the batch carries none), and the attention over the
// sequence (undefined: flex attention on this rank).
struct AttentionInputs {
  Tensor cos, sin;
  Tensor cos_local, sin_local;  // the sliding layers' own RoPE tables, when they have one (Gemma 3)
  Tensor nope_q_scale;  // [S, 1, 1]: the NoPE layers' query temperature at this rank's positions (Llama 4)
  Tensor doc_ids;
  AttendFn attend;
  BlockMaskCache* masks = nullptr;  // the model's (null: every call builds its mask)
};

// The mask of the full-attention layers, and the bias added to the scores.
enum class MaskKind { causal, block_causal, sliding_window, prefix_lm };
constexpr std::array<std::string_view, 4> enum_names(MaskKind) {
  return {"causal", "block_causal", "sliding_window", "prefix_lm"};
}
enum class ScoreBias { none, alibi, relative };
constexpr std::array<std::string_view, 3> enum_names(ScoreBias) { return {"none", "alibi", "relative"}; }

struct AttentionVariant {
  MaskKind mask = MaskKind::causal;  // of the full-attention layers
  int64_t prefix_len = 0;       // prefix_lm: tokens at the start of each sequence every query sees
  double softcap = 0;           // > 0: scores become softcap * tanh(score / softcap) (Gemma-2), after the bias
  ScoreBias bias = ScoreBias::none;
  int64_t relative_max_distance = 128;  // relative: distances clipped to [-(R-1), R-1]; table [H, 2R-1]
  bool operator==(const AttentionVariant&) const = default;
  bool is_default() const { return *this == AttentionVariant(); }
  // Checks the values (names the key); `seq_len` > 0 also checks prefix_len against it.
  void validate(int64_t seq_len = 0) const;
  std::string describe() const;  // e.g. "block_causal, alibi, softcap 50"
};

// What decides a layer's block mask (when it reads no data): the variant, the layer's window and chunk, the
// attention's sizes.
struct AttentionVariantKey {
  AttentionVariant variant;
  int64_t window = 0, chunk = 0, B = 0, H = 0, q_len = 0, kv_len = 0;
  bool operator==(const AttentionVariantKey&) const = default;
};

// Block masks built once per model and reused by every layer and micro-batch that attends alike: the same
// variant, window, chunk and sizes (a 405B plan's 126 layers x 64 micro-batches x forward, recompute and
// backward classify the same 64 x 64 tiles otherwise). Masks that differ per batch row (block_causal's
// documents: MaskMod::per_batch) or that a context-parallel plan builds per chunk pair are not cached.
class BlockMaskCache {
 public:
  // The mask of `key`, built by `build` the first time.
  const BlockMask& get(const AttentionVariantKey& key, const std::function<BlockMask()>& build);

 private:
  std::vector<std::pair<AttentionVariantKey, BlockMask>> masks_;  // few: one per kind of layer and size
};

// The mask of one layer: `window` > 0 makes it a sliding layer (within the
// document under block_causal); otherwise the variant's mask. `chunk` > 0 also keeps each query within its
// chunk of `chunk` tokens (chunked local attention: Llama 4's RoPE layers). doc_ids int64
// [B, S] (block_causal) is the document index of every token.
MaskMod layer_mask(const AttentionVariant& v, int64_t window, const Tensor& doc_ids, int64_t chunk = 0);

// The score_mod: bias (ALiBi slopes [H] or relative table [H, 2R-1], the
// layer's local heads), then the softcap. Undefined when neither is on.
ScoreMod layer_score_mod(const AttentionVariant& v, const Tensor& bias_param);

// ALiBi slopes of n heads (Press et al.; HF's build_alibi_tensor): a geometric
// sequence from 2^(-8/n') for the largest power of two n' <= n, interleaved
// with the next power's odd terms for the rest. [n] float32.
Tensor alibi_slopes(int64_t n_heads);

// One layer's attention: q [B, S, Hq, D], k/v [B, S, Hkv, D] -> [B, S, Hq, D]
// with the layer's mask (window > 0: a sliding layer), the variant's
// score_mod over `bias` (ALiBi slopes or the relative table of these heads)
// and optional sinks [Hq].
// `attend` (undefined: flex attention) runs it (context parallel: over the whole sequence).
// scale: what multiplies q.k (0: head_dim^-0.5; Gemma 3: query_pre_attn_scalar^-0.5), before the score mods.
// chunk > 0: chunked local attention (layer_mask).
// masks: the model's cache of block masks (null: built here every call).
Tensor variant_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& sinks,
                         const AttentionVariant& variant, int64_t window, const Tensor& doc_ids, const Tensor& bias,
                         const AttendFn& attend = nullptr, double scale = 0, int64_t chunk = 0,
                         BlockMaskCache* masks = nullptr);

// The tensor a layer's attn_bias needs for n_heads heads: ALiBi's slopes
// (a constant, on the default device), the relative table (zeros; register it
// as the parameter `relative_bias`), or undefined.
Tensor attention_bias_tensor(const AttentionVariant& v, int64_t n_heads);

// Score mods, usable on their own
ScoreMod softcap_mod(double cap);
ScoreMod alibi_mod(const Tensor& slopes);                                     // s + slope[h] * (kv - q)
ScoreMod relative_bias_mod(const Tensor& table, int64_t max_distance);        // s + table[h, clip(q - kv) + R - 1]

}  // namespace titan::nn
