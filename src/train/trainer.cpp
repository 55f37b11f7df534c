#include "src/train/trainer.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "comms/device_mesh.h"
#include "models/attention_config.h"
#include "models/causal_lm.h"
#include "src/ops/ops.h"
#include "parallel/parallelize.h"
#include "src/checkpoint/checkpoint.h"
#include "src/data/loader.h"
#include "src/optim/adamw.h"
#include "src/tensor/cost.h"
#include "src/train/collectives.h"
#include "src/train/eval.h"
#include "src/train/job_lock.h"
#include "src/train/preemption.h"
#include "simulator/plan.h"
#include "simulator/simulate.h"
#include "src/train/metrics.h"
#include "src/train/train_spec.h"
#include "src/train/train_step.h"

namespace fs = std::filesystem;

namespace titan {

namespace {
// Per-op table of one step: time (attributed between op records), FLOPs, bytes.
void print_profile(CostScope& cs, double seconds) {
  cs.flush_time();
  std::vector<std::pair<std::string, OpCost>> ops(cs.by_op().begin(), cs.by_op().end());
  std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
  log_info("profile of one step: " + fmt("%.3f", seconds) + " s, " + fmt("%.3f", cs.flops() / 1e12) + " TFLOP, " +
           fmt("%.3f", cs.bytes() / 1e9) + " GB moved");
  log_info("  op                          calls     time(ms)   share    GFLOP   GFLOP/s      GB");
  for (auto& [name, c] : ops) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-26s %6lld %12.2f %6.1f%% %8.3f %9.1f %7.3f", name.c_str(),
                  (long long)c.calls, c.seconds * 1e3, 100.0 * c.seconds / seconds, c.flops / 1e9,
                  c.seconds > 0 ? c.flops / c.seconds / 1e9 : 0.0, c.bytes / 1e9);
    log_info(line);
  }
}
}  // namespace

TrainResult train(const JobConfig& cfg) {
  TrainResult result;
  const double t_start = process_seconds();
  if (!comms::initialized() || comms::world_rank() == 0)
    for (const std::string& w : config_warnings(cfg)) log_info("warning: " + w);
  if (cfg.simulation.enabled) {  // one process plays simulation.world_size ranks on meta tensors
    const int world = (int)cfg.simulation.world_size;
    if (!comms::initialized()) comms::init(nullptr, nullptr);
    const bool lead = comms::world_rank() == 0;
    set_log_enabled(lead);
    if (comms::world_size() > 1) {  // the simulated world comes from the config, not from mpirun
      log_info("simulation: launched on " + std::to_string(comms::world_size()) +
               " processes (mpirun -np); a simulated job runs once, on rank 0, and plays simulation.world_size = " +
               std::to_string(world) + " ranks itself: the other processes exit now (-np does not change the result)");
      if (!lead) return result;
    }
    log_info("simulation: one training step of " + cfg.model.name + " " + cfg.model.flavor + " as " +
             std::to_string(world) + " ranks on meta tensors, priced on " + cfg.simulation.system);
    SimResult sim = simulate_step(cfg, world);
    // the step line as TorchTitan prints it, from the simulated step (every step is the same)
    log_info("step:  1  memory: " + fmt("%5.2f", sim.memory.total() / sim.ranks_per_chip / (double)(1 << 30)) +
             "GiB(" + fmt("%.2f", 100.0 * sim.memory.total() / sim.hbm_bytes) + "%)  tps: " + with_commas(sim.tokens_per_s_per_rank) +
             "  tflops: " + fmt("%.2f", sim.tflops_per_chip / sim.ranks_per_chip) + "  mfu: " +
             fmt("%.2f", 100.0 * sim.mfu) + "%  (simulated " + sim.chip + ", per rank as TorchTitan logs it)");
    for (const auto& l : describe_simulation(sim)) log_info(l);
    if (cfg.profiling.enable_profiling && lead) {  // the planned step's collectives, as a profiled real step lists them
      for (const auto& l : describe_collectives(sim.collectives, 0)) log_info(l);
      fs::create_directories(cfg.job.dump_folder);
      write_collectives(sim.collectives, cfg.job.dump_folder + "/collectives_rank0.tsv");
    }
    if (!cfg.simulation.trace_file.empty() && lead) {
      fs::create_directories(cfg.job.dump_folder);
      const std::string path = cfg.job.dump_folder + "/" + cfg.simulation.trace_file;
      write_chrome_trace(sim, path, (int)cfg.simulation.trace_chips);
      log_info("simulated timeline (Chrome trace, open in https://ui.perfetto.dev): " + path);
    }
    log_info("simulated in " + fmt("%.2f", process_seconds() - t_start) + " s, peak RSS " +
             fmt("%.2f", (double)max_rss_bytes() / (1 << 30)) + " GiB");
    return result;
  }
  if (!comms::initialized()) comms::init(nullptr, nullptr);
  // ---- layout: refused before anything is allocated when the degrees do not fit
  comms::DeviceMesh mesh(mesh_degrees(cfg));
  set_log_enabled(mesh.rank == 0);
  comms::set_collective_timeout(cfg.comm.init_timeout_seconds, "comm.init_timeout_seconds");
  const int64_t dp = mesh.dp_size();
  MPI_Comm comm = mesh.world > 1 ? comms::world_comm() : nullptr;

  // ---- job folder and config
  const std::string cfg_text = dump_job_config(cfg);
  std::unique_ptr<JobLock> lock;  // one job per folder, held until train() returns or the process ends
  if (mesh.rank == 0) lock = std::make_unique<JobLock>(cfg.job.dump_folder);
  if (mesh.rank == 0) {
    fs::create_directories(cfg.job.dump_folder);
    write_file_checked(cfg.job.dump_folder + "/config.yaml", cfg_text);
  }
  mesh.world_pg->barrier();
  if (cfg.job.print_args) log_info("effective config:\n" + cfg_text);
  log_info("parallelism: " + mesh.describe() + (mesh.world > 1 ? "" : " (single rank)"));
  if (mesh.degrees.pp > 1) {
    const auto& p = cfg.parallelism;
    log_info("pipeline: " + p.pipeline_parallel_schedule + ", " +
             std::to_string(cfg.training.local_batch_size / p.pipeline_parallel_microbatch_size) +
             " micro-batches of " + std::to_string(p.pipeline_parallel_microbatch_size) + " per schedule; " +
             pipeline_layout(cfg).describe());
  }
  // ---- simulated figures of this very job on the configured system (each rank mapped to a chip)
  std::string sim_suffix;
  if (!cfg.simulation.system.empty() && mesh.rank == 0) {  // rank 0 prices the job once; only rank 0 logs
    SimResult sim = simulate_step(cfg, mesh.world);
    for (const auto& l : describe_simulation(sim)) log_info(l);
    sim_suffix = "  sim[" + sim.chip + "]: tps " + with_commas(sim.tokens_per_s_per_rank) + " mfu " + fmt("%.2f", 100.0 * sim.mfu) + "%";
  }

  // ---- data, model
  const int64_t B = cfg.training.local_batch_size, S = cfg.training.seq_len;
  DataLoader loader(cfg.training.dataset_path, B, S, mesh.dp_rank(), dp);
  TITAN_CHECK(loader.vocab_size() <= cfg.model.vocab_size, "config error: model.vocab_size = ", cfg.model.vocab_size,
              " is smaller than the vocabulary of ", cfg.training.dataset_path, " (", loader.vocab_size(),
              ", tokenizer ", loader.tokenizer(), ")");
  std::unique_ptr<CausalLM> model_ptr;
  {
    DeviceScope meta(Device::Meta);  // shape-only first: the memory check allocates nothing
    model_ptr = train_spec(cfg.model.name).build(cfg.model);
  }
  const int64_t n_params = model_ptr->expected_num_params();
  log_info("building " + cfg.model.flavor + " " + model_ptr->describe());
  {
    const nn::AttentionVariant attn = attention_variant_from_job(cfg.model);
    attn.validate(S);
    if (!attn.is_default()) log_info("attention: " + attn.describe() + " (flex attention)");
    if (attn.mask == "block_causal")
      log_info(loader.num_documents() > 1
                   ? "attention: block_causal over the " + with_commas((double)loader.num_documents()) +
                         " documents of " + cfg.training.dataset_path + " (/doc_starts)"
                   : "warning: attn_mask_type block_causal, but " + cfg.training.dataset_path +
                         " holds one document (no /doc_starts): it equals causal; tokenize with titan-tokenize "
                         "from a folder or JSONL to keep document boundaries");
  }
  {  // refuse jobs whose weights + grads + AdamW moments alone exceed this machine's memory: the shards of
     // all ranks add up to 16 bytes per parameter, and each rank first builds the full fp32 model
    const double need = 16.0 * (double)n_params + 4.0 * (double)n_params * (mesh.world - 1);
    const double have = (double)physical_memory_bytes();
    TITAN_CHECK(need < 0.9 * have, "model ", cfg.model.flavor, " has ", with_commas((double)n_params),
                " parameters: weights + gradients + AdamW state need ", fmt("%.1f", need / (1 << 30)),
                " GiB on this machine (all ranks), it has ", fmt("%.1f", have / (1 << 30)),
                " GiB; pick a smaller flavor (configs/qwen3_debug.yaml)");
  }
  TrainJob job = build_job(cfg, mesh, [&](CausalLM& full) {
    TITAN_CHECK(full.num_parameters() == n_params, "internal: parameter count mismatch");
  });
  CausalLM& model = *job.model;
  parallel::ParallelModel& pm = job.pm;
  const double flops_per_token = model.flops_per_token(S);
  log_info("model parameters: " + with_commas((double)n_params) + " total, " +
           with_commas((double)(n_params - model.num_embedding_params())) + " non-embedding; " +
           fmt("%.4g", flops_per_token) + " training FLOPs per token (seq " + std::to_string(S) + ")");
  auto params = pm.named_params();
  std::vector<Region> regions = pm.state_regions();  // parameters, then buffers (expert biases)
  std::vector<Tensor*> plist = pm.params();
  if (!cfg.checkpoint.initial_load_path.empty()) {
    const HfLayout hl = model.hf_layout(regions);
    load_hf(cfg.checkpoint.initial_load_path, hl.regions, comm);
    hl.after_load();
    log_info("loaded initial weights from " + cfg.checkpoint.initial_load_path);
  }
  {
    int64_t local = 0;
    for (auto* p : plist) local += p->numel();
    log_info("rank 0 holds " + with_commas((double)local) + " parameters (" +
             fmt("%.1f", 100.0 * (double)local / (double)n_params) + "% of the model)");
  }

  // ---- optimizer, schedule
  AdamW& opt = *job.opt;
  LRSchedule sched{cfg.lr_scheduler.schedule, cfg.lr_scheduler.decay_type, cfg.lr_scheduler.warmup_steps,
                   cfg.training.steps, cfg.lr_scheduler.decay_ratio, cfg.lr_scheduler.min_lr_factor};
  const int64_t accum = job.accumulation;
  const int64_t global_batch = accum * B * dp;
  std::unique_ptr<DataLoader> val;
  if (cfg.validation.enabled)
    val = std::make_unique<DataLoader>(cfg.validation.dataset_path, B, S, mesh.dp_rank(), dp);
  log_info("data: " + cfg.training.dataset_path + " (" + with_commas((double)loader.num_tokens()) +
           " tokens, tokenizer " + loader.tokenizer() + "), batch " + std::to_string(B) + " x seq " +
           std::to_string(S) + " per rank, gradient accumulation " + std::to_string(accum) + ", global batch " +
           std::to_string(global_batch * S) + " tokens");
  loader.check_ids(cfg.model.vocab_size, comm);  // a bad id is found now, not when a batch reaches it
  if (val) val->check_ids(cfg.model.vocab_size, comm);
  Generator rng((uint64_t)cfg.debug.seed + 1);

  // ---- resume
  const std::string ckpt_dir = cfg.job.dump_folder + "/" + cfg.checkpoint.folder;
  int64_t start = 0;
  if (cfg.checkpoint.enable) {
    if (mesh.rank == 0 && fs::is_directory(ckpt_dir))  // partial writes of a job that died mid-save
      for (auto& e : fs::directory_iterator(ckpt_dir))
        if (e.path().extension() == ".tmp") {
          log_info("removing " + e.path().string() + " (an unfinished checkpoint write of an earlier run)");
          fs::remove(e.path());
        }
    mesh.world_pg->barrier();
    // resume from the newest checkpoint that verifies; say which ones were skipped and why
    auto ck = list_checkpoints(ckpt_dir);
    std::vector<std::string> skipped;
    for (auto it = ck.rbegin(); it != ck.rend(); ++it) {
      bool legacy = false;
      const std::string why = verify_checkpoint(it->second, comm, &legacy);
      if (!why.empty()) {
        log_info("WARNING skipping checkpoint " + it->second + ": " + why);
        skipped.push_back(it->second + ": " + why);
        continue;
      }
      TrainState st = load_checkpoint(it->second, regions, &opt, comm);
      const auto changed = config_changes(st.config, cfg_text, {"model", "optimizer"});
      if (!changed.empty()) {
        std::string list;
        for (auto& c : changed) list += "\n  " + c;
        TITAN_CHECK(cfg.checkpoint.resume_with_changed_config, "checkpoint: ", it->second,
                    " was written with a different model/optimizer config:", list,
                    "\nresuming would silently change the run; set checkpoint.resume_with_changed_config: true to "
                    "resume anyway, or use another job.dump_folder");
        log_info("WARNING resuming with a changed config (checkpoint.resume_with_changed_config):" + list);
      }
      start = st.step;
      loader.set_state(st.data_position, st.data_epoch);
      rng.set_state(st.rng);
      log_info("resumed from " + it->second + " at step " + std::to_string(start) +
               (legacy ? " (written before checksums: values checked finite only" : " (checksums verified") +
               (skipped.empty() ? "" : "; " + std::to_string(skipped.size()) + " newer checkpoint(s) skipped") + ")");
      if (start >= cfg.training.steps)
        log_info("that checkpoint already reached training.steps = " + std::to_string(cfg.training.steps) +
                 ": nothing left to train (raise training.steps, or remove " + ckpt_dir + " to start over)");
      break;
    }
    if (!ck.empty() && skipped.size() == ck.size()) {
      std::string list;
      for (auto& s : skipped) list += "\n  " + s;
      fail("checkpoint: none of the ", ck.size(), " checkpoints in ", ckpt_dir, " verifies; refusing to train "
           "from scratch over them (move them away to start over):", list);
    }
  }
  result.first_step = start + 1;

  std::unique_ptr<JsonlWriter> jsonl;
  if (cfg.metrics.save_jsonl && mesh.rank == 0 && start > 0)  // resumed: rows past the checkpoint are redone
    truncate_metrics_after(cfg.job.dump_folder + "/metrics.jsonl", start);
  if (cfg.metrics.save_jsonl && mesh.rank == 0)
    jsonl = std::make_unique<JsonlWriter>(cfg.job.dump_folder + "/metrics.jsonl");
  const double peak_flops = cfg.metrics.peak_tflops * 1e12;
  const int64_t phys = physical_memory_bytes();
  log_info("training " + std::to_string(cfg.training.steps) + " steps; MFU against " +
           fmt("%.3f", cfg.metrics.peak_tflops) + " TFLOP/s peak per rank (metrics.peak_tflops)");
  auto dp_mean = [&](double v) {
    if (dp == 1) return v;
    return mesh.dp->all_reduce(from_vector<double>({v}, {1}), comms::ReduceOp::Avg).to_vector<double>()[0];
  };

  auto& mem = MemoryTracker::get(Device::CPU);
  mem.reset_peak();
  MemoryStats run_peak = mem.stats();  // per-category peaks over the whole run (log lines reset the tracker's)
  auto fold_peak = [&] {
    const MemoryStats ms = mem.stats();
    for (int i = 0; i < kNumMemoryCategories; ++i) run_peak.peak[i] = std::max(run_peak.peak[i], ms.peak[i]);
    run_peak.total_peak = std::max(run_peak.total_peak, ms.total_peak);
  };
  comms::CommLog::get().clear();
  double t_log = wall_seconds();
  int64_t tokens_since_log = 0;
  bool first = true;
  double load_min = 0, load_mean = 0, load_max = 0;
  std::vector<double> expert_total;  // tokens per expert over the run, summed over MoE layers and ranks
  int64_t load_steps = 0;
  PreemptionGuard preempt;  // SIGTERM / SIGINT: finish the step, checkpoint, return
  for (int64_t step = start + 1; step <= cfg.training.steps; ++step) {
    const bool profile = cfg.profiling.enable_profiling && step == cfg.profiling.profile_step;
    std::unique_ptr<CostScope> cs;
    std::unique_ptr<CostTrace> trace;
    if (profile) {
      cs = std::make_unique<CostScope>(/*timed=*/true);
      trace = std::make_unique<CostTrace>(/*timed=*/true);
    }
    const double t_step = wall_seconds();
    if (step == 2 && cfg.debug.fail_on_rank == mesh.rank)
      fail("debug.fail_on_rank: rank ", mesh.rank, " fails on purpose at step 2");
    const double lr = cfg.optimizer.lr * sched.factor(step);
    auto dump_grads = [&] {
      if (cfg.debug.dump_grads_at_step != step) return;
      std::vector<Tensor> keep;
      std::vector<Region> grads = pm.grad_regions(keep);
      const std::string path = cfg.job.dump_folder + "/grads_step_" + std::to_string(step) + ".h5";
      export_hf(path, model.hf_layout(grads).regions, model.hf_config_json(), DType::F32, comm);
      log_info("wrote gradients to " + path);
    };
    const StepResult sr = train_step(job, [&] { return loader.next(); }, lr, dump_grads);
    const double loss_acc = sr.loss, norm = sr.grad_norm;
    if (!sr.finite) {  // the same decision on every rank: no hang
      std::string msg = "step " + std::to_string(step) + ": non-finite " +
                        (std::isfinite(loss_acc) ? "gradient norm (" + fmt("%g", norm) + ")"
                                                 : "loss (" + fmt("%g", loss_acc) + ")");
      if (cfg.training.on_nonfinite == "abort")
        fail(msg, "; stopping (set training.on_nonfinite: skip to skip such steps, or lower optimizer.lr)");
      log_info("WARNING " + msg + "; skipped the optimizer step (training.on_nonfinite: skip)");
      continue;
    }
    if (!sr.expert_load.empty()) {
      expert_total.resize(sr.expert_load[0].size(), 0.0);
      for (auto& layer : sr.expert_load)
        for (size_t e = 0; e < layer.size() && e < expert_total.size(); ++e) expert_total[e] += layer[e];
      for (auto& layer : sr.expert_load) {  // min / mean / max over experts, averaged over layers
        double mn = 1e300, mx = 0, mean = 0;
        for (double c : layer) {
          mn = std::min(mn, c);
          mx = std::max(mx, c);
          mean += c / (double)layer.size();
        }
        load_min += mn / (double)sr.expert_load.size();
        load_mean += mean / (double)sr.expert_load.size();
        load_max += mx / (double)sr.expert_load.size();
      }
      ++load_steps;
    }
    if (profile) {
      print_profile(*cs, wall_seconds() - t_step);
      const double end = trace->elapsed();
      std::vector<CostEvent> events = trace->take();
      for (const auto& l : describe_collectives(events, mesh.rank)) log_info(l);
      write_collectives(events, cfg.job.dump_folder + "/collectives_rank" + std::to_string(mesh.rank) + ".tsv");
      const std::string path =
          cfg.job.dump_folder + "/profile_trace_rank" + std::to_string(mesh.rank) + ".json";
      write_chrome_trace(measured_timeline(events, end, "this CPU"), path, 1, mesh.rank);
      log_info("measured timeline of step " + std::to_string(step) + " (Chrome trace): " + path);
      trace.reset();
    }
    result.losses.push_back(loss_acc);
    tokens_since_log += accum * B * S;
    if (first) {
      log_info("time to first step: " + fmt("%.2f", process_seconds()) + " s (" +
               fmt("%.2f", process_seconds() - t_start) + " s in the trainer)");
      first = false;
    }
    if (step % cfg.metrics.log_freq == 0 || step == start + 1 || step == cfg.training.steps) {
      const double dt = wall_seconds() - t_log;
      StepMetrics sm;
      sm.step = step;
      sm.loss = loss_acc;
      sm.grad_norm = norm;
      sm.lr = lr;
      const MemoryStats ms = mem.stats();
      sm.memory_gib = (double)ms.total_peak / (1024.0 * 1024 * 1024);
      sm.memory_pct = 100.0 * (double)ms.total_peak / (double)phys;
      // tps per rank as TorchTitan: this rank's tokens over the ranks that share them (tp ranks, the
      // pipeline's stages: every stage runs the same tokens, and the cp ranks: each holds 1/cp of a sequence)
      sm.tps = (double)tokens_since_log / dt / (double)(mesh.degrees.tp * mesh.degrees.pp * mesh.degrees.cp);
      sm.tflops = flops_per_token * sm.tps / 1e12;
      sm.mfu_pct = 100.0 * flops_per_token * sm.tps / peak_flops;
      sm.elapsed_s = process_seconds();
      double comm_busy = 0, comm_exposed = 0;
      for (auto& r : comms::CommLog::get().take()) {
        comm_busy += r.busy_s;
        comm_exposed += r.exposed_s;
      }
      std::string line = format_step_line(sm);
      if (load_steps > 0) {
        line += "  experts: " + fmt("%.0f", load_min / load_steps) + "/" + fmt("%.0f", load_mean / load_steps) + "/" +
                fmt("%.0f", load_max / load_steps) + " tokens min/mean/max";
        load_min = load_mean = load_max = 0;
        load_steps = 0;
      }
      if (mesh.world > 1)
        line += "  comm: " + fmt("%.0f", 100.0 * comm_exposed / dt) + "% exposed (" +
                fmt("%.0f", 100.0 * comm_busy / dt) + "% busy)";
      line += sim_suffix;
      log_info(line);
      if (jsonl)
        jsonl->write("{\"step\": " + std::to_string(step) + ", \"loss\": " + fmt("%.8f", sm.loss) +
                     ", \"grad_norm\": " + fmt("%.8f", norm) + ", \"lr\": " + fmt("%.6g", lr) +
                     ", \"tps\": " + fmt("%.1f", sm.tps) + ", \"tflops\": " + fmt("%.5f", sm.tflops) +
                     ", \"mfu\": " + fmt("%.4f", sm.mfu_pct) + ", \"memory_gib\": " + fmt("%.4f", sm.memory_gib) +
                     ", \"comm_exposed_s\": " + fmt("%.4f", comm_exposed) + ", \"comm_busy_s\": " +
                     fmt("%.4f", comm_busy) + ", \"elapsed_s\": " + fmt("%.3f", sm.elapsed_s) + "}");
      fold_peak();
      mem.reset_peak();
      t_log = wall_seconds();
      tokens_since_log = 0;
    }
    if (val && (step % cfg.validation.freq == 0 || step == cfg.training.steps)) {
      const double t_val = wall_seconds();
      val->reset();
      const int64_t vsteps = cfg.validation.steps < 0 ? val->steps_left() : cfg.validation.steps;
      double vl = dp_mean(evaluate_loss(model, *val, vsteps, job.pipeline.get(), &mesh));
      result.val_losses.emplace_back(step, vl);
      log_info("validation: step: " + std::to_string(step) + "  loss: " + fmt("%.5f", vl) + "  (" +
               std::to_string(vsteps) + " batches per rank, " + fmt("%.2f", wall_seconds() - t_val) + " s)");
      if (jsonl) jsonl->write("{\"step\": " + std::to_string(step) + ", \"val_loss\": " + fmt("%.8f", vl) + "}");
      t_log += wall_seconds() - t_val;  // keep validation out of the throughput figure
      comms::CommLog::get().clear();
    }
    if (step == start + 1)  // the first step is done: from now on a stuck collective is a hang
      comms::set_collective_timeout(cfg.comm.train_timeout_seconds, "comm.train_timeout_seconds");
    // preemption: a signal on any rank stops every rank after this step (one flag, all-reduced)
    int signal = preempt.signal();
    if (mesh.world > 1)
      signal = (int)mesh.world_pg->all_reduce(from_vector<double>({(double)signal}, {1}), comms::ReduceOp::Max)
                   .to_vector<double>()[0];
    if (signal != 0 || (cfg.checkpoint.enable && (step % cfg.checkpoint.interval == 0 || step == cfg.training.steps))) {
      const double t_ck = wall_seconds();
      if (mesh.rank == 0) fs::create_directories(ckpt_dir);
      mesh.world_pg->barrier();
      TrainState st{step, loader.position(), loader.epoch(), rng.state(), cfg_text};
      const std::string path = ckpt_dir + "/step-" + std::to_string(step) + ".h5";
      save_checkpoint(path, regions, &opt, st, comm);
      // read back before older ones are pruned: keep_latest_k never deletes the last verified checkpoint
      const std::string why = verify_checkpoint(path, comm);
      TITAN_CHECK(why.empty(), "checkpoint: ", path, " does not read back as written (", why,
                  "); older checkpoints kept. Check the disk.");
      if (mesh.rank == 0) prune_checkpoints(ckpt_dir, cfg.checkpoint.keep_latest_k);
      log_info("saved checkpoint " + path + " (" + fmt("%.2f", wall_seconds() - t_ck) + " s)");
      t_log += wall_seconds() - t_ck;
      comms::CommLog::get().clear();
    }
    if (signal != 0) {
      log_info("stopped by signal " + std::to_string(signal) + " (" + strsignal(signal) + ") after step " +
               std::to_string(step) + ": checkpoint written; run the same command again to resume" +
               (cfg.checkpoint.enable ? "" : " (with --checkpoint.enable true)"));
      result.stopped_by_signal = signal;
      return result;
    }
  }
  if (cfg.checkpoint.export_at_end) {
    const std::string folder = cfg.job.dump_folder + "/export";
    if (mesh.rank == 0) fs::create_directories(folder);
    mesh.world_pg->barrier();
    ExportOptions eo;
    eo.format = cfg.checkpoint.export_format;
    eo.dtype = cfg.checkpoint.export_dtype;
    eo.max_shard_bytes = cfg.checkpoint.export_max_shard_mb * 1000 * 1000;
    const double t_ex = wall_seconds();
    const auto files = export_hf_folder(folder, model.hf_layout(regions).regions, model.hf_config_json(), eo, comm);
    std::string list;
    for (const auto& f : files) list += (list.empty() ? "" : ", ") + f;
    log_info("exported the model for Hugging Face to " + folder + " (" + cfg.checkpoint.export_dtype + "; " + list +
             "; " + fmt("%.2f", wall_seconds() - t_ex) + " s)");
  }
  {
    fold_peak();
    const MemoryStats& ms = run_peak;
    auto mib = [&](MemoryCategory c) { return fmt("%.2f", (double)ms.peak[(int)c] / (1 << 20)); };
    log_info("memory on rank 0 (MiB, peak by category): parameters " + mib(MemoryCategory::Parameters) + ", gradients " +
             mib(MemoryCategory::Gradients) + ", optimizer " + mib(MemoryCategory::OptimizerState) +
             ", activations " + mib(MemoryCategory::Activations) + ", communication " +
             mib(MemoryCategory::Communication) + "; peak of all tracked tensors " + fmt("%.1f", (double)ms.total_peak / (1 << 20)) + " MiB");
  }
  if (!expert_total.empty()) {  // what a simulation of this model's routing takes (simulation.moe_routing_histogram)
    std::string hist;
    for (double c : expert_total) hist += (hist.empty() ? "" : ",") + fmt("%.0f", c);
    log_info("expert load (routed tokens per expert over this run, all MoE layers; for "
             "simulation.moe_routing_histogram): " + hist);
  }
  log_info("training done: peak RSS " + fmt("%.2f", (double)max_rss_bytes() / (1 << 30)) + " GiB (rank 0)");
  return result;
}

}  // namespace titan
