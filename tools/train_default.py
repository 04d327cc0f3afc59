#!/usr/bin/python3
"""Train the embedded default model: a small GPT-OSS on the King James Bible.

The model has the exact GPT-OSS architecture that tools/gptoss_ref.py
defines: RMSNorm, attention with learned sinks on alternating
sliding-window / full layers, GQA, YaRN RoPE (gpt-oss's own rope_scaling),
a top-k router with softmax over the k, and the clamped SwiGLU experts with
interleaved gate/up and biases.  It is trained here with Debian's
python3-torch on CPU, seeded and deterministic, on public-domain text that
a Debian package ships, with its own byte-level BPE tokenizer, and written
in the Hugging Face layout by tools/gptoss_ckpt.py's writers.

Needs (Debian 12):

    apt-get install -y python3-torch python3-numpy bible-kjv libopenblas0-openmp

Debian's python3-torch calls the system libblas.so.3, which is the slow
reference BLAS unless an optimized one is selected; this script runs itself
again with libopenblas0-openmp's libblas.so.3 first on LD_LIBRARY_PATH
(only for itself: the system's BLAS alternative is left alone), about 10x
faster.  Time: ~1.0 s per step of the full preset (0.9-1.0 CPU-seconds;
measured over 20 steps on this project's 2-core AMD EPYC with 1 or 2
threads), so the 2000 steps take about 34 minutes, plus ~2 minutes for the
rest; on cores shared with other jobs it takes proportionally longer (3x at
a load average of 10).

Source text: the Authorized (King James) Version, 1611, as the bible-kjv
package ships it (/usr/lib/bible.data from bible-kjv-text, read through its
`bible` program: `bible -f Gen1:1-Rev22:21`, one verse per line, 31102
verses).  The translation is in the public domain (copyright expired); the
Debian copyright file (/usr/share/doc/bible-kjv-text/copyright) says so and
allows unrestricted use of the data file ("Users may copy, modify or
distribute this file at will").

What it does (everything seeded, torch.use_deterministic_algorithms(True),
--threads 2 by default: a rerun with the same thread count on the same
machine and software reproduces the weights bit for bit; another thread
count or CPU changes the rounding, and so the weights):

 1. corpus: the 1189 chapters, each a document of its verses, one per line
    (no verse numbers).  Held out: every 50th chapter (index % 50 == 49, 23
    chapters), written to OUT/heldout.txt (chapters separated by a blank
    line) for tools/perplexity.py and tests/e2e/default_models.py.
 2. tokenizer: byte-level BPE trained here on the training chapters (and the
    chat samples' text): 256 byte tokens + 3824 merges + 16 special tokens
    = 4096 ids; pre-tokenizer = o200k's split regex as gpt-oss uses it; the
    harmony special tokens at the top ids, laid out like o200k_harmony's
    199998..200013 (<|startoftext|>, <|endoftext|>, <|return|>,
    <|constrain|>, <|channel|>, <|start|>, <|end|>, <|message|>, <|call|>).
    Written as a Hugging Face tokenizer.json in the structure of
    transformers' TikTokenConverter (what models/tokenizer.c loads).
 3. chat samples, rendered exactly as the daemon's harmony renderer
    (models/harmony-render.c) renders a request without tools: the system message
    (random dates, reasoning efforts), sometimes a developer instruction or
    an earlier turn, the user question, then the answer in the final
    channel ending in <|return|>.  Tasks: "Continue: <first words of a
    verse>" -> the rest of it; "Write a verse about <word>." -> a training
    verse with that word.  Loss only on the answer.
 4. training: documents and chat samples shuffled per epoch, packed into
    rows of --seq tokens with <|endoftext|> after each; AdamW, warmup +
    cosine, a small Switch-style load-balancing loss on the routers.
 5. export: weights rounded to bf16 and written by gptoss_ckpt.encode /
    write_safetensors (the same writers the tests use), with config.json
    (gpt-oss's keys and rope_scaling), generation_config.json and
    tokenizer.json into OUT/bf16/.
 6. checks: held-out perplexity of the bf16 weights (the same chunks and
    scoring as tools/perplexity.py runs through the daemon), and the torch
    forward against tools/gptoss_ref.py on the written checkpoint; with
    --moeserve BIN also the C tokenizer on the whole corpus and the C
    logits (`moeserve generate --logits-out`) against torch.

    /usr/bin/python3 tools/train_default.py --out models/default
        [--preset full|smoke] [--steps N] [--threads N] [--moeserve BIN]
        [--kjv-text FILE] [--eval-every N] [--bench N]

--bench N times N training steps at the preset's size and prints steps/s,
CPU seconds per step, the load average and the time the preset's steps
would take at that rate, then exits.  OUT/train_report.json records the
run (sizes, losses, held-out perplexity, the checks' numbers).
"""

import argparse
import collections
import datetime
import heapq
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import gptoss_ckpt  # noqa: E402
import gptoss_ref  # noqa: E402
import perplexity  # noqa: E402  (held-out chunking and scoring rule)

# ---------------------------------------------------------------------------
# sizes

PRESETS = {
    # the shipped model: ~2.8M parameters (1.05M of them embedding + head)
    "full": dict(layers=4, hidden=128, heads=4, kv_heads=2, head_dim=32, experts=8, top_k=2,
                 intermediate=128, sliding_window=128, seq=256, batch=16, steps=2000,
                 lr=3e-3, warmup=100, chat_per_epoch=4000),
    # a smoke run: same code path, tiny, a minute or two
    "smoke": dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, experts=8, top_k=2,
                  intermediate=64, sliding_window=32, seq=128, batch=8, steps=150,
                  lr=3e-3, warmup=20, chat_per_epoch=1500),
}
VOCAB = 4096
N_SPECIAL = 16
SEED = 1611
THREADS = 2

# ---------------------------------------------------------------------------
# 1. corpus

# bible -f prints "Ge1:1 In the beginning ..."; its book abbreviations, in order
BOOKS = [
    ("Ge", "Genesis"), ("Exo", "Exodus"), ("Lev", "Leviticus"), ("Num", "Numbers"),
    ("Deu", "Deuteronomy"), ("Josh", "Joshua"), ("Jdgs", "Judges"), ("Ruth", "Ruth"),
    ("1Sm", "1 Samuel"), ("2Sm", "2 Samuel"), ("1Ki", "1 Kings"), ("2Ki", "2 Kings"),
    ("1Chr", "1 Chronicles"), ("2Chr", "2 Chronicles"), ("Ezra", "Ezra"), ("Neh", "Nehemiah"),
    ("Est", "Esther"), ("Job", "Job"), ("Psa", "Psalms"), ("Prv", "Proverbs"),
    ("Eccl", "Ecclesiastes"), ("SSol", "Song of Solomon"), ("Isa", "Isaiah"),
    ("Jer", "Jeremiah"), ("Lam", "Lamentations"), ("Eze", "Ezekiel"), ("Dan", "Daniel"),
    ("Hos", "Hosea"), ("Joel", "Joel"), ("Amos", "Amos"), ("Obad", "Obadiah"),
    ("Jonah", "Jonah"), ("Mic", "Micah"), ("Nahum", "Nahum"), ("Hab", "Habakkuk"),
    ("Zep", "Zephaniah"), ("Hag", "Haggai"), ("Zec", "Zechariah"), ("Mal", "Malachi"),
    ("Mat", "Matthew"), ("Mark", "Mark"), ("Luke", "Luke"), ("John", "John"), ("Acts", "Acts"),
    ("Rom", "Romans"), ("1Cor", "1 Corinthians"), ("2Cor", "2 Corinthians"),
    ("Gal", "Galatians"), ("Eph", "Ephesians"), ("Phi", "Philippians"), ("Col", "Colossians"),
    ("1Th", "1 Thessalonians"), ("2Th", "2 Thessalonians"), ("1Tim", "1 Timothy"),
    ("2Tim", "2 Timothy"), ("Titus", "Titus"), ("Phmn", "Philemon"), ("Heb", "Hebrews"),
    ("Jas", "James"), ("1Pet", "1 Peter"), ("2Pet", "2 Peter"), ("1Jn", "1 John"),
    ("2Jn", "2 John"), ("3Jn", "3 John"), ("Jude", "Jude"), ("Rev", "Revelation"),
]
HELDOUT_EVERY = 50        # chapter index % 50 == 49 is held out
KJV_SHA256 = "cd45f0c9cedab8e4439bd6486c8952c77cc8b0ecc5d1f6ae3513f2039f47229d"  # bible-kjv 4.38


def read_kjv(path=None):
    """-> text of `bible -f Gen1:1-Rev22:21` (or of the file given)."""
    if path:
        with open(path, encoding="ascii") as f:
            return f.read()
    try:
        r = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], stdin=subprocess.DEVNULL,
                           capture_output=True, check=True)
    except FileNotFoundError:
        sys.exit("train_default: the `bible` program is missing: apt-get install -y bible-kjv")
    return r.stdout.decode("ascii")


def parse_chapters(text):
    """-> list of (book name, chapter number, [verse texts]) in Bible order."""
    names = dict(BOOKS)
    line_re = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")
    chapters = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = line_re.match(line)
        if not m:
            raise ValueError(f"unexpected line in the KJV text: {line[:60]!r}")
        book, ch, body = names[m.group(1)], int(m.group(2)), m.group(4)
        body = " ".join(body.split())
        if not chapters or chapters[-1][0] != book or chapters[-1][1] != ch:
            chapters.append((book, ch, []))
        chapters[-1][2].append(body)
    if len(chapters) != 1189:
        raise ValueError(f"{len(chapters)} chapters, expected 1189")
    return chapters


def split_chapters(chapters):
    """-> (train, heldout): every 50th chapter (index % 50 == 49) held out."""
    train = [c for i, c in enumerate(chapters) if i % HELDOUT_EVERY != HELDOUT_EVERY - 1]
    held = [c for i, c in enumerate(chapters) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1]
    return train, held


def chapter_text(ch):
    return "\n".join(ch[2])


# ---------------------------------------------------------------------------
# 2. tokenizer

# o200k's split regex (gpt-oss.md 4.1), as written into tokenizer.json
O200K_PATTERN = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
# The same pattern restricted to ASCII, for Python's re (no \p{..}): on ASCII
# text Lu = [A-Z], Ll = [a-z], N = [0-9], Lt/Lm/Lo/M are empty, and
# White_Space is [\t\n\v\f\r ] (Python's own \s would add \x1c-\x1f).  Only
# training text goes through it, and that is checked to be ASCII.
_WS = r"[\t\n\x0b\x0c\r ]"
_NWS = r"[^\t\n\x0b\x0c\r ]"
_ASCII_SPLIT = re.compile("|".join([
    r"[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[0-9]{1,3}",
    r" ?[^\t\n\x0b\x0c\r A-Za-z0-9]+[\r\n/]*",
    _WS + r"*[\r\n]+",
    _WS + r"+(?!" + _NWS + r")",
    _WS + r"+",
]))

# Top N_SPECIAL ids, in o200k_harmony's order from 199998 on
SPECIAL_NAMES = ["<|startoftext|>", "<|endoftext|>", None, None, "<|return|>", "<|constrain|>",
                 None, "<|channel|>", "<|start|>", "<|end|>", "<|message|>", None, None, None,
                 "<|call|>", None]


def special_tokens(vocab=VOCAB):
    base = vocab - N_SPECIAL
    return [(base + i, name or f"<|reserved_{base + i}|>") for i, name in enumerate(SPECIAL_NAMES)]


def byte_to_unicode():
    """GPT-2's byte -> printable character table (ByteLevel)."""
    out, n = {}, 0
    for b in range(256):
        if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def pretokenize(text):
    if not text.isascii():
        raise ValueError("the training tokenizer only splits ASCII text")
    return _ASCII_SPLIT.findall(text)


def train_bpe(counts, n_merges):
    """Byte-level BPE on {piece bytes: count}.  Each step merges the most
    frequent adjacent pair (ties: the lowest (left id, right id)) in every
    piece.  -> list of (left id, right id); merge i creates id 256 + i."""
    words = [list(w) for w in counts]
    freq = [counts[w] for w in counts]
    pair_count = collections.Counter()
    where = collections.defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += freq[wi]
            where[(a, b)].add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        negc, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc or -negc <= 0:
            continue   # stale entry
        new = 256 + len(merges)
        merges.append(pair)
        changed = collections.Counter()
        for wi in sorted(where.pop(pair, ())):
            w, f = words[wi], freq[wi]
            for a, b in zip(w, w[1:]):
                changed[(a, b)] -= f
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == pair:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for a, b in zip(out, out[1:]):
                changed[(a, b)] += f
                where[(a, b)].add(wi)
        for p, d in changed.items():
            if d:
                pair_count[p] += d
                if pair_count[p] > 0:
                    heapq.heappush(heap, (-pair_count[p], p))
                else:
                    del pair_count[p]
        pair_count.pop(pair, None)
    return merges


class Tokenizer:
    """Byte-level BPE encoder with the semantics of tokenizers' BPE and
    models/tokenizer.c: in each piece, merge the lowest-ranked adjacent pair
    (leftmost on ties) until none is left."""

    def __init__(self, merges, vocab=VOCAB):
        self.merges = merges
        self.rank = {p: (r, 256 + r) for r, p in enumerate(merges)}
        self.bytes = [bytes([b]) for b in range(256)]
        for a, b in merges:
            self.bytes.append(self.bytes[a] + self.bytes[b])
        self.specials = special_tokens(vocab)
        self.special_id = {name: i for i, name in self.specials}
        self.vocab = vocab
        if len(self.bytes) != vocab - N_SPECIAL:
            raise ValueError(f"{len(self.bytes)} BPE tokens + {N_SPECIAL} specials != {vocab}")
        self._cache = {}
        self._special_re = re.compile("(" + "|".join(re.escape(n) for _, n in self.specials) + ")")

    @classmethod
    def from_json(cls, path):
        """Load a tokenizer.json this script wrote (merges in order, byte
        tokens first)."""
        with open(path, encoding="utf-8") as f:
            tj = json.load(f)
        u2b = {u: b for b, u in byte_to_unicode().items()}
        vocab = tj["model"]["vocab"]
        ids = {t: i for t, i in vocab.items()}
        merges = [(ids[a], ids[b]) for a, b in tj["model"]["merges"]]
        self = cls(merges, len(vocab) + len(tj["added_tokens"]))
        for t, i in vocab.items():
            if bytes(u2b[ch] for ch in t) != self.bytes[i]:
                raise ValueError(f"{path}: token {i} is not this script's layout")
        if [(a["id"], a["content"]) for a in tj["added_tokens"]] != self.specials:
            raise ValueError(f"{path}: added tokens differ from this script's")
        return self

    def encode_piece(self, piece):
        ids = self._cache.get(piece)
        if ids is not None:
            return ids
        ids = list(piece.encode("utf-8"))
        while len(ids) > 1:
            best, at = None, -1
            for i in range(len(ids) - 1):
                r = self.rank.get((ids[i], ids[i + 1]))
                if r is not None and (best is None or r[0] < best[0]):
                    best, at = r, i
            if best is None:
                break
            ids[at:at + 2] = [best[1]]
        self._cache[piece] = ids
        return ids

    def encode(self, text):
        """Plain text (special tokens not recognised), like a completion prompt."""
        out = []
        for piece in pretokenize(text):
            out.extend(self.encode_piece(piece))
        return out

    def encode_chat(self, text):
        """Rendered harmony text: special tokens by name, the text between
        them encoded on its own (as the server encodes the renderer's spans)."""
        out = []
        for part in self._special_re.split(text):
            if not part:
                continue
            if part in self.special_id:
                out.append(self.special_id[part])
            else:
                out.extend(self.encode(part))
        return out

    def decode(self, ids):
        names = dict(self.specials)
        return b"".join(names[i].encode() if i in names else self.bytes[i] for i in ids).decode(
            "utf-8", "replace")

    def to_json(self):
        """The tokenizer.json, laid out like transformers' TikTokenConverter
        (tools/npm-ref/build-tokenizer.mjs writes o200k_harmony the same way)."""
        b2u = byte_to_unicode()
        s = ["".join(b2u[c] for c in t) for t in self.bytes]
        if len(set(s)) != len(s):
            raise ValueError("duplicate token strings")
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [{"id": i, "content": n, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}
                             for i, n in self.specials],
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": O200K_PATTERN}, "behavior": "Isolated",
                 "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": False}]},
            "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                               "use_regex": True},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(s)},
                      "merges": [[s[a], s[b]] for a, b in self.merges]},
        }


def build_tokenizer(texts, vocab=VOCAB):
    counts = collections.Counter()
    for t in texts:
        counts.update(pretokenize(t))
    bcounts = collections.Counter()
    for piece, c in counts.items():
        bcounts[piece.encode()] += c
    merges = train_bpe(bcounts, vocab - N_SPECIAL - 256)
    return Tokenizer(merges, vocab)


# ---------------------------------------------------------------------------
# 3. chat samples (models/harmony-render.c's rendering of a request without tools)

SYSTEM_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
DEVELOPER_INSTRUCTIONS = [
    "Answer in the words of the King James Bible.",
    "You are a helpful assistant.",
    "Answer briefly.",
    "Quote scripture.",
]
CONTINUE_ASKS = ["Continue: {}", "Continue this verse: {}", "Finish the verse: {}",
                 "Complete the verse: {}", "How does this verse go on? {}", "{}"]
TOPIC_ASKS = ["Write a verse about {}.", "Give me a verse about {}.",
              "Quote a verse that mentions {}.", "Tell me about {}.", "What does the Bible say about {}?",
              "A verse about {}, please."]
STOPWORDS = set("""a about above after again against all also am an and any are as at be because
been before being below between both but by can could did do does doing down during each even
every few for from further had has have having he her here hers herself him himself his how i if in
into is it its itself just me more most my myself no nor not now of off on once only or other ought
our ours ourselves out over own same shall she should so some such than that the thee their theirs
them themselves then there these they thine this those thou thy through thyself to too under until
unto up upon us very was we were what when where which while who whom why will with would ye yea you
your yours yourself yourselves hath doth saith said also therefore wherefore neither nay let may
might must one two three went came come go make made say according whosoever""".split())


def render_system(date, effort):
    return ("<|start|>system<|message|>" + SYSTEM_IDENTITY + "\nKnowledge cutoff: 2024-06\n"
            "Current date: " + date + "\n\nReasoning: " + effort + "\n\n# Valid channels: analysis, "
            "commentary, final. Channel must be included for every message.<|end|>")


def render_chat(turns, date, effort, instructions=None):
    """turns: [(user, assistant), ...]; the last assistant answer is what the
    model learns to write.  -> (prompt text ending in <|start|>assistant,
    answer text from <|channel|> to <|return|>)."""
    s = render_system(date, effort)
    if instructions:
        s += "<|start|>developer<|message|># Instructions\n\n" + instructions + "\n\n<|end|>"
    for u, a in turns[:-1]:
        s += "<|start|>user<|message|>" + u + "<|end|>"
        s += "<|start|>assistant<|channel|>final<|message|>" + a + "<|end|>"
    s += "<|start|>user<|message|>" + turns[-1][0] + "<|end|><|start|>assistant"
    return s, "<|channel|>final<|message|>" + turns[-1][1] + "<|return|>"


def topic_index(chapters, min_count=8, max_count=800):
    """{word: [verse texts containing it]} over content words of the training
    verses (lower-case, not stop words, seen in min..max verses)."""
    idx = collections.defaultdict(list)
    for _, _, verses in chapters:
        for v in verses:
            for w in set(re.findall(r"[a-z]+", v)):
                if len(w) > 3 and w not in STOPWORDS:
                    idx[w].append(v)
    return {w: vs for w, vs in sorted(idx.items()) if min_count <= len(vs) <= max_count}


def chat_sample(rng, verses, topics, topic_words):
    """One seeded chat exchange: (user question, answer)."""
    if rng.random() < 0.5:
        v = verses[rng.integers(len(verses))]
        words = v.split()
        if len(words) < 6:
            v = "In the beginning God created the heaven and the earth."
            words = v.split()
        cut = int(rng.integers(2, max(3, min(len(words) - 2, 10))))
        ask = CONTINUE_ASKS[rng.integers(len(CONTINUE_ASKS))]
        return ask.format(" ".join(words[:cut])), " ".join(words[cut:])
    w = topic_words[rng.integers(len(topic_words))]
    vs = topics[w]
    ask = TOPIC_ASKS[rng.integers(len(TOPIC_ASKS))]
    return ask.format(w), vs[rng.integers(len(vs))]


def make_chats(n, seed, verses, topics):
    """n rendered chat samples: list of (prompt text, answer text)."""
    rng = np.random.default_rng([SEED, 7, seed])
    topic_words = sorted(topics)
    out = []
    d0 = datetime.date(2024, 1, 1)
    for _ in range(n):
        date = (d0 + datetime.timedelta(days=int(rng.integers(0, 1100)))).isoformat()
        effort = ("low", "medium", "high")[rng.integers(3)]
        instr = DEVELOPER_INSTRUCTIONS[rng.integers(len(DEVELOPER_INSTRUCTIONS))] \
            if rng.random() < 0.15 else None
        turns = [chat_sample(rng, verses, topics, topic_words)
                 for _ in range(2 if rng.random() < 0.15 else 1)]
        out.append(render_chat(turns, date, effort, instr))
    return out


# ---------------------------------------------------------------------------
# 4. the model (torch): exactly tools/gptoss_ref.py's math

def import_torch():
    try:
        import torch
    except ImportError:
        sys.exit("train_default: torch is missing: apt-get install -y python3-torch")
    return torch


def hf_param_shapes(c, vocab=VOCAB):
    """(name, shape) of every parameter in the Hugging Face layout, in the
    order of gptoss_ckpt.make_weights (so gptoss_ckpt.encode writes it)."""
    H, E, I, L = c["hidden"], c["experts"], c["intermediate"], c["layers"]
    nq, nkv = c["heads"] * c["head_dim"], c["kv_heads"] * c["head_dim"]
    out = [("model.embed_tokens.weight", (vocab, H))]
    for l in range(L):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (H,)),
                (p + "self_attn.q_proj.weight", (nq, H)), (p + "self_attn.q_proj.bias", (nq,)),
                (p + "self_attn.k_proj.weight", (nkv, H)), (p + "self_attn.k_proj.bias", (nkv,)),
                (p + "self_attn.v_proj.weight", (nkv, H)), (p + "self_attn.v_proj.bias", (nkv,)),
                (p + "self_attn.o_proj.weight", (H, nq)), (p + "self_attn.o_proj.bias", (H,)),
                (p + "self_attn.sinks", (c["heads"],)),
                (p + "post_attention_layernorm.weight", (H,)),
                (p + "mlp.router.weight", (E, H)), (p + "mlp.router.bias", (E,)),
                (p + "mlp.experts.gate_up_proj", (E, H, 2 * I)),
                (p + "mlp.experts.gate_up_proj_bias", (E, 2 * I)),
                (p + "mlp.experts.down_proj", (E, I, H)),
                (p + "mlp.experts.down_proj_bias", (E, H))]
    out += [("model.norm.weight", (H,)), ("lm_head.weight", (vocab, H))]
    return out


def ckpt_params(c, vocab=VOCAB):
    """gptoss_ckpt's parameter dict for this model (make_config / encode)."""
    p = dict(gptoss_ckpt.DEFAULTS)
    p.update(layers=c["layers"], hidden=c["hidden"], heads=c["heads"], kv_heads=c["kv_heads"],
             head_dim=c["head_dim"], experts=c["experts"], top_k=c["top_k"],
             intermediate=c["intermediate"], vocab=vocab, sliding_window=c["sliding_window"],
             format="bf16", shards=1, seed=SEED)
    return p


def model_config_json(c, tok, p=None):
    """config.json: gptoss_ckpt.make_config (gpt-oss-20b's keys, rope_scaling,
    layer_types) with this tokenizer's ids: eos = <|return|> and
    <|endoftext|> (so raw completions stop at a document's end too), pad =
    <|endoftext|>."""
    cfg = gptoss_ckpt.make_config(p or ckpt_params(c, tok.vocab))
    cfg["eos_token_id"] = [tok.special_id["<|return|>"], tok.special_id["<|endoftext|>"]]
    cfg["pad_token_id"] = tok.special_id["<|endoftext|>"]
    return cfg


def generation_config_json(tok):
    s = tok.special_id
    return {"bos_token_id": s["<|startoftext|>"], "do_sample": True,
            "eos_token_id": [s["<|return|>"], s["<|call|>"], s["<|endoftext|>"]],
            "pad_token_id": s["<|endoftext|>"], "transformers_version": "4.55.0.dev0"}


def build_model(c, vocab=VOCAB):
    torch = import_torch()
    nn = torch.nn
    F = torch.nn.functional
    H, E, L, k = c["hidden"], c["experts"], c["layers"], c["top_k"]
    nH, nKV, d = c["heads"], c["kv_heads"], c["head_dim"]
    # the constants as the reference reads them from this config.json
    cfg = gptoss_ref.Config(model_config_json(c, _FakeTok(vocab)))
    limit, alpha, eps = cfg.limit, cfg.alpha, cfg.eps
    inv_freq, attn_scale = gptoss_ref.yarn_inv_freq(
        d, cfg.rope_theta, cfg.rope["factor"], cfg.rope["l0"], cfg.rope["beta_fast"],
        cfg.rope["beta_slow"], cfg.rope["truncate"], cfg.rope["attention_factor"])
    sliding = cfg.sliding
    window = int(cfg.window)

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rope(x, cos, sin):
        x1, x2 = x[..., :d // 2], x[..., d // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    class GptOss(nn.Module):
        def __init__(self):
            super().__init__()
            self.shapes = hf_param_shapes(c, vocab)
            self.names = {}
            for name, shape in self.shapes:
                key = name.replace(".", "__")
                self.names[name] = key
                self.register_parameter(key, nn.Parameter(torch.zeros(shape)))
            self.dtype_for_rope = torch.float32
            self._rope = {}

        def p(self, name):
            return getattr(self, self.names[name])

        def init_weights(self, gen):
            std = 0.02
            for name, shape in self.shapes:
                t = self.p(name)
                with torch.no_grad():
                    if name.endswith(("layernorm.weight", "norm.weight")):
                        t.fill_(1.0)
                    elif name.endswith(("bias", "sinks")):
                        t.zero_()
                    elif name.endswith(("o_proj.weight", "down_proj")):
                        t.normal_(0, std / math.sqrt(2 * L), generator=gen)
                    else:
                        t.normal_(0, std, generator=gen)

        def rope_tables(self, T, dtype):
            key = (T, dtype)
            if key not in self._rope:
                ang = np.arange(T, dtype=np.float64)[:, None] * inv_freq[None, :]
                self._rope[key] = (torch.tensor(np.cos(ang) * attn_scale, dtype=dtype),
                                   torch.tensor(np.sin(ang) * attn_scale, dtype=dtype))
            return self._rope[key]

        def mask(self, l, T, dtype):
            """Additive mask [T, T]: 0 where query i may see key j (causal;
            sliding layers: i - j < window), -inf elsewhere."""
            key = (sliding[l], T, dtype)
            if key not in self._rope:
                i = torch.arange(T)[:, None]
                j = torch.arange(T)[None, :]
                allowed = j <= i
                if sliding[l]:
                    allowed = allowed & ((i - j) < window)
                self._rope[key] = torch.zeros(T, T, dtype=dtype).masked_fill(~allowed, float("-inf"))
            return self._rope[key]

        def attention(self, l, h, cos, sin):
            pre = f"model.layers.{l}.self_attn."
            B, T, _ = h.shape
            q = F.linear(h, self.p(pre + "q_proj.weight"), self.p(pre + "q_proj.bias"))
            kk = F.linear(h, self.p(pre + "k_proj.weight"), self.p(pre + "k_proj.bias"))
            v = F.linear(h, self.p(pre + "v_proj.weight"), self.p(pre + "v_proj.bias"))
            q = rope(q.view(B, T, nH, d), cos[:, None], sin[:, None]).transpose(1, 2)
            kk = rope(kk.view(B, T, nKV, d), cos[:, None], sin[:, None]).transpose(1, 2)
            v = v.view(B, T, nKV, d).transpose(1, 2)
            # GQA without copies: query head h reads kv head h // (nH / nKV)
            q = q.reshape(B, nKV, nH // nKV, T, d)
            s = torch.matmul(q, kk.unsqueeze(2).transpose(-1, -2)) * d ** -0.5   # [B, nKV, rep, T, T]
            s = s + self.mask(l, T, s.dtype)
            # the sink is one more softmax column whose probability is dropped
            sink = self.p(pre + "sinks").view(1, nKV, nH // nKV, 1, 1).expand(B, -1, -1, T, 1)
            prob = torch.softmax(torch.cat([s, sink.to(s.dtype)], dim=-1), dim=-1)[..., :T]
            o = torch.matmul(prob, v.unsqueeze(2)).reshape(B, nH, T, d).transpose(1, 2).reshape(B, T, nH * d)
            return F.linear(o, self.p(pre + "o_proj.weight"), self.p(pre + "o_proj.bias"))

        def moe(self, l, h, aux):
            pre = f"model.layers.{l}.mlp."
            shp = h.shape
            x = h.reshape(-1, H)
            r = F.linear(x, self.p(pre + "router.weight"), self.p(pre + "router.bias"))
            topv, topi = torch.topk(r, k, dim=-1)
            w = torch.softmax(topv, dim=-1)
            if aux is not None:
                # Switch-style balance: E * sum_e (share of assignments) * (mean router prob)
                frac = torch.zeros(E, dtype=x.dtype).index_add_(
                    0, topi.reshape(-1), torch.ones(topi.numel(), dtype=x.dtype)) / topi.numel()
                aux.append(E * (frac * torch.softmax(r, dim=-1).mean(0)).sum())
            gu_w, gu_b = self.p(pre + "experts.gate_up_proj"), self.p(pre + "experts.gate_up_proj_bias")
            dn_w, dn_b = self.p(pre + "experts.down_proj"), self.p(pre + "experts.down_proj_bias")
            # every (token, slot) assignment, grouped by expert (stable order)
            flat = topi.reshape(-1)
            _, order = torch.sort(flat, stable=True)
            tok = torch.div(order, k, rounding_mode="floor")
            counts = torch.bincount(flat, minlength=E).tolist()
            ys = []
            for e, xe in enumerate(torch.split(x[tok], counts)):
                if xe.shape[0] == 0:
                    continue
                gu = xe @ gu_w[e] + gu_b[e]
                gate, up = gu[:, 0::2], gu[:, 1::2]      # interleaved, not halves
                gate = gate.clamp(max=limit)               # one-sided
                up = up.clamp(-limit, limit)
                act = (up + 1) * (gate * torch.sigmoid(alpha * gate))
                ys.append(act @ dn_w[e] + dn_b[e])         # bias inside the weighting
            y = torch.cat(ys) * w.reshape(-1)[order].unsqueeze(-1)
            out = torch.zeros_like(x).index_add(0, tok, y)
            return out.view(shp)

        def forward(self, ids, aux=None):
            B, T = ids.shape
            x = F.embedding(ids, self.p("model.embed_tokens.weight"))
            cos, sin = self.rope_tables(T, x.dtype)
            for l in range(L):
                pre = f"model.layers.{l}."
                x = x + self.attention(l, rms(x, self.p(pre + "input_layernorm.weight")), cos, sin)
                x = x + self.moe(l, rms(x, self.p(pre + "post_attention_layernorm.weight")), aux)
            x = rms(x, self.p("model.norm.weight"))
            return F.linear(x, self.p("lm_head.weight"))

        def hf_weights(self):
            """[(name, float64 array)] in checkpoint order."""
            return [(n, self.p(n).detach().double().numpy()) for n, _ in self.shapes]

        def load_hf(self, tensors):
            with torch.no_grad():
                for n, _ in self.shapes:
                    self.p(n).copy_(torch.as_tensor(np.asarray(tensors[n])))

    return GptOss()


class _FakeTok:
    """Stands in for a Tokenizer where only the special ids matter."""

    def __init__(self, vocab=VOCAB):
        self.vocab = vocab
        self.special_id = {n: i for i, n in special_tokens(vocab)}


def round_bf16(a):
    """float array -> float64 of its bf16 rounding (what the checkpoint holds)."""
    bits = gptoss_ckpt.to_bf16_bits(a).astype(np.uint32) << 16
    return bits.view(np.float32).astype(np.float64)


# ---------------------------------------------------------------------------
# 5. data stream and training

def encode_segments(tok, docs, chats):
    """-> list of (ids int32, loss mask uint8): documents (loss everywhere,
    <|endoftext|> after) and chat samples (loss on the answer only)."""
    eot = tok.special_id["<|endoftext|>"]
    segs = []
    for d in docs:
        ids = tok.encode(d) + [eot]
        segs.append((np.array(ids, np.int32), np.ones(len(ids), np.uint8)))
    for prompt, answer in chats:
        a = tok.encode_chat(prompt)
        b = tok.encode_chat(answer)
        ids = a + b + [eot]
        # mask[i] = 1: the model is trained to predict ids[i] (from ids[:i])
        mask = [0] * len(a) + [1] * len(b) + [0]
        segs.append((np.array(ids, np.int32), np.array(mask, np.uint8)))
    return segs


def epoch_rows(segs, seq, epoch):
    """Shuffle the segments (seeded by epoch), concatenate, cut into rows of
    seq + 1 tokens (consecutive rows share one token)."""
    rng = np.random.default_rng([SEED, 11, epoch])
    order = rng.permutation(len(segs))
    ids = np.concatenate([segs[i][0] for i in order])
    mask = np.concatenate([segs[i][1] for i in order])
    n = (len(ids) - 1) // seq
    x = np.lib.stride_tricks.sliding_window_view(ids, seq + 1)[::seq][:n]
    m = np.lib.stride_tricks.sliding_window_view(mask, seq + 1)[::seq][:n]
    return np.ascontiguousarray(x), np.ascontiguousarray(m)


class Batches:
    """Deterministic batches over epochs; each epoch's rows in a seeded order."""

    def __init__(self, tok, docs, verses, topics, c):
        self.tok, self.docs, self.verses, self.topics, self.c = tok, docs, verses, topics, c
        self.epoch = -1
        self.pos = 0
        self.rows = None

    def _next_epoch(self):
        self.epoch += 1
        chats = make_chats(self.c["chat_per_epoch"], self.epoch, self.verses, self.topics)
        segs = encode_segments(self.tok, self.docs, chats)
        x, m = epoch_rows(segs, self.c["seq"], self.epoch)
        perm = np.random.default_rng([SEED, 13, self.epoch]).permutation(len(x))
        self.rows = (x[perm], m[perm])
        self.pos = 0
        return len(x)

    def next(self):
        b = self.c["batch"]
        if self.rows is None or self.pos + b > len(self.rows[0]):
            self._next_epoch()
        x, m = self.rows[0][self.pos:self.pos + b], self.rows[1][self.pos:self.pos + b]
        self.pos += b
        return x, m


def lr_at(step, c, total):
    if step < c["warmup"]:
        return c["lr"] * (step + 1) / c["warmup"]
    t = (step - c["warmup"]) / max(1, total - c["warmup"])
    return c["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def use_openblas(argv, script=None):
    """Debian's python3-torch links libblas.so.3, by default the reference
    BLAS (~2 GFLOP/s here: hours instead of minutes).  When Debian's
    libopenblas0-openmp is installed, run this script again with its
    libblas.so.3 first on the library path: OpenBLAS for this process only
    (OpenMP threads, so torch.set_num_threads governs it too), the system's
    BLAS alternative untouched."""
    if os.environ.get("MS_TRAIN_BLAS"):
        return os.environ["MS_TRAIN_BLAS"]
    import glob
    for d in sorted(glob.glob("/usr/lib/*/openblas-openmp")) + \
            sorted(glob.glob("/usr/lib/*/openblas-pthread")):
        if os.path.exists(os.path.join(d, "libblas.so.3")):
            env = dict(os.environ, MS_TRAIN_BLAS=d,
                       LD_LIBRARY_PATH=d + (":" + os.environ["LD_LIBRARY_PATH"]
                                            if os.environ.get("LD_LIBRARY_PATH") else ""))
            # sleep instead of spinning while waiting for a thread: on a busy
            # machine spinning OpenMP threads cost ~10x
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            if d.endswith("pthread"):
                env.setdefault("OPENBLAS_NUM_THREADS", str(THREADS))
            os.execve(sys.executable, [sys.executable, os.path.abspath(script or __file__)] + list(argv),
                      env)
    print("train_default: warning: no OpenBLAS (apt-get install -y libopenblas0-openmp); "
          "the reference BLAS is ~10x slower", file=sys.stderr)
    return "system libblas.so.3"


def setup_torch(threads=None):
    torch = import_torch()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads or THREADS)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    return torch


def make_optimizer(torch, model, c):
    # weight decay on matrices (embedding, projections, experts), not on
    # norms, biases (the experts' are [E, 2I] / [E, H]) or sinks
    decay, no_decay = [], []
    for n, prm in model.named_parameters():
        (decay if prm.dim() >= 2 and not n.endswith("bias") else no_decay).append(prm)
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=c["lr"], betas=(0.9, 0.95), eps=1e-8)


def train_step(torch, model, opt, x, m, lr, aux_coef=0.01):
    F = torch.nn.functional
    for g in opt.param_groups:
        g["lr"] = lr
    xt = torch.as_tensor(x[:, :-1].astype(np.int64))
    yt = torch.as_tensor(x[:, 1:].astype(np.int64))
    mt = torch.as_tensor(m[:, 1:].astype(np.float32))
    aux = []
    logits = model(xt, aux)
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), yt.reshape(-1), reduction="none")
    loss = (nll * mt.reshape(-1)).sum() / mt.sum().clamp(min=1)
    total = loss + aux_coef * torch.stack(aux).mean()
    opt.zero_grad(set_to_none=True)
    total.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss)


def heldout_nll(torch, model, tok, heldout_text, max_chunks=None):
    """(sum of -log p, token count) over the held-out chunks, scored as
    tools/perplexity.py scores them through the daemon: each chunk a prompt
    of its own, every token but the first."""
    F = torch.nn.functional
    total, count = 0.0, 0
    chunks = perplexity.chunks(heldout_text)
    if max_chunks:
        chunks = chunks[:max_chunks]
    with torch.no_grad():
        for ch in chunks:
            ids = tok.encode(ch)
            if len(ids) < 2:
                continue
            t = torch.as_tensor(np.array(ids, np.int64))[None]
            logp = F.log_softmax(model(t)[0].double(), dim=-1)
            total -= float(logp[torch.arange(len(ids) - 1), t[0, 1:]].sum())
            count += len(ids) - 1
    return total, count


# ---------------------------------------------------------------------------
# 6. export and checks

def write_bf16(out_dir, c, tok, weights):
    """config.json, generation_config.json, tokenizer.json and the bf16
    model.safetensors through gptoss_ckpt's writers."""
    os.makedirs(out_dir, exist_ok=True)
    p = ckpt_params(c, tok.vocab)
    gptoss_ckpt.check_params(p)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model_config_json(c, tok, p), f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(generation_config_json(tok), f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(tok.to_json(), f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    gptoss_ckpt.write_safetensors(os.path.join(out_dir, "model.safetensors"),
                                  gptoss_ckpt.encode(p, weights))


def check_against_reference(torch, model_dir, c, prompts):
    """Torch (float64, weights from the checkpoint) vs gptoss_ref on the
    checkpoint: max |logit difference| over the prompts."""
    ref = gptoss_ref.Model(model_dir)
    ck = gptoss_ref.Checkpoint(model_dir)
    m = build_model(c, ref.cfg.vocab).double()
    m.load_hf({n: ck.get(n) for n, _ in hf_param_shapes(c, ref.cfg.vocab)})
    worst = 0.0
    with torch.no_grad():
        for ids in prompts:
            lt = m(torch.as_tensor(np.array(ids, np.int64))[None])[0].numpy()
            lr = ref.forward(ids)
            worst = max(worst, float(np.abs(lt - lr).max()))
    return worst, m


def check_c_tokenizer(moeserve, tok_path, tok, texts):
    """The C tokenizer must give exactly our ids on every text."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")
        name = f.name
    try:
        with open(name) as fin:
            r = subprocess.run([moeserve, "tokenize", "--tokenizer", tok_path, "--jsonl"], stdin=fin,
                               capture_output=True, text=True, check=True)
    finally:
        os.unlink(name)
    lines = r.stdout.strip().split("\n")
    bad = 0
    for t, line in zip(texts, lines):
        if [int(x) for x in line.split()] != tok.encode(t):
            bad += 1
    return bad + abs(len(lines) - len(texts))


def check_c_logits(moeserve, model_dir, tmodel, prompts):
    """`moeserve generate --logits-out` against the torch model (float64 on
    the checkpoint's weights): max |logit difference|."""
    torch = import_torch()
    worst = 0.0
    for ids in prompts:
        with tempfile.NamedTemporaryFile(suffix=".f32", delete=False) as f:
            path = f.name
        try:
            subprocess.run([moeserve, "generate", "--model", model_dir, "--tokens",
                            ",".join(map(str, ids)), "--max-tokens", "1", "--ignore-eos",
                            "--logits-out", path], check=True, capture_output=True,
                           env=dict(os.environ, MOESERVE_EXACT="1"))
            lc = np.fromfile(path, dtype="<f4").reshape(len(ids), -1)
        finally:
            os.unlink(path)
        with torch.no_grad():
            lt = tmodel(torch.as_tensor(np.array(ids, np.int64))[None])[0].numpy()
        worst = max(worst, float(np.abs(lc - lt).max()))
    return worst


# ---------------------------------------------------------------------------
# main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder (models/default): OUT/bf16/, "
                    "OUT/heldout.txt, OUT/train_report.json")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="full")
    ap.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    ap.add_argument("--kjv-text", help="the output of `bible -f Gen1:1-Rev22:21` (default: run it)")
    ap.add_argument("--moeserve", help="moeserve binary: check the C tokenizer and logits too")
    ap.add_argument("--bench", type=int, metavar="N", help="time N steps, print steps/s, exit")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--threads", type=int, default=THREADS,
                    help="torch threads (default 2; the weights are reproducible for a fixed count)")
    a = ap.parse_args(argv)
    blas = use_openblas(sys.argv[1:] if argv is None else argv)

    c = dict(PRESETS[a.preset])
    if a.steps:
        c["steps"] = a.steps
    t_start = time.time()
    torch = setup_torch(a.threads)

    text = read_kjv(a.kjv_text)
    import hashlib
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest != KJV_SHA256:
        print(f"train_default: note: KJV text sha256 {digest} differs from bible-kjv 4.38's",
              file=sys.stderr)
    chapters = parse_chapters(text)
    train_ch, held_ch = split_chapters(chapters)
    docs = [chapter_text(ch) for ch in train_ch]
    heldout_text = "\n\n".join(chapter_text(ch) for ch in held_ch) + "\n"
    verses = [v for ch in train_ch for v in ch[2]]
    topics = topic_index(train_ch)
    print(f"corpus: {len(chapters)} chapters, {len(train_ch)} train ({len(verses)} verses), "
          f"{len(held_ch)} held out; {len(topics)} topic words", flush=True)

    t0 = time.time()
    tok_texts = docs + [p + a_ for p, a_ in make_chats(2000, 999, verses, topics)]
    # specials are not BPE text: drop them from the tokenizer's training text
    tok_texts = [re.sub(r"<\|[a-z_]+\|>", "\n", t) for t in tok_texts]
    tok = build_tokenizer(tok_texts)
    n_train_tok = sum(len(tok.encode(d)) for d in docs)
    print(f"tokenizer: {tok.vocab} ids ({len(tok.merges)} merges) in {time.time() - t0:.0f} s; "
          f"training text {n_train_tok} tokens", flush=True)

    model = build_model(c, tok.vocab)
    gen = torch.Generator().manual_seed(SEED)
    model.init_weights(gen)
    n_params = sum(p_.numel() for p_ in model.parameters())
    opt = make_optimizer(torch, model, c)
    batches = Batches(tok, docs, verses, topics, c)

    if a.bench:
        x, m = batches.next()
        train_step(torch, model, opt, x, m, c["lr"])   # warm-up, not timed
        t0, c0 = time.time(), time.process_time()
        for i in range(a.bench):
            x, m = batches.next()
            train_step(torch, model, opt, x, m, c["lr"])
        dt, dc = time.time() - t0, time.process_time() - c0
        sps = a.bench / dt
        print(json.dumps({"preset": a.preset, "params": n_params, "threads": a.threads, "blas": blas,
                          "steps_timed": a.bench, "steps_per_s": round(sps, 4),
                          "cpu_s_per_step": round(dc / a.bench, 3),
                          "load_average": os.getloadavg()[0],
                          "tokens_per_step": c["batch"] * c["seq"], "planned_steps": c["steps"],
                          "planned_training_minutes": round(c["steps"] / sps / 60, 1)}))
        return 0

    print(f"model: {n_params} parameters; {c['steps']} steps of {c['batch']} x {c['seq']} tokens",
          flush=True)
    t0 = time.time()
    ema = None
    for step in range(c["steps"]):
        x, m = batches.next()
        loss = train_step(torch, model, opt, x, m, lr_at(step, c, c["steps"]))
        ema = loss if ema is None else 0.98 * ema + 0.02 * loss
        if step % 50 == 0 or step == c["steps"] - 1:
            el = time.time() - t0
            print(f"step {step:5d}  loss {loss:.3f} (avg {ema:.3f})  epoch {batches.epoch}  "
                  f"{(step + 1) / el:.2f} steps/s  {el / 60:.1f} min", flush=True)
        if a.eval_every and step and step % a.eval_every == 0:
            nll, n = heldout_nll(torch, model, tok, heldout_text, max_chunks=20)
            print(f"  held-out ppl (first 20 chunks) {math.exp(nll / n):.2f}", flush=True)
    train_s = time.time() - t0

    # export: bf16-rounded weights, the shipped model
    weights = [(n, round_bf16(w)) for n, w in model.hf_weights()]
    bf16_dir = os.path.join(a.out, "bf16")
    write_bf16(bf16_dir, c, tok, weights)
    with open(os.path.join(a.out, "heldout.txt"), "w") as f:
        f.write(heldout_text)

    # checks
    rng = np.random.default_rng([SEED, 17])
    prompts = [tok.encode(docs[int(i)])[:n] for i, n in
               zip(rng.integers(len(docs), size=3), (1, 40, 200))]
    prompts.append(tok.encode_chat(render_chat([("Continue: In the beginning", "")],
                                               "2025-01-01", "medium")[0]))
    ref_diff, m64 = check_against_reference(torch, bf16_dir, c, prompts)
    print(f"torch float64 vs gptoss_ref on the bf16 checkpoint: max |dlogit| {ref_diff:.2e}")
    nll, n = heldout_nll(torch, m64, tok, heldout_text)
    ppl = math.exp(nll / n)
    print(f"held-out perplexity (bf16 weights, {n} tokens): {ppl:.3f}", flush=True)
    report = {"preset": a.preset, "config": c, "params": n_params, "seed": SEED,
              "train_tokens_per_epoch": n_train_tok, "steps": c["steps"], "epochs_started":
              batches.epoch + 1, "train_minutes": round(train_s / 60, 1),
              "total_minutes": round((time.time() - t_start) / 60, 1),
              "final_train_loss_avg": ema, "heldout_tokens": n, "heldout_ppl_bf16": ppl,
              "torch_vs_ref_max_abs_logit": ref_diff, "torch": torch.__version__,
              "threads": a.threads, "blas": blas,
              "kjv_sha256": digest}
    if a.moeserve:
        bad = check_c_tokenizer(a.moeserve, os.path.join(bf16_dir, "tokenizer.json"), tok,
                                docs + heldout_text.split("\n\n"))
        print(f"C tokenizer vs ours on {len(docs)} + {len(held_ch)} chapters: {bad} mismatches")
        c_diff = check_c_logits(a.moeserve, bf16_dir, m64, prompts)
        print(f"moeserve generate --logits-out vs torch: max |dlogit| {c_diff:.2e}")
        report.update(c_tokenizer_mismatches=bad, c_vs_torch_max_abs_logit=c_diff)
    with open(os.path.join(a.out, "train_report.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
