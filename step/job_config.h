// step/job_config.h — the job configuration, sections as TorchTitan's.
//
// Every field here is a YAML key `section.name` and a CLI flag
// `--section.name VALUE`; defaults are the member initializers. The table in
// job_config.cpp binds keys to members, with types and allowed values, so an
// unknown or ill-typed key is an error naming the key, the file and line,
// and what is allowed.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include "models/decoder/args.h"
#include "parallel/context_parallel.h"
#include "parallel/pipeline.h"
#include "src/checkpoint/checkpoint.h"
#include "src/optim/adamw.h"
#include "src/config/name_list.h"
#include "src/ops/float8.h"

namespace titan {

struct JobConfig {
  struct Job {
    std::string dump_folder = "./outputs";
    std::string description = "";
    bool print_args = false;  // the effective config is saved as <dump_folder>/config.yaml either way
  } job;

  // Architecture: the decoder's knobs, each declared once in models/decoder/knobs.def (YAML key model.<name>,
  // default, HF field, check, meaning); a key the YAML / CLI does not give takes model.name's preset
  // (models/decoder/presets.h).
  using Model = decoder::Args;
  Model model;
  std::set<std::string> model_given;  // the keys (without "model.") the YAML or command line set
  std::map<std::string, std::string> model_where;  // where each was given: "FILE:LINE" or "--model.KEY"
  std::vector<std::string> notes;  // what loading decided that the log should say (a flavor made custom)
  std::vector<std::string> overridden;  // the section.key flags the command line gave (the table's order)
  std::set<std::string> given;          // every section.key the YAML or the command line set

  // model.converters (TorchTitan's key; a training choice, not an architecture knob: config.json does not carry
  // it): what the built model's layers become before parallelizing (models/converters.h). float8: the linear
  // layers' GEMMs in FP8 as the float8 section says.
  config::NameList converters;
  struct Float8 {  // TorchTitan's float8 section (torchao's recipes; emulated exactly on the CPU)
    Float8Recipe recipe = Float8Recipe::rowwise;  // tensorwise | rowwise | rowwise_with_gw_hp | mxfp8 | mxfp8_rceil
    config::NameList filter_fqns;                 // linear layers whose name contains one of these stay float32
    config::NameList moe_fqns_prototype;          // MoE experts modules whose grouped GEMMs go FP8 (rowwise)
    // FSDP gathers the FP8 linear layers' weights as FP8 codes (torchao's WeightWithDynamicFloat8CastTensor):
    // each shard cast from its float32 values with the whole weight's scale, one byte an element on the wire
    bool enable_fsdp_float8_all_gather = false;
    // ... their scales (amaxes) all-reduced once a step, together, instead of one all-reduce per weight per gather
    bool precompute_float8_dynamic_scale_for_fsdp = false;
  } float8;

  struct Optimizer {
    std::string name = "AdamW";
    double lr = 8e-4;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.1;
  } optimizer;

  struct LRScheduler {
    LRShape schedule = LRShape::wsd;  // constant | linear | cosine | wsd
    int64_t warmup_steps = 10;
    double decay_ratio = 0.2;      // wsd: share of steps spent decaying
    DecayShape decay_type = DecayShape::linear;  // wsd decay shape: linear | cosine
    double min_lr_factor = 0.0;
  } lr_scheduler;

  struct Training {
    std::string dataset_path = "data/kjv_train.h5";
    int64_t steps = 200;
    int64_t seq_len = 256;
    int64_t local_batch_size = 8;
    int64_t global_batch_size = -1;  // -1: local * data-parallel ranks; larger: gradient accumulation
    double max_norm = 1.0;
    enum class OnNonFinite { abort, skip };
    OnNonFinite on_nonfinite = OnNonFinite::abort;  // abort | skip
    // mixed precision (TorchTitan's keys; titan's numerics are bf16 autocast's in every layout: GEMMs multiply
    // bf16 operands with float32 accumulation, master weights, AdamW state, norms, softmax, loss in float32;
    // docs/training.md "Precision"). titan's default is float32 (exact on the CPU); TorchTitan's is bfloat16.
    enum class Precision { bfloat16, float32 };
    Precision mixed_precision_param = Precision::float32;   // bf16 autocast: the GEMMs' operands and outputs
    Precision mixed_precision_reduce = Precision::float32;  // FSDP's / DDP's gradient reduce-scatter / all-reduce
  } training;

  struct Validation {
    bool enabled = true;
    std::string dataset_path = "data/kjv_val.h5";
    int64_t freq = 50;
    int64_t steps = 10;  // -1: the whole split
  } validation;

  struct Parallelism {
    int64_t data_parallel_replicate_degree = 1;
    int64_t data_parallel_shard_degree = -1;  // -1: the remaining ranks
    int64_t tensor_parallel_degree = 1;
    int64_t expert_parallel_degree = 1;  // gpt_oss: experts spread over ep ranks borrowed from dp_shard
    // TorchTitan's policy: always frees each block's gathered weights after its forward and gathers them again in
    // backward, never keeps them to the backward, default = always without pipeline parallel, never with it (a
    // stage's weights gathered once per pipeline schedule, not once per micro-batch)
    enum class Reshard { by_default, always, never };
    Reshard fsdp_reshard_after_forward = Reshard::by_default;
    bool reshard_after_forward() const {
      return fsdp_reshard_after_forward == Reshard::always ||
             (fsdp_reshard_after_forward == Reshard::by_default && pipeline_parallel_degree == 1);
    }
    bool enable_sequence_parallel = true;    // with tp > 1: norms and residual stream sharded along the sequence
    bool disable_loss_parallel = false;      // with tp > 1: false = logits stay split over the vocabulary
    // with sequence parallel: free each block's gathered input after its forward, gather it again in its
    // backward (Megatron-LM's layout; parallel/parallelize.h)
    bool sequence_parallel_regather = false;
    // with sequence parallel (TorchTitan's key): each block's all-gather fused with its column-parallel projections
    // and its reduce-scatter with its row-parallel one, the ring's steps overlapping the GEMMs
    bool enable_async_tensor_parallel = false;
    // gradient accumulation under FSDP/HSDP: true = reduce every micro-batch's gradients (FSDP2's default);
    // false = accumulate them unsharded and reduce once per step (less communication, the memory of the
    // unsharded gradients)
    bool fsdp_reduce_every_microbatch = true;
    // pipeline parallel with the stage's weights kept gathered (reshard after forward off): true = a stage issues
    // every unit's all-gather when its schedule starts, false = one unit ahead of its forward (FSDP2's,
    // TorchTitan's)
    bool fsdp_gather_stage_at_start = false;
    // pipeline parallel (the outermost mesh dimension): stages over pp ranks, the local batch split into
    // micro-batches of pipeline_parallel_microbatch_size run by the schedule (GPipe | 1F1B |
    // Interleaved1F1B: more than one stage per rank, virtual stages); pipeline_parallel_layers_per_stage:
    // blocks per stage (-1: the blocks split evenly over pp stages, two per rank when interleaved)
    int64_t pipeline_parallel_degree = 1;
    parallel::PipelineSchedule pipeline_parallel_schedule = parallel::PipelineSchedule::OneFOneB;
    int64_t pipeline_parallel_microbatch_size = 1;
    int64_t pipeline_parallel_layers_per_stage = -1;
    // the embedding / the final norm + head counted as this many blocks when the blocks are split over the
    // stages (TorchTitan's keys; its default is 1, titan's 0: an even split of the blocks, as Megatron's default)
    int64_t pipeline_parallel_first_stage_less_layers = 0;
    int64_t pipeline_parallel_last_stage_less_layers = 0;
    // context parallel (TorchTitan's keys; mesh [pp, dp_replicate, dp_shard, cp, tp]): each sequence cut into
    // 2 x cp chunks, rank i of the cp group holding chunks i and 2cp-1-i (causal load balance); attention
    // exchanges K/V over the group: allgather (all-gathered, Llama 3's method) or alltoall (passed around a
    // ring, ring attention), overlapped with the attention of the block already held; parameters and
    // gradients sharded over dp_shard x cp (parallel/context_parallel.h)
    int64_t context_parallel_degree = 1;
    parallel::RotateMethod context_parallel_rotate_method = parallel::RotateMethod::AllGather;
    comms::ExpertCommBackend expert_parallel_comm_backend = comms::ExpertCommBackend::Standard;
  } parallelism;

  struct Comm {  // TorchTitan's comm section: the collective watchdog (comms/watchdog.h)
    double init_timeout_seconds = 300;   // until the first step completes
    double train_timeout_seconds = 100;  // afterwards; a collective running longer aborts the job
  } comm;

  enum class ACMode { none, full, selective };
  struct ActivationCheckpoint {
    ACMode mode = ACMode::none;  // none | full | selective (TorchTitan's: every Nth block, or op-level)
    // selective: N = checkpoint blocks N, 2N, ... (1-based); "op" = every block with TorchTitan's op-level
    // policy (keep matmul outputs except every second one, attention and TP reduce-scatter outputs)
    struct SelectiveOption {
      bool op = false;
      int64_t every = 2;
      static constexpr const char* kind = "a positive integer N (checkpoint every Nth block) or 'op' (op-level)";
      static std::optional<SelectiveOption> parse(const std::string& text);
      std::string text() const { return op ? "op" : std::to_string(every); }
      bool operator==(const SelectiveOption&) const = default;
    } selective_ac_option;

    // Checkpoint every how many blocks: 0 none, 1 all, N every Nth.
    int64_t every() const;
    bool op_level() const { return mode == ACMode::selective && selective_ac_option.op; }
  } activation_checkpoint;

  struct Checkpoint {
    bool enable = false;
    std::string folder = "checkpoint";  // inside job.dump_folder
    int64_t interval = 100;
    int64_t keep_latest_k = 2;
    std::string initial_load_path = "";  // HF-named weights to start from: .safetensors, an index, model.h5, a folder
    bool resume_with_changed_config = false;  // resume although model.* / optimizer.* differ from the checkpoint's
    bool export_at_end = false;          // write <dump>/export/: config.json + HF-named weights
    ExportDType export_dtype = ExportDType::float32;  // float32 | bfloat16 | float16 (safetensors only)
    ExportFormat export_format = ExportFormat::safetensors;  // safetensors (model.safetensors) | hdf5 (model.h5) | both
    int64_t export_max_shard_mb = 5000;  // safetensors above this are sharded (+ model.safetensors.index.json)
  } checkpoint;

  struct Metrics {
    int64_t log_freq = 10;
    bool save_jsonl = true;   // <dump>/metrics.jsonl
    double peak_tflops = 0;  // MFU denominator per rank; 0: measured at start (job/peak_flops.h)
    int64_t link_probe_mib = 4;  // across hosts: the block timed around the ring of hosts at each step line; 0: off
  } metrics;

  struct Profiling {
    bool enable_profiling = false;  // per-op FLOP/byte/time table of one step
    int64_t profile_step = 2;
    std::string simulate_system = "cpu-host";  // the profiled step also simulated on this spec, op by op beside
                                                // the measured one; "": off
  } profiling;

  // Planning on meta tensors (the simulator's front half): no data, no memory
  struct Simulation {  // the simulated UltraServer (simulator/specs, simulator/simulate.h)
    bool enabled = false;    // run one step on meta tensors as world_size ranks and price it; no real training
    int64_t world_size = 1;  // fake ranks of the simulated job
    std::string system = "";  // simulator/specs/systems/<name>.yaml or a path; set without `enabled`, real runs
                              // print the simulated figures of their own world next to the measured ones
    std::string chip = "";    // overrides the system's chip (simulator/specs/chips/<name>.yaml or a path)
    int64_t ranks_per_chip = 1;  // Trainium LNC=2: 8 NeuronCores / 2 = 4 ranks per chip
    int64_t num_systems = 1;     // systems joined by the system's scale_out network
    enum class Mode { eager, compiled, cudagraphs };
    Mode mode = Mode::eager;  // eager (every op its kernels, each issued by the host) | compiled (elementwise chains
                              // fused; the generated code issues each kernel) | cudagraphs (compiled, captured as
                              // CUDA graphs: torch.compile mode="reduce-overhead", Megatron's CUDA graphs; the
                              // host issues the step once)
    std::string attention_kernel = "";  // "": the chip's default attention kernel (attention_efficiency); else a
                                        // kernel its spec lists under attention_kernels (e.g. cudnn on H100)
    // how the run's stack computes attention: fused (a flash kernel: the scores never leave the chip) |
    // materialized (an eager framework's matmul - scale / mask / softmax - matmul: every score written to and read
    // from memory; Megatron-LM before flash attention, Hugging Face's "eager" attention)
    enum class AttentionScores { fused, materialized };
    AttentionScores attention_scores = AttentionScores::fused;
    double attention_dropout = 0;  // materialized: the dropout on the attention probabilities, its own kernel
                                   // pass (Megatron-LM's default 0.1); titan's model has no dropout
    std::string trace_file = "";  // Chrome-trace JSON of the simulated step (relative to job.dump_folder)
    std::string what_if = "";     // changes priced beside the planned step (simulator/what_if.h); "": none
    enum class KernelModel { table, engines };
    KernelModel kernel_model = KernelModel::table;  // engines: GEMM / elementwise kernels priced by the schedule of
                                                    // the chip's engines (simulator/engines.h; Trainium specs)
    int64_t trace_chips = 0;      // chips drawn in the trace; 0: one per distinct timeline (pipeline stage),
                                  // standing for the chips that run alike (SPMD)
    // MoE routing of the meta step (which has no router outputs), priced at the busiest rank:
    double moe_routing_skew = 0;  // 0: balanced; s > 0: Zipf, expert e gets a share proportional to 1/(e+1)^s
    std::string moe_routing_histogram = "";  // tokens per expert, comma-separated (the end-of-run "expert load"
                                             // line of a real run), every MoE layer alike; or one list per MoE
                                             // layer, in order, separated by ';' (its "expert load per MoE layer"
                                             // line); exclusive with moe_routing_skew
    bool allow_oom = false;  // a simulated step over the chip's memory: an error (exit 1), unless true (plan anyway)
    // the published measurement a config reproduces (configs/validation/): the report prints it and the error
    double published_tps = 0;               // tokens per second (0: none)
    std::string published_tps_per = "chip";  // chip (per chip) | job (the whole job)
    std::string published_source = "";      // where it was published
  } simulation;

  struct Debug {
    int64_t seed = 42;
    int64_t dump_grads_at_step = 0;  // > 0: write <dump>/grads_step_N.h5 (HF names, full shapes, before clipping)
    int64_t fail_on_rank = -1;       // fault injection for tests: this rank throws at step 2
  } debug;
};
constexpr std::array<std::string_view, 3> enum_names(JobConfig::ACMode) { return {"none", "full", "selective"}; }
constexpr std::array<std::string_view, 3> enum_names(JobConfig::Parallelism::Reshard) {
  return {"default", "always", "never"};
}
constexpr std::array<std::string_view, 2> enum_names(JobConfig::Training::OnNonFinite) { return {"abort", "skip"}; }
constexpr std::array<std::string_view, 3> enum_names(JobConfig::Simulation::Mode) { return {"eager", "compiled", "cudagraphs"}; }
constexpr std::array<std::string_view, 2> enum_names(JobConfig::Simulation::KernelModel) { return {"table", "engines"}; }
constexpr std::array<std::string_view, 2> enum_names(JobConfig::Simulation::AttentionScores) {
  return {"fused", "materialized"};
}
constexpr std::array<std::string_view, 2> enum_names(JobConfig::Training::Precision) { return {"bfloat16", "float32"}; }

// simulation.moe_routing_histogram as numbers: one histogram (every MoE layer) or one per MoE layer (errors
// name the key and the item; the layers' histograms must list as many experts).
std::vector<std::vector<double>> parse_routing_histogram(const std::string& text);

// Loads `path` (YAML), then applies `--section.key value` overrides from
// argv. Throws titan::Error with file:line / flag and the allowed values.
// argv may contain `--config PATH` (used when path is empty).
JobConfig load_job_config(int argc, const char* const* argv);
JobConfig load_job_config_file(const std::string& path, const std::vector<std::string>& overrides = {});
// `--config NAME`: NAME itself when it is a file, else NAME[.yaml] under
// ./configs, the source tree's configs/ and the installed share/titan/configs
// (sub-folders searched by file name); an error lists the known configs.
// Values that are legal but almost surely a mistake, one line each (the job
// logs them as warnings): warmup longer than training, a sliding window that
// covers the whole sequence.
std::vector<std::string> config_warnings(const JobConfig& c);

std::string resolve_config_path(const std::string& name);
// A data file the job reads (`key` names it: training.dataset_path): an absolute path as given; a relative one
// looked up in ./, titan's source tree and the installed share/titan, in that order (the path that exists,
// "" when none does). data_roots() lists those folders.
std::string find_data_file(const std::string& path);
std::vector<std::string> data_roots();
// The job's data files found (cfg's paths replaced by the ones found, each move said in `notes`), or an error
// naming the key, the value as written, the folders searched and how to make the file.
JobConfig with_data_found(const JobConfig& cfg, std::vector<std::string>* notes);
// "section.key: old -> new" for every key of `sections` whose value differs
// between two dump_job_config texts (numbers compared as numbers; a key the
// old text lacks, written by an older titan, counts as its default).
std::vector<std::string> config_changes(const std::string& old_yaml, const std::string& new_yaml,
                                        const std::vector<std::string>& sections);
// The effective config as YAML text (printed at start, saved in the job folder).
std::string dump_job_config(const JobConfig& c);

}  // namespace titan
