#include "job/simulation_entry.h"

#include <filesystem>
#include <optional>
#include <set>

#include "job/job_lock.h"
#include "job/metrics.h"
#include "simulator/simulate.h"
#include "simulator/what_if.h"
#include "step/collectives.h"

namespace fs = std::filesystem;

namespace titan {

TrainResult run_simulated_job(const JobConfig& cfg, double t_start) {
  TrainResult result;
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
  log_info("simulation: one training step of " + config::enum_name(cfg.model.name) + " " + cfg.model.flavor + " as " +
           std::to_string(world) + " ranks on meta tensors, priced on " + cfg.simulation.system);
  const std::string cfg_text = dump_job_config(cfg);
  // the job it priced, as it priced it; never over a trained job's config.yaml (its checkpoints compare it)
  TITAN_CHECK(!fs::exists(cfg.job.dump_folder + "/metrics.jsonl") && !fs::exists(cfg.job.dump_folder + "/checkpoint"),
              "simulation: job.dump_folder ", cfg.job.dump_folder, " holds a trained job (metrics.jsonl / checkpoint/): "
              "its config.yaml would be overwritten; give the simulation its own --job.dump_folder");
  fs::create_directories(cfg.job.dump_folder);
  JobLock lock(cfg.job.dump_folder);  // not while a job runs there
  write_file_checked(cfg.job.dump_folder + "/config.yaml", cfg_text);
  if (cfg.job.print_args) log_info("effective config:\n" + cfg_text);
  std::optional<WhatIf> what_if;  // parsed before anything is priced: a malformed change fails at once
  if (!cfg.simulation.what_if.empty()) what_if = parse_what_if(cfg.simulation.what_if);
  SimResult sim = simulate_step(cfg, world);
  log_info(describe_simulated_job(cfg, sim));
  // the step line as TorchTitan prints it, from the simulated step (every step is the same)
  log_info("step:  1  memory: " + fmt("%5.2f", sim.memory.total() / sim.ranks_per_chip / (double)(1 << 30)) + "GiB(" +
           fmt("%.2f", 100.0 * sim.memory.total() / sim.hbm_bytes) + "%)  tps: " +
           with_commas(sim.tokens_per_s_per_rank) + "  tflops: " +
           fmt("%.2f", sim.tflops_per_chip / sim.ranks_per_chip) + "  mfu: " + fmt("%.2f", 100.0 * sim.mfu) +
           "%  (simulated " + sim.chip + ", per rank as TorchTitan logs it)");
  for (const auto& l : describe_simulation(sim)) log_info(l);
  if (what_if) {  // the same step with the changes: nothing runs again but the simulation
    const SimResult changed = simulate_what_if(cfg, *what_if);
    for (const auto& l : describe_what_if(sim, changed, what_if->as_written)) log_info(l);
  }
  if (cfg.simulation.published_tps > 0) {
    const bool per_chip = cfg.simulation.published_tps_per == "chip";
    const double simulated = per_chip ? sim.tokens_per_s_per_chip : sim.tokens_per_s;
    // the figure was published for the config as written: a flag that changes the job (not where it writes or
    // logs) makes another job, whose error against it would mean nothing, unless the flag gives the figure too
    std::vector<std::string> changed;
    bool figure_given = false;
    for (const auto& k : cfg.overridden) {
      figure_given = figure_given || k == "simulation.published_tps";
      const std::string sec = k.substr(0, k.find('.'));
      static const std::set<std::string> quiet_sections = {"job", "metrics", "profiling", "checkpoint", "comm", "debug",
                                                           "validation"};
      static const std::set<std::string> quiet_keys = {"simulation.trace_file", "simulation.trace_chips",
                                                       "simulation.what_if",
                                                       "simulation.allow_oom"};
      if (!quiet_sections.count(sec) && !quiet_keys.count(k) && k.rfind("simulation.published_", 0) != 0)
        changed.push_back("--" + k);  // it changes the priced step
    }
    std::string line = "sim published: " + with_commas(cfg.simulation.published_tps) + " tok/s" +
                       (per_chip ? " per chip" : "") +
                       (cfg.simulation.published_source.empty() ? "" : " (" + cfg.simulation.published_source + ")");
    if (changed.empty() || figure_given)
      line += "; simulated " + with_commas(simulated) + ": " +
              fmt("%+.1f", 100.0 * (simulated / cfg.simulation.published_tps - 1)) + "%";
    else
      line += ", for the config as written; " + config::join(changed) + " made another job: not compared";
    log_info(line);
  }
  if (cfg.profiling.enable_profiling && lead) {  // the planned step's collectives, as a profiled real step lists them
    const std::string dtypes =
        cfg.training.mixed_precision_param == cfg.training.mixed_precision_reduce
            ? config::enum_name(cfg.training.mixed_precision_param) + " (typed buffers as they are), as priced"
            : "gradients " + config::enum_name(cfg.training.mixed_precision_reduce) + ", the rest " +
                  config::enum_name(cfg.training.mixed_precision_param) + " (typed buffers as they are), as priced";
    for (const auto& l : describe_collectives(sim.collectives, 0, dtypes)) log_info(l);
    fs::create_directories(cfg.job.dump_folder);
    write_collectives(sim.collectives, cfg.job.dump_folder + "/collectives_rank0.tsv");
  }
  if (!cfg.simulation.trace_file.empty() && lead) {
    fs::create_directories(cfg.job.dump_folder);
    const std::string path = cfg.job.dump_folder + "/" + cfg.simulation.trace_file;
    write_chrome_trace(sim, path, TraceLayout((int)cfg.simulation.trace_chips));
    log_info("simulated timeline (Chrome trace, open in https://ui.perfetto.dev): " + path);
  }
  log_info("simulated in " + fmt("%.2f", process_seconds() - t_start) + " s, peak RSS " +
           fmt("%.2f", (double)max_rss_bytes() / (1 << 30)) + " GiB");
  TITAN_CHECK(!sim.oom || cfg.simulation.allow_oom, "simulation: the step does not fit in ", sim.chip, "'s memory (",
              fmt("%.2f", sim.memory.total() / (double)(1 << 30)), " of ", fmt("%.2f", sim.hbm_bytes / (double)(1 << 30)),
              " GiB per chip): ", sim.oom_advice, "; its figures above are of a step that cannot run "
              "(simulation.allow_oom: true plans it anyway, exit status 0)");
  return result;
}

std::string describe_simulated_job(const JobConfig& cfg, const SimResult& sim) {
  const auto& m = cfg.model;
  const int64_t S = cfg.training.seq_len;
  const auto& ac = cfg.activation_checkpoint;
  const double seqs = sim.tokens_per_step / (double)S;
  std::string moe;
  if (m.moe_enabled) moe = ", " + with_commas((double)m.num_active_params()) + " active";
  return "sim job: " + config::enum_name(m.name) + " " + m.flavor + ", " + with_commas((double)m.num_params()) +
         " parameters (" + with_commas((double)(m.num_params() - m.num_embedding_params())) + " non-embedding" + moe +
         "); seq " + std::to_string(S) + ", " + with_commas(seqs) + " sequences = " + with_commas(sim.tokens_per_step) +
         " tokens per step (local batch " + std::to_string(cfg.training.local_batch_size) + "); activation checkpointing " +
         config::enum_name(ac.mode) +
         (ac.mode == JobConfig::ACMode::selective ? " (" + ac.selective_ac_option.text() + ")" : std::string()) +
         "; parameters and activations " + config::enum_name(cfg.training.mixed_precision_param) + ", gradient reduction " +
         config::enum_name(cfg.training.mixed_precision_reduce) + ", fp32 master weights and AdamW state; " +
         config::enum_name(cfg.simulation.mode) + " mode";
}

std::string simulated_figures(const JobConfig& cfg, const comms::DeviceMesh& mesh) {
  if (cfg.simulation.system.empty() || mesh.rank != 0) return "";  // rank 0 prices the job once; only it logs
  SimResult sim = simulate_step(cfg, mesh.world);
  for (const auto& l : describe_simulation(sim)) log_info(l);
  return "  sim[" + sim.chip + "]: tps " + with_commas(sim.tokens_per_s_per_rank) + " mfu " +
         fmt("%.2f", 100.0 * sim.mfu) + "%";
}

}  // namespace titan
