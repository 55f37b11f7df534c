#include "job/metrics_logger.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "comms/hosts.h"
#include "job/peak_flops.h"

namespace titan {

namespace {
// A figure as the step line rounds it (printf's %.Nf / %.Ng), so metrics.jsonl carries what was logged.
double rounded(const char* format, double v) { return std::stod(fmt(format, v)); }

// One metrics.jsonl row: {"key": value, ...} (the spacing titan has always written; readers parse JSON).
std::string row_text(const nlohmann::ordered_json& row) {
  std::string s = "{";
  for (auto it = row.begin(); it != row.end(); ++it)
    s += (it == row.begin() ? "" : ", ") + nlohmann::json(it.key()).dump() + ": " + it.value().dump();
  return s + "}";
}
}  // namespace

MetricsLogger::MetricsLogger(const JobConfig& cfg, const comms::DeviceMesh& mesh, const TrainJob& job,
                             std::string sim_suffix, int64_t start, double t_start)
    : cfg_(cfg),
      mesh_(mesh),
      sim_suffix_(std::move(sim_suffix)),
      start_(start),
      t_start_(t_start),
      flops_per_token_(job.model->flops_per_token(cfg.training.seq_len)),
      t_log_(0),
      accumulation_(job.accumulation),
      compute_(job.compute),
      probe_(mesh.world_pg) {
  const std::string path = cfg.job.dump_folder + "/metrics.jsonl";
  if (cfg.metrics.save_jsonl && mesh.rank == 0) {
    if (start > 0) truncate_metrics_after(path, start);  // resumed: rows past the checkpoint are redone
    jsonl_ = std::make_unique<JsonlWriter>(path);
  }
  if (cfg.metrics.peak_tflops > 0) {
    peak_tflops_ = cfg.metrics.peak_tflops;
    log_info("training " + std::to_string(cfg.training.steps) + " steps; MFU against " + fmt("%.3f", peak_tflops_) +
             " TFLOP/s peak per rank (metrics.peak_tflops)");
  } else {
    const PeakFlops p = measure_peak_flops(job.compute);
    peak_tflops_ = agreed_max(p.tflops);
    log_info("training " + std::to_string(cfg.training.steps) + " steps; MFU against " + fmt("%.3f", peak_tflops_) +
             " TFLOP/s peak per rank, measured on " + std::to_string(p.threads) + " thread" +
             (p.threads > 1 ? "s" : "") + " (the fastest " + (job.compute == DType::BF16 ? "bf16 " : "float32 ") +
             "linear forward + backward, 1024 x 1024 x 1024, " + fmt("%.2f", p.seconds) +
             " s; metrics.peak_tflops sets it)");
  }
  if (probe_.active() && cfg.metrics.link_probe_mib > 0)
    log_info("links between hosts: " + std::to_string(cfg.metrics.link_probe_mib) + " MiB around the ring of " +
             std::to_string(comms::hosts().count()) + " hosts at each step line, timed (metrics.link_probe_mib)");
  else if (!probe_.active() && cfg.metrics.link_probe_mib != JobConfig::Metrics{}.link_probe_mib)
    log_info("metrics.link_probe_mib (" + std::to_string(cfg.metrics.link_probe_mib) +
             "): this job runs on one host, no links between hosts to time");
  auto& mem = MemoryTracker::get(Device::CPU);
  mem.reset_peak();
  run_peak_ = mem.stats();
  comms::CommLog::get().clear();
  t_log_ = wall_seconds();
}

double MetricsLogger::agreed_max(double v) const {  // every rank's MFU against one peak: the fastest rank's
  if (mesh_.world == 1) return v;
  return mesh_.world_pg->all_reduce(from_vector<double>({v}, {1}), comms::ReduceOp::Max).to_vector<double>()[0];
}

void MetricsLogger::fold_peak() {
  const MemoryStats ms = MemoryTracker::get(Device::CPU).stats();
  for (int i = 0; i < kNumMemoryCategories; ++i) run_peak_.peak[i] = std::max(run_peak_.peak[i], ms.peak[i]);
  run_peak_.total_peak = std::max(run_peak_.total_peak, ms.total_peak);
}

void MetricsLogger::step(int64_t step, const StepResult& r, double lr) {
  if (!r.expert_load.empty()) {
    expert_total_.resize(r.expert_load[0].size(), 0.0);
    expert_by_layer_.resize(r.expert_load.size());
    expert_interval_.resize(r.expert_load.size());
    for (size_t l = 0; l < r.expert_load.size(); ++l) {
      const auto& layer = r.expert_load[l];
      expert_by_layer_[l].resize(layer.size(), 0.0);
      expert_interval_[l].resize(layer.size(), 0.0);
      for (size_t e = 0; e < layer.size(); ++e) {
        expert_by_layer_[l][e] += layer[e];
        expert_interval_[l][e] += layer[e];
      }
      for (size_t e = 0; e < layer.size() && e < expert_total_.size(); ++e) expert_total_[e] += layer[e];
    }
    for (auto& layer : r.expert_load) {  // min / mean / max over experts, averaged over layers
      double mn = 1e300, mx = 0, mean = 0;
      for (double c : layer) {
        mn = std::min(mn, c);
        mx = std::max(mx, c);
        mean += c / (double)layer.size();
      }
      load_min_ += mn / (double)r.expert_load.size();
      load_mean_ += mean / (double)r.expert_load.size();
      load_max_ += mx / (double)r.expert_load.size();
    }
    ++load_steps_;
  }
  const int64_t B = cfg_.training.local_batch_size, S = cfg_.training.seq_len;
  tokens_since_log_ += accumulation_ * B * S;
  if (first_) {
    log_info("time to first step: " + fmt("%.2f", process_seconds()) + " s (" +
             fmt("%.2f", process_seconds() - t_start_) + " s in the trainer)");
    first_ = false;
  }
  if (!(step % cfg_.metrics.log_freq == 0 || step == start_ + 1 || step == cfg_.training.steps)) return;
  auto& mem = MemoryTracker::get(Device::CPU);
  const double dt = wall_seconds() - t_log_;
  StepMetrics sm;
  sm.step = step;
  sm.loss = r.loss;
  sm.grad_norm = r.grad_norm;
  sm.lr = lr;
  const MemoryStats ms = mem.stats();
  sm.memory_gib = (double)ms.total_peak / (1024.0 * 1024 * 1024);
  sm.memory_pct = 100.0 * (double)ms.total_peak / (double)physical_memory_bytes();
  // tps per rank as TorchTitan: this rank's tokens over the ranks that share them (tp ranks, the
  // pipeline's stages: every stage runs the same tokens, and the cp ranks: each holds 1/cp of a sequence)
  const auto& d = mesh_.degrees;
  sm.tps = (double)tokens_since_log_ / dt / (double)(d.tp * d.pp * d.cp);
  sm.tflops = flops_per_token_ * sm.tps / 1e12;
  double comm_busy = 0, comm_exposed = 0;  // the interval's collectives (before this line's own)
  for (auto& c : comms::CommLog::get().take()) {
    comm_busy += c.busy_s;
    comm_exposed += c.exposed_s;
  }
  sm.mfu_pct = 100.0 * flops_per_token_ * sm.tps / (peak_tflops_ * 1e12);
  // Above 100% the peak is wrong (lesson: a figure over its physical limit is a bug). A measured peak is taken
  // again, now: the start's may have run while the machine was busy with other work. Every rank decides alike
  // (the step lines come at the same steps on every rank; the verdict is all-reduced).
  // Once per run; the verdict's all-reduce and the probe stay out of the step's communication and memory figures.
  if (cfg_.metrics.peak_tflops == 0 && !remeasured_ && agreed_max(sm.mfu_pct > 100.0 ? 1.0 : 0.0) > 0) {
    remeasured_ = true;
    const double old = peak_tflops_;
    fold_peak();
    peak_tflops_ = std::max(peak_tflops_, agreed_max(measure_peak_flops(compute_).tflops));
    mem.reset_peak();
    sm.mfu_pct = 100.0 * flops_per_token_ * sm.tps / (peak_tflops_ * 1e12);
    log_info("MFU peak measured again at step " + std::to_string(step) + ": " + fmt("%.3f", peak_tflops_) +
             " TFLOP/s per rank (the start's " + fmt("%.3f", old) + " was below what the steps reached" +
             (peak_tflops_ > old ? ": it was measured while the machine was busy)" : ")"));
  }
  if (sm.mfu_pct > 100.0 && !warned_mfu_) {  // above its physical limit: the peak is wrong, said once
    warned_mfu_ = true;
    log_info("warning: MFU " + fmt("%.1f", sm.mfu_pct) + "% is above 100%: the peak (" + fmt("%.3f", peak_tflops_) +
             " TFLOP/s) is below what this step ran at; set metrics.peak_tflops to this machine's peak per rank, or 0 "
             "to measure it");
  }
  sm.elapsed_s = process_seconds();
  // across hosts: the links between them, timed (rank 0 is host 0's first rank: it has the times); its blocks
  // are no step's memory
  std::vector<double> links;
  std::string straggler;
  if (probe_.active() && cfg_.metrics.link_probe_mib > 0) {
    const int64_t bytes = cfg_.metrics.link_probe_mib << 20;
    fold_peak();
    links = probe_.measure(bytes);
    mem.reset_peak();
    if (!links.empty()) straggler = comms::LinkProbe::slowest(links, comms::hosts().name, bytes);
  }
  // every rank's wait in the interval's collectives (its step time less its own work): the rank the others
  // waited for waited least; gathered at each step line (every rank logs at the same steps)
  std::vector<double> waits;
  std::string waited_for;
  if (mesh_.world > 1) {
    waits = mesh_.world_pg->all_gather(from_vector<double>({comm_exposed}, {1})).to_vector<double>();
    const auto [lo, hi] = std::minmax_element(waits.begin(), waits.end());
    // named when the spread is a real share of the interval (above timing noise: 5% of it and 10 ms); not under
    // pipeline parallelism, where the spread is the stages' bubbles (their receives wait by design)
    if (mesh_.degrees.pp == 1 && *hi - *lo > std::max(0.05 * dt, 0.01))
      waited_for = comms::rank_where((int)(lo - waits.begin())) + " (" + fmt("%.3f", *lo) + " s waiting; the others up to " +
                   fmt("%.3f", *hi) + " s)";
  }
  comms::CommLog::get().clear();  // the peak's agreement, the link probe and the waits' gather are no step's communication
  std::string line = format_step_line(sm);
  if (load_steps_ > 0) {
    line += "  experts: " + fmt("%.0f", load_min_ / load_steps_) + "/" + fmt("%.0f", load_mean_ / load_steps_) + "/" +
            fmt("%.0f", load_max_ / load_steps_) + " tokens min/mean/max";
    load_min_ = load_mean_ = load_max_ = 0;
    load_steps_ = 0;
  }
  if (mesh_.world > 1)
    line += "  comm: " + fmt("%.0f", 100.0 * comm_exposed / dt) + "% exposed (" + fmt("%.0f", 100.0 * comm_busy / dt) +
            "% busy)";
  if (!straggler.empty()) line += "  straggler: " + straggler;
  if (!waited_for.empty()) line += "  waited for: " + waited_for;
  log_info(line + sim_suffix_);
  if (jsonl_) {
    nlohmann::ordered_json row = {{"step", step},
                                        {"loss", rounded("%.8f", sm.loss)},
                                        {"grad_norm", rounded("%.8f", sm.grad_norm)},
                                        {"lr", rounded("%.6g", lr)},
                                        {"tps", rounded("%.1f", sm.tps)},
                                        {"tflops", rounded("%.5f", sm.tflops)},
                                        {"mfu", rounded("%.4f", sm.mfu_pct)},
                                        {"memory_gib", rounded("%.4f", sm.memory_gib)},
                                        {"comm_exposed_s", rounded("%.4f", comm_exposed)},
                                        {"comm_busy_s", rounded("%.4f", comm_busy)},
                                        {"elapsed_s", rounded("%.3f", sm.elapsed_s)}};
    if (!links.empty()) {  // seconds for the probe's block to reach host i from host i-1
      nlohmann::ordered_json l = nlohmann::ordered_json::array();
      for (double t : links) l.push_back(rounded("%.5f", t));
      row["link_in_s"] = l;
      row["straggler"] = straggler;
    }
    if (!expert_interval_.empty()) {  // routed tokens per expert and MoE layer since the last line: a step's own
      // routing, layer by layer (simulation.moe_routing_histogram's form), for planning that step
      std::string hist;
      for (const auto& layer : expert_interval_) {
        if (!hist.empty()) hist += ";";
        for (size_t e = 0; e < layer.size(); ++e) hist += (e ? "," : "") + fmt("%.0f", layer[e]);
      }
      row["expert_load"] = hist;
    }
    if (!waits.empty()) {  // seconds each rank waited in the interval's collectives, by world rank
      nlohmann::ordered_json w = nlohmann::ordered_json::array();
      for (double t : waits) w.push_back(rounded("%.4f", t));
      row["rank_comm_wait_s"] = w;
      row["interval_s"] = rounded("%.4f", dt);
    }
    jsonl_->write(row_text(row));
  }
  for (auto& layer : expert_interval_) std::fill(layer.begin(), layer.end(), 0.0);
  fold_peak();
  mem.reset_peak();
  t_log_ = wall_seconds();
  tokens_since_log_ = 0;
}

void MetricsLogger::validation(int64_t step, double loss) {
  if (jsonl_) jsonl_->write(row_text(nlohmann::ordered_json{{"step", step}, {"val_loss", rounded("%.8f", loss)}}));
}

void MetricsLogger::exclude_since(double t0) {
  t_log_ += wall_seconds() - t0;
  comms::CommLog::get().clear();
}

void MetricsLogger::finish() {
  fold_peak();
  const MemoryStats& ms = run_peak_;
  auto mib = [&](MemoryCategory c) { return fmt("%.2f", (double)ms.peak[(int)c] / (1 << 20)); };
  log_info("memory on rank 0 (MiB, peak by category): parameters " + mib(MemoryCategory::Parameters) + ", gradients " +
           mib(MemoryCategory::Gradients) + ", optimizer " + mib(MemoryCategory::OptimizerState) + ", activations " +
           mib(MemoryCategory::Activations) + ", communication " + mib(MemoryCategory::Communication) +
           "; peak of all tracked tensors " + fmt("%.1f", (double)ms.total_peak / (1 << 20)) + " MiB");
  if (!expert_total_.empty()) {  // what a simulation of this model's routing takes (simulation.moe_routing_histogram)
    std::string hist;
    for (double c : expert_total_) hist += (hist.empty() ? "" : ",") + fmt("%.0f", c);
    log_info("expert load (routed tokens per expert over this run, all MoE layers; for "
             "simulation.moe_routing_histogram): " + hist);
    // the same by layer: the ranks meet at every layer's all-to-alls, so a simulation that prices each layer's
    // busiest rank takes this one
    std::string layers;
    for (const auto& layer : expert_by_layer_) {
      layers += layers.empty() ? "" : ";";
      for (size_t e = 0; e < layer.size(); ++e) layers += (e ? "," : "") + fmt("%.0f", layer[e]);
    }
    log_info("expert load per MoE layer (routed tokens per expert over this run, the layers in order separated by "
             "';'; for simulation.moe_routing_histogram): " + layers);
  }
}

}  // namespace titan
