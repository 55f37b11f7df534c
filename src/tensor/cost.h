// src/tensor/cost.h — what each op would cost: FLOPs and bytes moved.
//
// Every op records (name, flops, bytes) when it runs, on cpu or meta. A
// CostScope (RAII) collects the totals and a per-op breakdown of everything
// recorded while it is alive on this thread; scopes nest. The simulator prices
// these records on a target chip; tests check FLOP counts on meta inputs.
//
// Conventions: a matmul of [M,K]x[K,N] is 2*M*N*K FLOPs; elementwise and
// normalization ops count the arithmetic per element given at each op;
// bytes = bytes read + bytes written by the kernel.
//
// A timed scope also attributes wall time: each op is charged the time from
// its record to the next op's record (or to the scope's end), i.e. its
// kernel plus its share of the framework overhead. No op needs a timer.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <memory>
#include <string>
#include <vector>

#include "src/tensor/dtype.h"
#include "src/tensor/memory.h"

namespace titan {

// The [M, K] x [K, N] problem of a matmul-like kernel (batch GEMMs of one call).
// The simulator prices GEMMs with a shape-dependent efficiency.
// The precision a GEMM's operands are multiplied in: high (the activation dtype), FP8 (float8 training's
// per-tensor / per-row scales) or MXFP8 (32-element blocks with e8m0 scales); the simulator prices each at the
// chip's rate for it.
// high: the run's compute dtype as recorded (the simulator reads it as float32 in a float32 run: fp32)
enum class GemmPrecision : uint8_t { high, fp8, mxfp8, fp32 };
struct GemmShape {
  int64_t batch = 0, m = 0, n = 0, k = 0;  // batch 0: not a GEMM
  GemmPrecision precision = GemmPrecision::high;  // set from the GemmPrecisionScope alive at the record
  // FP8 only: accumulated with periodic promotion to float32 (cuBLAS without fast accumulation: torchao's and
  // Transformer Engine's backward GEMMs), not in the tensor core's fast accumulator; set from the scope too
  bool split_accumulation = false;
};

// RAII: GEMMs recorded on this thread while alive run in `p` (the float8 linear's casts open one), FP8 ones with
// split accumulation when asked.
class GemmPrecisionScope {
 public:
  explicit GemmPrecisionScope(GemmPrecision p, bool split_accumulation = false);
  ~GemmPrecisionScope();
  GemmPrecisionScope(const GemmPrecisionScope&) = delete;
  GemmPrecisionScope& operator=(const GemmPrecisionScope&) = delete;
  static GemmPrecision current();

 private:
  GemmPrecision prev_;
  bool prev_split_;
};

// The kind of kernel a record describes, declared by the op (the simulator
// prices each kind by its own model; GEMMs are those with a GemmShape).
enum class KernelClass : uint8_t {
  Elementwise,  // bandwidth-bound; fusable in compiled mode
  Attention,    // a fused (flash) attention kernel
  EagerOnly,    // traffic only an eager framework pays (e.g. a score_mod run as its own kernels over
                // materialized scores); its arithmetic is already in the fused kernel's record
  Optimizer,    // the optimizer's update (reads and writes fp32 state: not scaled to the activation dtype)
  HostSync,     // no kernel: the host waits for the device here (it needs a value the device computed, e.g. the
                // MoE dispatch's exchanged counts to size its buffers), as PyTorch's .tolist() / .item() do
  PipelineMark, // no kernel: a pipeline schedule begins / ends here (alternately), so the simulator
                // measures the bubble within the schedule's window
};

// How PyTorch's eager mode runs an op that titan runs as one kernel: `kernels` launches sharing the op's
// arithmetic and moving `traffic` times its bytes (float32 upcasts, materialized intermediates). Declared
// by the op with its cost record; the simulator prices eager mode by it (compiled mode: one kernel).
struct EagerSplit {
  int kernels = 1;
  double traffic = 1.0;
};

struct OpCost {
  int64_t calls = 0;
  double flops = 0;
  double bytes = 0;
  double seconds = 0;  // timed scopes only
};

class CostScope {
 public:
  explicit CostScope(bool timed = false);
  ~CostScope();
  CostScope(const CostScope&) = delete;
  CostScope& operator=(const CostScope&) = delete;
  double flops() const { return total_.flops; }
  double bytes() const { return total_.bytes; }
  int64_t calls() const { return total_.calls; }
  std::map<std::string, OpCost> by_op() const;  // by op name (records of one name from several files merged)
  void reset();
  // Charges the time since the last op's record to that op (call before reading by_op()).
  void flush_time();

 private:
  friend void charge_cost_scopes(const char*, double, double);
  CostScope* parent_;
  bool timed_;
  OpCost total_;
  // by the op's static name string (a pointer: a record costs no string and no string compare; by_op()
  // merges names that live at several addresses)
  std::unordered_map<const char*, OpCost> by_op_;
};


// Who takes part in a collective: the simulator places it on chips from the
// members' world ranks and gives each group its own stream (by id); the name
// is a label for logs and trace lanes only.
struct CommGroupRef {
  std::string name;
  uint64_t id = 0;
  std::shared_ptr<const std::vector<int>> world_ranks;  // in group-rank order
  int size() const { return world_ranks ? (int)world_ranks->size() : 1; }
};

// RAII: collectives started on this thread while alive carry gradients (a
// simulation prices their bytes in training.mixed_precision_reduce). FSDP's and HSDP's
// gradient reductions open one; nothing is inferred from a group's name.
class GradientReductionScope {
 public:
  GradientReductionScope();
  ~GradientReductionScope();
  GradientReductionScope(const GradientReductionScope&) = delete;
  GradientReductionScope& operator=(const GradientReductionScope&) = delete;
  static bool active();

 private:
  bool prev_;
};

// One thing a thread did, in program order: a kernel, or the start / the
// wait of a collective. The simulator schedules these on a compute stream and
// one communication stream per process group.
// The problem an attention record runs (the simulator's engine schedules, simulator/engines.h): the (query, key)
// pairs its visible tiles compute, summed over batch and heads, the head dims, and whether it is the backward;
// and the whole score matrix, [B x Hq, sq, skv], which an attention that materializes its scores (an eager
// framework's matmul - softmax - matmul) computes and stores every element of (simulation.attention_scores).
struct AttentionShape {
  double pairs = 0;
  int64_t d = 0, dv = 0;
  bool backward = false;
  double scores = 0;         // B x Hq x sq x skv (0: not given)
  int64_t sq = 0, skv = 0;   // one score matrix's rows and columns
};

struct CostEvent {
  enum class Kind { Compute, CommStart, CommWait };
  Kind kind = Kind::Compute;
  const char* op = "";  // op or collective name (static strings)
  double flops = 0, bytes = 0;
  GemmShape gemm;        // Compute: GEMM dims when the op is one
  AttentionShape attention;  // Compute: an attention kernel's problem (pairs 0: none given)
  KernelClass cls = KernelClass::Elementwise;  // Compute: when not a GEMM
  EagerSplit eager;      // Compute: the op's eager-mode kernels
  int64_t comm_id = -1;  // CommStart / CommWait: pairs them
  CommGroupRef group;    // CommStart: the process group
  bool gradients = false;  // CommStart: issued inside a GradientReductionScope
  // CommStart: the bytes are in the dtype the run moves (a bf16 or integer buffer), not the float32 stand-in
  // for training.mixed_precision_param / _reduce: the simulator prices them as they are
  bool typed = false;
  int peer = -1;           // CommStart of a point-to-point send / recv: the other side's world rank
  bool send = false;       //   true: this rank sends
  int64_t tag = -1;        //   and the message tag (a send and its recv share (sender, receiver, tag))
  double t = 0;          // timed traces: seconds since the trace began, at the record
  // Compute: the bytes the current device's tracker holds per MemoryCategory at the record (the memory over
  // the step; plan_step makes them the step's own, less what was held before it)
  std::array<int64_t, kNumMemoryCategories> memory{};
};

struct CostSegment;  // cost_segment.h

// A recorded pass repeated once in a trace (cost_segment.h, event_stream.h): before the trace's owned event `at`,
// the record's events with their memory moved (a kernel's by `kernel_shift`, the others' by `other_shift`) and
// their collectives numbered from `first_id` in the order the record first used them.
struct CostRepeat {
  size_t at = 0;
  std::shared_ptr<const CostSegment> seg;
  std::array<int64_t, kNumMemoryCategories> kernel_shift{}, other_shift{};
  int64_t first_id = 0;
};

class EventStream;  // event_stream.h

// RAII: while alive, every record on this thread is appended to the trace (the simulator's input; a repeated
// pass as a reference to its record). Traces nest: the innermost one receives.
class CostTrace {
 public:
  explicit CostTrace(bool timed = false);  // timed: stamp every event (measured timelines)
  ~CostTrace();
  CostTrace(const CostTrace&) = delete;
  CostTrace& operator=(const CostTrace&) = delete;
  // The events recorded one by one; a trace holding repeated passes refuses (take_stream() gives them all)
  const std::vector<CostEvent>& events() const;
  bool timed() const { return timed_; }
  double elapsed() const;  // timed: seconds since the trace began
  std::vector<CostEvent> take();  // a trace without repeated passes (checked)
  EventStream take_stream();      // every event in program order, repeated passes by reference
  static CostTrace* current();  // the innermost trace alive on this thread (nullptr: none)

 private:
  friend class CostSegmentRecorder;
  friend void replay_cost_segment(const std::shared_ptr<const CostSegment>&);
  friend void record_cost(const char*, double, double, const GemmShape&, KernelClass, EagerSplit);
  friend void record_attention_cost(const char*, double, double, const AttentionShape&, EagerSplit);
  friend int64_t record_comm_start(const char*, const CommGroupRef&, double, DType);
  friend int64_t record_p2p_start(bool, const CommGroupRef&, double, int, int64_t, DType);
  friend void record_comm_wait(int64_t);
  CostTrace* parent_;
  bool timed_;
  double t0_ = 0;
  void append(CostEvent&& e);
  void grow();                                // room for one more (doubling)
  std::vector<CostEvent> events_;
  std::vector<CostRepeat> runs_;              // the repeated passes, in order
};

// RAII: ops run while alive record nothing on this thread — for a composite whose
// kernel structure differs from its parts' (FSDP's flat copy-in / copy-out is one
// kernel per unit in FSDP2), which then records itself once.
class CostRecordPause {
 public:
  CostRecordPause();
  ~CostRecordPause();
  CostRecordPause(const CostRecordPause&) = delete;
  CostRecordPause& operator=(const CostRecordPause&) = delete;
};

// Called by every op kernel (cheap when no scope or trace is active).
void record_cost(const char* op, double flops, double bytes, const GemmShape& gemm = {},
                 KernelClass cls = KernelClass::Elementwise, EagerSplit eager = {});
inline void record_cost(const char* op, double flops, double bytes, KernelClass cls) {
  record_cost(op, flops, bytes, GemmShape{}, cls);
}
inline void record_cost(const char* op, double flops, double bytes, EagerSplit eager) {
  record_cost(op, flops, bytes, GemmShape{}, KernelClass::Elementwise, eager);
}
// A fused attention kernel's record (KernelClass::Attention) with its problem.
void record_attention_cost(const char* op, double flops, double bytes, const AttentionShape& shape,
                           EagerSplit eager = {});
// Called by the communication layer. `bytes` is the collective's size as the
// cost model takes it: all_gather: the gathered output; reduce_scatter and
// all_reduce: the full input; all_to_all: the larger of what this rank sends
// and receives. `dtype`: what the bytes are made of: F32 is the plan's stand-in for the run's dtypes (the
// simulator prices it in training.mixed_precision_param or _reduce), any other dtype is moved as it is
// (CostEvent::typed). Returns an id for record_comm_wait (-1 when nothing records).
int64_t record_comm_start(const char* kind, const CommGroupRef& group, double bytes, DType dtype = DType::F32);
void record_comm_wait(int64_t id);
// Charges an op's call, FLOPs and bytes to the CostScopes alive on this thread (what record_cost does besides
// appending to the trace).
void charge_cost_scopes(const char* op, double flops, double bytes);
// A fresh id pairing a CommStart with its CommWait (this thread's).
int64_t next_comm_id();
int64_t next_comm_ids(int64_t n);  // n consecutive fresh ids (a repeated pass's); returns the first
// Collectives this thread traced inside a CostRecordPause (traced, not charged to the CostScopes), so far.
int64_t comm_starts_traced_while_paused();
// A point-to-point transfer (send: this rank sends, else receives) of `bytes` with world rank `peer` under `tag`.
int64_t record_p2p_start(bool send, const CommGroupRef& group, double bytes, int peer, int64_t tag,
                         DType dtype = DType::F32);

}  // namespace titan
