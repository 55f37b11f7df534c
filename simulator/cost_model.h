// simulator/cost_model.h — what a kernel and a collective cost on simulated
// hardware (simulator/hardware.h). Pure functions of the specs; the scheduler
// that strings them into a training step is simulator/simulate.
//
// Kernels (roofline): a rank owns 1/ranks_per_chip of its chip (cores, HBM
// bandwidth). time = max(compute, memory) + launch overhead, with
//   GEMM:      2*b*pad(m)*pad(n)*pad(k) / (peak * gemm_efficiency(GFLOP of the call))
//   attention: flops / (peak * attention_efficiency)   (fused flash kernel; its backward at
//              attention_backward_efficiency where the spec gives one; by the kernel's head dim where the
//              spec has attention_by_head_dim)
//   other:     flops / vector_tflops
//   memory:    bytes / (hbm * memory_efficiency)
// and the overhead of the execution mode (eager: every op is a kernel;
// compiled: the scheduler fuses elementwise chains first).
//
// Collectives (alpha-beta, hierarchical): a group's ranks span n_0 ranks on
// one chip, n_1.. units of each interconnect level, n_s systems. Innermost
// level first, all-gather / reduce-scatter of a buffer of S bytes moves
//   (n_i - 1) * S / (n_0 * ... * n_i)     bytes per rank at level i
// (the slow outer levels carry the smallest chunks); every rank of a chip
// runs the same collective at once, so a chip's links carry ranks_per_chip
// times that. Per level: ring (n-1 steps) or recursive halving/doubling
// (log2 n steps, power-of-two groups on switches / on chip), bidirectional
// rings along each spanned torus dimension (usable links = the dims spanned).
// All-reduce = reduce-scatter + all-gather. All-to-all: bytes leaving each
// level's unit, priced by injection bandwidth, and on a torus or ring also by
// its bisection: (chips * D / 4) / (cut links * link bandwidth).
#pragma once
#include <string>
#include <vector>

#include "simulator/collective_library.h"
#include "simulator/hardware.h"
#include "src/tensor/cost.h"
#include "src/config/enum_names.h"

namespace titan::sim {

// eager: every op its kernels (PyTorch eager); compiled: elementwise chains fused (torch.compile); graphs: compiled
// and captured as CUDA graphs (the host issues the step once: no per-kernel host time, chip.*_host_us).
enum class ExecMode { Eager, Compiled, Graphs };
constexpr std::array<std::string_view, 3> enum_names(ExecMode) { return {"eager", "compiled", "cudagraphs"}; }

enum class KernelKind { Gemm, Attention, Other };

struct Kernel {
  KernelKind kind = KernelKind::Other;
  double flops = 0, bytes = 0;
  long long batch = 1, m = 0, n = 0, k = 0;  // GEMM shape
  GemmPrecision precision = GemmPrecision::high;  // GEMM (and attention: high or fp32): priced at the chip's peak for it
  bool split_accumulation = false;  // an FP8 GEMM without fast accumulation: at the chip's fp8_split_accumulation_rate
  double element_bytes = 4;  // the dtype it moves (engine schedules count elements: simulator/engines.h)
  AttentionShape attention;  // an attention kernel's problem (engine schedules; pairs 0: unknown)
};

// The dense peak (TFLOP/s per chip) a GEMM of this precision is priced against: peak_tflops, or for FP8 /
// MXFP8 peak_tflops x their headline / headline_tflops; a precision the chip has no rate for is refused, naming
// the chip and the spec key.
double gemm_peak_tflops(const ChipSpec& chip, GemmPrecision p);

// The fraction of peak an attention kernel of this head dim (its query / key dim) reaches (its backward kernel where `backward`): the
// spec's attention_by_head_dim row, between two rows linear in log2(head dim), outside them the nearest row's;
// without that table (or with head_dim 0, unknown) attention_efficiency / attention_backward_efficiency.
double attention_efficiency(const ChipSpec& chip, int64_t head_dim, bool backward);

struct KernelTime {
  double seconds = 0, compute_s = 0, memory_s = 0, overhead_s = 0;
  double efficiency = 1;  // GEMM: the table's value times tile utilisation
  // priced by engines: each engine kind's busy seconds per core (Tensor, Vector, Scalar, GpSimd, DMA)
  std::array<double, 5> engine_busy{};
};

// chip.price_by_engines (simulation.kernel_model engines): GEMM, attention (with its problem) and elementwise
// kernels take their engine schedule's time (simulator/engines.h) on the rank's cores.
KernelTime kernel_time(const ChipSpec& chip, int ranks_per_chip, const Kernel& k, ExecMode mode);

// An attention kernel (its AttentionShape's score matrix given) as the kernels an eager framework runs with
// the scores materialized in memory (chip.attention_materialized: simulation.attention_scores materialized):
// every one of the N = B x Hq x sq x skv scores is computed (a causal mask masks scores, it skips none) and
// goes through memory, e bytes each (the kernel's element_bytes), p = chip.attention_dropout:
//   forward:  S = Q K^T (a GEMM per (b, h): [sq, d] x [d, skv], writes N), P = softmax(scale S + mask) (reads
//             and writes N), P' = dropout(P) when p > 0 (reads N, writes N and an N-byte mask), O = P' V
//             ([sq, skv] x [skv, dv], reads N);
//   backward: dP' = dO V^T (writes N), dV = P'^T dO (reads N), dP = dropout'(dP') when p > 0 (reads N and the
//             mask, writes N), dS = softmax'(P, dP) (reads 2N, writes N), dQ = dS K and dK = dS^T Q (read N each).
// Compiled (and CUDA graphs): the softmax and the dropout fused into one pass, forward and backward. The GEMMs
// are Gemm kernels (the table at their per-matrix size, tile padding), the passes elementwise ones; each is
// priced by kernel_time as its own launch.
std::vector<Kernel> materialized_attention(const Kernel& attention, double dropout, ExecMode mode);

// Collective (its kinds): simulator/collective_library.h
Collective parse_collective(const std::string& s);
const char* collective_name(Collective c);

// Where a process group's members sit.
struct GroupSpan {
  int ranks_on_chip = 1;          // members sharing one chip
  std::vector<int> units;         // per system level (innermost first): units spanned
  std::vector<std::vector<int>> torus_extent;  // per level: spanned [x, y] extents (torus levels)
  int systems = 1;                // systems spanned (scale-out)
  // The members, and the fewest of them in one system: a world that does not fill its last system (72 + 56 chips
  // of two NVL72 racks) has groups that are not a product of their spans. 0: a span written by hand (the product).
  int members = 0, fewest_in_a_system = 0;
  int size() const;     // members (the product of the spans where they are not known)
  int product() const;  // ranks_on_chip x units spanned at every level x systems: size() for a rectangular group
};

// Members -> span; ranks map to chips as documented in hardware.h.
GroupSpan group_span(const SystemSpec& sys, int ranks_per_chip, const std::vector<int>& ranks);

struct CollectiveTime {
  double seconds = 0;
  std::string algorithm;  // per level, e.g. "chip:rd + neuronlink:torus-rings"
  // The parts, innermost level first (they run one after another): the time moving bytes over the
  // level's links (shared with whatever else uses those links at the same time) and the latency steps.
  struct Level {
    std::string name;
    double transfer_s = 0, latency_s = 0;
  };
  std::vector<Level> levels;
};

// `bytes`: all_gather: the gathered output; reduce_scatter, all_reduce: the
// full input; all_to_all: what each rank sends (spread evenly over the group).
CollectiveTime collective_time(const ChipSpec& chip, const SystemSpec& sys, int ranks_per_chip, Collective kind,
                               double bytes, const GroupSpan& span);

// A point-to-point transfer of `bytes` between the two ranks of `span` (pipeline stages): the outermost
// level the pair spans, one link of a torus or ring (neighbours), the chip's bandwidth on a switch or the
// scale-out network, plus one step of latency.
CollectiveTime p2p_time(const ChipSpec& chip, const SystemSpec& sys, double bytes, const GroupSpan& span);

}  // namespace titan::sim
