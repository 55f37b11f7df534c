// titan-eval --checkpoint W --tokens T.h5 --seq-len S --batch-size B [--json] [--dump-grads G.h5]
//   W: an HF export folder, model.safetensors, model.safetensors.index.json (with config.json beside it)
//      or an HDF5 export (config as its root attribute); F32, BF16 or F16 weights
//            [--dp-shard N --dp-replicate N --tp N]   (under mpirun: any layout)
//            [--precision float32 | bfloat16]          (bfloat16: as titan-train's training.mixed_precision_param:
//                                                       bf16 autocast's GEMMs, float32 elsewhere)
// Builds the model from the checkpoint's HF config.json alone and prints the mean next-token cross-entropy over
// every full batch of the token file (batches dealt round-robin to the
// data-parallel ranks; the mean is over all of them).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "comms/device_mesh.h"
#include "models/decoder/model.h"
#include "src/ops/ops.h"
#include "src/autograd/autocast.h"
#include "src/autograd/grad_mode.h"
#include "src/checkpoint/checkpoint.h"
#include "src/data/loader.h"
#include "src/config/version.h"
#include "job/metrics.h"
#include "step/train_step.h"

using namespace titan;

int main(int argc, char** argv) {
  std::signal(SIGXFSZ, SIG_IGN);  // a file-size limit makes writes fail (EFBIG, reported), not kill the job
  comms::init(&argc, &argv);
  CLI::App app{"titan-eval: mean next-token cross-entropy of HF-named weights (safetensors or HDF5) over a token file",
               "titan-eval"};
  app.set_version_flag("--version", version_string("titan-eval"));
  std::string ckpt, tokens, dump;
  int64_t seq = 0, batch = 0, dp_shard = -1, dp_rep = 1, tp = 1, ep = 1, pp = 1, pp_mbs = 1, max_batches = -1, cp = 1;
  std::string pp_schedule = "1F1B", cp_rotate = "allgather", precision = "float32";
  bool json = false;
  app.add_option("--checkpoint", ckpt,
                 "HF weights: an export folder, a .safetensors file or index (config.json beside it), or an HDF5 "
                 "export")
      ->required();
  app.add_option("--tokens", tokens, "HDF5 token file (/tokens, uint32)")->required();
  app.add_option("--seq-len", seq, "sequence length")->required();
  app.add_option("--batch-size", batch, "batch size")->required();
  app.add_flag("--json", json, "print {\"loss\": X, \"tokens\": N} instead of `loss: X`");
  app.add_option("--dump-grads", dump, "write d(loss)/d(param) for every parameter, HF-named, to this HDF5 file");
  app.add_option("--dp-shard", dp_shard, "data_parallel_shard_degree (-1: the remaining ranks)");
  app.add_option("--dp-replicate", dp_rep, "data_parallel_replicate_degree");
  app.add_option("--tp", tp, "tensor_parallel_degree");
  app.add_option("--ep", ep, "expert_parallel_degree (MoE models)");
  app.add_option("--cp", cp, "context_parallel_degree (each sequence over cp ranks)");
  app.add_option("--cp-rotate", cp_rotate, "context_parallel_rotate_method: allgather | alltoall")
      ->check(CLI::IsMember({"allgather", "alltoall"}));
  app.add_option("--pp", pp, "pipeline_parallel_degree (stages, the blocks split evenly)");
  app.add_option("--pp-schedule", pp_schedule, "pipeline_parallel_schedule: GPipe | 1F1B | Interleaved1F1B")
      ->check(CLI::IsMember({"GPipe", "1F1B", "Interleaved1F1B"}));
  app.add_option("--pp-microbatch-size", pp_mbs, "pipeline_parallel_microbatch_size (must divide --batch-size)");
  app.add_option("--precision", precision,
                 "float32, or bfloat16: the forward (and --dump-grads' backward) under bf16 autocast, as "
                 "training.mixed_precision_param bfloat16 trains")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  app.add_option("--max-batches", max_batches, "evaluate only the first N batches (default: the whole file)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    comms::finalize();
    return rc;
  }
  try {
    TITAN_CHECK(seq > 0 && batch > 0, "titan-eval: --seq-len and --batch-size must be > 0");
    {  // a relative path as titan-train finds its data: ./, the source tree, the install (data/kjv_val.h5)
      const std::string found = find_data_file(tokens);
      TITAN_CHECK(!found.empty(), "titan-eval: --tokens ", tokens, ": no such file",
                  std::filesystem::path(tokens).is_absolute() ? std::string() : " in " + config::join(data_roots()));
      tokens = found;
    }
    {  // the token file must hold one batch; checked before any collective
      DataLoader probe(tokens, batch, seq);
      TITAN_CHECK(probe.steps_left() > 0, "titan-eval: ", tokens, " holds no full batch");
    }
    TITAN_CHECK(pp >= 1 && pp_mbs >= 1 && batch % pp_mbs == 0, "titan-eval: --pp and --pp-microbatch-size must be "
                ">= 1, and --pp-microbatch-size must divide --batch-size (", batch, ")");
    // the job as titan-train assembles it (step/train_step.h build_job): the model of the file's config.json,
    // the layout of the flags
    const std::string cfg = read_hf_config(ckpt);
    JobConfig job_cfg;
    try {  // the file's errors name it
      job_cfg.model = decoder::Args::from_hf_json(cfg);
    } catch (const Error& e) {
      fail("titan-eval: the config.json of ", ckpt, ": ", e.what());
    }
    job_cfg.training.seq_len = seq;
    job_cfg.training.local_batch_size = batch;
    auto& par = job_cfg.parallelism;
    par.data_parallel_replicate_degree = dp_rep;
    par.data_parallel_shard_degree = dp_shard;
    par.tensor_parallel_degree = tp;
    par.expert_parallel_degree = ep;
    par.context_parallel_degree = cp;
    par.context_parallel_rotate_method = *config::parse_enum<parallel::RotateMethod>(cp_rotate);  // CLI11 checked it
    par.pipeline_parallel_degree = pp;
    if (pp > 1) {
      par.pipeline_parallel_schedule = *config::parse_enum<parallel::PipelineSchedule>(pp_schedule);
      par.pipeline_parallel_microbatch_size = pp_mbs;
    }
    const comms::MeshDegrees degrees = mesh_degrees(job_cfg);
    degrees.check_sequence_length(seq, par.enable_sequence_parallel, "titan-eval --seq-len");  // before any collective
    comms::DeviceMesh mesh(degrees);
    set_log_enabled(mesh.rank == 0 && !json);  // progress on rank 0; --json keeps stdout to the one JSON line
    MPI_Comm comm = mesh.world > 1 ? comms::world_comm() : nullptr;
    TrainJob job = build_job(job_cfg, mesh, nullptr, JobPurpose::evaluate);
    decoder::Decoder& model = *job.model;
    parallel::ParallelModel& pm = job.pm;
    parallel::Pipeline* pipeline = job.pipeline.get();
    const int64_t vocab = model.vocab_size();
    {
      const HfLayout hl = model.hf_layout(pm.state_regions());
      load_hf(ckpt, hl.regions, comm);
      hl.after_load();
    }
    DataLoader loader(tokens, batch, seq);
    loader.check_ids(vocab, comm);
    const int64_t steps = max_batches > 0 ? std::min(max_batches, loader.steps_left()) : loader.steps_left();
    const int64_t dp = mesh.dp_size(), me = mesh.dp_rank();
    const bool grads = !dump.empty();
    // batch i goes to dp rank i % dp. Every rank runs the same number of
    // forwards (FSDP/TP collectives must line up): a rank past the end repeats
    // batch `me` with weight 0.
    std::vector<Batch> mine;
    Batch first;
    for (int64_t i = 0; i < steps; ++i) {
      Batch b = loader.next();
      if (i == 0) first = b;
      if (i % dp == me) mine.push_back(b);
    }
    const int64_t rounds = (steps + dp - 1) / dp;
    double total = 0;
    Progress progress("evaluating", rounds, "batches");
    const DType compute = precision == "bfloat16" ? DType::BF16 : DType::F32;
    for (int64_t k = 0; k < rounds; ++k) {
      AutocastScope autocast(compute);  // this batch's forward (and backward)
      const bool real = k < (int64_t)mine.size();
      // context parallel: this rank's chunks, weighted by its share of the group's valid targets
      const ShardedBatch sb = shard_for_context_parallel(model, mesh, real ? mine[k] : first);
      const Batch& b = sb.batch;
      const double w = (real ? 1.0 : 0.0) * sb.loss_weight, gw = (real ? 1.0 : 0.0) * sb.grad_weight;
      if (pipeline && grads) {
        // the schedule's losses carry gw * dp / steps (FSDP averages over dp x cp); the last stage reports the mean
        total += w * pipeline->train(b, gw * (double)dp / (double)steps, /*reduce=*/true).loss;
        pm.wait_gradients();
      } else if (pipeline) {
        const double l = pipeline->eval(b);
        if (w > 0) total += w * l;  // w 0: a repeated batch, or no valid target on this cp rank (a NaN mean)
      } else if (grads) {
        Tensor logits = model.forward(b.inputs, b.doc_ids);
        Tensor loss = model.loss(logits, b.targets);
        if (w > 0) total += w * (double)loss.item<float>();
        // FSDP averages gradients over the dp (x cp) ranks: scale so the result is d(mean over all batches)
        mul(loss, gw * (double)dp / (double)steps).backward();
        pm.wait_gradients();  // FSDP's reduce-scatters of this backward land in .grad
      } else {
        NoGradGuard ng;
        Tensor logits = model.forward(b.inputs, b.doc_ids);
        if (w > 0) total += w * (double)model.loss(logits, b.targets).item<float>();
      }
      progress.add();
    }
    progress.finish();
    // tp ranks of one dp index computed the same batches: sum over dp only (pipeline eval: every stage
    // holds the loss already; pipeline train: the last stage's, summed over pp below)
    total = mesh.dp->all_reduce(from_vector<double>({total}, {1})).to_vector<double>()[0];
    if (cp > 1) total = mesh.cp->all_reduce(from_vector<double>({total}, {1})).to_vector<double>()[0];
    if (pipeline && grads) total = mesh.pp->all_reduce(from_vector<double>({total}, {1})).to_vector<double>()[0];
    const double loss = total / (double)steps;
    if (grads) {
      std::vector<Tensor> keep;
      export_hf(dump, model.hf_layout(pm.grad_regions(keep)).regions, cfg, DType::F32, comm);
    }
    if (mesh.rank == 0) {
      if (json) std::printf("{\"loss\": %.8f, \"tokens\": %lld}\n", loss, (long long)(steps * batch * seq));
      else std::printf("loss: %.8f\n", loss);
    }
  } catch (const std::exception& e) {
    if (comms::world_size() > 1) comms::abort_job(std::string("titan-eval: ") + e.what());
    std::cerr << "[titan-eval] error: " << e.what() << std::endl;
    comms::finalize();
    return 1;
  }
  comms::finalize();
  return 0;
}
