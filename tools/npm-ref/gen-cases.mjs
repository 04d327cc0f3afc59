// gen-cases.mjs: deterministic tokenizer test strings for tests/models/tokenizer_npm.mjs.
//
//   node tools/npm-ref/gen-cases.mjs [N] [--seed S] [--with-category]
//       N (default 12000) cases, one JSON string per line on stdout
//       (--with-category: one {"cat":..,"text":..} object per line instead).
//   node tools/npm-ref/gen-cases.mjs --big [--big-bytes B] [--seed S]
//       one JSON string of B (default 1000000) UTF-8 bytes with no white
//       space at all (no Unicode White_Space, no U+FEFF), for benchmarks.
//   node tools/npm-ref/gen-cases.mjs --unicode-diff
//       recompute UNICODE_EXCLUDED (o200k.mjs): code points whose General
//       Category differs between /usr/bin/python3's unicodedata (Debian 12:
//       Unicode 14.0.0, what PCRE2 10.42 has) and this Node's ICU.
//
// Case i depends only on (seed, i): the first k cases are the same for every
// N >= k.  Every case is valid Unicode (no surrogates), under 20 KB of UTF-8,
// and contains no code point of UNICODE_EXCLUDED.  Random code points also
// skip noncharacters.  Node's Unicode version does not change the output.

import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { UNICODE_EXCLUDED, isExcludedCodePoint } from "./o200k.mjs";

export const DEFAULT_SEED = 20250805;
export const DEFAULT_N = 12000;
export const MAX_CASE_BYTES = 20000;

// ---------------------------------------------------------------------------
// PRNG: splitmix32 stream per case, seeded from (seed, case index).
function splitmix32(a) {
  return () => {
    a = (a + 0x9e3779b9) | 0;
    let t = a ^ (a >>> 16);
    t = Math.imul(t, 0x21f0aaad);
    t ^= t >>> 15;
    t = Math.imul(t, 0x735a2d97);
    return ((t ^ (t >>> 15)) >>> 0) / 4294967296;
  };
}

class Rng {
  constructor(seed, index) {
    const mix = splitmix32((seed ^ Math.imul(index + 1, 0x85ebca6b)) | 0);
    mix(); mix();
    this.next = splitmix32((mix() * 4294967296) | 0);
  }
  float() { return this.next(); }
  int(n) { return Math.floor(this.next() * n); }           // 0..n-1
  range(lo, hi) { return lo + this.int(hi - lo + 1); }       // lo..hi
  chance(p) { return this.next() < p; }
  pick(a) { return a[this.int(a.length)]; }
  // Skewed towards small values: lengths, repeat counts.
  small(max) { return 1 + Math.floor(max * this.next() * this.next()); }
}

// ---------------------------------------------------------------------------
// Code points.
const isSurrogate = (cp) => cp >= 0xD800 && cp <= 0xDFFF;
const isNonchar = (cp) => (cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) === 0xFFFE;
const usable = (cp) => !isSurrogate(cp) && !isNonchar(cp) && !isExcludedCodePoint(cp);

function cpFrom(r, ranges) {
  for (;;) {
    const [lo, hi] = r.pick(ranges);
    const cp = r.range(lo, hi);
    if (usable(cp)) return String.fromCodePoint(cp);
  }
}

// Any plane.  Weighted towards the BMP and plane 1, where most assigned
// characters are; planes 3..13 are almost all unassigned (Cn), 14 holds tags
// and variation selectors, 15-16 private use.
function randomCodePoint(r) {
  const x = r.float();
  let lo, hi;
  if (x < 0.45) [lo, hi] = [0x0000, 0xFFFF];
  else if (x < 0.55) [lo, hi] = [0x0080, 0x07FF];            // 2-byte UTF-8
  else if (x < 0.75) [lo, hi] = [0x10000, 0x1FFFF];
  else if (x < 0.83) [lo, hi] = [0x20000, 0x2FFFF];
  else if (x < 0.86) [lo, hi] = [0x30000, 0x3FFFF];
  else if (x < 0.92) [lo, hi] = [0xE0000, 0xE01FF];
  else if (x < 0.95) [lo, hi] = [0x40000, 0xDFFFF];
  else [lo, hi] = [0xF0000, 0x10FFFF];
  return cpFrom(r, [[lo, hi]]);
}

const RANGES = {
  latin: [[0x41, 0x5A], [0x61, 0x7A], [0xC0, 0xFF], [0x100, 0x17F], [0x180, 0x24F], [0x1E00, 0x1EFF]],
  greek: [[0x391, 0x3A9], [0x3B1, 0x3C9], [0x386, 0x3CE], [0x1F00, 0x1FFC]],
  cyrillic: [[0x410, 0x44F], [0x400, 0x40F], [0x450, 0x45F], [0x460, 0x52F]],
  arabic: [[0x621, 0x64A], [0x64B, 0x652], [0x660, 0x669], [0x671, 0x6D3], [0x750, 0x77F]],
  hebrew: [[0x5D0, 0x5EA], [0x591, 0x5C7], [0xFB1D, 0xFB4F]],
  devanagari: [[0x904, 0x939], [0x93C, 0x94D], [0x958, 0x96F], [0x971, 0x97F]],
  thai: [[0xE01, 0xE30], [0xE31, 0xE3A], [0xE40, 0xE4E], [0xE50, 0xE59]],
  cjk: [[0x4E00, 0x9FFF], [0x3400, 0x4DBF], [0x20000, 0x2A6DF], [0xF900, 0xFAFF], [0x30000, 0x3134A]],
  hangul: [[0xAC00, 0xD7A3], [0x1100, 0x11FF], [0x3131, 0x318E]],
  kana: [[0x3041, 0x3096], [0x30A1, 0x30FA], [0x30FC, 0x30FF], [0xFF66, 0xFF9D], [0x31F0, 0x31FF]],
};

const WORDS = {
  latin: ["café", "naïve", "résumé", "façade", "jalapeño", "Ångström", "Übermaß", "straße", "Łódź",
    "Kraków", "Dvořák", "Škoda", "İstanbul", "ılık", "São", "Paulo", "Ærøskøbing", "œuvre", "Đà", "Nẵng",
    "Việt", "Nguyễn", "Şişli", "Ćevapi", "fjörður", "Þórshöfn", "the", "quick", "brown", "fox", "jumps",
    "over", "lazy", "dog", "Hello", "WORLD", "McDonald", "iPhone", "eBay", "CamelCaseWord", "snake_case",
    "ALLCAPS", "x", "I", "a", "ǅemal", "ǈubljana", "ǋegoš", "Ÿ", "ŒUVRE", "e\u0301te\u0301", "n\u0303o"],
  greek: ["Καλημέρα", "κόσμε", "Ελληνικά", "ΑΘΗΝΑ", "φιλοσοφία", "ψυχή", "Ωμέγα", "ἀρχή", "ῥήτωρ",
    "σοφός", "ΣΊΣΥΦΟΣ", "ᾅδης", "ϐϑϒ"],
  cyrillic: ["Привет", "мир", "Москва", "ЁЛКА", "щётка", "Україна", "їжак", "Ђорђе", "Љубљана",
    "съешь", "ещё", "этих", "мягких", "французских", "булок", "ПРИВЕТ", "ҚАЗАҚСТАН", "ӧӱ"],
  arabic: ["مرحبا", "بالعالم", "اللغة", "العربية", "كتاب", "مُحَمَّد", "القُرْآن", "٣٤٥", "سلام",
    "عليكم", "فارسی", "اردو", "ﷺ", "ﻻ"],
  hebrew: ["שלום", "עולם", "עברית", "ירושלים", "סֵפֶר", "בְּרֵאשִׁית", "תל־אביב", "ﬠ", "יִשְׂרָאֵל"],
  devanagari: ["नमस्ते", "दुनिया", "हिन्दी", "भाषा", "क्षत्रिय", "श्री", "संस्कृतम्", "१२३", "ज़िंदगी", "ॐ"],
  thai: ["สวัสดี", "ชาวโลก", "ภาษาไทย", "กรุงเทพมหานคร", "ขอบคุณ", "๑๒๓", "ฯลฯ", "น้ำ"],
  cjk: ["你好", "世界", "中文", "汉字", "漢字", "東京", "北京大学", "人工智能", "机器学习", "鬱", "𠀀",
    "𪚥", "𰻞𰻞面", "龘", "〇", "々"],
  hangul: ["안녕하세요", "세계", "한국어", "서울", "대한민국", "ㄱㄴㄷ", "훈민정음", "\u1112\u1161\u11ab",
    "똠얌꿍"],
  kana: ["こんにちは", "ひらがな", "カタカナ", "ｶﾀｶﾅ", "ーー", "きゃ", "ヴァイオリン", "東京タワー", "ゔ",
    "ㇰㇱ", "ゟ", "ヿ"],
};
const SCRIPT_PUNCT = {
  latin: [" ", " ", " ", ", ", ". ", "! ", "? ", "; ", ": ", " – ", " — ", "…", "«", "»", "¿", "¡"],
  greek: [" ", " ", ", ", ". ", ";", "·"],
  cyrillic: [" ", " ", ", ", ". ", "! ", " — ", "«", "»"],
  arabic: [" ", " ", "، ", "؛ ", "؟", ". ", "ـ"],
  hebrew: [" ", " ", ", ", ". ", "״", "׳", "־"],
  devanagari: [" ", " ", "। ", "॥ ", ", "],
  thai: ["", "", " ", "ๆ", "ฯ"],
  cjk: ["", "", "，", "。", "、", "！", "？", "「", "」", "・", " "],
  hangul: [" ", " ", ", ", ". ", "?"],
  kana: ["", "", "、", "。", "・", "「", "」", "！"],
};
const CASED = new Set(["latin", "greek", "cyrillic"]);

function scriptWord(r, script) {
  if (r.chance(0.6)) {
    let w = r.pick(WORDS[script]);
    if (CASED.has(script)) {
      const c = r.int(6);
      if (c === 0) w = w.toUpperCase();
      else if (c === 1) w = w.toLowerCase();
      else if (c === 2) w = w[0].toUpperCase() + w.slice(1).toLowerCase();
    }
    return w;
  }
  let w = "";
  for (let i = r.small(9); i > 0; i--) w += cpFrom(r, RANGES[script]);
  return w;
}

function scriptText(r, script, maxWords = 40) {
  let s = "";
  for (let n = r.small(maxWords); n > 0; n--) s += scriptWord(r, script) + r.pick(SCRIPT_PUNCT[script]);
  if (r.chance(0.3)) s = s.normalize(r.pick(["NFC", "NFD", "NFKC", "NFKD"]));
  return s;
}

// ---------------------------------------------------------------------------
// Emoji.
const EMOJI_BASIC = ["😀", "😂", "🤖", "🚀", "❤", "✨", "👍", "🎉", "🔥", "☕", "🍕", "🍣", "🦀", "🐍",
  "🌍", "⭐", "✅", "❌", "⚠", "☺", "✌", "☝", "♻", "™", "©", "®", "🆗", "🈯", "🀄", "🃏", "⌚", "⏩"];
const EMOJI_ZWJ = [
  "\u{1F468}\u200D\u{1F469}\u200D\u{1F467}\u200D\u{1F466}", "\u{1F469}\u200D\u{1F4BB}",
  "\u{1F9D1}\u200D\u{1F680}", "\u{1F3F3}\uFE0F\u200D\u{1F308}", "\u{1F3F3}\uFE0F\u200D\u26A7\uFE0F",
  "\u{1F441}\uFE0F\u200D\u{1F5E8}\uFE0F", "\u2764\uFE0F\u200D\u{1F525}", "\u{1F415}\u200D\u{1F9BA}",
  "\u{1F469}\u200D\u2764\uFE0F\u200D\u{1F48B}\u200D\u{1F468}", "\u{1F43B}\u200D\u2744\uFE0F",
  "\u{1F9D1}\u{1F3FD}\u200D\u{1F91D}\u200D\u{1F9D1}\u{1F3FB}",
];
const SKIN_BASES = ["\u{1F44D}", "\u{1F44B}", "\u{1F9D1}", "\u{1F469}", "\u{1F64F}", "\u270C", "\u{1F476}"];
const TAG_FLAG = "\u{1F3F4}\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F}";

function emojiOne(r) {
  switch (r.int(8)) {
    case 0: return r.pick(EMOJI_BASIC);
    case 1: return r.pick(EMOJI_ZWJ);
    case 2: return r.pick(SKIN_BASES) + String.fromCodePoint(r.range(0x1F3FB, 0x1F3FF)) +
      (r.chance(0.3) ? "\u200D" + r.pick(["\u{1F4BB}", "\u{1F527}", "\u{1F52C}", "\u2695\uFE0F"]) : "");
    case 3: {                                     // flags, sometimes unpaired
      let s = "";
      for (let n = r.chance(0.2) ? 1 : 2; n > 0; n--) s += String.fromCodePoint(r.range(0x1F1E6, 0x1F1FF));
      return s;
    }
    case 4: return r.pick(EMOJI_BASIC) + r.pick(["\uFE0F", "\uFE0E", "\uFE0F\uFE0F"]);
    case 5: return r.pick("0123456789#*") + r.pick(["\uFE0F\u20E3", "\u20E3"]);
    case 6: return TAG_FLAG;
    default: return cpFrom(r, [[0x1F300, 0x1F5FF], [0x1F600, 0x1F64F], [0x1F680, 0x1F6FF],
      [0x1F900, 0x1F9FF], [0x2600, 0x27BF], [0x1FA70, 0x1FAFF]]);
  }
}

function emojiText(r) {
  let s = "";
  for (let n = r.small(30); n > 0; n--) {
    const k = r.int(4);
    if (k === 0) s += scriptWord(r, "latin") + " ";
    else if (k === 1) s += emojiOne(r);
    else if (k === 2) s += " " + emojiOne(r) + emojiOne(r);
    else s += emojiOne(r) + r.pick(["", " ", "!", ".", "\n", "a", "1", "'s"]);
  }
  return s;
}

// ---------------------------------------------------------------------------
// Combining marks.
const MARKS = [[0x300, 0x36F], [0x483, 0x489], [0x591, 0x5BD], [0x64B, 0x65F], [0x93C, 0x93C],
  [0x94D, 0x94D], [0x1AB0, 0x1ACE], [0x1DC0, 0x1DFF], [0x20D0, 0x20F0], [0xFE20, 0xFE2F],
  [0x302A, 0x302F], [0x3099, 0x309A], [0xE0100, 0xE01EF], [0x0E31, 0x0E31], [0x0E34, 0x0E3A],
  [0x1D165, 0x1D169], [0x16AF0, 0x16AF4], [0x0903, 0x0903]];
const MARK_BASES = ["a", "e", "o", "A", "Z", "ß", "ı", "i", "1", "9", " ", ".", "'", "-", "\n", "\t", "α",
  "Ж", "ب", "ש", "क", "ก", "中", "한", "か", "😀", "_", "", "\u00A0", "'s"];

function marks(r, n) {
  let s = "";
  for (; n > 0; n--) s += cpFrom(r, MARKS);
  return s;
}

function combiningText(r) {
  let s = r.chance(0.2) ? marks(r, r.small(4)) : "";       // marks at string start
  for (let n = r.small(25); n > 0; n--) {
    s += r.pick(MARK_BASES) + marks(r, r.chance(0.2) ? r.range(5, 30) : r.small(4));
    if (r.chance(0.3)) s += r.pick([" ", "", "x", "Y", "z'", "\n"]);
  }
  return s;
}

// ---------------------------------------------------------------------------
// Code.
const IDENTS = ["i", "j", "n", "len", "buf", "ctx", "tokenizer", "merge_rank", "MAX_LEN", "kvCache",
  "_private", "__init__", "x1", "data2", "HTTPServer", "größe", "π", "变量", "userId", "tmp_0"];
const id = (r) => r.pick(IDENTS);
const num = (r) => r.pick([String(r.int(10)), String(r.int(1000)), String(r.int(1 << 30)),
  (r.float() * 1000).toFixed(r.int(6)), "0x" + r.int(1 << 24).toString(16), "1e-" + r.int(40), "-" + r.int(99)]);

function indent(r) {
  return r.pick([["\t", 1], ["  ", 1], ["    ", 1], ["        ", 1], ["\t\t", 1], [" \t", 1]])[0];
}

function codeC(r) {
  const ind = indent(r), nl = r.chance(0.15) ? "\r\n" : "\n";
  const lines = ["#include <stdio.h>", `#include "${id(r)}.h"`, "",
    `static int ${id(r)}(const char *${id(r)}, size_t ${id(r)}) {`];
  for (let n = r.small(12); n > 0; n--) {
    const d = ind.repeat(r.range(1, 4));
    lines.push(r.pick([
      `${d}for (int i = 0; i < ${num(r)}; i++) {`,
      `${d}if (${id(r)} != NULL && ${id(r)}->${id(r)} >= ${num(r)}) return -${r.int(30)};`,
      `${d}printf("%d: %s\\n", ${id(r)}, ${id(r)});`,
      `${d}${id(r)} += ${id(r)}[${num(r)}] << ${r.int(32)};`,
      `${d}/* ${scriptText(r, "latin", 6)} */`,
      `${d}// TODO(${id(r)}): fix   ${r.pick(["", "  ", "\t"])}`,
      `${d}}`, "", `${d}char s[] = "tab\\there \\"quoted\\" ${r.pick(["é", "中", "😀"])}";`,
      `${d}x = a->b ? c : d; y = ~z & 0xff | (w ^ 1);`,
    ]) + (r.chance(0.1) ? r.pick([" ", "\t", "  "]) : ""));
  }
  lines.push(`${ind}return ${num(r)};`, "}", "");
  return lines.join(nl);
}

function codePython(r) {
  const ind = r.pick(["    ", "  ", "\t"]);
  const lines = [`import ${id(r)}`, `from ${id(r)}.${id(r)} import ${id(r)} as ${id(r)}`, "", "",
    `@${id(r)}(${num(r)})`, `def ${id(r)}(self, ${id(r)}: int = ${num(r)}, *args, **kwargs) -> dict:`,
    `${ind}"""${scriptText(r, "latin", 8)}"""`];
  for (let n = r.small(12); n > 0; n--) {
    const d = ind.repeat(r.range(1, 3));
    lines.push(r.pick([
      `${d}for ${id(r)} in range(${num(r)}):`, `${d}if ${id(r)} is not None and ${id(r)} >= ${num(r)}:`,
      `${d}return {"${id(r)}": ${num(r)}, '${id(r)}': [${num(r)}, ${num(r)}]}`,
      `${d}print(f"{${id(r)}!r:>10} {${id(r)}:.3f}")`, `${d}# ${scriptText(r, r.pick(["latin", "cjk", "cyrillic"]), 5)}`,
      `${d}${id(r)} = lambda x: x ** 2 // 3 % 7`, "", `${d}except (ValueError, KeyError) as e:`,
      `${d}yield from ${id(r)}[::-1]`, `${d}s = '''it's "quoted"\\n'''`, `${d}pass${r.pick(["", "  ", "\t"])}`,
    ]));
  }
  return lines.join("\n") + "\n";
}

function jsonValue(r, depth) {
  const k = r.int(depth > 3 ? 5 : 8);
  if (k === 0) return r.int(2) === 0;
  if (k === 1) return null;
  if (k === 2) return r.chance(0.5) ? r.int(100000) - 50000 : Number((r.float() * 1e6).toPrecision(r.range(1, 15)));
  if (k === 3 || k === 4) return r.chance(0.5) ? scriptWord(r, r.pick(Object.keys(WORDS))) : scriptText(r, "latin", 5);
  if (k === 5 || k === 6) {
    const o = {};
    for (let n = r.int(6); n > 0; n--) o[r.chance(0.7) ? id(r) : scriptWord(r, r.pick(Object.keys(WORDS)))] = jsonValue(r, depth + 1);
    return o;
  }
  return Array.from({ length: r.int(5) }, () => jsonValue(r, depth + 1));
}

function codeJson(r) {
  const s = JSON.stringify({ [id(r)]: jsonValue(r, 0), [id(r)]: jsonValue(r, 0) }, null, r.pick([0, 1, 2, 4, "\t"]));
  // Sometimes ASCII-escaped, as many JSON writers do.
  return r.chance(0.3) ? s.replace(/[^\x00-\x7f]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")) : s;
}

function codeShell(r) {
  const lines = ["#!/bin/sh", "set -eu"];
  for (let n = r.small(10); n > 0; n--) {
    lines.push(r.pick([
      `for f in *.txt; do`, `\tgrep -n "${id(r)}" "$f" | awk '{print $1}' >> out.log 2>&1`, `done`,
      `export ${id(r).toUpperCase()}="\${HOME:-/root}/.cache/${id(r)}"`, `[ -d "$dir" ] && cd "$dir" || exit ${r.int(3)}`,
      `cat <<'EOF'\n${scriptText(r, "latin", 5)}\nEOF`, `echo $((${num(r)} + ${r.int(9)})) | tee -a /tmp/${id(r)}.txt`,
      `find . -name '*.c' -print0 | xargs -0 wc -l`, `  ls -la /usr/local/bin/ 2>/dev/null    # list`,
      `curl -fsSL "https://example.com/${id(r)}?q=${num(r)}&x=y" -o -`, `case "$1" in -h|--help) usage ;; esac`,
    ]));
  }
  return lines.join("\n") + (r.chance(0.5) ? "\n" : "");
}

// ---------------------------------------------------------------------------
// Numbers: case k of this category has a digit run of length 1 + k % 40.
const DIGIT_SETS = [[0x30, 0x39], [0x660, 0x669], [0x6F0, 0x6F9], [0x966, 0x96F], [0xE50, 0xE59],
  [0xFF10, 0xFF19], [0x1D7CE, 0x1D7FF], [0x1040, 0x1049]];
const NUMBERISH = ["²", "³", "¹", "½", "¾", "⅓", "Ⅻ", "ⅷ", "①", "⑳", "〇", "〡", "𐄇", "߁", "₃", "⁴"];

function digitRun(r, len) {
  const set = r.chance(0.75) ? DIGIT_SETS[0] : r.pick(DIGIT_SETS);
  let s = "";
  for (let i = 0; i < len; i++) s += String.fromCodePoint(r.range(set[0], set[1]));
  return s;
}

function numbersText(r, k) {
  const len = 1 + (k % 40);
  const d = digitRun(r, len);
  const forms = [
    () => d, () => " " + d, () => d + " ", () => "abc" + d + "xyz", () => "X" + d, () => d + "px",
    () => "$" + d + ".99", () => "-" + d, () => "+" + d + "e-" + r.int(30), () => d + "," + digitRun(r, 3) + "," + digitRun(r, 3),
    () => d + "." + digitRun(r, r.small(10)), () => "v" + d + "." + r.int(20) + "." + r.int(20) + "-rc" + r.int(9),
    () => "0x" + d, () => "(" + d + ")", () => d + "%", () => d + "'s", () => d + "th", () => "№" + d,
    () => d.split("").join(r.pick([" ", ",", ".", "_", "\u00A0", "\u202F", "'"])),
    () => "192.168." + r.int(256) + "." + r.int(256) + ":" + d, () => "2024-06-" + d + "T12:00:00Z",
    () => r.pick(NUMBERISH) + d + r.pick(NUMBERISH), () => d + "\n" + d, () => "ab" + d + "cd" + digitRun(r, r.small(40)) + "ef",
  ];
  let s = r.pick(forms)();
  if (r.chance(0.3)) s = scriptWord(r, "latin") + " " + s + r.pick([".", "!", " ok", "\n"]);
  return s;
}

// ---------------------------------------------------------------------------
// Whitespace.
export const SPACE_KINDS = [" ", "\t", "\n", "\r", "\r\n", "\n\n\n", "\u000B", "\u000C", "\u0085",
  "\u00A0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005", "\u2006", "\u2007",
  "\u2008", "\u2009", "\u200A", "\u2028", "\u2029", "\u202F", "\u205F", "\u3000"];
// Not White_Space, but easy to mistake for it.
const SPACE_LOOKALIKES = ["\u200B", "\u180E", "\uFEFF", "\u2060", "\u00AD", "\u001C", "\u001D", "\u001E",
  "\u001F", "\u200C", "\u200D", "\u0000", "\u007F"];

function wsRun(r) {
  let s = "";
  for (let n = r.small(12); n > 0; n--) s += r.chance(0.92) ? r.pick(SPACE_KINDS) : r.pick(SPACE_LOOKALIKES);
  if (r.chance(0.2)) s = s.repeat(r.range(2, 6));
  return s;
}

function whitespaceText(r) {
  let s = r.chance(0.5) ? wsRun(r) : "";
  for (let n = r.small(20); n > 0; n--) {
    s += r.pick(["a", "word", "Hi", "x.", "!", "1", "中", "é", "'s", "-", "//", "/", ""]) + wsRun(r);
  }
  return s;
}

// ---------------------------------------------------------------------------
// Contractions.
const CONTRACTION_SUFFIX = ["s", "t", "re", "ve", "m", "ll", "d"];
function randomCase(r, s) {
  return [...s].map((c) => (r.chance(0.5) ? c.toUpperCase() : c.toLowerCase())).join("");
}

function contractionText(r) {
  let s = "";
  for (let n = r.small(16); n > 0; n--) {
    const pre = r.pick(["it", "IT", "we", "WE", "You", "they", "THEY", "don", "DON", "can", "I", "i", "she",
      "Ünal", "Κώστα", "Петя", "中", "90", "x", "", " ", "!", "''", "ab'cd", "o", "ǅ", "ʼ"]);
    const apos = r.pick(["'", "'", "'", "\u2019", "\u2018", "\u02BC", "`", "''"]);
    let suf = r.chance(0.85) ? randomCase(r, r.pick(CONTRACTION_SUFFIX)) : r.pick(["x", "sx", "lld", "S", "ſ", "\u212A", "K", "ss", "tt"]);
    if (r.chance(0.15)) suf += r.pick(["a", "s", "Z", "1", "é", "'s", "\u0301"]);
    s += pre + apos + suf + r.pick([" ", " ", "", ".", ",", "\n", "?"]);
  }
  return s;
}

// ---------------------------------------------------------------------------
// URLs and paths.
function urlText(r) {
  const host = () => r.pick(["www.example.com", "localhost:8080", "a.b.c.d", "xn--fsq.com", "例子.测试",
    "[::1]", "192.0.2.1", "münchen.de", "user:pass@host.io"]);
  const seg = () => r.pick(["path", "a", "b", "index.html", "v1", "api", "%E4%B8%AD", "~user", "file.tar.gz",
    "路径", "😀", String(r.int(1000)), "", "."]);
  const one = () => {
    switch (r.int(7)) {
      case 0: return `${r.pick(["https", "http", "ftp", "ws"])}://${host()}/${Array.from({ length: r.int(6) }, seg).join("/")}` +
        (r.chance(0.5) ? `?${id(r)}=${num(r)}&${id(r)}=${scriptWord(r, "latin")}` : "") + (r.chance(0.3) ? "#frag" : "");
      case 1: return `mailto:${id(r)}@${host()}`;
      case 2: return `file:///C:/Users/${id(r)}/Desktop/${seg()}`;
      case 3: return "/" + Array.from({ length: r.small(8) }, seg).join("/") + r.pick(["", "/", "//", "/\n", "//\n\n", "/\r\n"]);
      case 4: return "C:\\Windows\\System32\\" + seg();
      case 5: return `<https://${host()}/${seg()}>` + r.pick([".", ",", ")", "\n", "/\n/"]);
      default: return `(see ${r.pick(["http", "https"])}://${host()}/${seg()}/).`;
    }
  };
  let s = "";
  for (let n = r.small(6); n > 0; n--) s += one() + r.pick([" ", "\n", "", " and ", ", "]);
  return s;
}

// ---------------------------------------------------------------------------
// Random code points from all planes.
function randomUnicodeText(r) {
  const n = r.chance(0.15) ? r.range(1000, 4500) : r.small(300);
  let s = "";
  for (let i = 0; i < n; i++) {
    s += randomCodePoint(r);
    if (r.chance(0.05)) s += r.pick([" ", "\n", "  ", "'s", "1"]);
  }
  return s;
}

// ---------------------------------------------------------------------------
// Fixed edge cases (the first cases of every run).
export const EDGE_CASES = [
  "", " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\n ", "a", " a", "a ", " a ", "  a", "a  ",
  "A", "1", "12", "123", "1234", "!", " !", "!!", "'", "'s", "'S", "''", "'ſ", " I'ſ", "\u0085", "\uFEFF",
  " \u0085", "\u0085 ", "a\u0085b", "a\uFEFFb", "\u00A0", " \u00A0", "\u3000", "\u2028", "\u180E",
  "\u0000", "\u007F", "\u0301", "a\u0301", " \u0301", "😀", "\u{1F1FA}\u{1F1F8}", "\u{10FFFD}",
  "\u{E0001}", "\u{FFFD}", "中", "<|endoftext|>", "<|start|>user<|message|>hi<|end|>", "<|reserved_200100|>",
  "hello world", "Hello, World!", "don't", "DON'T", "it’s", "123abc", "abc123", "a1b2c3",
  "x\n\n\ny", "x \n y", "x  \n\n  y", "tab\there", "  leading", "trailing  ", "\n\nboth\n\n",
  "//", "/\n", ".\n/", "x.\r\n\r\n", "a".repeat(1000), " ".repeat(1000), "\n".repeat(300),
  "1".repeat(40), "ab".repeat(300), "😀".repeat(200), "中".repeat(500),
];

// ---------------------------------------------------------------------------
// Mixtures.
const SCRIPTS = Object.keys(WORDS);

function mixedScriptText(r) {
  let s = "";
  for (let n = r.small(20); n > 0; n--) {
    s += scriptWord(r, r.pick(SCRIPTS));
    if (r.chance(0.4)) s += r.pick([" ", "", "-", "_", "1", "'", "."]);
  }
  return s;
}

function specialText(r) {
  const sp = () => r.pick(["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>",
    "<|constrain|>", "<|endoftext|>", "<|startoftext|>", "<|endofprompt|>", `<|reserved_${r.range(200013, 201087)}|>`,
    "<|", "|>", "<|start", "<| end |>", "<||>"]);
  let s = "";
  for (let n = r.small(10); n > 0; n--)
    s += sp() + r.pick(["user", "assistant", "system", "analysis", "final", "commentary", " to=functions.get_weather",
      "json", scriptText(r, "latin", 6), "{\"location\": \"Tokyo\"}", ""]);
  return s;
}

function deviationText(r) {
  const dev = ["\u0085", "\uFEFF", "\u017F", "'\u017F", "'\u017Fx", " I'\u017F", " I'\u017Fll", "\u212A", "'\u212A", "\u180E", "\u200B",
    "\u2060", "\u02BC", "\u2019"];
  let s = "";
  for (let n = r.small(10); n > 0; n--)
    s += r.pick(["a", "it", "IT", " ", "  ", "\n", "x ", "é", "中", "1", "!", ""]) + r.pick(dev) +
      r.pick(["", "b", " ", "  y", "\n", "s", "S", "'s", "1", "!"]);
  return s;
}

function leadingTrailing(r, k) {
  const inner = pickGenerator(r, k, true)(r, k);
  return wsRun(r) + inner + (r.chance(0.8) ? wsRun(r) : "");
}

const GENERATORS = {
  latin: (r) => scriptText(r, "latin"),
  greek: (r) => scriptText(r, "greek"),
  cyrillic: (r) => scriptText(r, "cyrillic"),
  arabic: (r) => scriptText(r, "arabic"),
  hebrew: (r) => scriptText(r, "hebrew"),
  devanagari: (r) => scriptText(r, "devanagari"),
  thai: (r) => scriptText(r, "thai"),
  cjk: (r) => scriptText(r, "cjk"),
  hangul: (r) => scriptText(r, "hangul"),
  kana: (r) => scriptText(r, "kana"),
  "mixed-script": mixedScriptText,
  emoji: emojiText,
  combining: combiningText,
  "code-c": codeC,
  "code-python": codePython,
  "code-json": codeJson,
  "code-shell": codeShell,
  numbers: numbersText,
  whitespace: whitespaceText,
  contractions: contractionText,
  urls: urlText,
  "random-unicode": randomUnicodeText,
  "random-mix": (r, k) => {
    let s = "";
    for (let n = r.small(r.chance(0.1) ? 40 : 8); n > 0; n--) s += pickGenerator(r, k, true)(r, k) + (r.chance(0.5) ? wsRun(r) : "");
    return s;
  },
  "leading-trailing": leadingTrailing,
  "special-text": specialText,
  deviation: deviationText,
};
// Relative weights of the round-robin schedule.
const WEIGHTS = {
  latin: 6, greek: 3, cyrillic: 3, arabic: 3, hebrew: 3, devanagari: 3, thai: 3, cjk: 4, hangul: 3, kana: 3,
  "mixed-script": 4, emoji: 6, combining: 5, "code-c": 3, "code-python": 3, "code-json": 3, "code-shell": 3,
  numbers: 8, whitespace: 7, contractions: 6, urls: 4, "random-unicode": 6, "random-mix": 8,
  "leading-trailing": 4, "special-text": 2, deviation: 3,
};
const SCHEDULE = Object.entries(WEIGHTS).flatMap(([cat, w]) => Array(w).fill(cat));
const LEAF = Object.keys(GENERATORS).filter((c) => c !== "random-mix" && c !== "leading-trailing");

function pickGenerator(r, k, leafOnly) {
  return GENERATORS[leafOnly ? r.pick(LEAF) : r.pick(Object.keys(GENERATORS))];
}

// Drop excluded code points, cut to MAX_CASE_BYTES at a code point boundary.
function finish(text) {
  let out = "", bytes = 0;
  for (const ch of text) {
    const cp = ch.codePointAt(0);
    if (isSurrogate(cp) || isExcludedCodePoint(cp)) continue;
    const n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (bytes + n >= MAX_CASE_BYTES) break;
    out += ch;
    bytes += n;
  }
  return out;
}

export function generateCase(i, seed = DEFAULT_SEED) {
  if (i < EDGE_CASES.length) return { cat: "edge", text: EDGE_CASES[i] };
  const j = i - EDGE_CASES.length;
  const cat = SCHEDULE[j % SCHEDULE.length];
  const k = Math.floor(j / SCHEDULE.length) * WEIGHTS[cat] +
    SCHEDULE.slice(0, j % SCHEDULE.length).filter((c) => c === cat).length;   // index within category
  const r = new Rng(seed, i);
  return { cat, text: finish(GENERATORS[cat](r, k)) };
}

export function generateCases(n = DEFAULT_N, seed = DEFAULT_SEED) {
  return Array.from({ length: n }, (_, i) => generateCase(i, seed));
}

// One string of `bytes` UTF-8 bytes (exactly, padded with ASCII) containing
// no Unicode White_Space and no U+FEFF.  Letter runs are kept short (words
// are always followed by a non-letter), so no regex piece is huge.
export function bigString(bytes = 1000000, seed = DEFAULT_SEED) {
  const r = new Rng(seed, -1);
  const noSpace = /[\p{White_Space}\uFEFF]/gu;
  const seps = [",", ".", ";", "-", "_", "/", "1", "42", "2024", "(", ")", "\"", "'s", ":", "…", "、", "。",
    "😀", "\u{1F1EF}\u{1F1F5}", "=", "+", "&", "#", "%"];
  const parts = [];
  let total = 0;
  while (total < bytes) {
    let frag;
    const k = r.int(10);
    if (k < 6) frag = scriptWord(r, r.pick(SCRIPTS)) + r.pick(seps);
    else if (k === 6) frag = digitRun(r, r.small(12)) + r.pick(seps);
    else if (k === 7) frag = emojiOne(r) + r.pick(seps);
    else if (k === 8) frag = r.pick(["http://a.b/c", "x=1&y=2", "{\"k\":[1,2,3]}", "a->b", "i++;", "//", "::"]) + r.pick(seps);
    else frag = randomCodePoint(r) + r.pick(seps);
    frag = finish(frag).replace(noSpace, "");
    const n = Buffer.byteLength(frag, "utf8");
    if (total + n > bytes) { parts.push("x".repeat(bytes - total)); total = bytes; break; }
    parts.push(frag);
    total += n;
  }
  return parts.join("");
}

// ---------------------------------------------------------------------------
// --unicode-diff: General_Category per code point, Unicode 14.0 (python3.11
// unicodedata) versus this Node, as [lo, hi] ranges.
export function unicodeDiff(python = "/usr/bin/python3") {
  const py = spawnSync(python, ["-c",
    "import sys, unicodedata\n" +
    "sys.stderr.write(unicodedata.unidata_version)\n" +
    "sys.stdout.write(''.join(unicodedata.category(chr(c)) for c in range(0x110000)))"],
  { maxBuffer: 8 << 20, encoding: "latin1" });
  if (py.status !== 0) throw new Error(`${python} failed: ${py.stderr}`);
  const cats = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi",
    "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Cn"];
  const res = cats.map((c) => new RegExp(`^\\p{gc=${c}}$`, "u"));
  const ranges = [];
  for (let cp = 0; cp < 0x110000; cp++) {
    if (isSurrogate(cp)) continue;
    const s = String.fromCodePoint(cp);
    const node = cats[res.findIndex((re) => re.test(s))];
    if (py.stdout.substr(cp * 2, 2) === node) continue;
    const last = ranges[ranges.length - 1];
    if (last && last[1] === cp - 1) last[1] = cp; else ranges.push([cp, cp]);
  }
  return { python: py.stderr, node: process.versions.unicode, ranges };
}

// ---------------------------------------------------------------------------
function main(argv) {
  let n = DEFAULT_N, seed = DEFAULT_SEED, big = false, bigBytes = 1000000, withCat = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--seed") seed = Number(argv[++i]);
    else if (a === "--n") n = Number(argv[++i]);
    else if (a === "--big") big = true;
    else if (a === "--big-bytes") bigBytes = Number(argv[++i]);
    else if (a === "--with-category") withCat = true;
    else if (a === "--unicode-diff") {
      const d = unicodeDiff();
      const hex = (x) => "0x" + x.toString(16).toUpperCase();
      console.log(`// General_Category differs: Unicode ${d.python} (python3) vs ${d.node} (node ${process.version})`);
      console.log(d.ranges.map(([a, b]) => `[${hex(a)}, ${hex(b)}]`).join(", "));
      const same = JSON.stringify(d.ranges) === JSON.stringify(UNICODE_EXCLUDED);
      console.log(`// ${same ? "identical to" : "DIFFERS from"} UNICODE_EXCLUDED in o200k.mjs`);
      return same ? 0 : 1;
    } else if (/^\d+$/.test(a)) n = Number(a);
    else { process.stderr.write(`gen-cases: unknown argument ${a}\n`); return 2; }
  }
  if (!Number.isInteger(n) || n < 0 || !Number.isInteger(seed)) { process.stderr.write("gen-cases: bad N or seed\n"); return 2; }
  if (big) { process.stdout.write(JSON.stringify(bigString(bigBytes, seed)) + "\n"); return 0; }
  const out = [];
  for (let i = 0; i < n; i++) {
    const c = generateCase(i, seed);
    out.push(withCat ? JSON.stringify(c) : JSON.stringify(c.text));
  }
  process.stdout.write(out.join("\n") + (n ? "\n" : ""));
  return 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) process.exitCode = main(process.argv.slice(2));
