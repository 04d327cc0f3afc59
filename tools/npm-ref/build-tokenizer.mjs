// build-tokenizer.mjs: write a Hugging Face tokenizer.json for o200k_harmony
// from js-tiktoken's o200k_base ranks plus the harmony special tokens.
//
//   node tools/npm-ref/build-tokenizer.mjs OUT.json [--merges-strings]
//        [--all-splits] [--pretty] [--verify N | --no-verify]
//
// Layout follows transformers' TikTokenConverter.converted() (which the
// gpt-oss conversion script's GptOssConverter inherits):
//   normalizer      null
//   pre_tokenizer   Sequence[Split(o200k regex, Isolated), ByteLevel(add_prefix_space=false, use_regex=false)]
//   post_processor  ByteLevel(trim_offsets=false), serialized as TikTokenConverter does
//   decoder         ByteLevel()
//   model           BPE, GPT-2 byte-level token strings, vocab = ranks 0..199997
//   added_tokens    199998..201087, all special, normalized=false
//
// Merges.  Default: one merge per token of >= 2 bytes.  For the token t of
// rank r, run tiktoken's BPE over t's bytes using only ranks < r; it always
// stops at exactly two parts (a, b) (checked for all 199742 tokens), and
// (a, b) is t's merge.  Merges are listed in rank order of t, so merge index
// order equals tiktoken's rank order.  This is exactly equivalent to
// tiktoken's byte_pair_merge: when tiktoken forms t inside a longer piece,
// the merges inside t's span happen in the same order as in t alone (a merge
// crossing the span would prevent t), so the last one is (a, b); hence
// "ignore_merges": false is safe and no whole-word vocab lookup is needed.
// --all-splits instead writes what TikTokenConverter writes: every split
// (l, r) with l, r and l+r all tokens, ordered by (rank(l+r), rank(l),
// rank(r)), with "ignore_merges": true.
//
// Merges are written as [["a","b"], ...] (tokenizers >= 0.20); with
// --merges-strings as ["a b", ...] (older files; no token string contains a
// space, since byte 0x20 is written as U+0120).
//
// Verification (default 3000 cases from gen-cases.mjs, --no-verify to skip):
// a plain merges-based BPE written here (lowest merge index first, leftmost on
// ties, honouring ignore_merges) must reproduce js-tiktoken's ids for every
// case, and every vocab token spelled alone must come back as itself.

import fs from "node:fs";
import { fileURLToPath } from "node:url";
import {
  N_BPE_TOKENS, O200K_PATTERN, SPECIAL_TOKENS, UNICODE_TO_BYTE, bytesToTokenString,
  loadRanks, referenceEncoders, rustSemanticsJsPattern,
} from "./o200k.mjs";
import { generateCases } from "./gen-cases.mjs";

// ---------------------------------------------------------------------------
// Merges.

// [a, b] as byte strings (latin1), one per token of >= 2 bytes, rank order.
export function canonicalMerges(tokens) {
  const rankOf = new Map(tokens.map((b, i) => [b.toString("latin1"), i]));
  const merges = [];
  for (let r = 0; r < tokens.length; r++) {
    const t = tokens[r];
    if (t.length < 2) continue;
    const parts = [...t.toString("latin1")];
    while (parts.length > 2) {
      let best = -1, at = -1;
      for (let i = 0; i + 1 < parts.length; i++) {
        const q = rankOf.get(parts[i] + parts[i + 1]);
        if (q !== undefined && q < r && (best < 0 || q < best)) { best = q; at = i; }
      }
      if (at < 0) break;
      parts.splice(at, 2, parts[at] + parts[at + 1]);
    }
    if (parts.length !== 2 || !(rankOf.get(parts[0]) < r) || !(rankOf.get(parts[1]) < r))
      throw new Error(`token ${r}: BPE over its bytes with ranks < ${r} ends in ${parts.length} parts`);
    merges.push(parts);
  }
  return merges;
}

// TikTokenConverter's list: every valid split of every token.
export function allSplitMerges(tokens) {
  const rankOf = new Map(tokens.map((b, i) => [b.toString("latin1"), i]));
  const merges = [];
  for (let r = 0; r < tokens.length; r++) {
    const t = tokens[r].toString("latin1");
    const local = [];
    for (let i = 1; i < t.length; i++) {
      const a = t.slice(0, i), b = t.slice(i);
      if (rankOf.has(a) && rankOf.has(b)) local.push([a, b]);
    }
    local.sort((x, y) => rankOf.get(x[0]) - rankOf.get(y[0]) || rankOf.get(x[1]) - rankOf.get(y[1]));
    merges.push(...local);
  }
  return merges;
}

const latin1ToTokenString = (s) => bytesToTokenString(Buffer.from(s, "latin1"));

// ---------------------------------------------------------------------------
// tokenizer.json

export function buildTokenizerJson({ mergesStrings = false, allSplits = false } = {}) {
  const { tokens } = loadRanks();
  const vocab = {};
  tokens.forEach((b, id) => { vocab[bytesToTokenString(b)] = id; });
  if (Object.keys(vocab).length !== N_BPE_TOKENS) throw new Error("duplicate token strings");
  const merges = (allSplits ? allSplitMerges(tokens) : canonicalMerges(tokens))
    .map(([a, b]) => [latin1ToTokenString(a), latin1ToTokenString(b)]);
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: SPECIAL_TOKENS.map(([id, content]) => ({
      id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
    })),
    normalizer: null,
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: O200K_PATTERN }, behavior: "Isolated", invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: allSplits,
      vocab,
      merges: mergesStrings ? merges.map(([a, b]) => `${a} ${b}`) : merges,
    },
  };
}

// ---------------------------------------------------------------------------
// A plain merges-based BPE over a tokenizer.json object.

export class MergesBpe {
  constructor(tj) {
    const m = tj.model;
    this.vocab = new Map(Object.entries(m.vocab));
    this.ignoreMerges = !!m.ignore_merges;
    this.rank = new Map();
    m.merges.forEach((mg, i) => {
      const key = Array.isArray(mg) ? `${mg[0]} ${mg[1]}` : mg;
      if (!this.rank.has(key)) this.rank.set(key, i);
    });
    this.cache = new Map();
  }

  // One pre-tokenized piece, already in byte-level token-string form.
  word(sym) {
    const hit = this.cache.get(sym);
    if (hit) return hit;
    let ids;
    if (this.ignoreMerges && this.vocab.has(sym)) ids = [this.vocab.get(sym)];
    else {
      const parts = [...sym];
      for (;;) {
        let best = Infinity, at = -1;
        for (let i = 0; i + 1 < parts.length; i++) {
          const q = this.rank.get(parts[i] + " " + parts[i + 1]);
          if (q !== undefined && q < best) { best = q; at = i; }
        }
        if (at < 0) break;
        parts.splice(at, 2, parts[at] + parts[at + 1]);
      }
      ids = parts.map((p) => {
        const id = this.vocab.get(p);
        if (id === undefined) throw new Error(`no vocab entry for ${JSON.stringify(p)}`);
        return id;
      });
    }
    if (this.cache.size > 200000) this.cache.clear();
    this.cache.set(sym, ids);
    return ids;
  }

  encode(text, splitRe) {
    const out = [];
    for (const m of text.matchAll(splitRe)) out.push(...this.word(bytesToTokenString(Buffer.from(m[0], "utf8"))));
    return out;
  }
}

export function verify(tj, nCases, log = console.error) {
  const bpe = new MergesBpe(tj);
  const splitRe = new RegExp(rustSemanticsJsPattern(tj.pre_tokenizer.pretokenizers[0].pattern.Regex), "gu");
  // 1. Every token alone.
  let bad = 0;
  for (const [s, id] of bpe.vocab) {
    const got = bpe.word(s);
    if (got.length !== 1 || got[0] !== id) { if (bad++ < 5) log(`token ${id} ${JSON.stringify(s)} -> ${got}`); }
    for (const ch of s) if (!UNICODE_TO_BYTE.has(ch)) throw new Error(`bad byte-level char in ${id}`);
  }
  // 2. Test strings against js-tiktoken (Rust-semantics regex, so both sides
  //    split identically; the split is not what is verified here).
  const ref = referenceEncoders();
  let badCases = 0;
  const cases = generateCases(nCases);
  const t0 = Date.now();
  let nTok = 0;
  for (const { text } of cases) {
    const want = ref.rust(text), got = bpe.encode(text, splitRe);
    nTok += want.length;
    if (want.length !== got.length || want.some((v, i) => v !== got[i])) {
      if (badCases++ < 5) log(`mismatch ${JSON.stringify(text).slice(0, 200)}\n  want ${want}\n  got  ${got}`);
    }
  }
  log(`verify: ${bpe.vocab.size} single tokens (${bad} bad), ${cases.length} cases / ${nTok} tokens ` +
    `(${badCases} mismatches) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return bad === 0 && badCases === 0;
}

// ---------------------------------------------------------------------------
function main(argv) {
  let out = null, mergesStrings = false, allSplits = false, pretty = false, nVerify = 3000;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--merges-strings") mergesStrings = true;
    else if (a === "--all-splits") allSplits = true;
    else if (a === "--pretty") pretty = true;
    else if (a === "--no-verify") nVerify = 0;
    else if (a === "--verify") nVerify = Number(argv[++i]);
    else if (!a.startsWith("--") && out === null) out = a;
    else { console.error(`build-tokenizer: unknown argument ${a}`); return 2; }
  }
  if (!out) {
    console.error("usage: node tools/npm-ref/build-tokenizer.mjs OUT.json [--merges-strings] [--all-splits] [--pretty] [--verify N | --no-verify]");
    return 2;
  }
  const tj = buildTokenizerJson({ mergesStrings, allSplits });
  if (nVerify > 0 && !verify(tj, nVerify)) { console.error("build-tokenizer: verification FAILED"); return 1; }
  fs.writeFileSync(out, JSON.stringify(tj, null, pretty ? 2 : undefined) + "\n");
  console.error(`build-tokenizer: wrote ${out}: ${Object.keys(tj.model.vocab).length} vocab, ` +
    `${tj.model.merges.length} merges, ${tj.added_tokens.length} added tokens`);
  return 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) process.exitCode = main(process.argv.slice(2));
