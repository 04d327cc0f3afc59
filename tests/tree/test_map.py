#!/usr/bin/python3
"""tests/README.md is the map of the tests: every meson test must be on it.

    tests/tree/test_map.py --build BUILD [--readme tests/README.md] [--tests DIR]

Reads the tests this build defines (BUILD/meson-info/intro-tests.json,
written by `meson setup`) and the map: in the README's section "## The map",
a heading per folder (`### `engine/``, ...) and under it a bullet per test
program, which starts with the program's meson tests as backticked names:

    - `kernels`, `kernels-avx512`, `kernels-avx2` (test-kernels.c): ...

(a bullet whose first backticked word is not a test name, such as a file
`testutil.h`, is prose, not a test). Fails, naming each, on:
  - a test this build defines that the map does not list;
  - a test listed under a folder whose suite the test is not in (the
    folder's meson.build gives each of its tests `suite: '<folder>'`);
  - a test listed twice;
  - a listed test that no configuration can define: not defined here, and
    its name is neither a quoted string in a meson.build under tests/ nor a
    quoted prefix ending in '-' there followed by a quoted string of the
    same file ('fuzz-' + name, 'golden-kv-' + kv). Tests that exist only in
    some builds (the fuzz build's, those that need node, the normal build's
    container test) are listed whatever this build is; this check keeps a
    misspelt name from hiding there, not a stale one that a meson.build
    still spells.
Exit 0, or 1 with one line per fault.
"""
import argparse
import json
import os
import re
import sys

NAME = r"[a-z0-9][a-z0-9-]*"
FOLDER = re.compile(r"^###\s+`([a-z0-9-]+)/`")
BULLET = re.compile(r"^- ((?:`" + NAME + r"`(?:,\s*)?)+)")


def read_map(readme):
    """-> [(name, folder, line number)] from the map section. A bullet goes
    on over the indented lines after it, so its names may wrap."""
    out, folder, inside = [], None, False
    bullet = None  # [first line number, text so far]

    def end_bullet():
        if bullet:
            m = BULLET.match(bullet[1])
            if m:
                for name in re.findall(r"`(" + NAME + r")`", m.group(1)):
                    out.append((name, folder, bullet[0]))

    with open(readme, encoding="utf-8") as f:
        for ln, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if bullet and line.startswith("  ") and line.strip():
                bullet[1] += " " + line.strip()
                continue
            end_bullet()
            bullet = None
            if line.startswith("## "):
                inside = line.strip() == "## The map"
                folder = None
                continue
            if not inside:
                continue
            m = FOLDER.match(line)
            if m:
                folder = m.group(1)
            elif line.startswith("- "):
                bullet = [ln, line]
    end_bullet()
    return out


def spellable(tests_dir):
    """Quoted strings of every meson.build under tests/, per file."""
    per_file = []
    for dirpath, dirnames, files in os.walk(tests_dir):
        dirnames[:] = [d for d in dirnames if d != "node_modules"]
        if "meson.build" in files:
            with open(os.path.join(dirpath, "meson.build"), encoding="utf-8") as f:
                text = f.read()
            per_file.append(set(re.findall(r"'([^'\n]*)'", text)))
    return per_file


def could_be_defined(name, per_file):
    for quoted in per_file:
        if name in quoted:
            return True
        for p in quoted:
            if p.endswith("-") and name.startswith(p) and name[len(p):] in quoted:
                return True
    return False


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    tests = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="a configured meson build folder")
    ap.add_argument("--readme", default=os.path.join(tests, "README.md"))
    ap.add_argument("--tests", default=tests, help="the tests/ folder (its meson.build files)")
    a = ap.parse_args()

    intro = os.path.join(a.build, "meson-info", "intro-tests.json")
    try:
        with open(intro, encoding="utf-8") as f:
            defined = {t["name"]: {s.split(":", 1)[-1] for s in t["suite"]} for t in json.load(f)}
    except (OSError, ValueError) as e:
        print(f"test-map: cannot read {intro}: {e}")
        return 1
    listed = read_map(a.readme)
    if not listed:
        print(f"test-map: {a.readme} has no map (a '## The map' section with `name` bullets)")
        return 1

    bad = []
    seen = {}
    for name, folder, ln in listed:
        where = f"{a.readme}:{ln}"
        if name in seen:
            bad.append(f"{where}: `{name}` listed again (first at line {seen[name]})")
            continue
        seen[name] = ln
        if folder is None:
            bad.append(f"{where}: `{name}` is not under a folder heading (### `folder/`)")
        if name in defined:
            if folder and folder not in defined[name]:
                bad.append(f"{where}: `{name}` is listed under {folder}/ but its suites are "
                           f"{sorted(defined[name])}")
    per_file = spellable(a.tests)
    for name, folder, ln in listed:
        if name not in defined and not could_be_defined(name, per_file):
            bad.append(f"{a.readme}:{ln}: `{name}` is listed, but no meson.build under "
                       f"{a.tests} defines it")
    for name in sorted(set(defined) - set(seen)):
        bad.append(f"`{name}` (suites {sorted(defined[name])}) is a meson test that "
                   f"{a.readme} does not list")

    for b in bad:
        print(f"test-map: {b}")
    here_only = len([n for n in seen if n in defined])
    print(f"test-map: {len(defined)} tests in this build, {len(seen)} on the map "
          f"({here_only} of them defined here), {len(bad)} faults")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
