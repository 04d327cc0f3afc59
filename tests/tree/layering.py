#!/usr/bin/env python3
"""The layering rule of docs/ARCHITECTURE.md, checked on every #include.

    tests/tree/layering.py --src DIR

The rooms, bottom up; a file may include headers of its own room and of the
rooms below it, never of one above:

    config < engine < quant < models < server

A backend (engine/cpu, engine/rocm) sits on config and engine and
only server/ may include it: quant/ and models/ reach it through engine's
interface (engine/backend.h), so they run on any backend. engine/ names a
backend only by its registry entry, declared in engine/backend.h.
Structured outputs (engine/grammar) sit on config and engine too; they see
a vocabulary through engine/lm.h's view, never the tokenizer, and engine/
itself does not include them (a constraint is engine.h's struct): models/
(tool forcing) and server/ do.

server/ is four rooms. server/api (the OpenAI and Responses APIs) uses
everything below server/, and of server/ only itself and http/metrics.h,
the counters it records into; nothing it includes may reach
<microhttpd.h>, so the API runs apart from any transport. server/http
adds api; server/bench, api and http; server/cli, all of server/.

tests/ and tools/ may include anything. Quoted includes are resolved by file
name against the tree's headers (names are unique: the build puts every room
on the include path); <...> includes are the system's and libraries'.
KNOWN lists the includes the rule forbids that are still to be removed,
each with what removes it; one that no longer occurs is an error too, so
the list only shrinks. Exit 0, or 1 naming every
forbidden include as file:line.
"""
import argparse
import os
import re
import sys

ROOMS = ["config", "engine", "engine/cpu", "engine/rocm", "engine/grammar", "quant", "models",
         "server/api", "server/http", "server/bench", "server/cli"]
BACKENDS = ("engine/cpu", "engine/rocm")
# headers meson writes into the build tree, and the room they belong to
GENERATED = {"rocm-config.h": "engine/rocm/rocm-config.h"}
FREE = ("tests", "tools")

# room -> the rooms it may include
ALLOWED = {
    "config": {"config"},
    "engine": {"config", "engine"},
    "quant": {"config", "engine", "quant"},
    "models": {"config", "engine", "engine/grammar", "quant", "models"},
}
BELOW_SERVER = {r for r in ROOMS if not r.startswith("server/")}
ALLOWED["server/api"] = BELOW_SERVER | {"server/api"}
ALLOWED["server/http"] = BELOW_SERVER | {"server/api", "server/http"}
ALLOWED["server/bench"] = BELOW_SERVER | {"server/api", "server/http", "server/bench"}
ALLOWED["server/cli"] = set(ROOMS)
# single headers a room may include beyond its rooms: (room, header)
EXTRA = {("server/api", "metrics.h")}
# the rooms that may not reach libmicrohttpd, even through a header
NO_MHD = ("server/api",)
for b in BACKENDS + ("engine/grammar",):
    ALLOWED[b] = {"config", "engine", b}

# (including file, included header): what removes it.
KNOWN = {}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
MHD = re.compile(r'^\s*#\s*include\s+<microhttpd\.h>')


def reaches_mhd(src, rel, headers, memo):
    """Does rel include <microhttpd.h>, itself or through the tree's headers?"""
    if rel not in memo:
        memo[rel] = False  # a cycle does not reach it by itself
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            lines = f.read().splitlines()
        memo[rel] = any(MHD.match(l) for l in lines) or any(
            reaches_mhd(src, headers[os.path.basename(m.group(1))][0], headers, memo)
            for m in map(INCLUDE.match, lines)
            if m and os.path.basename(m.group(1)) in headers
            and os.path.basename(m.group(1)) not in GENERATED)
    return memo[rel]


def mhd_errors(src, files, headers):
    memo = {}
    return [f"{rel}: {room_of(rel)}/ reaches <microhttpd.h> (the API has no transport type)"
            for rel in files if room_of(rel) in NO_MHD and reaches_mhd(src, rel, headers, memo)]


def room_of(rel):
    """The room of a source path relative to the tree, or None."""
    d = os.path.dirname(rel)
    best = None
    for r in ROOMS + list(FREE):
        if d == r or d.startswith(r + "/"):
            if best is None or len(r) > len(best):
                best = r
    return best


def sources(src):
    for top in ROOMS + list(FREE):
        base = os.path.join(src, top)
        if not os.path.isdir(base):
            continue
        for dirpath, dirnames, files in os.walk(base):
            dirnames[:] = [d for d in dirnames if d not in ("node_modules", "default")]
            for f in files:
                if f.endswith((".c", ".h", ".cu")):
                    yield os.path.relpath(os.path.join(dirpath, f), src)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True)
    args = ap.parse_args()
    files = sorted(set(sources(args.src)))
    headers = {}
    for rel in files:
        # a .cu is included whole by the host model's build (engine/rocm/sim)
        if rel.endswith((".h", ".cu")):
            headers.setdefault(os.path.basename(rel), []).append(rel)
    for name, rel in GENERATED.items():
        headers.setdefault(name, []).append(rel)
    bad, seen, n_inc = [], set(), 0
    for name, where in headers.items():
        if len(where) > 1 and any(room_of(w) not in FREE for w in where):
            bad.append(f"header name {name} is not unique: {', '.join(where)}")
    for rel in files:
        room = room_of(rel)
        if room in FREE:
            continue
        with open(os.path.join(args.src, rel), encoding="utf-8") as f:
            for ln, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                n_inc += 1
                inc = os.path.basename(m.group(1))
                where = headers.get(inc)
                if not where:
                    bad.append(f"{rel}:{ln}: \"{m.group(1)}\" is no header of the tree")
                    continue
                target = room_of(where[0])
                if target in FREE:
                    bad.append(f"{rel}:{ln}: includes {where[0]} (tests/tools are not a room)")
                elif target not in ALLOWED[room] and (room, inc) not in EXTRA:
                    if (rel, inc) in KNOWN:
                        seen.add((rel, inc))
                    else:
                        why = ("a backend: reach it through engine/backend.h"
                               if target in BACKENDS else f"{target}/ is above it")
                        bad.append(f"{rel}:{ln}: {room}/ may not include {where[0]} ({why})")
    bad += mhd_errors(args.src, files, headers)
    for k in sorted(set(KNOWN) - seen):
        bad.append(f"KNOWN lists {k[0]} -> {k[1]}, which no longer occurs: drop it")
    for b in bad:
        print("layering: " + b)
    print(f"layering: {len(files)} files, {n_inc} includes of the tree, "
          f"{len(seen)} known exceptions, {len(bad)} errors")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
