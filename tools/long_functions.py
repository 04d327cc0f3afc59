#!/usr/bin/env python3
"""C functions longer than a bound in the daemon's rooms (not tests/).

    tools/long_functions.py --src DIR [--max LINES]

A function's length is the lines from its opening brace to its closing brace,
both counted. A long function hides its phases; naming them as functions
keeps each readable on one screen (the bound: 120 lines). KNOWN lists the
functions that may still be long, each with why; one that is no longer long
(or gone) is an error too, so the list only shrinks. Exit 0, or 1 naming
every function over the bound as file:line name (lines).
"""
import argparse
import os
import re
import sys

ROOMS = ["config", "engine", "quant", "models", "server"]
SKIP_DIRS = ("node_modules", "default")

# (file, function): why it may stay long for now.
KNOWN = {
}

IDENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*$")
NOT_FUNCS = {"if", "for", "while", "switch", "return", "sizeof", "do"}


def strip(text):
    """text with comments, string and character literals and preprocessor
    lines blanked out (newlines kept, so line numbers still hold)."""
    out = []
    i, n = 0, len(text)
    bol = True  # at the beginning of a line (only blanks so far)
    while i < n:
        c = text[i]
        if bol and c == "#":
            # a directive, with its continuation lines
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                i += 1
            continue
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "/" and text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
            continue
        if c == "\n":
            bol = True
        elif not c.isspace():
            bol = False
        out.append(c)
        i += 1
    return "".join(out)


def functions(text):
    """(name, line of the opening brace, lines) of every function defined at
    file scope in text: a '{' at depth 0 whose preceding code ends in
    'name(...)' (struct bodies and initialisers end otherwise)."""
    s = strip(text)
    depth, i, n = 0, 0, len(s)
    found = []
    while i < n:
        c = s[i]
        if c == "{":
            if depth == 0:
                name = defined_name(s, i)
                if name:
                    j, d = i, 0
                    while j < n:
                        if s[j] == "{":
                            d += 1
                        elif s[j] == "}":
                            d -= 1
                            if d == 0:
                                break
                        j += 1
                    first = s.count("\n", 0, i) + 1
                    last = s.count("\n", 0, j) + 1
                    found.append((name, first, last - first + 1))
                    i = j + 1
                    continue
            depth += 1
        elif c == "}":
            depth -= 1
        i += 1
    return found


def defined_name(s, brace):
    """The function's name when the code before brace is a definition's
    declarator 'name(params)' (attributes after it allowed), else None."""
    k = brace - 1
    while k >= 0 and s[k].isspace():
        k -= 1
    # trailing __attribute__((...)) or macros without parentheses are rare
    # here; the declarator must end in ')'
    if k < 0 or s[k] != ")":
        return None
    d = 0
    while k >= 0:
        if s[k] == ")":
            d += 1
        elif s[k] == "(":
            d -= 1
            if d == 0:
                break
        k -= 1
    m = IDENT.search(s[:k])
    if not m or m.group(1) in NOT_FUNCS:
        return None
    return m.group(1)


def sources(src):
    for top in ROOMS:
        base = os.path.join(src, top)
        if not os.path.isdir(base):
            continue
        for dirpath, dirnames, files in os.walk(base):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
            for f in files:
                if f.endswith((".c", ".h", ".cu")):
                    yield os.path.relpath(os.path.join(dirpath, f), src)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--max", type=int, default=120)
    args = ap.parse_args()
    bad, seen, n_funcs = [], set(), 0
    for rel in sorted(set(sources(args.src))):
        with open(os.path.join(args.src, rel), encoding="utf-8") as f:
            text = f.read()
        for name, line, length in functions(text):
            n_funcs += 1
            if length <= args.max:
                continue
            if (rel, name) in KNOWN:
                seen.add((rel, name))
                print(f"long-functions: {rel}:{line}: {name} ({length} lines; known: "
                      f"{KNOWN[(rel, name)]})")
            else:
                bad.append(f"{rel}:{line}: {name} is {length} lines (over {args.max}): "
                           f"name its phases as functions")
    for k in sorted(set(KNOWN) - seen):
        bad.append(f"KNOWN lists {k[0]}: {k[1]}, which is no longer long: drop it")
    for b in bad:
        print("long-functions: " + b)
    print(f"long-functions: {n_funcs} functions, {len(seen)} known exceptions, "
          f"{len(bad)} errors")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
