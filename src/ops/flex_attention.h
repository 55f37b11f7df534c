// src/ops/flex_attention.h — attention variants as two small C++ callables.
//
// As PyTorch's FlexAttention: a variant is a `score_mod`, a function of one
// (already scaled) score and its index (batch b, head h, query q, key kv),
// and a `mask_mod`, a predicate on the index. The op runs flash-tiled (query
// and key tiles, online softmax, only the row log-sum-exp saved: O(S·D)
// memory per head), skips the tiles a block mask marks empty, and derives the
// backward of the score_mod from its own definition: the same generic
// callable runs on plain numbers in the forward and on `flex::Dual` numbers
// (value + derivatives w.r.t. the score and every captured element it read)
// in the backward. Captured tensors are op inputs, so they train.
//
//   // ALiBi in three lines; `slopes` [H] is captured (trainable if it requires grad)
//   ScoreMod alibi("alibi", {slopes}, [](auto s, const auto& cap, ScoreIndex i) {
//     return s + cap(0, i.h) * double(i.kv - i.q);
//   });
//   MaskMod causal = causal_mask();
//   Tensor o = flex_attention(q, k, v, {.score_mod = alibi, .mask_mod = causal});
//
// Determinism: the forward owns output rows per (batch, head, query tile);
// the backward owns dK/dV and the dQ of a KV head's query heads per (batch,
// KV head), accumulating in a fixed order, and captured-tensor gradients are
// summed over tasks in task order: results do not depend on the thread count.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "src/tensor/tensor.h"

namespace titan {

// The index of one attention score. h counts the op's query heads (a tensor-
// parallel shard's local heads).
struct ScoreIndex {
  int64_t b, h, q, kv;
};

namespace flex {

// ---- forward-mode derivatives of a score_mod -------------------------------
// A value with its derivative w.r.t. the score (`ds`) and w.r.t. the captured
// elements read while computing it (`d[k]` for the k-th read of this score).
template <typename T>
struct Dual {
  static constexpr int kSlots = 8;  // captured reads per score
  T v = 0, ds = 0;
  T d[kSlots] = {};  // the first n are meaningful
  int n = 0;  // slots in use
  Dual() = default;
  Dual(double x) : v((T)x) {}  // NOLINT: constants mix freely
};

template <typename X>
struct is_dual : std::false_type {};
template <typename T>
struct is_dual<Dual<T>> : std::true_type {};

namespace detail {
// Chain rule for a unary function with value f and derivative df at a.
template <typename T>
Dual<T> chain(const Dual<T>& a, T f, T df) {
  Dual<T> r;
  r.v = f;
  r.ds = df * a.ds;
  r.n = a.n;
  for (int k = 0; k < a.n; ++k) r.d[k] = df * a.d[k];
  return r;
}
// r = ca * a + cb * b for the derivative parts; value set by the caller.
template <typename T>
Dual<T> combine(const Dual<T>& a, T ca, const Dual<T>& b, T cb, T value) {
  Dual<T> r;
  r.v = value;
  r.ds = ca * a.ds + cb * b.ds;
  r.n = std::max(a.n, b.n);
  for (int k = 0; k < r.n; ++k) r.d[k] = (k < a.n ? ca * a.d[k] : T(0)) + (k < b.n ? cb * b.d[k] : T(0));
  return r;
}
}  // namespace detail

template <typename T> Dual<T> operator+(const Dual<T>& a, const Dual<T>& b) { return detail::combine(a, T(1), b, T(1), a.v + b.v); }
template <typename T> Dual<T> operator-(const Dual<T>& a, const Dual<T>& b) { return detail::combine(a, T(1), b, T(-1), a.v - b.v); }
template <typename T> Dual<T> operator*(const Dual<T>& a, const Dual<T>& b) { return detail::combine(a, b.v, b, a.v, a.v * b.v); }
template <typename T> Dual<T> operator/(const Dual<T>& a, const Dual<T>& b) {
  return detail::combine(a, T(1) / b.v, b, -a.v / (b.v * b.v), a.v / b.v);
}
template <typename T> Dual<T> operator-(const Dual<T>& a) { return detail::chain(a, -a.v, T(-1)); }
template <typename T, typename X, typename = std::enable_if_t<std::is_arithmetic_v<X>>>
Dual<T> operator+(const Dual<T>& a, X x) { return detail::chain(a, a.v + (T)x, T(1)); }
template <typename T, typename X, typename = std::enable_if_t<std::is_arithmetic_v<X>>>
Dual<T> operator+(X x, const Dual<T>& a) { return a + x; }
template <typename T, typename X, typename = std::enable_if_t<std::is_arithmetic_v<X>>>
Dual<T> operator-(const Dual<T>& a, X x) { return detail::chain(a, a.v - (T)x, T(1)); }
template <typename T, typename X, typename = std::enable_if_t<std::is_arithmetic_v<X>>>
Dual<T> operator-(X x, const Dual<T>& a) { return detail::chain(a, (T)x - a.v, T(-1)); }
template <typename T, typename X, typename = std::enable_if_t<std::is_arithmetic_v<X>>>
Dual<T> operator*(const Dual<T>& a, X x) { return detail::chain(a, a.v * (T)x, (T)x); }
template <typename T, typename X, typename = std::enable_if_t<std::is_arithmetic_v<X>>>
Dual<T> operator*(X x, const Dual<T>& a) { return a * x; }
template <typename T, typename X, typename = std::enable_if_t<std::is_arithmetic_v<X>>>
Dual<T> operator/(const Dual<T>& a, X x) { return detail::chain(a, a.v / (T)x, T(1) / (T)x); }
template <typename T, typename X, typename = std::enable_if_t<std::is_arithmetic_v<X>>>
Dual<T> operator/(X x, const Dual<T>& a) { return detail::chain(a, (T)x / a.v, -(T)x / (a.v * a.v)); }

// Math for score_mods: the same call works on plain numbers and on Duals.
template <typename X> X tanh(X x) { if constexpr (is_dual<X>::value) { auto t = std::tanh(x.v); return detail::chain(x, t, 1 - t * t); } else return std::tanh(x); }
template <typename X> X exp(X x) { if constexpr (is_dual<X>::value) { auto e = std::exp(x.v); return detail::chain(x, e, e); } else return std::exp(x); }
template <typename X> X log(X x) { if constexpr (is_dual<X>::value) return detail::chain(x, std::log(x.v), 1 / x.v); else return std::log(x); }
template <typename X> X sqrt(X x) { if constexpr (is_dual<X>::value) { auto r = std::sqrt(x.v); return detail::chain(x, r, 1 / (2 * r)); } else return std::sqrt(x); }
template <typename X> X sigmoid(X x) {
  if constexpr (is_dual<X>::value) { auto s = 1 / (1 + std::exp(-x.v)); return detail::chain(x, s, s * (1 - s)); }
  else return 1 / (1 + std::exp(-x));
}
template <typename X> X abs(X x) {
  if constexpr (is_dual<X>::value) return detail::chain(x, std::abs(x.v), decltype(x.v)(x.v < 0 ? -1 : 1));
  else return std::abs(x);
}
// cond ? a : b (the derivative follows the chosen side)
template <typename X> X select(bool cond, const X& a, const X& b) { return cond ? a : b; }

// Captured tensors as a score_mod sees them: cap(i, idx...) is element
// [idx...] of captured tensor i (row-major), a plain number in the forward
// and a Dual that remembers the read in the backward.
template <typename T>
struct CapturedTensor {
  const T* data = nullptr;
  std::vector<int64_t> shape;
  int64_t flat(std::initializer_list<int64_t> idx, int i) const;
};

template <typename T>
class ValueReader {
 public:
  explicit ValueReader(const CapturedTensor<T>* caps) : caps_(caps) {}
  template <typename... I>
  T operator()(int i, I... idx) const { return caps_[i].data[caps_[i].flat({(int64_t)idx...}, i)]; }

 private:
  const CapturedTensor<T>* caps_;
};

template <typename T>
class DualReader {
 public:
  struct Read { int cap; int64_t flat; };
  explicit DualReader(const CapturedTensor<T>* caps) : caps_(caps) {}
  template <typename... I>
  Dual<T> operator()(int i, I... idx) const {
    const int64_t f = caps_[i].flat({(int64_t)idx...}, i);
    if (n_ == Dual<T>::kSlots) overflow();
    reads_[n_] = {i, f};
    Dual<T> r;
    r.v = caps_[i].data[f];
    r.n = n_ + 1;
    r.d[n_++] = T(1);
    return r;
  }
  void reset() const { n_ = 0; }
  int size() const { return n_; }
  const Read& read(int k) const { return reads_[k]; }

 private:
  [[noreturn]] static void overflow();
  const CapturedTensor<T>* caps_;
  mutable Read reads_[Dual<T>::kSlots];
  mutable int n_ = 0;
};

// Type-erased tile evaluators of a score_mod, one per dtype.
template <typename T>
struct ScoreTile {
  // Forward: s [nq, ld] in place, s = mod(s) where keep (null: all).
  virtual void forward(T* s, int64_t ld, int64_t nq, int64_t nk, int64_t b, int64_t h, int64_t q0, int64_t k0,
                       const uint8_t* keep, const CapturedTensor<T>* caps) const = 0;
  // Backward of softmax(mod(s)) given dP: p_out = softmax probabilities,
  // ds_out = dL/ds; adds dL/dcaptured to cap_grad[i][flat] (in double: a
  // captured element can collect a sum over every score; null: not wanted).
  virtual void backward(const T* s, T* p_out, T* ds_out, const T* dp, int64_t ld, int64_t nq, int64_t nk, int64_t b,
                        int64_t h, int64_t q0, int64_t k0, const uint8_t* keep, const T* lse, const T* di,
                        const CapturedTensor<T>* caps, double* const* cap_grad) const = 0;
  virtual ~ScoreTile() = default;
};

}  // namespace flex

// ---- score_mod -----------------------------------------------------------------------
// A callable `f(score, cap, ScoreIndex) -> score'` generic in the number type
// (write it with `auto` and the flex:: math), plus the tensors it captures.
class ScoreMod {
 public:
  ScoreMod() = default;  // identity
  template <typename F>
  ScoreMod(std::string name, std::vector<Tensor> captures, F f, double flops_per_score = 2);
  bool defined() const { return f32_ != nullptr; }
  const std::string& name() const { return name_; }
  const std::vector<Tensor>& captures() const { return captures_; }
  double flops_per_score() const { return flops_; }
  template <typename T>
  const flex::ScoreTile<T>& tile() const;

 private:
  std::string name_;
  std::vector<Tensor> captures_;
  double flops_ = 0;
  std::shared_ptr<flex::ScoreTile<float>> f32_;
  std::shared_ptr<flex::ScoreTile<double>> f64_;
};

// ---- mask_mod and block masks ----------------------------------------------------------
enum class BlockKind : uint8_t { Empty = 0, Partial = 1, Full = 2 };

// A predicate `f(b, h, q, kv) -> bool` (true: the key is visible). An
// optional exact classifier of a whole tile [q0, q1) x [k0, k1) lets a block
// mask be built in O(tiles) instead of O(S²) predicate calls.
class MaskMod {
 public:
  using Fn = std::function<bool(int64_t b, int64_t h, int64_t q, int64_t kv)>;
  using TileFn = std::function<void(uint8_t* keep, int64_t ld, int64_t nq, int64_t nk, int64_t b, int64_t h,
                                    int64_t q0, int64_t k0)>;
  using Classifier = std::function<BlockKind(int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0, int64_t k1)>;
  MaskMod() = default;  // every key visible
  // per_batch / per_head: whether f depends on b / h (false lets one block
  // mask serve every batch row / head; claiming false wrongly skips tiles).
  template <typename F>
  MaskMod(std::string name, F f, bool per_batch = true, bool per_head = true);
  MaskMod& with_classifier(Classifier c) {
    classify_ = std::move(c);
    return *this;
  }
  bool defined() const { return (bool)tile_; }
  bool has_classifier() const { return (bool)classify_; }  // classify() exact in O(1) per tile
  const std::string& name() const { return name_; }
  bool per_batch() const { return per_batch_; }
  bool per_head() const { return per_head_; }
  // keep[i * ld + j] = f(b, h, q0 + i, k0 + j)
  void fill(uint8_t* keep, int64_t ld, int64_t nq, int64_t nk, int64_t b, int64_t h, int64_t q0, int64_t k0) const;
  // Exact kind of a tile (classifier when given, else the predicate on every element).
  BlockKind classify(int64_t b, int64_t h, int64_t q0, int64_t q1, int64_t k0, int64_t k1) const;
  bool operator()(int64_t b, int64_t h, int64_t q, int64_t kv) const;

 private:
  friend MaskMod and_masks(const MaskMod& a, const MaskMod& b);
  std::string name_ = "all";
  TileFn tile_;
  Classifier classify_;
  bool per_batch_ = false, per_head_ = false;
};

MaskMod causal_mask();                       // kv <= q
MaskMod sliding_window_mask(int64_t window);  // q - window < kv <= q
MaskMod chunked_causal_mask(int64_t chunk);  // kv <= q within chunks of `chunk` tokens (Llama 4's local layers)
MaskMod prefix_lm_mask(int64_t prefix);       // kv <= q, or kv < prefix (the prefix is seen by every query)
// Causal within each document: doc_ids int64 [B, S], non-decreasing along S
// (document index of each token). A meta doc_ids prices as causal (an upper bound).
MaskMod document_causal_mask(const Tensor& doc_ids);
MaskMod and_masks(const MaskMod& a, const MaskMod& b);

// Which tiles of [B, H, q_len, kv_len] a mask leaves visible; B or H is 1 when
// the mask does not depend on it (broadcast). The tile sizes are the kernel's.
struct BlockMask {
  int64_t B = 1, H = 1, q_len = 0, kv_len = 0, q_block = 128, kv_block = 128;
  int64_t q_offset = 0, kv_offset = 0;  // global positions of the first query / key row (FlexOptions)
  std::vector<BlockKind> kinds;  // [B, H, nq_blocks, nkv_blocks]
  bool defined() const { return q_len > 0; }
  int64_t nq() const { return (q_len + q_block - 1) / q_block; }
  int64_t nkv() const { return (kv_len + kv_block - 1) / kv_block; }
  BlockKind at(int64_t b, int64_t h, int64_t qb, int64_t kb) const {
    return kinds[(((B == 1 ? 0 : b) * H + (H == 1 ? 0 : h)) * nq() + qb) * nkv() + kb];
  }
  // Query-key pairs inside non-empty tiles for batch b, head h (the kernel's work).
  double computed_pairs(int64_t b, int64_t h) const;
  // Non-empty tiles over all tiles, averaged over (b, h).
  double density() const;
};
// q_offset / kv_offset: the global positions of row 0 of the queries / keys (the mask sees q + q_offset,
// kv + kv_offset).
BlockMask create_block_mask(const MaskMod& mask, int64_t B, int64_t H, int64_t q_len, int64_t kv_len,
                            int64_t q_block = 128, int64_t kv_block = 128, int64_t q_offset = 0,
                            int64_t kv_offset = 0);

struct FlexOptions {
  ScoreMod score_mod;   // undefined: identity
  MaskMod mask_mod;     // undefined: every key visible
  BlockMask block_mask;  // undefined: built here from mask_mod (build once and pass it to reuse across layers)
  Tensor sinks;         // [Hq] or undefined: a per-head logit joining each softmax denominator, then dropped
  double scale = 0;     // 0: head_dim^-0.5
  // Global positions of q's and k/v's first rows: every mask_mod, score_mod and tile classification sees
  // q + q_offset and kv + kv_offset (a rank's chunk of a sequence under context parallel).
  int64_t q_offset = 0, kv_offset = 0;
};

// q [B, Sq, Hq, D], k [B, Skv, Hkv, D], v [B, Skv, Hkv, Dv] (Hq % Hkv == 0) -> [B, Sq, Hq, Dv]. Dv may differ from
// D (multi-head latent attention: q.k over nope + rope dims, v narrower); the scale defaults to D's.
// Rows that see no key (and no sink) give 0, as PyTorch's flex_attention.
// Under bf16 autocast (src/ops/autocast.h) as PyTorch's CPU flash attention for bf16: q / k / v read as bf16, the
// tile GEMMs on bf16 operands (the probabilities and, in backward, dO and dS rounded to bf16 for them) with float32
// accumulation, softmax in float32, a bf16 output.
Tensor flex_attention(const Tensor& q, const Tensor& k, const Tensor& v, const FlexOptions& opt);

// ---- attention in blocks (context parallel) ---------------------------------------------
// One block of keys for a block of queries, without autograd: the pieces an attention over a sequence
// spread across ranks is assembled from (parallel/context_parallel.h). Positions from opt's offsets;
// opt.sinks join this block's softmax (give them to one block per query row). Meta inputs: shaped
// results, the visible tiles' work recorded.
namespace flex {
struct BlockOut {
  Tensor out;  // [B, Sq, Hq, Dv], normalized within the block
  Tensor lse;  // [B, Hq, Sq]: the block's log-sum-exp, -inf where it sees no key (and no sink)
};
// bf16 (float32 q only): the tiles as flex_attention's under bf16 autocast (q / k / v and the probabilities, in
// backward also dO and dS, read as bf16 by the tile GEMMs; float32 accumulation and softmax); otherwise in q's
// dtype. Both calls of one attention take the same flag.
BlockOut attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, const FlexOptions& opt,
                                 bool bf16);
// The block's share of the gradients, given the whole attention's output `out` [B, Sq, Hq, D] and
// log-sum-exp `lse` [B, Hq, Sq] (the softmax of every block is exp(s - lse), so FlashAttention-2's backward
// splits over key blocks): dq [B, Sq, Hq, D], dsinks [Hq] and dcaps (one per captured tensor) are added to
// (allocated as zeros when undefined); dk, dv [B, Skv, Hkv, D] are returned.
struct BlockGrads {
  Tensor dk, dv;
};
BlockGrads attention_block_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const FlexOptions& opt, const Tensor& out, const Tensor& lse, Tensor& dq,
                                    Tensor& dsinks, std::vector<Tensor>& dcaps, bool bf16);
}  // namespace flex

// ======================================================================================
// template definitions

namespace flex {
template <typename T>
int64_t CapturedTensor<T>::flat(std::initializer_list<int64_t> idx, int i) const {
  if (idx.size() != shape.size()) {
    throw std::runtime_error("flex_attention score_mod: captured tensor " + std::to_string(i) + " has " +
                             std::to_string(shape.size()) + " dims, read with " + std::to_string(idx.size()) +
                             " indices");
  }
  int64_t f = 0, d = 0;
  for (int64_t x : idx) {
    if (x < 0 || x >= shape[d]) {
      throw std::runtime_error("flex_attention score_mod: index " + std::to_string(x) + " out of range [0, " +
                               std::to_string(shape[d]) + ") in dim " + std::to_string(d) + " of captured tensor " +
                               std::to_string(i));
    }
    f = f * shape[d++] + x;
  }
  return f;
}

template <typename T>
void DualReader<T>::overflow() {
  throw std::runtime_error("flex_attention score_mod: more than " + std::to_string(Dual<T>::kSlots) +
                           " captured reads for one score");
}

template <typename T, typename F>
struct ScoreTileImpl final : ScoreTile<T> {
  F f;
  explicit ScoreTileImpl(F fn) : f(std::move(fn)) {}
  void forward(T* s, int64_t ld, int64_t nq, int64_t nk, int64_t b, int64_t h, int64_t q0, int64_t k0,
               const uint8_t* keep, const CapturedTensor<T>* caps) const override {
    ValueReader<T> cap(caps);
    for (int64_t i = 0; i < nq; ++i) {
      T* row = s + i * ld;
      const uint8_t* kr = keep ? keep + i * ld : nullptr;
      for (int64_t j = 0; j < nk; ++j)
        if (!kr || kr[j]) row[j] = (T)f(row[j], cap, ScoreIndex{b, h, q0 + i, k0 + j});
    }
  }
  void backward(const T* s, T* p_out, T* ds_out, const T* dp, int64_t ld, int64_t nq, int64_t nk, int64_t b,
                int64_t h, int64_t q0, int64_t k0, const uint8_t* keep, const T* lse, const T* di,
                const CapturedTensor<T>* caps, double* const* cap_grad) const override {
    DualReader<T> cap(caps);
    for (int64_t i = 0; i < nq; ++i) {
      const uint8_t* kr = keep ? keep + i * ld : nullptr;
      const bool dead = lse[i] == -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t e = i * ld + j;
        if ((kr && !kr[j]) || dead) {
          p_out[e] = ds_out[e] = 0;
          continue;
        }
        cap.reset();
        Dual<T> x;
        x.v = s[e];
        x.ds = 1;
        const Dual<T> y = f(x, cap, ScoreIndex{b, h, q0 + i, k0 + j});
        const T p = std::exp(y.v - lse[i]);
        const T g = p * (dp[e] - di[i]);  // dL / d mod(s)
        p_out[e] = p;
        ds_out[e] = g * y.ds;
        if (cap_grad)
          for (int r = 0; r < y.n; ++r) {
            const auto& rd = cap.read(r);
            cap_grad[rd.cap][rd.flat] += (double)(g * y.d[r]);
          }
      }
    }
  }
};
}  // namespace flex

template <typename F>
ScoreMod::ScoreMod(std::string name, std::vector<Tensor> captures, F f, double flops_per_score)
    : name_(std::move(name)), captures_(std::move(captures)), flops_(flops_per_score) {
  f32_ = std::make_shared<flex::ScoreTileImpl<float, F>>(f);
  f64_ = std::make_shared<flex::ScoreTileImpl<double, F>>(f);
}

template <typename T>
const flex::ScoreTile<T>& ScoreMod::tile() const {
  if constexpr (std::is_same_v<T, float>) return *f32_;
  else return *f64_;
}

template <typename F>
MaskMod::MaskMod(std::string name, F f, bool per_batch, bool per_head)
    : name_(std::move(name)), per_batch_(per_batch), per_head_(per_head) {
  tile_ = [f](uint8_t* keep, int64_t ld, int64_t nq, int64_t nk, int64_t b, int64_t h, int64_t q0, int64_t k0) {
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t j = 0; j < nk; ++j) keep[i * ld + j] = f(b, h, q0 + i, k0 + j) ? 1 : 0;
  };
}

}  // namespace titan
