// o200k.mjs: shared parts of the independent o200k_harmony reference.
//
// Everything here comes from the npm package js-tiktoken (pinned in
// package.json) and from ../../../shared/docs/gpt-oss.md section 4.1; nothing
// is read from moeserve's C sources.  Used by build-tokenizer.mjs,
// gen-cases.mjs, bench-encode.mjs and tests/models/tokenizer_npm.mjs.

import { Tiktoken } from "js-tiktoken/lite";
import o200kBase from "js-tiktoken/ranks/o200k_base";

// ---------------------------------------------------------------------------
// Split regex (tiktoken `o200k_base._pat_str`, gpt-oss.md section 4.1), in
// Rust `regex`/`fancy_regex` syntax: this is what tiktoken runs and what goes
// into tokenizer.json's Split pre-tokenizer.
export const O200K_PATTERN_ALTERNATIVES = [
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  "\\p{N}{1,3}",
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*",
  "\\s*[\\r\\n]+",
  "\\s+(?!\\S)",
  "\\s+",
];
export const O200K_PATTERN = O200K_PATTERN_ALTERNATIVES.join("|");

export const N_BPE_TOKENS = 199998;     // ids 0..199997
export const VOCAB_SIZE = 201088;       // ids 0..201087

// ---------------------------------------------------------------------------
// Harmony special tokens 199998..201087 (gpt-oss.md section 4.1 table).
export const SPECIAL_TOKENS = (() => {
  const named = {
    199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>",
    200003: "<|constrain|>", 200005: "<|channel|>", 200006: "<|start|>",
    200007: "<|end|>", 200008: "<|message|>", 200012: "<|call|>",
    200018: "<|endofprompt|>",
  };
  const out = [];
  for (let id = N_BPE_TOKENS; id < VOCAB_SIZE; id++)
    out.push([id, named[id] ?? `<|reserved_${id}|>`]);
  return out;
})();

// ---------------------------------------------------------------------------
// GPT-2 byte <-> unicode mapping: bytes 33..126, 161..172, 174..255 map to
// themselves, the other 68 bytes to U+0100.. in increasing byte order.
export const BYTE_TO_UNICODE = (() => {
  const keep = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const out = new Array(256);
  let n = 0;
  for (let b = 0; b < 256; b++) out[b] = String.fromCharCode(keep(b) ? b : 256 + n++);
  return out;
})();
export const UNICODE_TO_BYTE = new Map(BYTE_TO_UNICODE.map((c, b) => [c, b]));

export function bytesToTokenString(bytes) {
  let s = "";
  for (const b of bytes) s += BYTE_TO_UNICODE[b];
  return s;
}

// ---------------------------------------------------------------------------
// Ranks: token bytes by rank, from js-tiktoken's compressed o200k_base table
// ("! <offset> <base64> <base64> ..." on one line).
let ranksCache = null;
export function loadRanks() {
  if (ranksCache) return ranksCache;
  const tokens = [];
  for (const line of o200kBase.bpe_ranks.split("\n")) {
    if (!line) continue;
    const [, offsetStr, ...b64] = line.split(" ");
    const offset = Number.parseInt(offsetStr, 10);
    b64.forEach((t, i) => { tokens[offset + i] = Buffer.from(t, "base64"); });
  }
  if (tokens.length !== N_BPE_TOKENS || tokens.some((t) => t === undefined))
    throw new Error(`o200k_base: expected ${N_BPE_TOKENS} contiguous ranks, got ${tokens.length}`);
  ranksCache = { tokens, jsPattern: o200kBase.pat_str, data: o200kBase };
  return ranksCache;
}

// ---------------------------------------------------------------------------
// Where js-tiktoken's JavaScript regex differs from tiktoken's Rust regex.
//
// js-tiktoken runs `pat_str` with `new RegExp(pat, "ug")`.  Its o200k pat_str
// spells (?i:'s|...) out as ('s|'S|'t|'T|'re|'rE|'Re|'RE|...) and uses JS
// `\s`.  findRegexDeviations() below finds the code points where that
// matters (class membership over every code point 0..0x10FFFF): U+0085,
// U+FEFF and U+017F; tests/models/tokenizer_npm.mjs keeps them, with the reasons,
// in its DEVIATIONS table and checks the scan at every run.  The fold
// closures of the contraction letters s t r e v m l d hold only their ASCII
// case pairs plus U+017F (U+212A KELVIN SIGN folds to 'k', which no
// contraction uses).
//
// Confirmed once, offline, piece by piece against the Rust tiktoken core (npm
// `tiktoken` 1.0.22, the WASM build of the Rust crate, given a vocabulary of
// every substring of the probe strings so that each regex piece comes back
// as one token), with 17 probe strings per code point 0..0x10FFFF:
// js-tiktoken's pieces differ from Rust's exactly at those three code points
// plus Unicode-version code points inside UNICODE_EXCLUDED; the pattern from
// rustSemanticsJsPattern() differs only at the Unicode-version ones.

// Unicode White_Space (PropList.txt, unchanged since Unicode 6.3): what Rust
// regex's \s is.
export const WHITE_SPACE = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680,
  0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
  0x2028, 0x2029, 0x202F, 0x205F, 0x3000];

// Letters of the (?i:...) contraction group and their case-fold closures as
// used by Rust regex (simple case folding), computed with JS /iu, which also
// canonicalizes by simple case folding.
function caseFoldClosure(letters) {
  const want = [...new Set(letters.toLowerCase())];
  const out = Object.fromEntries(want.map((l) => [l, []]));
  const any = new RegExp(`^[${want.join("")}]$`, "iu");
  const each = want.map((l) => [l, new RegExp(`^${l}$`, "iu")]);
  for (let cp = 0; cp <= 0x10FFFF; cp++) {
    if (cp === 0xD800) cp = 0xE000;
    const s = String.fromCodePoint(cp);
    if (!any.test(s)) continue;
    for (const [l, re] of each) if (re.test(s)) out[l].push(cp);
  }
  return out;
}

// Translate the Rust-syntax pattern into a JS /u pattern with Rust's meaning:
// \s -> \p{White_Space}, \S -> \P{White_Space}, (?i:X) -> (?:X') with every
// letter of X replaced by its case-fold class.
export function rustSemanticsJsPattern(pattern = O200K_PATTERN) {
  if (pattern.includes("\\\\")) throw new Error("pattern with escaped backslash not supported");
  let out = pattern.replace(/\(\?i:([^()]*)\)/g, (_, body) => {
    const fold = caseFoldClosure(body.replace(/[^A-Za-z]/g, ""));
    const cls = (ch) => {
      const l = ch.toLowerCase();
      if (!fold[l]) return ch;
      return "[" + fold[l].map((cp) => `\\u{${cp.toString(16)}}`).join("") + "]";
    };
    return "(?:" + [...body].map(cls).join("") + ")";
  });
  out = out.replace(/\\s/g, "\\p{White_Space}").replace(/\\S/g, "\\P{White_Space}");
  if (/\(\?[a-z]/.test(out)) throw new Error("untranslated inline flag in pattern");
  return out;
}

// Class-membership scan over all code points: JS \s versus White_Space, and
// js-tiktoken's ASCII-only contraction letters versus case-fold closures.
// Returns [{cp, why}]; tests compare it with DEVIATIONS.
export function findRegexDeviations() {
  const ws = new Set(WHITE_SPACE);
  const jsS = /^\s$/u;
  const found = [];
  for (let cp = 0; cp <= 0x10FFFF; cp++) {
    if (cp === 0xD800) cp = 0xE000;
    const a = jsS.test(String.fromCodePoint(cp)), b = ws.has(cp);
    if (a !== b) found.push({ cp, why: a ? "in JS \\s, not White_Space" : "White_Space, not in JS \\s" });
  }
  const fold = caseFoldClosure("strevmld");
  for (const [l, cps] of Object.entries(fold))
    for (const cp of cps)
      if (cp !== l.charCodeAt(0) && cp !== l.toUpperCase().charCodeAt(0))
        found.push({ cp, why: `case-folds to '${l}' (Rust (?i:) matches it; js-tiktoken's pattern does not)` });
  return found.sort((x, y) => x.cp - y.cp);
}

// ---------------------------------------------------------------------------
// Unicode versions.  moeserve's C side uses Debian 12's PCRE2 10.42 (Unicode
// 14.0); tiktoken's Rust regex uses the Unicode of its regex-syntax build
// (the npm WASM build 1.0.22 behaves as Unicode 16.0); Node 20.20's ICU 78
// is Unicode 17.0.  These are the code points whose General_Category differs
// between Unicode 14.0 (Debian 12 python3.11 unicodedata, 14.0.0) and
// Unicode 17.0 (Node's \p{gc=..}): 110 ranges unassigned in 14.0 and
// assigned later (15.0: e.g. CJK Ext H 31350-323AF, Kawi 11F00-11F5F, Nag
// Mundari 1E4D0-1E4FF, Kaktovik 1D2C0-1D2DF, Cyrillic Ext-D 1E030-1E08F,
// Devanagari Ext-A 11B00-11B5F, Arabic Ext-C 10EC0-10EFF; 15.1, 16.0, 17.0
// additions), plus U+0295 (Ll in 14.0..16.0, Lo in 17.0) and U+1171E (Mn ->
// Mc, harmless).  Test strings never contain them; a case that does is not
// compared.  Regenerate with `node tools/npm-ref/gen-cases.mjs --unicode-diff`.
export const UNICODE_EXCLUDED_VERSION = "17.0";
export const UNICODE_EXCLUDED = [
  [0x295, 0x295], [0x88F, 0x88F], [0x897, 0x897], [0xC5C, 0xC5C], [0xCDC, 0xCDC], [0xCF3, 0xCF3],
  [0xECE, 0xECE], [0x1ACF, 0x1ADD], [0x1AE0, 0x1AEB], [0x1B4E, 0x1B4F], [0x1B7F, 0x1B7F],
  [0x1C89, 0x1C8A], [0x20C1, 0x20C1], [0x2427, 0x2429], [0x2B96, 0x2B96], [0x2FFC, 0x2FFF],
  [0x31E4, 0x31E5], [0x31EF, 0x31EF], [0xA7CB, 0xA7CF], [0xA7D2, 0xA7D2], [0xA7D4, 0xA7D4],
  [0xA7DA, 0xA7DC], [0xA7F1, 0xA7F1], [0xFBC3, 0xFBD2], [0xFD90, 0xFD91], [0xFDC8, 0xFDCE],
  [0x105C0, 0x105F3], [0x10940, 0x10959], [0x10D40, 0x10D65], [0x10D69, 0x10D85],
  [0x10D8E, 0x10D8F], [0x10EC2, 0x10EC7], [0x10ED0, 0x10ED8], [0x10EFA, 0x10EFF],
  [0x1123F, 0x11241], [0x11380, 0x11389], [0x1138B, 0x1138B], [0x1138E, 0x1138E],
  [0x11390, 0x113B5], [0x113B7, 0x113C0], [0x113C2, 0x113C2], [0x113C5, 0x113C5],
  [0x113C7, 0x113CA], [0x113CC, 0x113D5], [0x113D7, 0x113D8], [0x113E1, 0x113E2],
  [0x116D0, 0x116E3], [0x1171E, 0x1171E], [0x11B00, 0x11B09], [0x11B60, 0x11B67],
  [0x11BC0, 0x11BE1], [0x11BF0, 0x11BF9], [0x11DB0, 0x11DDB], [0x11DE0, 0x11DE9],
  [0x11F00, 0x11F10], [0x11F12, 0x11F3A], [0x11F3E, 0x11F5A], [0x1342F, 0x1342F],
  [0x13439, 0x13455], [0x13460, 0x143FA], [0x16100, 0x16139], [0x16D40, 0x16D79],
  [0x16EA0, 0x16EB8], [0x16EBB, 0x16ED3], [0x16FF2, 0x16FF6], [0x187F8, 0x187FF],
  [0x18CFF, 0x18CFF], [0x18D09, 0x18D1E], [0x18D80, 0x18DF2], [0x1B132, 0x1B132],
  [0x1B155, 0x1B155], [0x1CC00, 0x1CCFC], [0x1CD00, 0x1CEB3], [0x1CEBA, 0x1CED0],
  [0x1CEE0, 0x1CEF0], [0x1D2C0, 0x1D2D3], [0x1DF25, 0x1DF2A], [0x1E030, 0x1E06D],
  [0x1E08F, 0x1E08F], [0x1E4D0, 0x1E4F9], [0x1E5D0, 0x1E5FA], [0x1E5FF, 0x1E5FF],
  [0x1E6C0, 0x1E6DE], [0x1E6E0, 0x1E6F5], [0x1E6FE, 0x1E6FF], [0x1F6D8, 0x1F6D8],
  [0x1F6DC, 0x1F6DC], [0x1F774, 0x1F77F], [0x1F7D9, 0x1F7D9], [0x1F8B2, 0x1F8BB],
  [0x1F8C0, 0x1F8C1], [0x1F8D0, 0x1F8D8], [0x1FA54, 0x1FA57], [0x1FA75, 0x1FA77],
  [0x1FA87, 0x1FA8A], [0x1FA8E, 0x1FA8F], [0x1FAAD, 0x1FAAF], [0x1FABB, 0x1FABF],
  [0x1FAC6, 0x1FAC6], [0x1FAC8, 0x1FAC8], [0x1FACD, 0x1FACF], [0x1FADA, 0x1FADC],
  [0x1FADF, 0x1FADF], [0x1FAE8, 0x1FAEA], [0x1FAEF, 0x1FAEF], [0x1FAF7, 0x1FAF8],
  [0x1FBCB, 0x1FBEF], [0x1FBFA, 0x1FBFA], [0x2B739, 0x2B73F], [0x2CEA2, 0x2CEAD],
  [0x2EBF0, 0x2EE5D], [0x31350, 0x33479],
];

export function isExcludedCodePoint(cp) {
  let lo = 0, hi = UNICODE_EXCLUDED.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1, [a, b] = UNICODE_EXCLUDED[mid];
    if (cp < a) hi = mid - 1; else if (cp > b) lo = mid + 1; else return true;
  }
  return false;
}

export function firstExcludedCodePoint(text) {
  for (const ch of text) {
    const cp = ch.codePointAt(0);
    if (cp > 0x294 && isExcludedCodePoint(cp)) return cp;
  }
  return -1;
}

export function unicodeVersionWarning() {
  const v = process.versions.unicode ?? "?";
  const [maj, min] = v.split(".").map(Number);
  const [emaj, emin] = UNICODE_EXCLUDED_VERSION.split(".").map(Number);
  if (!(maj < emaj || (maj === emaj && min <= emin)))
    return `warning: Node's Unicode ${v} is newer than ${UNICODE_EXCLUDED_VERSION}, the version UNICODE_EXCLUDED was computed for; ` +
      "regenerate it with `node tools/npm-ref/gen-cases.mjs --unicode-diff`";
  return null;
}

// ---------------------------------------------------------------------------
// Reference encoders.  `plain` is js-tiktoken's own o200k_base (its JS
// regex); `rust` is the same ranks with rustSemanticsJsPattern(), i.e.
// tiktoken's (Rust) behaviour.  Both encode ordinarily: text that looks like a
// special token is ordinary text.
export function referenceEncoders() {
  const { data } = loadRanks();
  const plain = new Tiktoken(data);
  // (special_tokens stay as in the table: an empty list would make js-tiktoken's
  // special-token scan match "" at every position.)
  const rust = new Tiktoken({ ...data, pat_str: rustSemanticsJsPattern() });
  const ordinary = (enc) => (text) => enc.encode(text, [], []);
  return { plain: ordinary(plain), rust: ordinary(rust), decode: (ids) => plain.decode(ids) };
}
