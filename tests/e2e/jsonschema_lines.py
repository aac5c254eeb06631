#!/usr/bin/env python3
"""MaskBench's schema files (each {"schema", "tests": [{"valid", "data"}]}) as
the lines `pagoda constrain --sweep` reads: "S\t<schema>", then "V\t<data>"
or "I\t<data>" per test, compact JSON. Files in name order; with --every N,
only every N-th file (a deterministic subset)."""
import json
import os
import sys

def main():
    d = sys.argv[1]
    every = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--every" else 1
    names = sorted(os.listdir(d))[::every]
    out = sys.stdout
    for n in names:
        with open(os.path.join(d, n), encoding="utf-8") as f:
            doc = json.load(f)
        dump = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        try:
            out.write("S\t" + dump(doc["schema"]) + "\n")
        except ValueError:
            continue
        for t in doc.get("tests", []):
            try:
                out.write(("V\t" if t["valid"] else "I\t") + dump(t["data"]) + "\n")
            except ValueError:
                pass

main()
