// simulator/engines.h — a NeuronCore's engines, scheduled: how a kernel runs on a Trainium core's Tensor, Vector
// and Scalar engines and its DMA queues (the GpSimd engine runs none of the kernel classes titan prices), from
// the per-engine figures of the chip spec (`engines:`, cited from Neuron's architecture guides and ISA costs).
//
// A GEMM [batch x] M x K times K x N is cut into output tiles of at most 128 x 512 (the stationary operand's
// 128 columns of the 128 x 128 systolic array, the moving operand's 512-element free size; the operand with
// the smaller instruction cost is stationary). Each output tile is a job through four stages, in order:
//   DMA in     its operand blocks read from HBM the first time its core needs them (each core's SBUF is
//              assumed to hold every block it loaded, whatever K: an optimistic bound on reuse), at the core's
//              share of HBM bandwidth (loads and stores share it in proportion to their bytes);
//   Tensor     ceil(K / 128) matmul instructions of max(min(stationary_min, N_stationary), N_moving) cycles
//              each (the ISA's average cost back to back, the stationary load included);
//   evacuate   the fp32 PSUM tile copied out to SBUF on the Scalar or Vector engine (alternately, as the
//              compiler spreads them): max(min_ii, N) cycles, N its elements per partition;
//   DMA out    the output tile written to HBM.
// Each engine runs its jobs in order, a job's stage starting when its engine is free and its previous stage is
// done (a flow shop); jobs go round-robin to the rank's cores, each with its own engines and DMA share. The
// kernel's time is when the last stage ends, plus one DMA instruction's latency. An elementwise kernel streams
// tiles of 128 x 512 elements: DMA in, one engine pass (Vector; Scalar for activation-like work of more than
// 4 FLOP per element), DMA out.
#pragma once
#include <array>
#include <vector>

#include "simulator/hardware.h"

namespace titan::sim {

enum class Engine { Tensor = 0, Vector, Scalar, GpSimd, Dma };
constexpr int kEngines = 5;
const char* engine_name(Engine e);

struct EngineSlice {
  int core = 0;
  Engine engine = Engine::Tensor;
  double start = 0, end = 0;  // seconds from the kernel's start
};

struct EngineSchedule {
  double seconds = 0;                    // the kernel's time
  std::array<double, kEngines> busy{};   // seconds each engine kind is busy (summed over the rank's cores; DMA:
                                         // the HBM's time, loads and stores at their shares)
  int jobs = 0;                          // tiles
  std::vector<EngineSlice> slices;       // every stage of every job (when asked for)
};

// `cores`: the NeuronCores the rank holds (chip cores / ranks per chip, at least 1). `in_bytes` / `out_bytes`:
// bytes per element of the operands and of the output.
// `tensor_rate`: the Tensor engine's throughput for the operands' precision relative to BF16 (FP8: the chip's
// FP8 : BF16 ratio).
EngineSchedule schedule_gemm(const EngineSpec& e, int cores, long long batch, long long m, long long n, long long k,
                             double in_bytes, double out_bytes, bool keep_slices = false, double tensor_rate = 1.0);
// A fused (flash) attention kernel of `pairs` (query, key) pairs with head dims d (scores) and dv (values),
// moving `bytes`: tiles of 128 queries x 512 keys; forward: S = Q K^T (ceil(d / 128) instructions), P transposed
// in 128 x 128 blocks, O += P V on the Tensor engine, exp on Scalar, row max / sum and O's rescale on Vector;
// backward: S and P recomputed, dP = dO V^T, dV, dQ, dK on Tensor, exp on Scalar, dS = P (dP - delta) on Vector.
EngineSchedule schedule_attention(const EngineSpec& e, int cores, double pairs, long long d, long long dv,
                                  bool backward, double bytes, bool keep_slices = false);
// An elementwise kernel moving `bytes` over `elements` output elements with `flops` of arithmetic.
EngineSchedule schedule_elementwise(const EngineSpec& e, int cores, double elements, double bytes, double flops,
                                    bool keep_slices = false);

}  // namespace titan::sim
