#include "step/job_config.h"

#include <cmath>
#include <cstdlib>

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <variant>

#include "models/decoder/presets.h"
#include "parallel/parallelize.h"
#include "src/config/field.h"
#include "src/config/version.h"
#include "src/tensor/error.h"

namespace titan {

namespace {
using config::Field;

using config::join;
using config::suggestion;

// Every key of the job: the sections' members, and the model section from the decoder's knob table.
std::vector<Field> fields(JobConfig& c) {
  std::vector<Field> fs = {
      config::bind("job.dump_folder", &c.job.dump_folder,
                   "the job folder: config.yaml, metrics.jsonl, checkpoint/, export/, traces; one job at a time (.titan.lock)"),
      config::bind("job.description", &c.job.description,
                   "free text describing the job; saved in config.yaml with the effective config, not used otherwise"),
      config::bind("job.print_args", &c.job.print_args,
                   "true: log the effective config (the YAML saved as <dump_folder>/config.yaml) at start"),
  };
  for (const auto& k : decoder::knobs()) fs.push_back(k.bind(c.model));
  fs.push_back(config::bind("model.converters", &c.converters,
                            "what the model's layers become: [float8] = the linear layers' GEMMs in FP8 (float8.*); "
                            "[] = none (a training choice: not in the exported config.json)"));
  fs.push_back(config::bind("float8.recipe", &c.float8.recipe,
                            "torchao's recipe: tensorwise (e4m3, dy e5m2, one scale a tensor), rowwise (e4m3, a "
                            "power-of-two scale a row), rowwise_with_gw_hp (grad_weight in float32), mxfp8 / "
                            "mxfp8_rceil (32-blocks, e8m0 scales: floor / rceil)"));
  fs.push_back(config::bind("float8.filter_fqns", &c.float8.filter_fqns,
                            "linear layers left in float32: those whose name contains an entry (e.g. [lm_head] as "
                            "TorchTitan's [output]; MoE routers: [gate] / [router])"));
  fs.push_back(config::bind("float8.enable_fsdp_float8_all_gather", &c.float8.enable_fsdp_float8_all_gather,
                            "FSDP all-gathers the FP8 layers' weights as FP8 (tensorwise recipe): each shard cast "
                            "from its float32 values with the whole weight's scale, one byte an element"));
  fs.push_back(config::bind("float8.precompute_float8_dynamic_scale_for_fsdp",
                            &c.float8.precompute_float8_dynamic_scale_for_fsdp,
                            "with enable_fsdp_float8_all_gather: every FP8 weight's amax in one all-reduce a step "
                            "instead of one per weight per gather"));
  fs.push_back(config::bind("float8.moe_fqns_prototype", &c.float8.moe_fqns_prototype,
                            "MoE experts modules whose grouped GEMMs run in FP8 (torchao's grouped GEMMs: rowwise, "
                            "mxfp8, mxfp8_rceil): those whose name contains an entry (e.g. [experts]); [] = none"));
  std::vector<Field> more = {
      config::bind("optimizer.name", &c.optimizer.name, "the optimizer: AdamW (decoupled weight decay, PyTorch's update order), the only one", {"AdamW"}),
      config::bind("optimizer.lr", &c.optimizer.lr,
                   "peak learning rate; lr_scheduler scales it each step (warmup, then the schedule's shape)"),
      config::bind("optimizer.beta1", &c.optimizer.beta1,
                   "AdamW decay rate of the first moment (the gradients' running mean), in [0, 1)"),
      config::bind("optimizer.beta2", &c.optimizer.beta2,
                   "AdamW decay rate of the second moment (the squared gradients' running mean), in [0, 1)"),
      config::bind("optimizer.eps", &c.optimizer.eps,
                   "AdamW epsilon, added to the root of the bias-corrected second moment (> 0)"),
      config::bind("optimizer.weight_decay", &c.optimizer.weight_decay,
                   "decoupled weight decay per step, x lr (not on norms and biases: parameters of rank < 2)"),
      config::bind("lr_scheduler.schedule", &c.lr_scheduler.schedule,
                   "lr after warmup: constant; linear / cosine decay to min_lr_factor; wsd (stable, then decay)"),
      config::bind("lr_scheduler.warmup_steps", &c.lr_scheduler.warmup_steps,
                   "steps of linear warmup (step t: lr x t / (warmup_steps + 1)); 0: none"),
      config::bind("lr_scheduler.decay_ratio", &c.lr_scheduler.decay_ratio,
                   "wsd: share of training.steps spent decaying at the end (0.2: the last 20%), in [0, 1]"),
      config::bind("lr_scheduler.decay_type", &c.lr_scheduler.decay_type,
                   "wsd: shape of the final decay to min_lr_factor (linear or cosine)"),
      config::bind("lr_scheduler.min_lr_factor", &c.lr_scheduler.min_lr_factor,
                   "where the decays end, as a fraction of optimizer.lr (0: down to zero)"),
      config::bind("training.dataset_path", &c.training.dataset_path,
                   "HDF5 token file trained on (titan-tokenize's /tokens); relative: ./, the source tree, the install"),
      config::bind("training.steps", &c.training.steps,
                   "optimizer steps the job runs up to (a resumed job continues to this step)"),
      config::bind("training.seq_len", &c.training.seq_len,
                   "tokens per sequence (the context length trained on)"),
      config::bind("training.local_batch_size", &c.training.local_batch_size,
                   "sequences per micro-batch on each data-parallel rank"),
      config::bind("training.global_batch_size", &c.training.global_batch_size,
                   "sequences per step; -1: local x data-parallel ranks; a multiple of that: gradient accumulation"),
      config::bind("training.max_norm", &c.training.max_norm,
                   "clip the gradients to this global L2 norm; 0: no clipping"),
      config::bind("training.on_nonfinite", &c.training.on_nonfinite,
                   "a NaN/inf loss or gradient norm: abort the job, or skip that step's optimizer update"),
      config::bind("training.mixed_precision_param", &c.training.mixed_precision_param,
                   "bfloat16: bf16 autocast (GEMM operands, outputs and their gradients rounded to bf16, float32 "
                   "accumulation; values stored in float32; master weights, AdamW state, norms, loss float32); "
                   "float32: all float32"),
      config::bind("training.mixed_precision_reduce", &c.training.mixed_precision_reduce,
                   "dtype of FSDP's / DDP's gradient reductions over data-parallel ranks (bfloat16: each rank's "
                   "gradient and the reduced result rounded to bf16)"),
      config::bind("validation.enabled", &c.validation.enabled,
                   "true: mean loss on validation.dataset_path every validation.freq steps and at the last step"),
      config::bind("validation.dataset_path", &c.validation.dataset_path,
                   "HDF5 token file of the validation split (read only when validation.enabled)"),
      config::bind("validation.freq", &c.validation.freq,
                   "validate every N steps (and at the last step)"),
      config::bind("validation.steps", &c.validation.steps,
                   "batches per rank each validation (the same ones each time); -1: the whole split"),
      config::bind("parallelism.data_parallel_replicate_degree", &c.parallelism.data_parallel_replicate_degree,
                   "dp_replicate: model replicas, gradients all-reduced across them (HSDP with dp_shard > 1)"),
      config::bind("parallelism.data_parallel_shard_degree", &c.parallelism.data_parallel_shard_degree,
                   "dp_shard: FSDP (ZeRO-3) ranks sharding parameters, gradients, AdamW state; -1: the remaining ranks"),
      config::bind("parallelism.tensor_parallel_degree", &c.parallelism.tensor_parallel_degree,
                   "tp: ranks splitting each block's heads and MLP width (Megatron; innermost mesh dimension)"),
      config::bind("parallelism.expert_parallel_degree", &c.parallelism.expert_parallel_degree,
                   "ep: ranks splitting the MoE experts, borrowed from dp_shard x cp; divides moe_num_experts"),
      config::bind("parallelism.fsdp_reshard_after_forward", &c.parallelism.fsdp_reshard_after_forward,
                   "always: each block but the last frees its gathered weights after forward and re-gathers them in "
                   "backward; never: keeps them; default: always without pp, never with it (TorchTitan's)"),
      config::bind("parallelism.enable_sequence_parallel", &c.parallelism.enable_sequence_parallel,
                   "with tp > 1: norms and the residual stream sharded along the sequence over tp"),
      config::bind("parallelism.disable_loss_parallel", &c.parallelism.disable_loss_parallel,
                   "with tp > 1: true gathers the logits; false keeps them split over the vocabulary"),
      config::bind("parallelism.sequence_parallel_regather", &c.parallelism.sequence_parallel_regather,
                   "with sequence parallel: free each block's gathered input after forward, gather it again in backward"),
      config::bind("parallelism.enable_async_tensor_parallel", &c.parallelism.enable_async_tensor_parallel,
                   "with sequence parallel: each block's gather / reduce-scatter fused with its projections, ring steps "
                   "overlapping the GEMMs"),
      config::bind("parallelism.fsdp_reduce_every_microbatch", &c.parallelism.fsdp_reduce_every_microbatch,
                   "accumulation under FSDP: true reduces every micro-batch; false reduces once per step (more memory)"),
      config::bind("parallelism.fsdp_gather_stage_at_start", &c.parallelism.fsdp_gather_stage_at_start,
                   "with pp > 1 (weights kept gathered): true gathers all of a stage's weights as its schedule "
                   "starts; false one unit ahead of its forward (FSDP2's)"),
      config::bind("parallelism.pipeline_parallel_degree", &c.parallelism.pipeline_parallel_degree,
                   "pp: pipeline stages over ranks (the outermost mesh dimension); 1: no pipeline"),
      config::bind("parallelism.pipeline_parallel_schedule", &c.parallelism.pipeline_parallel_schedule,
                   "order of the micro-batches' forwards and backwards (Interleaved1F1B: virtual stages per rank)"),
      config::bind("parallelism.pipeline_parallel_microbatch_size", &c.parallelism.pipeline_parallel_microbatch_size,
                   "sequences per pipeline micro-batch; divides training.local_batch_size"),
      config::bind("parallelism.pipeline_parallel_layers_per_stage", &c.parallelism.pipeline_parallel_layers_per_stage,
                   "blocks per pipeline stage; -1: split evenly over pp stages (two per rank when interleaved)"),
      config::bind("parallelism.pipeline_parallel_first_stage_less_layers", &c.parallelism.pipeline_parallel_first_stage_less_layers,
                   "the embedding counted as this many blocks when splitting stages (0: even split; TorchTitan: 1)"),
      config::bind("parallelism.pipeline_parallel_last_stage_less_layers", &c.parallelism.pipeline_parallel_last_stage_less_layers,
                   "the final norm + head counted as this many blocks when splitting stages (0: even split)"),
      config::bind("parallelism.context_parallel_degree", &c.parallelism.context_parallel_degree,
                   "cp: ranks sharing each sequence (2 x cp chunks, head-tail balanced); seq_len divisible by 2cp"),
      config::bind("parallelism.context_parallel_rotate_method", &c.parallelism.context_parallel_rotate_method,
                   "K/V exchange over cp: allgather (Llama 3's) or alltoall (ring attention), overlapped"),
      config::bind("parallelism.expert_parallel_comm_backend", &c.parallelism.expert_parallel_comm_backend,
                   "ep > 1: standard (one all-to-all, a row per token and expert) or hierarchical (DeepEP's: a "
                   "token crosses to a host once, then fans out to its ranks there)"),
      config::bind("activation_checkpoint.mode", &c.activation_checkpoint.mode,
                   "recompute activations in backward: none, full (every block), selective (selective_ac_option)"),
      config::bind("activation_checkpoint.selective_ac_option", &c.activation_checkpoint.selective_ac_option,
                   "selective: N = blocks N, 2N, ... checkpointed; op = every block, op-level (keeps matmul outputs)"),
      config::bind("checkpoint.enable", &c.checkpoint.enable,
                   "true: save training state every interval steps and resume from the newest verified checkpoint"),
      config::bind("checkpoint.folder", &c.checkpoint.folder,
                   "checkpoint folder inside job.dump_folder (step-N.h5 files)"),
      config::bind("checkpoint.interval", &c.checkpoint.interval,
                   "save a checkpoint every N steps (and at the last step)"),
      config::bind("checkpoint.keep_latest_k", &c.checkpoint.keep_latest_k,
                   "checkpoints kept, newest first, older ones pruned after the new one verifies; 0: keep all"),
      config::bind("checkpoint.initial_load_path", &c.checkpoint.initial_load_path,
                   "HF-named weights to start from: .safetensors, an index, model.h5, a folder; \"\": init from debug.seed"),
      config::bind("checkpoint.export_at_end", &c.checkpoint.export_at_end,
                   "true: at the end write <dump_folder>/export/ (HF config.json + HF-named weights)"),
      config::bind("checkpoint.resume_with_changed_config", &c.checkpoint.resume_with_changed_config,
                   "true: resume although model.* / optimizer.* differ from the checkpoint's (else refused)"),
      config::bind("comm.init_timeout_seconds", &c.comm.init_timeout_seconds,
                   "collective watchdog until the first step completes (s): a longer collective aborts the job"),
      config::bind("comm.train_timeout_seconds", &c.comm.train_timeout_seconds,
                   "collective watchdog after the first step (s): a longer collective aborts the job, naming it"),
      config::bind("checkpoint.export_dtype", &c.checkpoint.export_dtype,
                   "dtype of the exported weights (float16: safetensors only)"),
      config::bind("checkpoint.export_format", &c.checkpoint.export_format,
                   "export file: safetensors (model.safetensors), hdf5 (model.h5, config as an attribute) or both"),
      config::bind("checkpoint.export_max_shard_mb", &c.checkpoint.export_max_shard_mb,
                   "safetensors larger than this (MB, 10^6 bytes) are sharded (+ model.safetensors.index.json)"),
      config::bind("metrics.log_freq", &c.metrics.log_freq,
                   "print the step line every N steps (and at the first and last step)"),
      config::bind("metrics.save_jsonl", &c.metrics.save_jsonl,
                   "true: the step lines' figures and validation losses also in <dump_folder>/metrics.jsonl"),
      config::bind("metrics.peak_tflops", &c.metrics.peak_tflops,
                   "peak TFLOP/s per rank that MFU divides by; 0: measured at start (a large GEMM on this rank's threads)"),
      config::bind("metrics.link_probe_mib", &c.metrics.link_probe_mib,
                   "across hosts: MiB sent around the ring of hosts at each step line, timed; a host whose links take "
                   "3x the others' and 20 ms more is named the straggler (0: off; larger on fast networks)"),
      config::bind("profiling.enable_profiling", &c.profiling.enable_profiling,
                   "true: profile_step's per-op table, collectives (collectives_rank<r>.tsv) and Chrome trace"),
      config::bind("profiling.profile_step", &c.profiling.profile_step,
                   "the step profiled (1-based)"),
      config::bind("profiling.simulate_system", &c.profiling.simulate_system,
                   "the profiled step also simulated on simulator/specs/systems/<name>.yaml (the machine it runs on), "
                   "each op's measured and simulated time side by side; \"\": off"),
      config::bind("simulation.enabled", &c.simulation.enabled,
                   "true: plan one step on meta tensors as world_size ranks on simulation.system, price it; no training"),
      config::bind("simulation.world_size", &c.simulation.world_size,
                   "ranks of the simulated job (simulation.enabled; a real run simulates its own world)"),
      config::bind("simulation.system", &c.simulation.system,
                   "simulator/specs/systems/<name>.yaml or a path; \"\": none; without enabled, a real run adds its simulated figures"),
      config::bind("simulation.chip", &c.simulation.chip,
                   "overrides the system's chip: simulator/specs/chips/<name>.yaml or a path; \"\": the system's own"),
      config::bind("simulation.ranks_per_chip", &c.simulation.ranks_per_chip,
                   "consecutive ranks sharing one chip (Trainium LNC=2: 8 NeuronCores / 2 = 4)"),
      config::bind("simulation.num_systems", &c.simulation.num_systems,
                   "systems joined by the system's scale_out network (chips available: system chips x this)"),
      config::bind("simulation.mode", &c.simulation.mode,
                   "eager (each op its kernels), compiled (elementwise chains fused), cudagraphs (compiled, step issued once)"),
      config::bind("simulation.attention_kernel", &c.simulation.attention_kernel,
                   "\"\": the chip's default attention kernel; else one its spec lists (e.g. cudnn, flash3 on H100)"),
      config::bind("simulation.attention_scores", &c.simulation.attention_scores,
                   "fused: attention as one flash kernel; materialized: as an eager matmul - softmax - matmul, every "
                   "score written to and read from memory (Megatron-LM before flash attention, HF eager)"),
      config::bind("simulation.attention_dropout", &c.simulation.attention_dropout,
                   "with attention_scores materialized: the probabilities' dropout, a kernel pass of its own (0: "
                   "none; Megatron-LM's default 0.1)"),
      config::bind("simulation.kernel_model", &c.simulation.kernel_model,
                   "table: kernels priced by the chip's efficiency tables; engines: GEMM and elementwise kernels by "
                   "the schedule of the chip's engines (specs with engines:, Trainium)"),
      config::bind("simulation.what_if", &c.simulation.what_if,
                   "the planned step priced again with changes, ';'-separated: chip.hbm_tbps*2, "
                   "system.levels.*.bandwidth_gbps*2, parallelism.tensor_parallel_degree=4; prints the new step, its "
                   "critical path and what moved"),
      config::bind("simulation.trace_file", &c.simulation.trace_file,
                   "Chrome-trace JSON of the simulated step, relative to job.dump_folder; \"\": none"),
      config::bind("simulation.trace_chips", &c.simulation.trace_chips,
                   "chips drawn in the simulated trace: the first N; 0: one per pipeline stage, standing for the chips "
                   "alike (SPMD: a stage's chips run the same timeline)"),
      config::bind("simulation.moe_routing_skew", &c.simulation.moe_routing_skew,
                   "MoE routing priced at the busiest rank; 0: balanced; s > 0: expert e gets a share ~ 1/(e+1)^s"),
      config::bind("simulation.moe_routing_histogram", &c.simulation.moe_routing_histogram,
                   "tokens per expert, comma-separated, for every MoE layer; or one such list per MoE layer in "
                   "order, separated by ';' (a real run's \"expert load\" lines); \"\": balanced"),
      config::bind("simulation.allow_oom", &c.simulation.allow_oom,
                   "true: a simulated step that does not fit in memory still prints its figures and exits 0 (plan anyway)"),
      config::bind("simulation.published_tps", &c.simulation.published_tps,
                   "the published tokens/s this config reproduces (configs/validation/): printed with the error; 0: none"),
      config::bind("simulation.published_tps_per", &c.simulation.published_tps_per, "what published_tps counts: chip (tokens/s per chip) or job (the whole job's)", {"chip", "job"}),
      config::bind("simulation.published_source", &c.simulation.published_source,
                   "where published_tps was published (printed with it)"),
      config::bind("debug.seed", &c.debug.seed,
                   "seed of the weight init: the same seed gives the same losses bit for bit"),
      config::bind("debug.dump_grads_at_step", &c.debug.dump_grads_at_step,
                   "> 0: write <dump_folder>/grads_step_N.h5 at step N (HF names, full shapes, before clipping); 0: off"),
      config::bind("debug.fail_on_rank", &c.debug.fail_on_rank,
                   "fault injection for tests: this rank throws at step 2; -1: off"),
  };
  fs.insert(fs.end(), more.begin(), more.end());
  return fs;
}

std::vector<std::string> sections_of(const std::vector<Field>& fs) {
  std::vector<std::string> s;
  for (const auto& f : fs) {
    std::string sec = f.key.substr(0, f.key.find('.'));
    if (std::find(s.begin(), s.end(), sec) == s.end()) s.push_back(sec);
  }
  return s;
}

std::vector<std::string> keys_in(const std::vector<Field>& fs, const std::string& sec) {
  std::vector<std::string> k;
  for (const auto& f : fs)
    if (f.key.rfind(sec + ".", 0) == 0) k.push_back(f.key.substr(sec.size() + 1));
  return k;
}

const Field* find(const std::vector<Field>& fs, const std::string& key) {
  for (const auto& f : fs)
    if (f.key == key) return &f;
  return nullptr;
}

// Keys that moved: their new place, named in the error (one definition: the run's precision is what is priced).
std::string moved_key(const std::string& key) {
  static const std::map<std::string, std::string> moved = {
      {"simulation.param_dtype", "training.mixed_precision_param"},
      {"simulation.reduce_dtype", "training.mixed_precision_reduce"}};
  auto it = moved.find(key);
  return it == moved.end() ? "" : " (moved: the simulated step is the run's, in its precision: use " + it->second + ")";
}

void apply_yaml(JobConfig& c, const std::string& path) {
  std::ifstream in(path);
  TITAN_CHECK(in.good(), "config error: cannot open config file '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  config::check_nesting(text.str(), "config error: " + path);
  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    fail("config error: ", path, ":", e.mark.line + 1, ": malformed YAML: ", e.msg);
  }
  if (root.IsNull()) return;
  TITAN_CHECK(root.IsMap(), "config error: ", path, ": the top level must be a mapping of sections");
  auto fs = fields(c);
  auto secs = sections_of(fs);
  // YAML keeps one of two equal keys silently: a duplicate key is an error naming both lines (a section
  // written twice merges, as configs dumped by titan 0.7 split `checkpoint` in two)
  std::map<std::string, int> seen;
  auto once = [&](const std::string& key, int line) {
    auto [it, fresh] = seen.emplace(key, line);
    TITAN_CHECK(fresh, "config error: ", path, ":", line, ": duplicate key '", key, "' (first at line ", it->second,
                "); YAML would keep one of them silently");
  };
  auto plain_key = [&](const YAML::Node& k) {  // a key is a name: YAML's [list] or {map} keys are refused
    TITAN_CHECK(k.IsScalar(), "config error: ", path, ":", k.Mark().line + 1,
                ": a key must be a plain name, not a list or mapping");
    return k.Scalar();
  };
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string sec = plain_key(it->first);
    const int line = it->first.Mark().line + 1;
    if (std::find(secs.begin(), secs.end(), sec) == secs.end())
      fail("config error: ", path, ":", line, ": unknown section '", sec, "'", suggestion(sec, secs),
           "; sections: ", join(secs));
    if (it->second.IsNull()) continue;
    TITAN_CHECK(it->second.IsMap(), "config error: ", path, ":", line, ": section '", sec, "' must be a mapping");
    auto keys = keys_in(fs, sec);
    for (auto kv = it->second.begin(); kv != it->second.end(); ++kv) {
      const std::string k = plain_key(kv->first);
      const int kl = kv->first.Mark().line + 1;
      const Field* f = find(fs, sec + "." + k);
      once(sec + "." + k, kl);
      if (!f)
        fail("config error: ", path, ":", kl, ": unknown key '", sec, ".", k, "'", moved_key(sec + "." + k),
             suggestion(k, keys), "; keys in [", sec, "]: ", join(keys));
      std::string text;
      if (kv->second.IsSequence() && f->type == config::NameList::kind) {  // a list key's YAML list: its items
        std::vector<std::string> items;
        for (const auto& item : kv->second) {
          TITAN_CHECK(item.IsScalar(), "config error: ", path, ":", kl, ": ", f->key, " must be ", f->type);
          items.push_back(item.Scalar());
        }
        text = "[" + join(items) + "]";
      } else {
        TITAN_CHECK(kv->second.IsScalar(), "config error: ", path, ":", kl, ": ", f->key, " must be ", f->type);
        text = kv->second.Scalar();
      }
      f->set(text, path + ":" + std::to_string(kl));
      c.given.insert(sec + "." + k);
      if (sec == "model" && decoder::find_knob(k)) c.model_given.insert(k), c.model_where[k] = path + ":" + std::to_string(kl);
    }
  }
}

// An unknown --key: the same "did you mean" and key list as a YAML typo.
[[noreturn]] void unknown_flag(const std::vector<Field>& fs, const std::string& key) {
  const auto secs = sections_of(fs);
  const std::string sec = key.substr(0, key.find('.'));
  if (key.find('.') == std::string::npos || std::find(secs.begin(), secs.end(), sec) == secs.end()) {
    std::vector<std::string> all;
    for (const auto& x : fs) all.push_back(x.key);
    fail("config error: unknown flag --", key, suggestion(key, all), "; flags are --section.key, sections: ",
         join(secs), " (titan-train --help lists every key)");
  }
  const auto keys = keys_in(fs, sec);
  fail("config error: unknown flag --", key, moved_key(key), suggestion(key.substr(sec.size() + 1), keys),
       "; keys in [", sec, "]: ", join(keys));
}

void apply_override(JobConfig& c, const std::string& key, const std::string& value) {
  auto fs = fields(c);
  const Field* f = find(fs, key);
  if (!f) unknown_flag(fs, key);
  f->set(value, "--" + key);
  c.given.insert(key);
  if (key.rfind("model.", 0) == 0 && decoder::find_knob(key.substr(6)))
    c.model_given.insert(key.substr(6)), c.model_where[key.substr(6)] = "--" + key;
}

void validate(const JobConfig& c) {
  TITAN_CHECK(c.activation_checkpoint.mode == JobConfig::ACMode::selective ||
                  c.activation_checkpoint.selective_ac_option == JobConfig::ActivationCheckpoint::SelectiveOption{},
              "config error: activation_checkpoint.selective_ac_option ('", c.activation_checkpoint.selective_ac_option.text(),
              "') applies only with activation_checkpoint.mode selective (it is ", config::enum_name(c.activation_checkpoint.mode),
              "); set the mode or drop the key");
  {  // model converters and the float8 section
    for (const std::string& conv : c.converters.items)
      TITAN_CHECK(conv == "float8", "config error: model.converters: unknown converter '", conv, "' in ",
                  c.converters.text(), "; converters: float8",
                  conv == "mx" ? " (MXFP8 is float8.recipe mxfp8 or mxfp8_rceil)" : "");
    const bool fp8 = c.converters.contains("float8");
    for (const char* k : {"float8.recipe", "float8.filter_fqns", "float8.moe_fqns_prototype",
                          "float8.enable_fsdp_float8_all_gather", "float8.precompute_float8_dynamic_scale_for_fsdp"})
      TITAN_CHECK(fp8 || !c.given.count(k), "config error: ", k, " is given but model.converters (",
                  c.converters.text(), ") has no float8: it would do nothing; add float8 to model.converters or "
                  "drop the key");
    const auto& p = c.parallelism;
    TITAN_CHECK(!fp8 || c.float8.moe_fqns_prototype.items.empty() || p.tensor_parallel_degree <= 1,
                "config error: float8.moe_fqns_prototype ", c.float8.moe_fqns_prototype.text(),
                " with parallelism.tensor_parallel_degree ", p.tensor_parallel_degree,
                ": tensor parallel cuts each expert's hidden size, and the FP8 experts' per-row scales would span the "
                "cut (no amax all-reduce for grouped GEMMs); use expert_parallel_degree, or drop the key");
    const auto& f8 = c.float8;
    TITAN_CHECK(!f8.enable_fsdp_float8_all_gather || f8.recipe == Float8Recipe::tensorwise,
                "config error: float8.enable_fsdp_float8_all_gather needs float8.recipe tensorwise (one scale a "
                "weight, which every shard can be cast with before the gather), got ", config::enum_name(f8.recipe),
                "; set the recipe or drop the key");
    TITAN_CHECK(!f8.enable_fsdp_float8_all_gather || p.data_parallel_shard_degree * std::max<int64_t>(
                    p.context_parallel_degree, 1) != 1,
                "config error: float8.enable_fsdp_float8_all_gather with parallelism.data_parallel_shard_degree ",
                p.data_parallel_shard_degree, " x context_parallel_degree ", p.context_parallel_degree,
                " = 1: FSDP shards nothing, so it gathers nothing; drop the key or shard");
    TITAN_CHECK(!f8.precompute_float8_dynamic_scale_for_fsdp || f8.enable_fsdp_float8_all_gather,
                "config error: float8.precompute_float8_dynamic_scale_for_fsdp precomputes the scales of FSDP's float8 "
                "all-gather, which is off; set float8.enable_fsdp_float8_all_gather: true or drop the key");
    if (fp8 && float8_casts(c.float8.recipe).mx) {
      const int64_t rows = (p.pipeline_parallel_degree > 1 ? p.pipeline_parallel_microbatch_size
                                                            : c.training.local_batch_size) *
                           c.training.seq_len / std::max<int64_t>(p.context_parallel_degree, 1);
      TITAN_CHECK(rows % kMxBlock == 0, "config error: float8.recipe ", config::enum_name(c.float8.recipe),
                  ": a micro-batch holds ", rows, " tokens (training.seq_len ", c.training.seq_len,
                  " x its sequences / context_parallel_degree), not a multiple of ", kMxBlock,
                  "; MX blocks run along the tokens in grad_weight's GEMM");
    }
  }
  auto pos = [](int64_t v, const char* k) { TITAN_CHECK(v > 0, "config error: ", k, " must be > 0, got ", v); };
  pos(c.training.steps, "training.steps");
  pos(c.training.seq_len, "training.seq_len");
  pos(c.training.local_batch_size, "training.local_batch_size");
  pos(c.metrics.log_freq, "metrics.log_freq");
  TITAN_CHECK(c.metrics.link_probe_mib >= 0 && c.metrics.link_probe_mib <= 256,
              "config error: metrics.link_probe_mib must be in [0, 256] (MiB sent by each host at every step line; "
              "0: off), got ", c.metrics.link_probe_mib);
  TITAN_CHECK(c.training.global_batch_size == -1 || c.training.global_batch_size > 0,
              "config error: training.global_batch_size must be > 0 (sequences per step, all ranks together) or -1 "
              "(local_batch_size x the data-parallel ranks), got ", c.training.global_batch_size);
  // sizes beyond any machine, refused as written before they size anything (products in double: no overflow)
  TITAN_CHECK(c.training.global_batch_size <= int64_t(1) << 31, "config error: training.global_batch_size (",
              c.training.global_batch_size, ") is more than 2^31 sequences a step; a value is mistyped");
  TITAN_CHECK((double)c.training.seq_len * (double)c.training.local_batch_size <= double(int64_t(1) << 31),
              "config error: training.seq_len (", c.training.seq_len, ") x training.local_batch_size (",
              c.training.local_batch_size, ") is more than 2^31 tokens per rank and step; a value is mistyped");
  {
    const auto& p = c.parallelism;
    double ranks = 1;
    for (int64_t d : {p.data_parallel_replicate_degree, p.data_parallel_shard_degree, p.tensor_parallel_degree,
                      p.pipeline_parallel_degree, p.context_parallel_degree})
      ranks *= (double)std::max<int64_t>(d, 1);
    const double simulated = (double)std::max(c.simulation.world_size, c.simulation.num_systems);
    TITAN_CHECK(ranks <= double(1 << 24) && simulated <= double(1 << 24), "config error: the parallelism degrees "
                "multiply to ", ranks, " ranks, simulation.world_size is ", c.simulation.world_size,
                " and simulation.num_systems ", c.simulation.num_systems,
                "; more than 2^24 (16,777,216; the largest published runs use ~100,000 chips) is a mistyped value");
  }
  {
    const auto& p = c.parallelism;
    TITAN_CHECK(p.pipeline_parallel_degree >= 1, "config error: parallelism.pipeline_parallel_degree must be >= 1, got ",
                p.pipeline_parallel_degree);
    parallel::check_layout(c.model, p.expert_parallel_degree, p.pipeline_parallel_degree);
    TITAN_CHECK(p.pipeline_parallel_microbatch_size >= 1 &&
                    c.training.local_batch_size % p.pipeline_parallel_microbatch_size == 0,
                "config error: parallelism.pipeline_parallel_microbatch_size (", p.pipeline_parallel_microbatch_size,
                ") must be >= 1 and divide training.local_batch_size (", c.training.local_batch_size, ")");
    TITAN_CHECK(p.pipeline_parallel_layers_per_stage == -1 || p.pipeline_parallel_layers_per_stage >= 1,
                "config error: parallelism.pipeline_parallel_layers_per_stage must be >= 1 (or -1: split evenly), got ",
                p.pipeline_parallel_layers_per_stage);
    TITAN_CHECK(p.pipeline_parallel_degree > 1 ||
                    (p.pipeline_parallel_schedule == parallel::PipelineSchedule::OneFOneB && p.pipeline_parallel_microbatch_size == 1 &&
                     p.pipeline_parallel_layers_per_stage == -1 && p.pipeline_parallel_first_stage_less_layers == 0 &&
                     p.pipeline_parallel_last_stage_less_layers == 0),
                "config error: parallelism.pipeline_parallel_schedule / _microbatch_size / _layers_per_stage / "
                "_first_stage_less_layers / _last_stage_less_layers apply only with parallelism.pipeline_parallel_degree "
                "> 1 (it is 1); set the degree or drop the keys");
    TITAN_CHECK(p.pipeline_parallel_first_stage_less_layers >= 0 && p.pipeline_parallel_last_stage_less_layers >= 0,
                "config error: parallelism.pipeline_parallel_first_stage_less_layers (",
                p.pipeline_parallel_first_stage_less_layers, ") and _last_stage_less_layers (",
                p.pipeline_parallel_last_stage_less_layers, ") must be >= 0");
    TITAN_CHECK(p.context_parallel_degree >= 1, "config error: parallelism.context_parallel_degree must be >= 1, got ",
                p.context_parallel_degree);
    TITAN_CHECK(p.context_parallel_degree > 1 || p.context_parallel_rotate_method == parallel::RotateMethod::AllGather,
                "config error: parallelism.context_parallel_rotate_method (", config::enum_name(p.context_parallel_rotate_method),
                ") applies only with parallelism.context_parallel_degree > 1 (it is 1); set the degree or drop the key");
    TITAN_CHECK(p.expert_parallel_degree > 1 || p.expert_parallel_comm_backend == comms::ExpertCommBackend::Standard,
                "config error: parallelism.expert_parallel_comm_backend (",
                config::enum_name(p.expert_parallel_comm_backend), ") applies only with "
                "parallelism.expert_parallel_degree > 1 (it is ", p.expert_parallel_degree,
                "); set the degree or drop the key");
    TITAN_CHECK(!p.sequence_parallel_regather || (p.tensor_parallel_degree > 1 && p.enable_sequence_parallel),
                "config error: parallelism.sequence_parallel_regather needs sequence parallel: "
                "parallelism.tensor_parallel_degree > 1 (it is ", p.tensor_parallel_degree,
                ") and parallelism.enable_sequence_parallel: true (it is ", p.enable_sequence_parallel ? "true" : "false",
                "); set them or drop the key");
    TITAN_CHECK(!p.enable_async_tensor_parallel || (p.tensor_parallel_degree > 1 && p.enable_sequence_parallel &&
                                                    !p.sequence_parallel_regather),
                "config error: parallelism.enable_async_tensor_parallel fuses sequence parallel's collectives with the "
                "projections: it needs parallelism.tensor_parallel_degree > 1 (it is ", p.tensor_parallel_degree,
                ") and parallelism.enable_sequence_parallel: true (it is ", p.enable_sequence_parallel ? "true" : "false",
                "), without parallelism.sequence_parallel_regather (it is ",
                p.sequence_parallel_regather ? "true" : "false", "); set them or drop the key");
    TITAN_CHECK(!p.sequence_parallel_regather || c.activation_checkpoint.every() != 1,
                "config error: parallelism.sequence_parallel_regather frees what a block keeps for its backward, but "
                "activation_checkpoint.mode ", config::enum_name(c.activation_checkpoint.mode),
                c.activation_checkpoint.mode == JobConfig::ACMode::selective ? " (" + c.activation_checkpoint.selective_ac_option.text() + ")"
                                                            : std::string(),
                " already recomputes every block (its gathered input included); drop one of the two");
  }
  TITAN_CHECK(c.model.attn_mask_type != nn::MaskKind::prefix_lm || c.model.attn_prefix_len < c.training.seq_len,
              "config error: model.attn_prefix_len (", c.model.attn_prefix_len, ") must be shorter than training.seq_len (",
              c.training.seq_len, ")");
  TITAN_CHECK(c.training.max_norm >= 0, "config error: training.max_norm must be >= 0 (0 = no clipping), got ",
              c.training.max_norm);
  TITAN_CHECK(c.optimizer.lr >= 0 && c.optimizer.beta1 >= 0 && c.optimizer.beta1 < 1 && c.optimizer.beta2 >= 0 &&
                  c.optimizer.beta2 < 1 && c.optimizer.eps > 0 && c.optimizer.weight_decay >= 0,
              "config error: optimizer needs lr >= 0, 0 <= beta1, beta2 < 1, eps > 0, weight_decay >= 0");
  TITAN_CHECK(c.lr_scheduler.warmup_steps >= 0, "config error: lr_scheduler.warmup_steps must be >= 0");
  TITAN_CHECK(c.lr_scheduler.decay_ratio >= 0 && c.lr_scheduler.decay_ratio <= 1,
              "config error: lr_scheduler.decay_ratio must be in [0, 1], got ", c.lr_scheduler.decay_ratio);
  TITAN_CHECK(c.simulation.world_size >= 1 && c.simulation.ranks_per_chip >= 1 && c.simulation.num_systems >= 1 &&
                  c.simulation.trace_chips >= 0,
              "config error: simulation.world_size, ranks_per_chip and num_systems must be >= 1, trace_chips >= 0 "
              "(0: one chip per pipeline stage)");
  {
    const bool routing = c.simulation.moe_routing_skew != 0 || !c.simulation.moe_routing_histogram.empty();
    TITAN_CHECK(c.simulation.moe_routing_skew >= 0 && std::isfinite(c.simulation.moe_routing_skew),
                "config error: simulation.moe_routing_skew must be >= 0 (0: balanced), got ",
                c.simulation.moe_routing_skew);
    TITAN_CHECK(c.simulation.moe_routing_skew == 0 || c.simulation.moe_routing_histogram.empty(),
                "config error: simulation.moe_routing_skew and simulation.moe_routing_histogram both set: give one");
    TITAN_CHECK(!routing || !c.simulation.system.empty(),
                "config error: simulation.moe_routing_* shapes the simulated step only, and nothing is simulated "
                "(set simulation.system, or drop the key)");
    TITAN_CHECK(!routing || c.model.moe_enabled,
                "config error: simulation.moe_routing_* needs MoE layers (model.moe_enabled: true)");
    if (!c.simulation.moe_routing_histogram.empty()) parse_routing_histogram(c.simulation.moe_routing_histogram);
  }
  TITAN_CHECK(c.simulation.published_tps >= 0 && std::isfinite(c.simulation.published_tps),
              "config error: simulation.published_tps must be >= 0 (tokens per second; 0: none), got ",
              c.simulation.published_tps);
  TITAN_CHECK((c.simulation.published_tps == 0 && c.simulation.published_source.empty()) || c.simulation.enabled,
              "config error: simulation.published_tps / published_source are compared with a simulated job's "
              "throughput, and this job is not simulated (set simulation.enabled: true, or drop the keys)");
  TITAN_CHECK(!c.simulation.allow_oom || c.simulation.enabled,
              "config error: simulation.allow_oom applies to a simulated job (simulation.enabled: true), and this "
              "job is not one; drop the key");
  TITAN_CHECK(c.simulation.published_tps > 0 ||
                  (c.simulation.published_tps_per == "chip" && c.simulation.published_source.empty()),
              "config error: simulation.published_tps_per / published_source describe simulation.published_tps, "
              "which is not set (0); set it, or drop the keys");
  TITAN_CHECK(c.simulation.attention_kernel.empty() || !c.simulation.system.empty(),
              "config error: simulation.attention_kernel shapes the simulated step only, and nothing is simulated "
              "(set simulation.system, or drop the key)");
  TITAN_CHECK(!c.parallelism.fsdp_gather_stage_at_start ||
                  (c.parallelism.pipeline_parallel_degree > 1 && !c.parallelism.reshard_after_forward()),
              "config error: parallelism.fsdp_gather_stage_at_start applies only to a pipeline stage that keeps its "
              "weights gathered through its schedule (pipeline_parallel_degree > 1, it is ",
              c.parallelism.pipeline_parallel_degree, "; fsdp_reshard_after_forward default or never, it is ",
              config::enum_name(c.parallelism.fsdp_reshard_after_forward), "); drop the key");
  using AttentionScores = JobConfig::Simulation::AttentionScores;
  const bool materialized = c.simulation.attention_scores == AttentionScores::materialized;
  TITAN_CHECK(!materialized || !c.simulation.system.empty(),
              "config error: simulation.attention_scores materialized shapes the simulated step only, and nothing "
              "is simulated (set simulation.system, or drop the key)");
  TITAN_CHECK(std::isfinite(c.simulation.attention_dropout) && c.simulation.attention_dropout >= 0 &&
                  c.simulation.attention_dropout < 1,
              "config error: simulation.attention_dropout must be in [0, 1), got ", c.simulation.attention_dropout);
  TITAN_CHECK(c.simulation.attention_dropout == 0 || materialized,
              "config error: simulation.attention_dropout (", c.simulation.attention_dropout, ") prices a dropout "
              "pass over materialized attention probabilities; it applies only with simulation.attention_scores "
              "materialized (a fused kernel drops inside the kernel)");
  TITAN_CHECK(!materialized || c.simulation.attention_kernel.empty(),
              "config error: simulation.attention_kernel '", c.simulation.attention_kernel, "' names a fused kernel, "
              "and simulation.attention_scores is materialized (no fused kernel); drop one of the two keys");
  TITAN_CHECK(!materialized || c.simulation.kernel_model == JobConfig::Simulation::KernelModel::table,
              "config error: simulation.attention_scores materialized is priced by the chip's tables, not by its "
              "engines; set simulation.kernel_model table or drop simulation.attention_scores");
  TITAN_CHECK(c.simulation.kernel_model == JobConfig::Simulation::KernelModel::table || !c.simulation.system.empty(),
              "config error: simulation.kernel_model engines prices kernels on a simulated chip, but no "
              "simulation.system is set (set simulation.system, or drop the key)");
  TITAN_CHECK(c.simulation.what_if.empty() || c.simulation.enabled,
              "config error: simulation.what_if '", c.simulation.what_if, "' prices a planned step: it needs "
              "simulation.enabled true (a real run is not re-run)");
  TITAN_CHECK(!c.simulation.enabled || !c.simulation.system.empty(),
              "config error: simulation.enabled needs simulation.system (a file in simulator/specs/systems, e.g. "
              "trn2-instance, or a path to a .yaml)");
  TITAN_CHECK(c.checkpoint.interval > 0 && c.checkpoint.keep_latest_k >= 0,
              "config error: checkpoint.interval must be > 0 and checkpoint.keep_latest_k >= 0");
  TITAN_CHECK(c.validation.freq > 0, "config error: validation.freq must be > 0");
  TITAN_CHECK(c.comm.init_timeout_seconds > 0 && c.comm.train_timeout_seconds > 0,
              "config error: comm.init_timeout_seconds and comm.train_timeout_seconds must be > 0");
  TITAN_CHECK(c.checkpoint.export_max_shard_mb > 0, "config error: checkpoint.export_max_shard_mb must be > 0, got ",
              c.checkpoint.export_max_shard_mb);
  TITAN_CHECK(c.checkpoint.export_dtype != ExportDType::float16 || c.checkpoint.export_format == ExportFormat::safetensors,
              "config error: checkpoint.export_dtype float16 is written to safetensors only (export_format: ",
              config::enum_name(c.checkpoint.export_format), "); HDF5 exports take float32 or bfloat16");
  TITAN_CHECK(c.metrics.peak_tflops >= 0 && std::isfinite(c.metrics.peak_tflops),
              "config error: metrics.peak_tflops must be > 0 (TFLOP/s per rank), or 0 (measured at start), got ",
              c.metrics.peak_tflops);
}
}  // namespace

std::vector<std::vector<double>> parse_routing_histogram(const std::string& text) {
  std::vector<std::vector<double>> layers;
  std::stringstream layers_in(text);
  std::string layer;
  while (std::getline(layers_in, layer, ';')) {
    std::vector<double> w;
    std::stringstream in(layer);
    std::string item;
    while (std::getline(in, item, ',')) {
      char* end = nullptr;
      const double v = std::strtod(item.c_str(), &end);
      while (end && *end == ' ') ++end;
      TITAN_CHECK(end != item.c_str() && end && *end == '\0' && std::isfinite(v) && v >= 0,
                  "config error: simulation.moe_routing_histogram: '", item, "' (MoE layer ", layers.size(),
                  ") is not a token count (expected comma-separated counts, one per expert; a list per MoE layer "
                  "separated by ';')");
      w.push_back(v);
    }
    TITAN_CHECK(layers.empty() || w.size() == layers[0].size(), "config error: simulation.moe_routing_histogram: MoE "
                "layer ", layers.size(), " lists ", w.size(), " experts, layer 0 lists ", layers[0].size(),
                " (every layer's list gives one count per expert)");
    layers.push_back(std::move(w));
  }
  return layers;
}

std::vector<std::string> config_warnings(const JobConfig& c) {
  std::vector<std::string> w = c.notes;
  if (c.lr_scheduler.warmup_steps > c.training.steps)
    w.push_back("lr_scheduler.warmup_steps (" + std::to_string(c.lr_scheduler.warmup_steps) +
                ") exceeds training.steps (" + std::to_string(c.training.steps) +
                "): the learning rate never reaches optimizer.lr");
  if (!c.parallelism.fsdp_reduce_every_microbatch && c.training.global_batch_size < 0)
    w.push_back("parallelism.fsdp_reduce_every_microbatch is false, but there is no gradient accumulation "
                "(training.global_batch_size -1: one micro-batch per step): every step reduces once either way");
  if (c.model.sliding_window >= c.training.seq_len)
    w.push_back("model.sliding_window (" + std::to_string(c.model.sliding_window) + ") is not shorter than "
                "training.seq_len (" + std::to_string(c.training.seq_len) + "): the window hides nothing (a typo?)");
  return w;
}

JobConfig load_job_config_file(const std::string& path, const std::vector<std::string>& overrides) {
  JobConfig c;
  if (!path.empty()) apply_yaml(c, path);
  TITAN_CHECK(overrides.size() % 2 == 0, "config error: overrides must come as key value pairs");
  for (size_t i = 0; i < overrides.size(); i += 2) {
    apply_override(c, overrides[i], overrides[i + 1]);
    c.overridden.push_back(overrides[i]);
  }
  const std::string flavor_note = decoder::apply_flavor(c.model, c.model_where, c.model_given);
  if (!flavor_note.empty()) c.notes.push_back(flavor_note);
  decoder::apply_preset(c.model, c.model_given);
  decoder::refuse_inapplicable(c.model, c.model_given);
  c.model.resolve();
  validate(c);
  return c;
}

namespace {
// Folders searched for a bare config name, in order.
std::vector<std::string> config_roots() {
  std::vector<std::string> roots{"configs"};
#ifdef TITAN_SOURCE_CONFIGS
  roots.push_back(TITAN_SOURCE_CONFIGS);
#endif
#ifdef TITAN_INSTALL_CONFIGS
  roots.push_back(TITAN_INSTALL_CONFIGS);
#endif
  return roots;
}
}  // namespace

std::string resolve_config_path(const std::string& name) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(name)) return name;
  TITAN_CHECK(!fs::exists(name), "config error: --config ", name, " is not a regular file");
  const bool has_ext = name.size() > 5 && (name.ends_with(".yaml") || name.ends_with(".yml"));
  const std::vector<std::string> wanted = has_ext ? std::vector<std::string>{name}
                                                  : std::vector<std::string>{name + ".yaml", name + ".yml", name};
  std::vector<std::string> known;
  for (const auto& root : config_roots()) {
    std::error_code ec;
    if (!fs::is_directory(root, ec)) continue;
    for (const auto& w : wanted)  // configs/NAME, configs/sub/NAME as given
      if (fs::is_regular_file(fs::path(root) / w)) return (fs::path(root) / w).string();
    std::vector<std::string> hits;  // configs/**/NAME by file name
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      if (!it->is_regular_file()) continue;
      const std::string file = it->path().filename().string();
      known.push_back(fs::relative(it->path(), root).string());
      for (const auto& w : wanted)
        if (file == fs::path(w).filename().string() && w.find('/') == std::string::npos) hits.push_back(it->path().string());
    }
    std::sort(hits.begin(), hits.end());
    TITAN_CHECK(hits.size() <= 1, "config error: --config ", name, " is ambiguous in ", root, ": ", join(hits),
                "; give the path");
    if (hits.size() == 1) return hits[0];
  }
  std::sort(known.begin(), known.end());
  known.erase(std::unique(known.begin(), known.end()), known.end());
  std::vector<std::string> stems;
  for (const auto& k : known) stems.push_back(fs::path(k).stem().string());
  fail("config error: --config ", name, ": no such file, and no config of that name under ", join(config_roots()),
       suggestion(fs::path(name).stem().string(), stems), "; known configs: ", join(known));
}

std::vector<std::string> data_roots() {
  std::vector<std::string> roots{"."};
#ifdef TITAN_SOURCE_DIR
  roots.push_back(TITAN_SOURCE_DIR);
#endif
#ifdef TITAN_INSTALL_SHARE
  roots.push_back(TITAN_INSTALL_SHARE);
#endif
  return roots;
}

std::string find_data_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) return "";
  if (fs::path(path).is_absolute()) return fs::exists(path, ec) ? path : "";
  for (const auto& root : data_roots()) {
    const fs::path p = root == "." ? fs::path(path) : fs::path(root) / path;
    if (fs::exists(p, ec)) return p.string();
  }
  return "";
}

JobConfig with_data_found(const JobConfig& cfg, std::vector<std::string>* notes) {
  JobConfig c = cfg;
  auto find = [&](std::string& path, const char* key, const char* off) {
    const std::string found = find_data_file(path);
    if (found.empty()) {
      const bool is_default = (std::string(key) == "training.dataset_path" && path == JobConfig{}.training.dataset_path) ||
                              (std::string(key) == "validation.dataset_path" && path == JobConfig{}.validation.dataset_path);
      fail("data error: ", key, " = '", path, "': no such file",
           std::filesystem::path(path).is_absolute() ? std::string() : " in " + join(data_roots()),
           is_default ? "; the default corpus (KJV) is made by scripts/prepare_data.sh in titan's source tree (run by "
                        "scripts/train.sh)"
                      : "",
           "; tokenize a corpus with `titan-tokenize --input CORPUS --output FILE.h5` and set ", key, off);
    }
    if (found != path && notes) notes->push_back(std::string(key) + " '" + path + "' found at " + found);
    path = found;
  };
  find(c.training.dataset_path, "training.dataset_path", "");
  if (c.validation.enabled) find(c.validation.dataset_path, "validation.dataset_path", ", or --validation.enabled false");
  return c;
}

JobConfig load_job_config(int argc, const char* const* argv) {
  CLI::App app{"titan-train: LLM training in C++ (TorchTitan's config sections)", "titan-train"};
  app.set_version_flag("--version", version_string("titan-train"));
  app.footer("Every --section.key is also the YAML key `section: key:` (the flag wins). A model.* default is titan's "
             "own, before model.name's preset and model.flavor fill the keys not given. docs/training.md explains "
             "the sections; an unknown key is refused with a did-you-mean.");
  std::string config_path;
  app.add_option("--config,--job.config_file", config_path,
                 "YAML job config: a path, or a name looked up under configs/ (e.g. qwen3_32b)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  JobConfig defaults;
  {  // typos first, with YAML's "did you mean" instead of CLI11's "arguments were not expected"
    const auto fs = fields(defaults);
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a.size() < 3 || a.rfind("--", 0) != 0) continue;
      const std::string key = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
      if (key == "config" || key == "job.config_file" || key == "help" || key == "version") continue;
      if (!find(fs, key)) unknown_flag(fs, key);
    }
  }
  std::vector<std::pair<std::string, std::string>> given;
  std::map<std::string, std::string> values;
  for (const auto& f : fields(defaults)) {
    std::string& slot = values[f.key];
    // one line of meaning (the table's), what it takes and titan's default (model.*: before model.name's preset)
    std::string help = f.help.empty() ? std::string("override ") + f.key : f.help;
    help += " [" + (f.choices.empty() ? f.type : join(f.choices, " | ")) + "; default " + f.get() + "]";
    app.add_option("--" + f.key, slot, help)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // last wins
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::printf("%s", app.help().c_str());
    std::exit(0);
  } catch (const CLI::CallForVersion& e) {
    std::printf("%s\n", e.what());
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    fail("command line error: ", e.what(), " (run with --help for every flag)");
  }
  std::vector<std::string> ov;
  for (const auto& f : fields(defaults)) {
    auto* opt = app.get_option("--" + f.key);
    if (opt->count() > 0) {
      ov.push_back(f.key);
      ov.push_back(values[f.key]);
    }
  }
  return load_job_config_file(config_path.empty() ? config_path : resolve_config_path(config_path), ov);
}

std::vector<std::string> config_changes(const std::string& old_yaml, const std::string& new_yaml,
                                        const std::vector<std::string>& sections) {
  auto flat = [](const std::string& text) {  // the config a checkpoint recorded: read as untrusted text
    std::map<std::string, std::string> m;
    config::check_nesting(text, "checkpoint: the recorded config");
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      fail("checkpoint: the recorded config is not YAML (line ", e.mark.line + 1, ": ", e.msg, "): damaged");
    }
    if (!root.IsMap()) return m;
    for (auto sec = root.begin(); sec != root.end(); ++sec)
      if (sec->first.IsScalar() && sec->second.IsMap())
        for (auto kv = sec->second.begin(); kv != sec->second.end(); ++kv)
          if (kv->first.IsScalar()) {
            std::string v = kv->second.IsScalar() ? kv->second.Scalar() : "?";
            if (kv->second.IsSequence()) {  // a list key: its items, as dump_job_config writes them
              std::vector<std::string> items;
              for (const auto& item : kv->second) items.push_back(item.IsScalar() ? item.Scalar() : "?");
              v = "[" + join(items) + "]";
            }
            m[sec->first.Scalar() + "." + kv->first.Scalar()] = v;
          }
    return m;
  };
  const auto a = flat(old_yaml), b = flat(new_yaml), d = flat(dump_job_config(JobConfig{}));
  std::vector<std::string> out;
  std::vector<std::string> keys;
  for (auto& [k, v] : a) keys.push_back(k);
  for (auto& [k, v] : b)
    if (!a.count(k)) keys.push_back(k);
  for (const auto& k : keys) {
    if (k == "model.flavor") continue;  // a name: the knobs it sets are compared themselves
    const std::string sec = k.substr(0, k.find('.'));
    if (std::find(sections.begin(), sections.end(), sec) == sections.end()) continue;
    auto ia = a.find(k), ib = b.find(k);
    std::string va = ia == a.end() ? "(absent)" : ia->second;
    const std::string vb = ib == b.end() ? "(absent)" : ib->second;
    if (ia == a.end()) {  // a key newer than the old config: it ran with the default then
      auto id = d.find(k);
      if (id != d.end()) va = id->second;
    }
    if (va == vb) continue;
    // numbers printed differently but equal (1e-3 vs 0.001) are no change
    try {
      size_t pa = 0, pb = 0;
      const double da = std::stod(va, &pa), db = std::stod(vb, &pb);
      if (pa == va.size() && pb == vb.size() && da == db) continue;
    } catch (...) {
    }
    out.push_back(k + ": " + va + " -> " + vb);
  }
  return out;
}

std::string dump_job_config(const JobConfig& cc) {
  JobConfig c = cc;
  std::ostringstream os;
  const auto fs = fields(c);
  for (const std::string& sec : sections_of(fs)) {  // one block per section, whatever the table's order
    if (sec == "float8" && !c.converters.contains("float8")) continue;  // would do nothing (and is refused so)
    os << sec << ":\n";
    for (const auto& f : fs) {
      if (f.key.rfind(sec + ".", 0) != 0) continue;
      if (sec == "model" && !decoder::knob_inapplicable(c.model, f.key.substr(6)).empty()) continue;  // did nothing
      os << "  " << f.key.substr(sec.size() + 1) << ": " << f.get();
      os << "\n";
    }
  }
  return os.str();
}

int64_t JobConfig::ActivationCheckpoint::every() const {
  if (mode == ACMode::none) return 0;
  if (mode == ACMode::full || selective_ac_option.op) return 1;  // op: every block, keeping the save list's outputs
  return selective_ac_option.every;
}

std::optional<JobConfig::ActivationCheckpoint::SelectiveOption> JobConfig::ActivationCheckpoint::SelectiveOption::parse(
    const std::string& text) {
  if (text == "op") return SelectiveOption{true, 1};
  int64_t n = 0;
  if (!config::parse_int(text, &n) || n < 1) return std::nullopt;
  return SelectiveOption{false, n};
}

}  // namespace titan
