// titan-eval --checkpoint W.h5 --tokens T.h5 --seq-len S --batch-size B [--json] [--dump-grads G.h5]
// Builds the model from the checkpoint's `config` attribute alone (HF
// config.json content) and prints the mean next-token cross-entropy over
// every full batch of the token file.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "models/qwen3/model.h"
#include "src/autograd/grad_mode.h"
#include "src/checkpoint/checkpoint.h"
#include "src/data/loader.h"
#include "src/train/metrics.h"

using namespace titan;

int main(int argc, char** argv) {
  CLI::App app{"titan-eval: mean next-token cross-entropy of HF-named HDF5 weights over a token file"};
  std::string ckpt, tokens, dump;
  int64_t seq = 0, batch = 0;
  bool json = false;
  app.add_option("--checkpoint", ckpt, "HF-named HDF5 weights with a `config` attribute")->required();
  app.add_option("--tokens", tokens, "HDF5 token file (/tokens, uint32)")->required();
  app.add_option("--seq-len", seq, "sequence length")->required();
  app.add_option("--batch-size", batch, "batch size")->required();
  app.add_flag("--json", json, "print {\"loss\": X, \"tokens\": N} instead of `loss: X`");
  app.add_option("--dump-grads", dump, "write d(loss)/d(param) for every parameter, HF-named, to this HDF5 file");
  CLI11_PARSE(app, argc, argv);
  try {
    TITAN_CHECK(seq > 0 && batch > 0, "titan-eval: --seq-len and --batch-size must be > 0");
    const std::string cfg = read_hf_config(ckpt);
    qwen3::Args args = qwen3::Args::from_hf_json(cfg);
    qwen3::Qwen3 model(args);
    auto params = model.named_parameters();
    load_hf(ckpt, params);
    DataLoader loader(tokens, batch, seq);
    const int64_t steps = loader.steps_left();
    const bool grads = !dump.empty();
    double total = 0;
    for (int64_t i = 0; i < steps; ++i) {
      Batch b = loader.next();
      if (grads) {
        Tensor logits = model.forward(b.inputs);
        Tensor loss = cross_entropy(logits.reshape({-1, args.vocab_size}), b.targets.reshape({-1}));
        total += (double)loss.item<float>();
        mul(loss, 1.0 / (double)steps).backward();
      } else {
        NoGradGuard ng;
        Tensor logits = model.forward(b.inputs);
        total += (double)cross_entropy(logits.reshape({-1, args.vocab_size}), b.targets.reshape({-1})).item<float>();
      }
    }
    const double loss = total / (double)steps;
    if (grads) {
      NamedParams gp;
      std::vector<Tensor> keep;
      keep.reserve(params.size());
      for (auto& [n, p] : params) {
        keep.push_back(p->grad().defined() ? p->grad() : zeros_like(*p));
        gp.emplace_back(n, &keep.back());
      }
      export_hf(dump, gp, cfg);
    }
    if (json) std::printf("{\"loss\": %.8f, \"tokens\": %lld}\n", loss, (long long)(steps * batch * seq));
    else std::printf("loss: %.8f\n", loss);
  } catch (const std::exception& e) {
    std::cerr << "[titan-eval] error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
