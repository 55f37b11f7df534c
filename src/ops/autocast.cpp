// bf16 autocast's value roundings (src/ops/autocast.h).
#include "src/ops/autocast.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "src/autograd/function.h"
#include "src/ops/common.h"
#include "src/tensor/bfloat16.h"

namespace titan {

void round_to_bf16_(Tensor& t) {
  if (t.is_meta() || t.numel() == 0) return;
  TITAN_CHECK(t.dtype() == DType::F32 && t.is_contiguous(), "round_to_bf16_: a contiguous float32 tensor expected, got ",
              dtype_name(t.dtype()), " ", shape_str(t.shape()));
  float* p = t.data<float>();
  const int64_t n = t.numel(), chunk = 1 << 14;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; i += chunk) round_to_bf16(p + i, std::min(chunk, n - i));
}

Tensor rounded_to_bf16(const Tensor& x) {
  Tensor r;
  {
    NoGradGuard ng;
    r = x.contiguous();
    if (r.impl() == x.impl()) r = x.clone();  // a copy: x's own values stay as they are
  }
  round_to_bf16_(r);
  return r;
}

Tensor autocast_operand(const Tensor& x) {
  if (!x.defined() || !autocast_bf16(x) || x.is_meta()) return x;
  return autograd::record("autocast_to_bf16", {x}, rounded_to_bf16(x), [](const std::vector<Tensor>& g) {
    // x's gradient is the bf16 operand's (a bf16 tensor's gradient is bf16), cast back exactly
    return std::vector<Tensor>{rounded_to_bf16(g[0])};
  });
}

namespace {
// The packs alive, by the storage (and place) they were made from; expired entries are dropped as new ones come.
struct PackEntry {
  const Storage* source;
  int64_t offset, numel;  // a contiguous source: its place in the storage (any shape over it)
  std::weak_ptr<Storage> pack;  // the pack's bits (its tensors are detached aliases: the storage is what lives)
};
thread_local std::vector<PackEntry> t_packs;

void remember_pack(const Tensor& x, const Tensor& p) {
  std::erase_if(t_packs, [](const PackEntry& e) { return e.pack.expired(); });
  t_packs.push_back({x.impl()->storage.get(), x.offset(), x.numel(), p.impl()->storage});
}

// A pack of the contiguous x holding x's values now (the bits compared), in x's shape, or undefined.
Tensor find_pack(const Tensor& x) {
  const Storage* src = x.impl()->storage.get();
  for (const PackEntry& e : t_packs) {
    if (e.source != src || e.offset != x.offset() || e.numel != x.numel()) continue;
    std::shared_ptr<Storage> bits = e.pack.lock();
    if (!bits) continue;
    auto impl = std::make_shared<TensorImpl>();  // a bf16 tensor of x's shape over the pack's bits
    impl->shape = x.shape();
    impl->strides = contiguous_strides(x.shape());
    impl->dtype = DType::BF16;
    impl->device = Device::CPU;
    impl->storage = std::move(bits);
    Tensor p(impl);
    const float* v = x.data<float>();
    const uint16_t* b = bf16_bits(p);
    const int64_t n = x.numel();
    int64_t differ = 0;
#pragma omp parallel for schedule(static) reduction(+ : differ) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) differ += float_to_bf16_bits(v[i]) != b[i];
    if (differ == 0) return p;
  }
  return Tensor();
}
}  // namespace

Tensor bf16_pack(const Tensor& x_in) {
  TITAN_CHECK(x_in.dtype() == DType::F32 && !x_in.is_meta(), "bf16_pack: a float32 cpu tensor expected, got ",
              dtype_name(x_in.dtype()), x_in.is_meta() ? " (meta)" : "");
  const Tensor x = x_in.is_contiguous() ? x_in : x_in.contiguous();
  if (Tensor p = find_pack(x); p.defined()) return p;
  Tensor p = empty(x.shape(), DType::BF16, Device::CPU);
  const float* v = x.data<float>();
  uint16_t* b = static_cast<uint16_t*>(p.raw_data());
  const int64_t n = x.numel(), chunk = 1 << 14;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; i += chunk) float_to_bf16_bits(v + i, b + i, std::min(chunk, n - i));
  remember_pack(x, p);
  return p;
}

Tensor saved_maybe_bf16(const Tensor& x) {
  // below this a pack saves too little to pay for its pass
  constexpr int64_t kMinElements = 4096;
  // an activation: not a parameter (a leaf, or FSDP's gathered copy: its storage is charged elsewhere)
  if (!x.defined() || !autocast_bf16(x) || x.is_meta() || x.is_leaf() || !x.is_contiguous() ||
      x.numel() < kMinElements || x.impl()->storage->category() != MemoryCategory::Activations)
    return autograd::saved(x);
  // bf16-valued: every value's low 16 bits are zero, its pack its high 16 bits (read as bits: memcpy'd words).
  // Most activations that are not (sums, norms' outputs) show it in their first values: checked there first,
  // then the whole tensor in one pass that packs as it checks. A pack made before (a linear's, which rounds)
  // is taken only for values it holds exactly.
  const char* raw = static_cast<const char*>(x.raw_data());
  auto word = [raw](int64_t i) {
    uint32_t w;
    std::memcpy(&w, raw + 4 * i, 4);
    return w;
  };
  const int64_t n = x.numel(), chunk = 1 << 14;
  for (int64_t i = 0; i < 64; ++i)
    if (word(i) & 0xFFFFu) return autograd::saved(x);
  Tensor p = find_pack(x);
  const bool have = p.defined();
  if (!have) p = empty(x.shape(), DType::BF16, Device::CPU);
  uint16_t* b = have ? nullptr : static_cast<uint16_t*>(p.raw_data());
  int64_t inexact = 0;
#pragma omp parallel for schedule(static) reduction(+ : inexact) if (n >= kParallelGrain)
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t i1 = std::min(n, i0 + chunk);
    uint32_t low = 0;
    for (int64_t i = i0; i < i1; ++i) {
      const uint32_t w = word(i);
      low |= w & 0xFFFFu;
      if (b) b[i] = (uint16_t)(w >> 16);
    }
    inexact += low != 0;
  }
  if (inexact) return autograd::saved(x);
  if (have) return p;
  remember_pack(x, p);
  return p;
}

bool has_bf16_pack(const Tensor& x) {
  if (!x.defined() || x.is_meta() || x.dtype() != DType::F32 || !x.is_contiguous()) return false;
  return find_pack(x).defined();
}

const uint16_t* bf16_bits(const Tensor& pack) {
  TITAN_CHECK(pack.dtype() == DType::BF16 && pack.is_contiguous(), "bf16_bits: a contiguous bfloat16 pack expected, got ",
              dtype_name(pack.dtype()), " ", shape_str(pack.shape()));
  return static_cast<const uint16_t*>(pack.raw_data());
}

Tensor unpack_bf16(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::BF16) return t;
  Tensor out = empty(t.shape(), DType::F32, Device::CPU);
  const uint16_t* b = bf16_bits(t);
  float* v = out.data<float>();
  const int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) v[i] = bf16_bits_to_float(b[i]);
  return out;
}

}  // namespace titan
