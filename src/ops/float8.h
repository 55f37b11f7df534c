// src/ops/float8.h — FP8 training numerics, emulated exactly on the CPU.
//
// torchao's float8 training (dynamic scaling: each operand's scale from its amax at every use) and MX
// (32-element blocks sharing an e8m0 power-of-two scale), with the formats' exact rounding (to nearest, ties to
// even) and saturation. What a GEMM multiplies is an operand cast to FP8 and back (its "round trip"): the FP8
// values divided by their scale in float32, exactly what torchao's emulated _scaled_mm multiplies, so an FP8 loss
// curve can be studied on a machine without FP8 units.
//
// A float8 linear y = x @ w^T casts each operand for each of its three GEMMs as the recipe says:
//   output       y  [M, N] = q(x  [M, K], along K) @ q(w [N, K], along K)^T
//   grad_input   dx [M, K] = q(dy [M, N], along N) @ q(w [N, K], along N)
//   grad_weight  dw [N, K] = q(dy [M, N], along M)^T @ q(x [M, K], along M)
// ("along" is the GEMM's contraction axis, the one an axiswise scale or an MX block spans; a tensorwise scale
// spans the whole tensor).
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <vector>
#include <cstdint>
#include <string>
#include <string_view>

#include "src/tensor/tensor.h"

namespace titan {

enum class Fp8Format : uint8_t { e4m3, e5m2 };  // OCP float8_e4m3fn (max 448, no inf) / float8_e5m2 (max 57344)
const char* fp8_format_name(Fp8Format f);
float fp8_max(Fp8Format f);
// float32 -> FP8 bits: rounded to nearest (ties to even), saturated to +-max (an infinity too); NaN stays NaN.
uint8_t fp8_encode(float v, Fp8Format f);
float fp8_decode(uint8_t bits, Fp8Format f);

// How one operand of one GEMM is cast.
enum class Fp8Scaling : uint8_t {
  tensorwise,  // one scale: max / amax(tensor)
  axiswise,    // one scale per row of the contraction axis (torchao's rowwise): max / amax(row)
  mx_floor,    // MX: 32-element blocks along the contraction axis, scale 2^(floor(log2 amax) - emax) (OCP MX spec)
  mx_rceil,    // MX: scale amax / max rounded up to a power of two (cuBLAS / Blackwell's conversion)
};
struct Fp8Cast {
  bool high_precision = false;  // true: this operand is not cast (the GEMM runs in float32)
  Fp8Format format = Fp8Format::e4m3;
  Fp8Scaling scaling = Fp8Scaling::tensorwise;
  bool pow2_scales = false;  // tensorwise / axiswise: the scale rounded down to a power of two
  bool operator==(const Fp8Cast&) const = default;
};
constexpr int64_t kMxBlock = 32;

// The scale(s) of x [R, C] for contraction along `axis` (1: each row's scale spans its C columns, 0: each
// column's spans its R rows), as torchao computes them: amax in float32, max / max(amax, 1e-12) in float64
// rounded to float32 (then down to a power of two when asked); MX: the power of two each block's values are
// divided by (2^e, e in [-127, 127]). Returned as float32: [1] tensorwise, [R] / [C] axiswise,
// [R, C / 32] / [R / 32, C] MX.
Tensor fp8_scales(const Tensor& x, const Fp8Cast& c, int axis);
// x [R, C] float32 -> the values the FP8 GEMM multiplies, float32 [R, C]: tensorwise / axiswise
// decode(encode(x * s)) / s; MX decode(encode(x / 2^e)) * 2^e. Records no graph (a float8 GEMM's operand).
// rows_cut / cols_cut: x's dims a tensor-parallel group cuts; a scale spanning one is all-reduced (max) with
// reduce_max (on meta tensors too: the plan prices the collective).
Tensor fp8_round_trip(const Tensor& x, const Fp8Cast& c, int axis, bool rows_cut = false, bool cols_cut = false,
                      const std::function<void(std::vector<float>&)>* reduce_max = nullptr);

// ---- an operand on an FP8 wire (tensor parallel's float8 gathers, comms/functional.h) ----
// torchao's float8 tensor parallel (TorchTitan's Float8ColwiseParallel / Float8RowwiseParallel /
// PrepareFloat8ModuleInput, tensorwise recipe) casts a sequence shard before gathering it and moves the FP8 codes,
// one byte an element; the FP8 GEMMs then read the gathered codes with the one scale. Here: x [R, C] (this rank's
// rows of a tensor cut along R) cast with one tensorwise scale for the whole tensor (this rank's amax all-reduced
// (max) with reduce_max first, every rank in one order) into codes [R, C] (DType::U8: the wire's bytes), the scale
// returned with them. Recorded as the cast kernel fp8_round_trip records (on the rank's rows only).
struct Fp8Codes {
  Tensor codes;     // [R, C] U8 (meta on meta x)
  float scale = 1;  // the FP8 value is round(x * scale); the decode divides by it
};
Fp8Codes fp8_encode(const Tensor& x, const Fp8Cast& c, const std::function<void(std::vector<float>&)>& reduce_max);
// codes [R, C] -> float32 code / scale: exactly the values fp8_round_trip makes with that scale, marked as the cast
// `c` (below). No kernel is recorded: a GPU's FP8 GEMM reads the codes as they are.
Tensor fp8_decode(const Tensor& codes, const Fp8Cast& c, float scale);
// An operand already cast with one tensorwise scale for the whole tensor (what an FP8 wire delivers): marked, it is
// what fp8_round_trip returns for the same tensorwise cast of it — no second cast, no second kernel, as torchao's
// GEMMs read a Float8Tensor input — when uncut, or when cut by a tensor-parallel group and marked spans_cut (its
// scale then spans every rank's part: FSDP's FP8 gather of a weight tensor parallel cuts). Found by the storage,
// place and size the mark was made on (a view of the same elements, a reshape, finds it); the mark lives as long
// as the storage.
void mark_fp8_operand(const Tensor& x, const Fp8Cast& c, bool spans_cut = false);
// The one tensorwise cast every use of an operand makes (each use: the cast of one GEMM and of the other GEMM that
// reads the same operand, e.g. input and input_for_grad_weight), when there is one: the operand may travel as FP8
// codes. A null cast (a high-precision reader), a non-tensorwise or differing cast: none.
std::optional<Fp8Cast> one_tensorwise(const std::vector<std::pair<const Fp8Cast*, const Fp8Cast*>>& uses);
// max |x| over a float32 tensor (NaN once it holds one, as torch.amax): a tensorwise scale's amax
float fp8_amax(const Tensor& x);
bool is_fp8_operand(const Tensor& x, const Fp8Cast& c, bool cut = false);

// x [R, C] whose rows come in groups (counts[g] consecutive rows each, summing to R): each group cast on its own
// (axis 0: a scale per column of the group's rows, torchao's "jagged" per-group scales of a grouped GEMM's
// grad_weight, or MX blocks of 32 of the group's rows, the last one zero-padded as torchao pads token groups;
// axis 1: per row, the same as fp8_round_trip). A group of no rows is skipped.
Tensor fp8_round_trip_groups(const Tensor& x, const Fp8Cast& c, int axis, const std::vector<int64_t>& counts);

// torchao's recipes: which operand of which GEMM is cast how.
enum class Float8Recipe : uint8_t { tensorwise, rowwise, rowwise_with_gw_hp, mxfp8, mxfp8_rceil };
constexpr std::array<std::string_view, 5> enum_names(Float8Recipe) {
  return {"tensorwise", "rowwise", "rowwise_with_gw_hp", "mxfp8", "mxfp8_rceil"};
}
// A tensor-parallel shard of a float8 linear: which of the weight's dims the group cuts (out: colwise, in:
// rowwise) and the group's max all-reduce. A scale spanning a cut dim (a tensorwise scale; an axiswise one along
// it) is then the whole tensor's, as torchao's amax of a DTensor is: the same casts as one rank. MX blocks stay
// within a shard (each rank's contraction lengths are multiples of 32). Set by the tensor-parallel plan.
struct Fp8TensorParallel {
  bool out_sharded = false, in_sharded = false;
  std::function<void(std::vector<float>& amax)> reduce_max;  // every rank of the group, in the same order
};
struct Float8Casts {
  Fp8Cast input, weight, grad_output;                                          // the output / grad_input GEMMs
  Fp8Cast input_for_grad_weight, weight_for_grad_input, grad_output_for_grad_weight;
  bool mx = false;  // MX blocks: each contraction length a multiple of kMxBlock
  std::shared_ptr<const Fp8TensorParallel> tp;  // null: the layer is whole on this rank
  // torchao's Float8GemmConfig.use_fast_accum of the output, grad_input and grad_weight GEMMs (its defaults, every
  // recipe: the forward in the tensor core's fast accumulator, the backward with split accumulation, as Transformer
  // Engine's defaults too). The emulation accumulates in float32 either way; the simulator prices a split one at the
  // chip's fp8_split_accumulation_rate.
  std::array<bool, 3> fast_accum = {true, false, false};
};
// tensorwise: e4m3 x and w, e5m2 dy, float32 scales (torchao's default). rowwise: e4m3 everywhere, axiswise,
// power-of-two scales. rowwise_with_gw_hp: rowwise, but w tensorwise for grad_input and grad_weight's GEMM in
// float32. mxfp8 / mxfp8_rceil: e4m3 everywhere in 32-blocks, floor / rceil scales.
Float8Casts float8_casts(Float8Recipe r);

// y = x [..., K] @ w [N, K]^T + bias [N] with each GEMM's operands cast as `casts` says; differentiable in x, w,
// bias (the gradients' GEMMs cast as the recipe says; the bias added and its gradient summed in float32).
// float32 only. Its GEMMs are recorded as FP8 GEMMs (the simulator prices them at the chip's FP8 rate).
Tensor float8_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Float8Casts& casts);

// The weight as a float8 layer's casts read it: under bf16 autocast its bf16 values, as torchao reads the weight
// that FSDP2's bf16 mixed precision (TorchTitan's training.mixed_precision_param) gathers; float32 otherwise. No
// kernel is priced: that bf16 weight is what the all-gather delivers (titan's FSDP gathers it as bf16 too).
Tensor float8_weight(const Tensor& w, bool bf16);
// What a float8 layer's weight cast `c` reads: a weight FSDP gathered as FP8 codes (marked) as it is, else
// float8_weight(w, bf16).
Tensor float8_weight_operand(const Tensor& w, const Fp8Cast& c, bool bf16);

// float8_linear's GEMMs on operands already cast (fp8_round_trip, each as `k` says), for ops that split its GEMMs
// over row blocks (async tensor parallel's per-shard GEMMs, comms/collective_matmul.h). bf16: under bf16 autocast
// (autocast_bf16 of the input): the output rounded to bf16, as float8_linear's. Recorded as FP8 (or MX) GEMMs unless
// the operand's cast is high precision.
namespace detail {
// y [M, N] = xq [M, K] @ wq [N, K]^T (+ bias [N], added as float8_linear adds it)
Tensor float8_output_gemm(const Tensor& xq, const Tensor& wq, const Tensor& bias, const Float8Casts& k, bool bf16);
// dx [M, K] = dyq [M, N] @ wq [N, K]
Tensor float8_grad_input_gemm(const Tensor& dyq, const Tensor& wq, const Float8Casts& k, bool bf16);
// dw [N, K] = dyq [M, N]^T @ xq [M, K]
Tensor float8_grad_weight_gemm(const Tensor& dyq, const Tensor& xq, const Float8Casts& k, bool bf16);
// db [N]: dy [M, N] summed over its rows in float32 (bf16: the bf16 gradient summed, rounded), as float8_linear's
Tensor float8_bias_grad(const Tensor& dy, bool bf16);
}  // namespace detail

// MoE experts' grouped GEMMs in FP8 (float8.moe_fqns_prototype: torchao's _Float8GroupedMM for rowwise casts,
// _MXFP8GroupedMM for MX): x [R, K] whose rows are grouped by expert (counts[e] each) @ w [E, K, N] + b [E, N]
// -> [R, N], each GEMM's operands cast as `casts` says, per expert (rowwise: a scale per row / column; MX: 32-blocks
// along the same axis):
//   output       y_e  = q(x_e, per token along K) @ q(w_e, per (e, n) along K)
//   grad_input   dx_e = q(dy_e, per token along N) @ q(w_e, per (e, k) along N)^T
//   grad_weight  dw_e = q(x_e, per column over e's tokens)^T @ q(dy_e, per column over e's tokens)
// (MX: each expert's tokens in whole blocks, the last zero-padded, as torchao pads token groups to 32.)
// The bias is added, and its gradient summed, in float32 (bf16 under autocast), as float8_linear's. Differentiable
// in x, w, b; recorded as FP8 grouped GEMMs. float32 only; no tensor-parallel casts (casts.tp must be null).
Tensor float8_grouped_linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::vector<int64_t>& counts,
                             const Float8Casts& casts);

}  // namespace titan
