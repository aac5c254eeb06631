"""Closed-loop load through pagoda-gateway's HTTP API, shaped like
`pagoda-bench load` (random token-id prompts, fixed output length): S
streams, each sending its next streamed /v1/completions request when the last
one ends. Prints one JSON object: aggregate generated tok/s, TTFT and ITL
p50/p99 in ms (TTFT from sending the request to the first text chunk; ITL
between chunks, which may carry several tokens under load).
Standard library only.  usage: gateway_load.py URL STREAMS REQUESTS PROMPT OUTPUT"""
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

url, streams, requests, plen, olen = sys.argv[1], *map(int, sys.argv[2:6])
u = urllib.parse.urlparse(url)
lock = threading.Lock()
todo = list(range(requests))
ttft, itl, gen = [], [], [0]


def worker(seed):
    rng = random.Random(seed)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    while True:
        with lock:
            if not todo:
                break
            todo.pop()
        body = json.dumps({"model": "m", "prompt": [3 + rng.randrange(400) for _ in range(plen)],
                           "max_tokens": olen, "temperature": 0, "stream": True,
                           "stream_options": {"include_usage": True}})
        t0 = time.monotonic()
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        last, first, n = None, None, 0
        for line in r:
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            ev = json.loads(line[6:])
            now = time.monotonic()
            if ev.get("choices") and ev["choices"][0].get("text"):
                if first is None:
                    first = now - t0
                elif last is not None:
                    with lock:
                        itl.append(now - last)
                last = now
            if ev.get("usage"):
                n = ev["usage"]["completion_tokens"]
        with lock:
            if first is not None:
                ttft.append(first)
            gen[0] += n


def pct(xs, p):
    xs = sorted(xs)
    return 1000 * xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


t0 = time.monotonic()
ths = [threading.Thread(target=worker, args=(i,)) for i in range(streams)]
for t in ths:
    t.start()
for t in ths:
    t.join()
wall = time.monotonic() - t0
print(json.dumps({"streams": streams, "requests": requests, "gen_tokens": gen[0], "wall_s": round(wall, 3),
                  "tok_s": round(gen[0] / wall, 1), "ttft_p50_ms": round(pct(ttft, 50), 1),
                  "ttft_p99_ms": round(pct(ttft, 99), 1), "itl_p50_ms": round(pct(itl, 50), 2),
                  "itl_p99_ms": round(pct(itl, 99), 2)}))
