#include "job/trainer.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "job/checkpointer.h"
#include "job/job_lock.h"
#include "job/metrics_logger.h"
#include "job/preemption.h"
#include "job/simulation_entry.h"
#include "job/step_profiler.h"
#include "job/validator.h"
#include "models/decoder/presets.h"
#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/h5.h"
#include "src/optim/adamw.h"
#include "step/train_step.h"

namespace fs = std::filesystem;

namespace titan {

namespace {
// One job per folder: the lock (held until the job ends), config.yaml, the effective config and the layout.
std::unique_ptr<JobLock> open_job_folder(const JobConfig& cfg, comms::DeviceMesh& mesh, const std::string& cfg_text) {
  std::unique_ptr<JobLock> lock;
  if (mesh.rank == 0) {
    lock = std::make_unique<JobLock>(cfg.job.dump_folder);
    fs::create_directories(cfg.job.dump_folder);
    write_file_checked(cfg.job.dump_folder + "/config.yaml", cfg_text);
  }
  mesh.world_pg->barrier();
  if (cfg.job.print_args) log_info("effective config:\n" + cfg_text);
  else log_info("config: " + cfg.job.dump_folder + "/config.yaml (job.print_args true prints it here)");
  log_info("parallelism: " + mesh.describe() + (mesh.world > 1 ? "" : " (single rank)"));
  if (cfg.parallelism.expert_parallel_degree > 1)  // ep borrows dp_shard x cp's ranks: not a mesh dimension
    log_info("expert parallel: " + std::to_string(cfg.parallelism.expert_parallel_degree) +
             " ranks share each MoE layer's experts (from dp_shard" + (mesh.degrees.cp > 1 ? " x cp" : "") +
             "), dispatch " + config::enum_name(cfg.parallelism.expert_parallel_comm_backend));
  if (mesh.degrees.pp > 1) {
    const auto& p = cfg.parallelism;
    log_info("pipeline: " + config::enum_name(p.pipeline_parallel_schedule) + ", " +
             std::to_string(cfg.training.local_batch_size / p.pipeline_parallel_microbatch_size) +
             " micro-batches of " + std::to_string(p.pipeline_parallel_microbatch_size) + " per schedule; " +
             pipeline_layout(cfg).describe());
  }
  return lock;
}

// The model on meta first (its size refused before anything is allocated), then the job (build_job), the
// initial weights, and what the log says about them and the data.
TrainJob assemble(const JobConfig& cfg, comms::DeviceMesh& mesh, DataLoader& loader) {
  const int64_t B = cfg.training.local_batch_size, S = cfg.training.seq_len;
  MPI_Comm comm = mesh.world > 1 ? comms::world_comm() : nullptr;
  check_fits(cfg, mesh.world);  // the data's vocabulary, this machine's memory (titan-train checked them first)
  int64_t n_params = 0;
  {
    DeviceScope meta(Device::Meta);  // shape-only first: the memory check allocates nothing
    decoder::Decoder shape(cfg.model);
    n_params = shape.expected_num_params();
    const std::string knobs = decoder::knobs_beyond_preset(cfg.model);
    log_info("building " + cfg.model.flavor + " " + shape.describe() + "; " +
             (knobs.empty() ? "every other knob " + config::enum_name(cfg.model.name) + "'s"
                            : "beyond " + config::enum_name(cfg.model.name) + "'s preset: " + knobs));
  }
  const nn::AttentionVariant attn = cfg.model.attention();
  attn.validate(S);
  if (!attn.is_default()) log_info("attention: " + attn.describe() + " (flex attention)");
  if (attn.mask == nn::MaskKind::block_causal)
    log_info(loader.num_documents() > 1
                 ? "attention: block_causal over the " + with_commas((double)loader.num_documents()) +
                       " documents of " + cfg.training.dataset_path + " (/doc_starts)"
                 : "warning: attn_mask_type block_causal, but " + cfg.training.dataset_path +
                       " holds one document (no /doc_starts): it equals causal; tokenize with titan-tokenize "
                       "from a folder or JSONL to keep document boundaries");
  TrainJob job = build_job(cfg, mesh, [&](decoder::Decoder& full) {
    TITAN_CHECK(full.num_parameters() == n_params, "internal: parameter count mismatch");
  });
  decoder::Decoder& model = *job.model;
  if (cfg.converters.contains("float8"))
    log_info("float8 training (emulated in float32 on this CPU): recipe " + config::enum_name(cfg.float8.recipe) + ", " +
             std::to_string(job.float8.converted.size()) + " linear layers converted" +
             (job.float8.filtered.empty() ? std::string()
                                          : ", " + std::to_string(job.float8.filtered.size()) +
                                                " left in float32 by float8.filter_fqns " + cfg.float8.filter_fqns.text()) +
             (job.float8.unaligned.empty()
                  ? std::string()
                  : ", " + std::to_string(job.float8.unaligned.size()) + " left in float32 for features not multiples "
                        "of 16 (e.g. " + job.float8.unaligned.front() + ")") +
             (job.float8.experts.empty()
                  ? std::string("; the MoE experts' grouped GEMMs stay as they are (float8.moe_fqns_prototype: none)")
                  : "; the grouped GEMMs of " + std::to_string(job.float8.experts.size()) +
                        " MoE experts modules in FP8 " + config::enum_name(cfg.float8.recipe) +
                        " (float8.moe_fqns_prototype " +
                        cfg.float8.moe_fqns_prototype.text() + ")"));
  log_info("model parameters: " + with_commas((double)n_params) + " total, " +
           with_commas((double)(n_params - model.num_embedding_params())) + " non-embedding; " +
           fmt("%.4g", model.flops_per_token(S)) + " training FLOPs per token (seq " + std::to_string(S) + ")");
  if (!cfg.checkpoint.initial_load_path.empty()) {
    const HfLayout hl = model.hf_layout(job.pm.state_regions());
    load_hf(cfg.checkpoint.initial_load_path, hl.regions, comm);
    hl.after_load();
    log_info("loaded initial weights from " + cfg.checkpoint.initial_load_path);
  }
  int64_t local = 0;
  for (auto* p : job.pm.params()) local += p->numel();
  log_info("rank 0 holds " + with_commas((double)local) + " parameters (" +
           fmt("%.1f", 100.0 * (double)local / (double)n_params) + "% of the model)");
  log_info("data: " + cfg.training.dataset_path + " (" + with_commas((double)loader.num_tokens()) +
           " tokens, tokenizer " + loader.tokenizer() + "), batch " + std::to_string(B) + " x seq " +
           std::to_string(S) + " per rank, gradient accumulation " + std::to_string(job.accumulation) +
           ", global batch " + std::to_string(job.accumulation * B * mesh.dp_size() * S) + " tokens");
  loader.check_ids(cfg.model.vocab_size, comm);  // a bad id is found now, not when a batch reaches it
  return job;
}

// debug.dump_grads_at_step: the gradients of that step (HF names, full shapes, before clipping).
void dump_gradients(const JobConfig& cfg, TrainJob& job, int64_t step) {
  if (cfg.debug.dump_grads_at_step != step) return;
  std::vector<Tensor> keep;
  const std::vector<Region> grads = job.pm.grad_regions(keep);
  const std::string path = cfg.job.dump_folder + "/grads_step_" + std::to_string(step) + ".h5";
  export_hf(path, job.model->hf_layout(grads).regions, job.model->hf_config_json(), DType::F32,
            job.mesh->world > 1 ? comms::world_comm() : nullptr);
  log_info("wrote gradients to " + path);
}

// A non-finite loss or norm (the same on every rank): training.on_nonfinite abort stops the job, skip goes on.
void handle_nonfinite(const JobConfig& cfg, int64_t step, const StepResult& r) {
  const std::string msg = "step " + std::to_string(step) + ": non-finite " +
                          (std::isfinite(r.loss) ? "gradient norm (" + fmt("%g", r.grad_norm) + ")"
                                                 : "loss (" + fmt("%g", r.loss) + ")");
  if (cfg.training.on_nonfinite == JobConfig::Training::OnNonFinite::abort)
    fail(msg, "; stopping (set training.on_nonfinite: skip to skip such steps, or lower optimizer.lr)");
  log_info("WARNING " + msg + "; skipped the optimizer step (training.on_nonfinite: skip)");
}

// Preemption: a signal on any rank stops every rank after this step (one flag, all-reduced).
int agreed_signal(const PreemptionGuard& preempt, comms::DeviceMesh& mesh) {
  const int signal = preempt.signal();
  if (mesh.world == 1) return signal;
  return (int)mesh.world_pg->all_reduce(from_vector<double>({(double)signal}, {1}), comms::ReduceOp::Max)
      .to_vector<double>()[0];
}
}  // namespace

void check_fits(const JobConfig& cfg, int world) {
  if (cfg.simulation.enabled) return;
  {  // the token file's vocabulary (titan-tokenize records it) within the model's
    h5::File f(cfg.training.dataset_path, h5::File::Read);
    const int64_t vocab = f.has_attr("vocab_size") ? f.attr_int("vocab_size") : -1;
    TITAN_CHECK(vocab <= cfg.model.vocab_size, "config error: model.vocab_size = ", cfg.model.vocab_size,
                " is smaller than the vocabulary of ", cfg.training.dataset_path, " (", vocab, ", tokenizer ",
                f.has_attr("tokenizer") ? f.attr_string("tokenizer") : std::string("unknown"), ")");
  }
  int64_t n_params = 0;
  {
    DeviceScope meta(Device::Meta);  // shape only: nothing allocated
    n_params = decoder::Decoder(cfg.model).expected_num_params();
  }
  // weights + grads + AdamW moments alone over this machine's memory: the shards of all ranks add up to 16
  // bytes per parameter, and each rank first builds the full fp32 model
  const double need = 16.0 * (double)n_params + 4.0 * (double)n_params * (world - 1);
  const double have = (double)physical_memory_bytes();
  TITAN_CHECK(need < 0.9 * have, "model ", cfg.model.flavor, " has ", with_commas((double)n_params),
              " parameters: weights + gradients + AdamW state need ", fmt("%.1f", need / (1 << 30)),
              " GiB on this machine (all ranks), it has ", fmt("%.1f", have / (1 << 30)),
              " GiB; pick a smaller flavor (configs/qwen3_debug.yaml)");
}

void check_layout(const JobConfig& cfg, int rank, int world) {
  if (cfg.simulation.enabled) return;
  comms::DeviceMesh mesh(mesh_degrees(cfg), /*fake=*/true, rank, world);
  DeviceScope meta(Device::Meta);
  (void)build_job(cfg, mesh);
}

TrainResult train(const JobConfig& given) {
  const double t_start = process_seconds();
  if (!comms::initialized() || comms::world_rank() == 0)
    for (const std::string& w : config_warnings(given)) log_info("warning: " + w);
  if (given.simulation.enabled) return run_simulated_job(given, t_start);  // one process plays world_size ranks
  if (!comms::initialized()) comms::init(nullptr, nullptr);
  comms::DeviceMesh mesh(mesh_degrees(given));  // refused before anything is allocated when the degrees do not fit
  set_log_enabled(mesh.rank == 0);
  std::vector<std::string> found;  // relative data paths resolved (./, the source tree, the install): said in the log
  const JobConfig cfg = with_data_found(given, &found);  // before the job folder exists: a missing file leaves nothing
  for (const auto& f : found) log_info("data: " + f);
  comms::set_collective_timeout(cfg.comm.init_timeout_seconds, "comm.init_timeout_seconds");
  const std::string cfg_text = dump_job_config(cfg);
  const auto lock = open_job_folder(cfg, mesh, cfg_text);
  const std::string sim_suffix = simulated_figures(cfg, mesh);
  DataLoader loader(cfg.training.dataset_path, cfg.training.local_batch_size, cfg.training.seq_len, mesh.dp_rank(),
                    mesh.dp_size());
  TrainJob job = assemble(cfg, mesh, loader);
  Validator validator(cfg, mesh);
  Checkpointer checkpointer(cfg, mesh, job, cfg_text);
  Generator rng((uint64_t)cfg.debug.seed + 1);
  const int64_t start = checkpointer.resume(loader, rng);
  TrainResult result;
  result.first_step = start + 1;
  MetricsLogger metrics(cfg, mesh, job, sim_suffix, start, t_start);
  StepProfiler profiler(cfg, mesh);
  const LRSchedule sched{cfg.lr_scheduler.schedule,     cfg.lr_scheduler.decay_type, cfg.lr_scheduler.warmup_steps,
                         cfg.training.steps,            cfg.lr_scheduler.decay_ratio, cfg.lr_scheduler.min_lr_factor};
  PreemptionGuard preempt;  // SIGTERM / SIGINT: finish the step, checkpoint, return
  for (int64_t step = start + 1; step <= cfg.training.steps; ++step) {
    profiler.begin(step);
    if (step == 2 && cfg.debug.fail_on_rank == mesh.rank)
      fail("debug.fail_on_rank: rank ", mesh.rank, " fails on purpose at step 2");
    const double lr = cfg.optimizer.lr * sched.factor(step);
    const StepResult r = train_step(job, [&] { return loader.next(); }, lr, [&] { dump_gradients(cfg, job, step); });
    if (!r.finite) {
      handle_nonfinite(cfg, step, r);
      profiler.cancel();
      continue;
    }
    profiler.end(step);
    result.losses.push_back(r.loss);
    metrics.step(step, r, lr);
    if (validator.due(step)) {
      const double t0 = wall_seconds();
      result.val_losses.emplace_back(step, validator.run(job, step));
      metrics.validation(step, result.val_losses.back().second);
      metrics.exclude_since(t0);  // keep validation out of the throughput figure
    }
    if (step == start + 1)  // the first step is done: from now on a stuck collective is a hang
      comms::set_collective_timeout(cfg.comm.train_timeout_seconds, "comm.train_timeout_seconds");
    const int signal = agreed_signal(preempt, mesh);
    if (checkpointer.due(step, signal != 0)) {
      const double t0 = wall_seconds();
      checkpointer.save(step, loader, rng);
      metrics.exclude_since(t0);
    }
    if (signal != 0) {
      log_info("stopped by signal " + std::to_string(signal) + " (" + strsignal(signal) + ") after step " +
               std::to_string(step) + ": checkpoint written; run the same command again to resume" +
               (cfg.checkpoint.enable ? "" : " (with --checkpoint.enable true)"));
      result.stopped_by_signal = signal;
      profiler.finish();
      return result;
    }
  }
  checkpointer.export_model(loader);
  metrics.finish();
  profiler.finish();
  log_info("training done: peak RSS " + fmt("%.2f", (double)max_rss_bytes() / (1 << 30)) + " GiB (rank 0)");
  return result;
}

}  // namespace titan
