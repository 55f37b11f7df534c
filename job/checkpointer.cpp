#include "job/checkpointer.h"

#include <filesystem>

#include "job/metrics.h"
#include "models/decoder/presets.h"
#include "src/data/tokenizer.h"

namespace fs = std::filesystem;

namespace titan {

Checkpointer::Checkpointer(const JobConfig& cfg, comms::DeviceMesh& mesh, TrainJob& job, std::string cfg_text)
    : cfg_(cfg),
      mesh_(mesh),
      job_(job),
      cfg_text_(std::move(cfg_text)),
      dir_(cfg.job.dump_folder + "/" + cfg.checkpoint.folder),
      regions_(job.pm.state_regions()),
      comm_(mesh.world > 1 ? comms::world_comm() : nullptr) {}

int64_t Checkpointer::resume(DataLoader& loader, Generator& rng) {
  if (!cfg_.checkpoint.enable) return 0;
  if (mesh_.rank == 0 && fs::is_directory(dir_))  // partial writes of a job that died mid-save
    for (auto& e : fs::directory_iterator(dir_))
      if (e.path().extension() == ".tmp") {
        log_info("removing " + e.path().string() + " (an unfinished checkpoint write of an earlier run)");
        fs::remove(e.path());
      }
  mesh_.world_pg->barrier();
  // resume from the newest checkpoint that verifies; say which ones were skipped and why
  auto ck = list_checkpoints(dir_);
  std::vector<std::string> skipped;
  for (auto it = ck.rbegin(); it != ck.rend(); ++it) {
    bool legacy = false;
    const std::string why = verify_checkpoint(it->second, comm_, &legacy);
    if (!why.empty()) {
      log_info("WARNING skipping checkpoint " + it->second + ": " + why);
      skipped.push_back(it->second + ": " + why);
      continue;
    }
    TrainState st = load_checkpoint(it->second, regions_, job_.opt.get(), comm_);
    const auto changed = config_changes(st.config, cfg_text_, {"model", "optimizer"});
    if (!changed.empty()) {
      std::string list;
      for (auto& c : changed) list += "\n  " + c;
      TITAN_CHECK(cfg_.checkpoint.resume_with_changed_config, "checkpoint: ", it->second,
                  " was written with a different model/optimizer config:", list,
                  "\nresuming would silently change the run; set checkpoint.resume_with_changed_config: true to "
                  "resume anyway, or use another job.dump_folder");
      log_info("WARNING resuming with a changed config (checkpoint.resume_with_changed_config):" + list);
    }
    loader.set_state(st.data_position, st.data_epoch);
    rng.set_state(st.rng);
    log_info("resumed from " + it->second + " at step " + std::to_string(st.step) +
             (legacy ? " (written before checksums: values checked finite only" : " (checksums verified") +
             (skipped.empty() ? "" : "; " + std::to_string(skipped.size()) + " newer checkpoint(s) skipped") + ")");
    if (st.step >= cfg_.training.steps)
      log_info("that checkpoint already reached training.steps = " + std::to_string(cfg_.training.steps) +
               ": nothing left to train (raise training.steps, or remove " + dir_ + " to start over)");
    return st.step;
  }
  if (!ck.empty()) {
    std::string list;
    for (auto& s : skipped) list += "\n  " + s;
    fail("checkpoint: none of the ", ck.size(), " checkpoints in ", dir_, " verifies; refusing to train "
         "from scratch over them (move them away to start over):", list);
  }
  return 0;
}

bool Checkpointer::due(int64_t step, bool stopping) const {
  return stopping ||
         (cfg_.checkpoint.enable && (step % cfg_.checkpoint.interval == 0 || step == cfg_.training.steps));
}

double Checkpointer::save(int64_t step, const DataLoader& loader, const Generator& rng) {
  const double t0 = wall_seconds();
  if (mesh_.rank == 0) fs::create_directories(dir_);
  mesh_.world_pg->barrier();
  TrainState st{step, loader.position(), loader.epoch(), rng.state(), cfg_text_};
  const std::string path = dir_ + "/step-" + std::to_string(step) + ".h5";
  save_checkpoint(path, regions_, job_.opt.get(), st, comm_);
  // read back before older ones are pruned: keep_latest_k never deletes the last verified checkpoint
  const std::string why = verify_checkpoint(path, comm_);
  TITAN_CHECK(why.empty(), "checkpoint: ", path, " does not read back as written (", why,
              "); older checkpoints kept. Check the disk.");
  if (mesh_.rank == 0) prune_checkpoints(dir_, cfg_.checkpoint.keep_latest_k);
  log_info("saved checkpoint " + path + " (" + fmt("%.2f", wall_seconds() - t0) + " s)");
  return wall_seconds() - t0;
}

void Checkpointer::export_model(const DataLoader& data) {
  if (!cfg_.checkpoint.export_at_end) return;
  const std::string folder = cfg_.job.dump_folder + "/export";
  if (mesh_.rank == 0) fs::create_directories(folder);
  mesh_.world_pg->barrier();
  ExportOptions eo;
  eo.format = cfg_.checkpoint.export_format;
  eo.dtype = cfg_.checkpoint.export_dtype;
  eo.max_shard_bytes = cfg_.checkpoint.export_max_shard_mb * 1000 * 1000;
  const double t0 = wall_seconds();
  decoder::Decoder& model = *job_.model;
  const auto files = export_hf_folder(folder, model.hf_layout(regions_).regions, model.hf_config_json(), eo, comm_);
  std::string list;
  for (const auto& f : files) list += (list.empty() ? "" : ", ") + f;
  if (mesh_.rank == 0) {  // the tokenizer that made the training data, beside the weights (HF's layout)
    try {
      const auto tok = tokenizer_of_token_file(data.path(), data.tokenizer(), data.tokenizer_sha256());
      write_file_checked(folder + "/tokenizer.json", tok->tokenizer_json());
      list += ", tokenizer.json (" + tok->name() + ")";
    } catch (const std::exception& e) {  // the weights are written: a missing tokenizer is said, not fatal
      log_info(std::string("warning: the export holds no tokenizer.json: ") + e.what());
    }
  }
  std::string why;  // the class HF loads it as (a qwen3 ablation may be a LlamaForCausalLM), or why none is
  const std::string cls = cfg_.model.hf_architecture(&why);
  log_info("exported the model for Hugging Face to " + folder + " (" + config::enum_name(cfg_.checkpoint.export_dtype) + "; " + list +
           "; " + fmt("%.2f", wall_seconds() - t0) + " s): " +
           (cls.empty() ? "no transformers class represents it (" + why + "), config.json holds titan_decoder"
                        : "architectures " + cls +
                              (cfg_.model.hf_class() == decoder::preset(cfg_.model.name).hf_class()
                                   ? std::string()
                                   : " (not " + config::enum_name(cfg_.model.name) + "'s own " +
                                         decoder::preset(cfg_.model.name).hf_architecture() +
                                         ": the knobs in effect make it that class)")));
}

}  // namespace titan
