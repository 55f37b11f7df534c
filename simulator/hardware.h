// simulator/hardware.h — simulated hardware as data: chips and the systems that
// join them. Specs live in YAML under simulator/specs/{chips,systems}/, every
// figure with its source in a comment; this file only loads and checks them.
//
// Rank -> chip mapping (documented order): ranks fill chips in order,
// `ranks_per_chip` consecutive ranks per chip (Trainium LNC=2: 8 NeuronCores
// / 2 = 4 logical-core ranks per chip); chips are numbered system-major, then
// level by level from the outermost level inward, so chip c of a system sits
// at position c % units(level 0) in the innermost level (e.g. its (x, y) in
// the 4x4 torus), c / units(level 0) % units(level 1) in the next, and so on.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "simulator/collective_library.h"

namespace titan::sim {

// Efficiency of a GEMM as a function of its size: (GFLOP per call, fraction
// of peak), interpolated linearly in log10(GFLOP), clamped at the ends.
struct EfficiencyPoint {
  double gflop = 0, efficiency = 0;
};
// An attention kernel's fractions of peak at one head dim, its forward and its backward kernel.
struct AttentionPoint {
  int64_t head_dim = 0;
  double forward = 0, backward = 0;
};
// A published attention kernel (attention_kernels): its fraction of peak, forward and backward alike, and where
// its figures by head dim were published, its rows by head dim (as attention_by_head_dim).
struct AttentionKernel {
  double efficiency = 0;
  std::vector<AttentionPoint> by_head_dim;
};

// One core's engines (Trainium's NeuronCore; simulator/engines.h schedules kernels on them). Optional in a chip
// spec (`engines:`); every figure cited there.
struct EngineSpec {
  double tensor_ghz = 0;          // Tensor engine clock
  int array = 128;                // the systolic array: array x array processing elements
  int moving_max = 512;           // a matmul instruction's moving free size at most
  double stationary_min = 64;     // matmul cost max(min(stationary_min, N_stationary), N_moving) cycles
  double vector_ghz = 0, scalar_ghz = 0, gpsimd_ghz = 0;
  double min_ii = 64;             // Vector / Scalar minimum instruction interval (cycles)
  double dma_gbps = 0;            // the core's share of HBM bandwidth (GB/s)
  double dma_latency_us = 0;      // one DMA instruction's latency
  bool valid() const { return tensor_ghz > 0; }
};

struct ChipSpec {
  std::string name, file;
  EngineSpec engines;              // optional (Trainium): the per-core engines
  bool price_by_engines = false;   // simulation.kernel_model engines: GEMM and elementwise kernels priced by
                                   // their engine schedule (simulator/engines.h), not the tables
  // simulation.attention_scores materialized: attention as the kernels of an eager matmul - softmax - matmul
  // (materialized_attention, cost_model.h), with a dropout pass over the probabilities when attention_dropout > 0
  bool attention_materialized = false;
  double attention_dropout = 0;
  int cores = 1;                   // compute cores (NeuronCores, SMs are not modelled separately)
  double peak_tflops = 0;          // dense bf16 tensor-engine peak the kernels are priced against
  double headline_tflops = 0;      // vendor's headline dense bf16 figure (reported, not priced)
  double mfu_peak_tflops = 0;      // MFU denominator (TorchTitan / vendor convention)
  // Dense FP8 / MXFP8 tensor-engine headlines (vendor figures, as headline_tflops is BF16's; 0: the chip has
  // none, a float8 step is refused). A GEMM recorded in FP8 (model.converters float8) is priced at
  // peak_tflops x fp8 / headline (the vendors' FP8 : BF16 ratio on the peak a GEMM reaches) with the same
  // gemm_efficiency table, and gemm_power_limit_tflops scaled by the same ratio (an assumption: no published
  // FP8 sweep per chip yet); a step with FP8 GEMMs reports MFU against mfu_peak_tflops x that ratio.
  double fp8_tflops = 0;
  double mxfp8_tflops = 0;
  // The fraction of its rate an FP8 GEMM reaches with split accumulation (no fast accumulation: torchao's and
  // Transformer Engine's backward GEMMs on Hopper, whose accumulator is promoted to float32 periodically); 1: the
  // chip has no such mode (Blackwell, Trainium) or no figure.
  double fp8_split_accumulation_rate = 1;
  // Dense float32 GEMM rate (the vendor's FP32 figure: GPUs' CUDA cores, as PyTorch multiplies float32 without
  // TF32 by default; Trainium's FP32 tensor-engine rate; a CPU's measured sgemm peak). A float32 run
  // (training.mixed_precision_param: float32) prices its GEMMs and attention at peak_tflops x fp32 / headline
  // with the same efficiency tables; 0: the chip has no figure, a float32 simulation is refused naming the key.
  double fp32_tflops = 0;
  double vector_tflops = 0;        // non-GEMM arithmetic throughput (elementwise, reductions)
  double hbm_gib = 0;              // memory capacity
  double hbm_tbps = 0;             // memory bandwidth, TB/s
  double memory_efficiency = 0;    // achievable fraction of hbm_tbps for streaming kernels
  double attention_efficiency = 0; // fraction of peak a fused (flash) attention kernel reaches (the chip's default
                                   // kernel: FlashAttention-2 on GPUs)
  double attention_backward_efficiency = 0;  // the backward kernel's own fraction where it was measured apart
                                            // (titan-calibrate; the fused backward recomputes and reduces more
                                            // than the forward); absent (0 here): attention_efficiency for both
  // The attention kernel's fractions of peak by head dim, where they were measured (titan-calibrate: at head dims
  // 32, 64 and 128): per pair of positions the softmax and the masking cost the same at any head dim while the
  // FLOPs grow with it, so a small head dim reaches less of the peak. Sorted by head dim; a kernel's head dim
  // between two rows reads the line between them in log2(head dim), outside the first or last row that row's.
  // Empty: attention_efficiency (and attention_backward_efficiency) at every head dim.
  std::vector<AttentionPoint> attention_by_head_dim;
  std::map<std::string, AttentionKernel> attention_kernels;  // other published attention kernels' fractions of
                                                             // peak (simulation.attention_kernel picks one; optional)
  double gemm_power_limit_tflops = 0;  // the most GEMM throughput the chip sustains at its power limit (TFLOP/s
                                       // per chip; 0: no limit beyond gemm_efficiency)
  double eager_launch_us = 0;      // per-kernel overhead in eager mode (dispatch + launch)
  double compiled_launch_us = 0;   // per-kernel overhead of a compiled graph
  // The host's side of an asynchronous stack (GPUs): the CPU time the training framework spends issuing one
  // kernel or collective (eager: Python + dispatcher + launch; compiled: the generated wrapper's launch). The
  // host runs ahead of the device, which cannot start a kernel before it is issued: a step of many short
  // kernels becomes host-bound. Optional, 0: the host never holds the device back (a synchronous CPU's
  // dispatch is in *_launch_us; Trainium runs compiled graphs).
  double eager_host_us = 0;
  double compiled_host_us = 0;
  // Ranks sharing a chip exchange through it (a CPU's ranks through shared memory): the rate one collective
  // step moves between them (GB/s, all of the chip's ranks together) and its latency; optional, 0: through
  // HBM at hbm_tbps * memory_efficiency / 2, 1 us per step.
  double local_comm_gbps = 0;
  double local_comm_latency_us = 0;
  double comm_interference = 0;    // fraction of a kernel's speed lost while a collective runs on the chip
                                   // (GPUs: NCCL kernels take SMs and HBM bandwidth; optional, default 0)
  std::vector<int> gemm_tile;      // [m, n, k]: dims are padded up to these multiples
  std::vector<EfficiencyPoint> gemm_efficiency;
  // gemm_efficiency_per: what the table's GFLOP axis is measured on. rank (default): one rank's share of the
  // chip (Trainium's sweeps of one logical core; GPUs, one rank per chip); chip: the whole chip (titan-calibrate's
  // all-core sweep), so a rank holding 1/ranks_per_chip of it reads the table at ranks_per_chip x its call's size
  // (its share is filled by a call that many times smaller).
  bool gemm_table_per_chip = false;
};

enum class Topology { Chip, Ring, Torus2D, Switch };
const char* topology_name(Topology t);

// One level of a system's interconnect: `units` units of the level below.
struct NetworkLevel {
  std::string name;
  Topology topology = Topology::Switch;
  int units = 1;                  // torus: shape[0] * shape[1]
  std::vector<int> shape;         // torus: [x, y]
  double bandwidth_gbps = 0;      // GB/s per chip into this level, one direction, all its links
  int links_per_chip = 1;         // links the per-chip bandwidth is spread over (torus: 4)
  double latency_us = 0;          // per step (hop + software)
  double efficiency = 0;          // achievable fraction of bandwidth_gbps
  // nvls_efficiency (optional; a switch level only): the switch reduces and multicasts in the network (NVLink
  // SHARP, NVSwitch 3 and later), and an all-reduce over it moves (1 + 1/n) x its bytes each way per chip at this
  // fraction of bandwidth_gbps (collective_library.h, NVLS; needs collective_library: nccl). 0 or absent: no
  // in-switch reduction.
  double nvls_efficiency = 0;
};

struct SystemSpec {
  std::string name, file, chip_name;
  int chips = 0;                      // per system
  std::vector<NetworkLevel> levels;   // innermost first; product of units == chips
  bool has_scale_out = false;
  NetworkLevel scale_out;             // between systems (EFA / InfiniBand), per chip
  CollectiveLibrary library = CollectiveLibrary::generic;  // collective_library: whose algorithm choice and
                                                           // latency model prices collectives (nccl on GPUs)
};

// Directory of simulator/specs (TITAN_DEVICE_SPECS overrides the built-in path).
std::string specs_dir();
std::vector<std::string> known_chips();
std::vector<std::string> known_systems();
// One change to a spec's figures, applied to its YAML before it is read and checked (so a changed figure meets
// every rule the file's own does): `path` is a key of the file ("hbm_tbps"; a system's level by its name,
// "levels.nvlink.bandwidth_gbps", or every level, "levels.*.bandwidth_gbps"; "scale_out.latency_us"), set to
// `value` or, with `scale`, multiplied by it (the key must be there). `as_written` names it in errors.
struct SpecEdit {
  std::string path;
  double value = 0;
  bool scale = false;
  std::string as_written;
};

// By name (file stem under specs/chips or specs/systems) or by path to a .yaml, with `edits` applied.
// Errors name the file and key; an unknown name lists the known ones.
ChipSpec load_chip(const std::string& name_or_path, const std::vector<SpecEdit>& edits = {});
SystemSpec load_system(const std::string& name_or_path, const std::vector<SpecEdit>& edits = {});

// A chip spec's GEMM efficiency at `gflop` per call (interpolated).
double gemm_efficiency(const ChipSpec& c, double gflop);

}  // namespace titan::sim
