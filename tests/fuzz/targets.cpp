// tests/fuzz/targets.cpp — the fuzz targets (see targets.h for the contract).
#include "tests/fuzz/targets.h"

#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "models/decoder/args.h"
#include "simulator/hardware.h"
#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/safetensors.h"
#include "src/data/corpus.h"
#include "src/data/loader.h"
#include "src/data/tokenizer.h"
#include "src/log/log.h"
#include "src/tensor/error.h"
#include "src/tensor/memory.h"
#include "step/job_config.h"

namespace fs = std::filesystem;

namespace titan::fuzz {
namespace {

// The bytes as a stream of choices (what libFuzzer's FuzzedDataProvider does, in a few lines so the release
// suite's gcc build runs the same targets): reads past the end give zeros.
class Bytes {
 public:
  Bytes(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  uint8_t u8() { return i_ < n_ ? d_[i_++] : 0; }
  uint64_t u64() {
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v |= (uint64_t)u8() << (8 * k);
    return v;
  }
  int64_t i64() { return (int64_t)u64(); }
  int64_t small(int64_t lo, int64_t hi) { return lo + (int64_t)(u8() % (uint64_t)(hi - lo + 1)); }  // [lo, hi]
  double f64() {
    const uint64_t v = u64();
    double x;
    std::memcpy(&x, &v, 8);
    return x;
  }
  std::string str(size_t max) {
    const size_t n = std::min<size_t>(u8() % (max + 1), n_ - std::min(i_, n_));
    std::string s((const char*)d_ + std::min(i_, n_), n);
    i_ += n;
    return s;
  }
  std::string rest() {
    std::string s((const char*)d_ + std::min(i_, n_), n_ - std::min(i_, n_));
    i_ = n_;
    return s;
  }
  bool done() const { return i_ >= n_; }

 private:
  const uint8_t* d_;
  size_t n_, i_ = 0;
};

// A folder of this process's own (libFuzzer may run several workers at once).
const std::string& scratch() {
  static const std::string* dir = [] {  // never destroyed: the exit handler below still reads it
    const char* t = std::getenv("TMPDIR");
    auto* d = new std::string(std::string(t && *t ? t : "/tmp") + "/titan_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch(), ec);
    });
    set_log_enabled(false);  // progress bars and notes would flood the fuzzer's output
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return d;
  }();
  return *dir;
}
std::string write_file(const std::string& name, const std::string& bytes) {
  const std::string p = scratch() + "/" + name;
  std::ofstream o(p, std::ios::binary | std::ios::trunc);
  o.write(bytes.data(), (std::streamsize)bytes.size());
  return p;
}
// The text before the first NUL and the bytes after it (targets that take two inputs).
std::pair<std::string, std::string> split_nul(const uint8_t* data, size_t size) {
  const std::string all((const char*)data, size);
  const size_t z = all.find('\0');
  if (z == std::string::npos) return {all, ""};
  return {all.substr(0, z), all.substr(z + 1)};
}

// Two small parameters, as a model's regions: w [2, 3], b [3] (optional, as state added later is).
struct Params {
  Tensor w = zeros({2, 3}), b = zeros({3});
  std::vector<Region> regions() {
    std::vector<Region> r{{"w", &w, {2, 3}, {0, 0}}, {"b", &b, {3}, {0}}};
    r[1].optional = true;
    return r;
  }
};

// ---- safetensors: one file, its header and data as given ----
void safetensors_file(const uint8_t* data, size_t size) {
  const std::string p = write_file("model.safetensors", std::string((const char*)data, size));
  Params params;
  load_safetensors(p, params.regions());
}

// ---- safetensors index: the index as given, over two good shards (w and b) ----
void safetensors_index(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const std::string d = scratch() + "/sharded";
    Params params;
    params.w = full({2, 3}, 0.5f);
    params.b = full({3}, -1.0f);
    save_safetensors(d, params.regions(), SafetensorsDType::F32, /*max_shard_bytes=*/16);
    return d;
  }();
  {
    std::ofstream o(dir + "/model.safetensors.index.json", std::ios::binary | std::ios::trunc);
    o.write((const char*)data, (std::streamsize)size);
  }
  Params params;
  load_safetensors(dir, params.regions());
}

// HDF5 writing for the generated files: a dataset of a chosen element type, rank and values.
hid_t element_type(uint8_t k) {
  switch (k % 6) {
    case 0: return H5T_NATIVE_UINT32;
    case 1: return H5T_NATIVE_INT64;
    case 2: return H5T_NATIVE_FLOAT;
    case 3: return H5T_NATIVE_DOUBLE;
    case 4: return H5T_NATIVE_UINT8;
    default: return H5T_NATIVE_INT32;
  }
}
void write_dataset(hid_t file, const std::string& name, Bytes& in) {
  const hid_t type = element_type(in.u8());
  const int rank = (int)in.small(0, 3);
  hsize_t dims[3] = {1, 1, 1};
  hsize_t n = 1;
  for (int d = 0; d < rank; ++d) n *= (dims[d] = (hsize_t)in.small(0, 40));
  std::vector<uint8_t> buf(n * H5Tget_size(type));
  for (auto& c : buf) c = in.u8();
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hid_t space = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims, nullptr);
  const hid_t ds = H5Dcreate2(file, name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  if (ds >= 0) {
    if (n > 0) H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    H5Dclose(ds);
  }
  H5Sclose(space);
  H5Pclose(lcpl);
}
void write_attribute(hid_t file, const std::string& name, Bytes& in) {
  if (H5Aexists(file, name.c_str()) > 0) H5Adelete(file, name.c_str());
  const int kind = (int)in.small(0, 3);
  const hid_t space = H5Screate(H5S_SCALAR);
  if (kind == 0 || kind == 1) {  // an integer / a double
    const int64_t i = in.i64();
    const double x = in.f64();
    const hid_t type = kind == 0 ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
    const hid_t a = H5Acreate2(file, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type, kind == 0 ? (const void*)&i : (const void*)&x);
    H5Aclose(a);
  } else if (kind == 2) {  // a string (variable length, as titan writes them)
    const std::string s = in.str(200);
    const char* p = s.c_str();
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    const hid_t a = H5Acreate2(file, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type, &p);
    H5Aclose(a);
    H5Tclose(type);
  } else {  // a 1-D array of int64 where a scalar is expected
    const hsize_t n = (hsize_t)in.small(0, 4);
    std::vector<int64_t> v(n);
    for (auto& x : v) x = in.i64();
    const hid_t s1 = H5Screate_simple(1, &n, nullptr);
    const hid_t a = H5Acreate2(file, name.c_str(), H5T_NATIVE_INT64, s1, H5P_DEFAULT, H5P_DEFAULT);
    if (n) H5Awrite(a, H5T_NATIVE_INT64, v.data());
    H5Aclose(a);
    H5Sclose(s1);
  }
  H5Sclose(space);
}

// ---- token files: /tokens, /doc_starts and the attributes, of any type and size; the loader as training uses it
void token_file(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  const std::string p = scratch() + "/tokens.h5";
  {
    const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const uint8_t has = in.u8();
    if (has & 1) write_dataset(f, "tokens", in);
    if (has & 2) write_dataset(f, "doc_starts", in);
    for (const char* a : {"vocab_size", "separator_id", "tokenizer", "tokenizer_sha256"})
      if (in.u8() & 1) write_attribute(f, a, in);
    H5Fclose(f);
  }
  const int64_t batch = in.small(1, 4), seq = in.small(1, 16), world = in.small(1, 3), rank = in.small(0, world - 1);
  DataLoader loader(p, batch, seq, rank, world);
  loader.check_ids(in.u8() & 1 ? in.i64() : loader.vocab_size() < 0 ? 256 : loader.vocab_size());
  for (int s = 0; s < 3; ++s) {
    const Batch b = loader.next();
    (void)loader.document_starts(loader.position(), loader.position() + seq);
    (void)b;
  }
  (void)loader.steps_left();
  loader.set_state(in.i64(), in.i64());
  if (loader.tokenizer() == "byte" || loader.tokenizer().empty()) return;
  (void)tokenizer_of_token_file(p, loader.tokenizer(), loader.tokenizer_sha256());
}

// ---- checkpoints and HDF5 exports: a good file (the first byte chooses a training-state checkpoint or an HF
// export), then datasets and attributes replaced or removed as the bytes say; what a resume does with a
// checkpoint (verify, load, the config diff, the RNG and loader state), what titan-eval does with an export
// (verify, read its config.json and import it, load the weights)
void checkpoint(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  const bool is_export = in.u8() & 0x80;
  const std::string p = scratch() + (is_export ? "/model.h5" : "/step-1.h5");
  {
    Params params;
    params.w = full({2, 3}, 0.25f);
    if (is_export) {
      export_hf(p, params.regions(), R"({"model_type": "qwen3", "vocab_size": 3, "hidden_size": 2,
        "num_hidden_layers": 1, "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 2,
        "intermediate_size": 4})");
    } else {
      TrainState st;
      st.step = 1;
      st.rng = Generator(7).state();
      st.config = dump_job_config(JobConfig{});
      save_checkpoint(p, params.regions(), nullptr, st);
    }
  }
  {
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    static const char* kNames[] = {"model/w", "model/b", "model/x", "step",      "data_position", "data_epoch",
                                   "rng",     "config",  "checksums", "optim_step", "model",       "w"};
    for (int ops = 0; ops < 6 && !in.done(); ++ops) {
      const std::string name = kNames[in.u8() % 12];
      switch (in.u8() % 4) {
        case 0: H5Ldelete(f, name.c_str(), H5P_DEFAULT); break;
        case 1:
          H5Ldelete(f, name.c_str(), H5P_DEFAULT);
          write_dataset(f, name, in);
          break;
        case 2: write_attribute(f, name, in); break;
        default:
          if (H5Aexists(f, name.c_str()) > 0) H5Adelete(f, name.c_str());
      }
    }
    H5Fclose(f);
  }
  if (is_export) {
    (void)decoder::Args::from_hf_json(read_hf_config(p));
    Params params;
    load_hf(p, params.regions());
    return;
  }
  bool legacy = false;
  const std::string why = verify_checkpoint(p, nullptr, &legacy);
  if (!why.empty()) fail("checkpoint: ", why);
  Params params;
  const TrainState st = load_checkpoint(p, params.regions(), nullptr);
  (void)config_changes(st.config, dump_job_config(JobConfig{}), {"model", "optimizer"});
  Generator g;
  g.set_state(st.rng);
  static const std::string tokens = [] {
    const std::string t = scratch() + "/resume_tokens.h5";
    write_token_file(t, std::vector<uint32_t>(64, 3), "byte", 256);
    return t;
  }();
  DataLoader loader(tokens, 1, 8);
  loader.set_state(st.data_position, st.data_epoch);
}

// ---- tokenizer.json, then the text after the first NUL encoded with it and decoded back ----
void tokenizer(const uint8_t* data, size_t size) {
  auto [json, text] = split_nul(data, size);
  const auto tok = make_tokenizer(write_file("tokenizer.json", json));
  const std::vector<uint32_t> ids = tok->encode(text);
  for (uint32_t id : ids)
    if ((int64_t)id >= tok->vocab_size()) {
      std::cerr << "tokenizer: encoded id " << id << " outside the vocabulary (" << tok->vocab_size() << ")\n";
      std::abort();
    }
  (void)tok->decode(ids);
  (void)tok->token_id(tok->end_of_text());
}

// ---- a YAML job config, then `--section.key value` overrides (the lines after the first NUL, in pairs); an
// accepted config must print (dump_job_config) a YAML that loads to the same config
void job_config(const uint8_t* data, size_t size) {
  auto [yaml, rest] = split_nul(data, size);
  std::vector<std::string> overrides;
  for (size_t a = 0; a < rest.size();) {
    const size_t e = std::min(rest.find('\n', a), rest.size());
    overrides.push_back(rest.substr(a, e - a));
    a = e + 1;
  }
  if (overrides.size() % 2) overrides.pop_back();
  const JobConfig c = load_job_config_file(write_file("job.yaml", yaml), overrides);
  (void)config_warnings(c);
  const std::string dumped = dump_job_config(c);
  std::string again;
  try {
    again = dump_job_config(load_job_config_file(write_file("dumped.yaml", dumped)));
  } catch (const Error& e) {
    std::cerr << "job_config: an accepted config printed a YAML that does not load: " << e.what() << "\n" << dumped;
    std::abort();
  }
  if (again != dumped) {
    std::cerr << "job_config: an accepted config does not survive its own YAML:\n" << dumped << "\n---\n" << again;
    std::abort();
  }
}

// ---- an HF config.json imported as titan-eval imports it; an accepted one exports and re-imports to the same
void hf_config(const uint8_t* data, size_t size) {
  const decoder::Args a = decoder::Args::from_hf_json(std::string((const char*)data, size));
  (void)a.num_params();
  std::string why;
  if (a.hf_class(&why) == decoder::HfClass::none) return;
  const std::string out = a.to_hf_json();
  try {
    (void)decoder::Args::from_hf_json(out);
  } catch (const Error& e) {
    std::cerr << "hf_config: an imported config exports a config.json that does not import: " << e.what() << "\n"
              << out;
    std::abort();
  }
}

// ---- chip and system spec YAML (the first byte chooses which) ----
void specs(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const std::string p = write_file("spec.yaml", std::string((const char*)data + 1, size - 1));
  if (data[0] & 1) (void)sim::load_system(p);
  else (void)sim::load_chip(p);
}

// ---- JSONL / JSONL.gz / text corpora tokenized as titan-tokenize does (byte-level tokenizer); the first byte
// chooses the file kind: 0 JSONL, 1 the bytes as a .jsonl.gz, 2 the rest gzip-compressed as .jsonl.gz, 3 text
void corpus(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const int kind = data[0] % 4;
  const std::string body((const char*)data + 1, size - 1);
  std::string p;
  if (kind == 2) {
    p = scratch() + "/corpus.jsonl.gz";
    gzFile g = gzopen(p.c_str(), "wb");
    if (!body.empty()) gzwrite(g, body.data(), (unsigned)body.size());
    gzclose(g);
  } else {
    p = write_file(kind == 3 ? "corpus.txt" : kind == 1 ? "corpus.jsonl.gz" : "corpus.jsonl", body);
  }
  static const auto tok = make_tokenizer("");
  CorpusOptions opt;
  opt.batch_bytes = 64;  // many batches from a small file
  opt.separator = 0;
  const TokenizedCorpus c = tokenize_corpus(*tok, corpus_files({p}), opt);
  if (c.doc_starts.size() && c.doc_starts.back() > (int64_t)c.tokens.size()) {
    std::cerr << "corpus: a document starts past the end of the tokens\n";
    std::abort();
  }
}

}  // namespace

const std::vector<Target>& targets() {
  static const std::vector<Target> t = {
      {"safetensors", "a .safetensors file (header JSON, offsets, values) loaded into a model", safetensors_file},
      {"safetensors_index", "model.safetensors.index.json over sharded files", safetensors_index},
      {"token_file", "HDF5 token files (generated: datasets and attributes of any type and size) and the loader",
       token_file},
      {"checkpoint", "training-state checkpoints (generated: datasets and attributes replaced or removed), resumed",
       checkpoint},
      {"tokenizer", "tokenizer.json loaded, then text encoded and decoded", tokenizer},
      {"job_config", "YAML job configs with --section.key overrides, and their printed YAML", job_config},
      {"hf_config", "HF config.json imported (and exported back)", hf_config},
      {"specs", "chip and system spec YAML", specs},
      {"corpus", "JSONL, JSONL.gz and text corpora tokenized", corpus},
  };
  return t;
}

const Target* find_target(const std::string& name) {
  for (const auto& t : targets())
    if (name == t.name) return &t;
  return nullptr;
}

std::string run_target(const Target& t, const uint8_t* data, size_t size) {
  try {
    t.run(data, size);
    return "";
  } catch (const Error& e) {
    return e.what()[0] ? e.what() : "(empty message)";
  } catch (const std::exception& e) {
    std::cerr << "fuzz_" << t.name << ": an error that is not titan's (no file, key or value named): "
              << typeid(e).name() << ": " << e.what() << "\n";
    std::abort();
  }
}

}  // namespace titan::fuzz
