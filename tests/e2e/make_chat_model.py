#!/usr/bin/python3
"""A small chat-capable GPT-OSS checkpoint for the server tests.

    /usr/bin/python3 tests/e2e/make_chat_model.py --gen tools/gptoss_ckpt.py \
        --tokenizer o200k_harmony.json --out DIR [--vocab N --hidden N --layers N
        --experts N --top-k N]

Writes a random GPT-OSS checkpoint (preset tiny-bf16: one layer, hidden 40)
with the o200k_harmony vocabulary (201088 ids; the embedding and the head
are most of its 32 MB) into DIR, and copies the tokenizer there as
DIR/tokenizer.json.  Its output is gibberish, but the harmony machinery of
`moeserve serve` (chat rendering, encoding, the parser that turns malformed
model output into content, tool-call plumbing) runs for real on it.
The sizes can be given (the vocabulary must be the tokenizer's): the
forced-call test's model has the default model's byte-level vocabulary
(4096 ids), so that its random text often splits a character.
"""
import argparse
import os
import shutil
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen", required=True, help="tools/gptoss_ckpt.py")
    ap.add_argument("--tokenizer", required=True, help="o200k_harmony tokenizer.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", default="201088")
    ap.add_argument("--hidden", default="40")
    sizes = ("layers", "experts", "top-k")
    for k in sizes:
        ap.add_argument("--" + k)
    a = ap.parse_args()
    tmp = a.out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    extra = [x for k in sizes if getattr(a, k.replace("-", "_"))
             for x in ("--" + k, getattr(a, k.replace("-", "_")))]
    subprocess.run([sys.executable, a.gen, "--preset", "tiny-bf16", "--vocab", a.vocab,
                    "--hidden", a.hidden, *extra, "--out", tmp], check=True,
                   stdout=subprocess.DEVNULL)
    shutil.copyfile(a.tokenizer, os.path.join(tmp, "tokenizer.json"))
    # replace the folder at once: a half-written model is never left in place
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp, a.out)


if __name__ == "__main__":
    main()
