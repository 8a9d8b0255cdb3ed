#!/usr/bin/env python3
"""Fails on an import cycle among the modules of a Rust crate.

    ci/lint/module-cycles.py [SRC_DIR]    # default: crates/controllers/src

A module is a top-level file `X.rs` or directory `X/` of SRC_DIR; every file
under `X/` belongs to module X. The crate root (lib.rs, main.rs) is not a
module: everything hangs off it, so edges into and out of it are ignored.

Module A depends on module B when a file of A names a path that starts in B:
  - `crate::B` anywhere in code, `use crate::{B::X, ...}` groups included
    (`$crate::B` in a macro too: the text lives in A);
  - `super::B` where the `super`s climb out of A to the crate root; a
    `super` that stays inside A (a `tests` module, A/x.rs) adds nothing;
  - an intra-doc link in a doc comment (`///`, `//!`, `/** */`, `/*! */`):
    [`crate::B::X`], [text](crate::B::X), [text][crate::B::X] or
    `[name]: crate::B::X`. A reader follows the link into B, and rustdoc's
    broken-link lint fails when B loses the item, so it is a dependency.
Plain comments, other doc text and string literals bind nothing and do not
count. Other paths (`self::`, names a `use` brought in) add nothing the `use`
did not already add. A module naming itself is not a cycle.

Prints cycles as `a -> b -> a`, with one file:line per edge (a code
reference when there is one), and exits 1: for each edge on a cycle, the
shortest cycle through it, so that every edge to consider breaking shows
without the many longer cycles they combine into; prints one OK line with
the counts of modules and edges and exits 0 when there is no cycle.
"""

import bisect
import os
import re
import sys
from collections import defaultdict

DOC_LINK = re.compile(r"(?:\[|\]\(|\]:[ \t]*)`?(?:[a-z]+@)?crate::([A-Za-z_][A-Za-z0-9_]*)")


def tokenize(text):
    """Code tokens as (text, offset), and doc comment bodies as (offset, text).

    Comments and string and char literals are dropped, so that `crate::x`
    inside them is not read as a path."""
    tokens, docs = [], []
    i, n = 0, len(text)

    def skip_string(j):
        while j < n:
            if text[j] == "\\":
                j += 2
            elif text[j] == '"':
                return j + 1
            else:
                j += 1
        return n

    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            if (text.startswith("///", i) and not text.startswith("////", i)) or text.startswith("//!", i):
                docs.append((i + 3, text[i + 3 : end]))
            i = end
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            outer_doc = text.startswith("/**", i) and not text.startswith(("/***", "/**/"), i)
            if outer_doc or text.startswith("/*!", i):
                docs.append((i + 3, text[i + 3 : j - 2]))
            i = j
        elif c == '"':
            i = skip_string(i + 1)
        elif c == "'":
            if text.startswith("\\", i + 1):  # '\n', '\'', '\u{..}'
                end = text.find("'", i + 3)
                i = n if end < 0 else end + 1
            elif i + 2 < n and text[i + 2] == "'":  # 'x'
                i += 3
            else:  # a lifetime or label: its name follows as an identifier
                i += 1
        elif c.isalnum() or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            if word in ("r", "br", "cr") and j < n and text[j] in '#"':
                k = j
                while k < n and text[k] == "#":
                    k += 1
                if k < n and text[k] == '"':
                    close = '"' + "#" * (k - j)
                    end = text.find(close, k + 1)
                    i = n if end < 0 else end + len(close)
                    continue
            if word in ("b", "c") and j < n and text[j] == '"':
                i = skip_string(j + 1)
                continue
            if not word[0].isdigit():
                tokens.append((word, i))
            i = j
        elif text.startswith("::", i):
            tokens.append(("::", i))
            i += 2
        else:
            tokens.append((c, i))
            i += 1
    return tokens, docs


def heads(tokens, at):
    """The first names of the path that continues at `at`: one name, or each
    item's first name in a `{...}` group."""
    if at >= len(tokens):
        return []
    if tokens[at][0] != "{":
        return [tokens[at]]
    found, depth, expect = [], 0, True
    for token in tokens[at:]:
        word = token[0]
        if word == "{":
            depth += 1
            expect = depth == 1
        elif word == "}":
            depth -= 1
            if depth == 0:
                break
        elif word == "," and depth == 1:
            expect = True
        elif expect:
            found.append(token)
            expect = False
    return found


def references(text, path_in_crate):
    """(name, offset, is_doc) for each crate-root path in `text`, whose file is
    the module at `path_in_crate` (e.g. ["cache"] or ["pool", "scale"])."""
    tokens, docs = tokenize(text)
    words = [token[0] for token in tokens]
    found = []
    inline, depth, opening = [], 0, False  # inline `mod x { ... }` nesting
    for k, word in enumerate(words):
        after_colons = k > 0 and words[k - 1] == "::"
        if word == "{":
            depth += 1
            if opening:
                inline.append(depth)
            opening = False
        elif word == "}":
            if inline and inline[-1] == depth:
                inline.pop()
            depth -= 1
        elif word == ";":
            opening = False
        elif word == "mod" and k + 2 < len(words) and words[k + 2] == "{":
            opening = True
        elif word == "crate" and not after_colons and k + 1 < len(words) and words[k + 1] == "::":
            found += [(name, offset, False) for name, offset in heads(tokens, k + 2)]
        elif word == "super" and not after_colons:
            climbed, at = 0, k
            while at + 1 < len(words) and words[at] == "super" and words[at + 1] == "::":
                climbed, at = climbed + 1, at + 2
            if climbed and climbed == len(path_in_crate) + len(inline):
                found += [(name, offset, False) for name, offset in heads(tokens, at)]
    for offset, doc in docs:
        found += [(m.group(1), offset + m.start(1), True) for m in DOC_LINK.finditer(doc)]
    return found


def modules_of(src):
    """{module: [(file, path in crate)]} for the .rs files below `src`."""
    modules = defaultdict(list)
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            file = os.path.join(root, name)
            parts = os.path.relpath(file, src)[: -len(".rs")].split(os.sep)
            if parts in (["lib"], ["main"]):
                continue
            if len(parts) > 1 and parts[-1] == "mod":
                parts.pop()
            modules[parts[0]].append((file, parts))
    return modules


def cycles_of(graph):
    """For each edge that lies on a cycle, the shortest cycle through it, each
    once, from its least module, shortest first. Every edge to consider for
    breaking is shown, without listing the many longer cycles they combine into."""
    found = set()
    for source in sorted(graph):
        for target in sorted(graph[source]):
            back = {target: None}  # breadth-first from target back to source
            queue = [target]
            while queue and source not in back:
                node = queue.pop(0)
                for next_ in sorted(graph[node]):
                    if next_ not in back:
                        back[next_] = node
                        queue.append(next_)
            if source not in back:
                continue
            cycle, node = [], source
            while node is not None:
                cycle.append(node)
                node = back[node]
            cycle = [source] + cycle[::-1][:-1]
            least = cycle.index(min(cycle))
            found.add(tuple(cycle[least:] + cycle[:least]))
    return sorted(([*cycle, cycle[0]] for cycle in found), key=lambda cycle: (len(cycle), cycle))


def main(argv):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if len(argv) > 2:
        print(f"usage: {argv[0]} [SRC_DIR]", file=sys.stderr)
        return 2
    src = argv[1] if len(argv) == 2 else os.path.relpath(os.path.join(repo, "crates/controllers/src"))
    if not os.path.isdir(src):
        print(f"module-cycles: {src} is not a directory", file=sys.stderr)
        return 2
    modules = modules_of(src)
    # (from, to) -> where it is seen: the first code reference, else the first doc link.
    edges = {}
    for module, files in modules.items():
        for file, path_in_crate in files:
            with open(file, encoding="utf-8") as f:
                text = f.read()
            lines = [i for i, c in enumerate(text) if c == "\n"]
            for name, offset, is_doc in references(text, path_in_crate):
                if name not in modules or name == module:
                    continue
                seen = (is_doc, file, bisect.bisect_left(lines, offset) + 1)
                edges[(module, name)] = min(edges.get((module, name), seen), seen)
    graph = defaultdict(set)
    for source, target in edges:
        graph[source].add(target)
    cycles = cycles_of(graph)
    if not cycles:
        print(f"module-cycles: OK, {len(modules)} modules, {len(edges)} edges, no cycle in {src}")
        return 0
    for cycle in cycles:
        print("cycle: " + " -> ".join(cycle))
        for source, target in zip(cycle, cycle[1:]):
            is_doc, file, line = edges[(source, target)]
            print(f"    {source} -> {target}: {file}:{line}" + (" (doc link)" if is_doc else ""))
    counted = f"{len(cycles)} cycle" + ("s" if len(cycles) > 1 else "")
    print(f"module-cycles: FAIL, {counted} among {len(modules)} modules of {src}; break an edge of each")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
