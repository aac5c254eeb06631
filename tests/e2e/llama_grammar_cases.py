#!/usr/bin/env python3
"""Extracts the cases of llama.cpp's tests/test-grammar-integration.cpp:
every test_grammar(desc, grammar, {passing}, {failing}) and
test_schema(desc, schema, {passing}, {failing}) call, its C++ string
literals decoded to bytes. Writes into OUT:
  gN.gbnf, gN.pass.K, gN.fail.K   (test_grammar: GBNF and its strings)
  schemas.sweep                   (test_schema: `pagoda constrain --sweep`
                                   lines S/V/I, instances that parse as JSON)
usage: llama_grammar_cases.py test-grammar-integration.cpp OUT"""
import json
import os
import re
import sys


def lex(src):
    """Tokens: ('s', bytes) for a (concatenated) string literal, or ('p', ch)."""
    i, n, out = 0, len(src), []
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            i = src.find("\n", i)
            i = n if i < 0 else i
        elif src.startswith("/*", i):
            i = src.find("*/", i) + 2
        elif c == 'R' and i + 1 < n and src[i + 1] == '"':
            j = src.index("(", i + 2)
            delim = src[i + 2:j]
            end = src.index(")" + delim + '"', j)
            out.append(("s", src[j + 1:end].encode()))
            i = end + len(delim) + 2
        elif c == '"':
            j, b = i + 1, bytearray()
            while src[j] != '"':
                if src[j] == "\\":
                    e = src[j + 1]
                    simple = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", '"': b'"', "'": b"'", "0": b"\0"}
                    if e == "x":
                        m = re.match(r"[0-9a-fA-F]+", src[j + 2:])
                        b.append(int(m.group(0), 16) & 0xff)
                        j += 2 + len(m.group(0))
                        continue
                    if e in "uU":
                        k = 4 if e == "u" else 8
                        b += chr(int(src[j + 2:j + 2 + k], 16)).encode()
                        j += 2 + k
                        continue
                    b += simple[e]
                    j += 2
                else:
                    b += src[j].encode()
                    j += 1
            out.append(("s", bytes(b)))
            i = j + 1
        elif c.isspace():
            i += 1
        else:
            out.append(("p", c))
            i += 1
    # adjacent literals concatenate
    merged = []
    for t in out:
        if t[0] == "s" and merged and merged[-1][0] == "s":
            merged[-1] = ("s", merged[-1][1] + t[1])
        else:
            merged.append(t)
    return merged


def calls(src, name):
    """(desc, text, passing, failing) of each call to name(...)."""
    for m in re.finditer(r"\b%s\(" % name, src):
        if src[m.start() - 7:m.start()].strip().endswith("void"):
            continue  # the definition
        depth, j = 1, m.end()
        while depth:
            if src[j] == '"' or src.startswith('R"', j):
                # skip literals so their parentheses do not count
                if src[j] == "R":
                    k = src.index("(", j + 2)
                    d = src[j + 2:k]
                    j = src.index(")" + d + '"', k) + len(d) + 2
                    continue
                j += 1
                while src[j] != '"':
                    j += 2 if src[j] == "\\" else 1
                j += 1
                continue
            if src.startswith("//", j):
                j = src.index("\n", j)
                continue
            depth += {"(": 1, ")": -1}.get(src[j], 0)
            j += 1
        toks = lex(src[m.end():j - 1])
        args, cur, lists, inlist = [], None, [], False
        for kind, v in toks:
            if kind == "s":
                if inlist:
                    lists[-1].append(v)
                else:
                    args.append(v)
            elif v == "{":
                inlist = True
                lists.append([])
            elif v == "}":
                inlist = False
        if len(args) >= 2 and len(lists) == 2:
            yield args[0].decode(), args[1], lists[0], lists[1]


def main():
    src = open(sys.argv[1], encoding="utf-8").read()
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    ng = 0
    for i, (desc, g, good, bad) in enumerate(calls(src, "test_grammar")):
        open(os.path.join(out, "g%d.gbnf" % i), "wb").write(g)
        for k, s in enumerate(good):
            open(os.path.join(out, "g%d.pass.%d" % (i, k)), "wb").write(s)
        for k, s in enumerate(bad):
            open(os.path.join(out, "g%d.fail.%d" % (i, k)), "wb").write(s)
        ng += 1
    lines, ns = [], 0
    for desc, schema, good, bad in calls(src, "test_schema"):
        lines.append("S\t" + json.dumps(json.loads(schema), separators=(",", ":"), ensure_ascii=False))
        ns += 1
        for tag, strs in (("V", good), ("I", bad)):
            for s in strs:
                try:
                    v = json.loads(s)
                except ValueError:
                    continue
                lines.append(tag + "\t" + json.dumps(v, separators=(",", ":"), ensure_ascii=False))
    open(os.path.join(out, "schemas.sweep"), "w", encoding="utf-8").write("\n".join(lines) + "\n")
    print("%d grammars, %d schemas" % (ng, ns))


main()
