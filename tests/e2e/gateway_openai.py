"""pagoda-gateway through the official OpenAI Python SDK (tests/e2e/gateway_openai.sh
starts pagodad on SmolLM2-135M-Instruct and the gateway, then runs this).

argv: base URL, API key, pagoda binary, pagodad socket, the GGUF file.
Every check prints FAIL: ... on a mismatch; the exit status counts them."""
import http.client
import json
import jsonschema
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import openai
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

BASE, KEY, PAGODA, SOCK = sys.argv[1:5]
MODEL = "smollm2"
client = OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=120)
fails = 0
checks = 0


def check(cond, msg):
    global fails, checks
    checks += 1
    if not cond:
        fails += 1
        print("FAIL:", msg, file=sys.stderr, flush=True)


def generate(*args):
    """`pagoda generate` straight through the rings: the reference."""
    r = subprocess.run([PAGODA, "generate", "--socket", SOCK, "--temp", "0", *args],
                       capture_output=True, check=True)
    return r.stdout.decode()


def metrics():
    with urllib.request.urlopen(BASE + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.name + json.dumps(dict(sorted(s.labels.items())), sort_keys=True)
            out[key] = s.value
    return out


def m(snap, name, **labels):
    labels.setdefault("model_name", MODEL)
    return snap.get(name + json.dumps(dict(sorted(labels.items())), sort_keys=True), 0.0)


def m_any(snap, name):
    """A sample whatever its labels (counters without model_name)."""
    return sum(v for k, v in snap.items() if k.split("{", 1)[0] == name)


Q = "What color is the sky?"

# ---- /v1/models --------------------------------------------------------------
models = client.models.list()
check([x.id for x in models.data] == [MODEL], f"models: {[x.id for x in models.data]}")

# ---- chat, non-streamed: greedy text equals `pagoda generate --chat` ----------
want = generate("--chat", "-p", Q, "-n", "40")
want_ids = generate("--chat", "-p", Q, "-n", "40", "--ids").split()
r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": Q}],
                                   temperature=0, max_tokens=40)
got = r.choices[0].message.content
check(got == want, f"chat: {got!r} != pagoda generate's {want!r}")
check(r.object == "chat.completion" and r.id.startswith("chatcmpl-"), f"chat envelope {r.object} {r.id}")
check(r.choices[0].message.role == "assistant", "chat role")
check(r.choices[0].finish_reason == ("length" if len(want_ids) == 40 else "stop"),
      f"chat finish_reason {r.choices[0].finish_reason} after {len(want_ids)} tokens")
check(r.usage.completion_tokens == len(want_ids), f"completion_tokens {r.usage.completion_tokens} != {len(want_ids)}")
check(r.usage.prompt_tokens > 5 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens,
      f"usage {r.usage}")
check(r.usage.prompt_tokens_details is not None and r.usage.prompt_tokens_details.cached_tokens is not None,
      "usage.prompt_tokens_details.cached_tokens missing")

# content as text parts, and a system message: same reply as the plain string
r2 = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=40,
                                    messages=[{"role": "user", "content": [{"type": "text", "text": "What color "},
                                                                           {"type": "text", "text": "is the sky?"}]}])
check(r2.choices[0].message.content == want, "chat with text parts differs from the string content")

# logprobs through the ring: one per token, the text they released adds up
rl = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": Q}], temperature=0,
                                    max_tokens=40, logprobs=True)
lps = rl.choices[0].logprobs.content if rl.choices[0].logprobs else []
check(rl.choices[0].message.content == want, "logprobs changed the greedy reply")
check(len(lps) == rl.usage.completion_tokens, f"{len(lps)} logprobs for {rl.usage.completion_tokens} tokens")
check(all(-100 < x.logprob <= 0 for x in lps), f"logprobs out of range: {[x.logprob for x in lps]}")
check("".join(x.token for x in lps) == want, "the logprob tokens do not spell the reply")
check(all(bytes(x.bytes) == x.token.encode() for x in lps), "logprob bytes differ from the token text")
check(sum(x.logprob for x in lps) < 0, "all logprobs are 0")
sl = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": Q}], temperature=0,
                                         max_tokens=40, logprobs=True, stream=True))
slp = [x for c in sl if c.choices and c.choices[0].logprobs for x in c.choices[0].logprobs.content]
check([x.logprob for x in slp] == [x.logprob for x in lps], "streamed logprobs differ from the whole answer's")

# top_logprobs: sorted alternatives, the greedy token first with its own logprob
rt = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": Q}], temperature=0,
                                    max_tokens=40, logprobs=True, top_logprobs=3)
tl = rt.choices[0].logprobs.content if rt.choices[0].logprobs else []
check(rt.choices[0].message.content == want, "top_logprobs changed the greedy reply")
check(len(tl) == len(lps) and all(len(x.top_logprobs) == 3 for x in tl), "not 3 top_logprobs per token")
check(all(x.top_logprobs[0].logprob == x.logprob for x in tl), "the greedy token is not the top alternative")
check(all([a.logprob for a in x.top_logprobs] == sorted((a.logprob for a in x.top_logprobs), reverse=True)
          for x in tl), "top_logprobs not sorted")
check(all(bytes(a.bytes) == a.token.encode() for x in tl for a in x.top_logprobs), "top_logprobs bytes differ")

# presence and frequency penalties: the same greedy reply as the rings give
pen = generate("--chat", "-p", Q, "-n", "40", "--presence-penalty", "1.5", "--frequency-penalty", "1.5")
rp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": Q}], temperature=0,
                                    max_tokens=40, presence_penalty=1.5, frequency_penalty=1.5)
check(rp.choices[0].message.content == pen, f"penalized chat {rp.choices[0].message.content!r} != {pen!r}")

# response_format: the reply is JSON valid against the schema (python3-jsonschema)
schema = {"type": "object", "properties": {"color": {"type": "string", "maxLength": 12},
                                           "bright": {"type": "boolean"}},
          "required": ["color", "bright"], "additionalProperties": False}
for temp in (0, 1.0):
    rj = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": Q}], temperature=temp,
                                        seed=3, max_tokens=60, response_format={
                                            "type": "json_schema", "json_schema": {"name": "sky", "schema": schema}})
    try:
        jsonschema.validate(json.loads(rj.choices[0].message.content), schema)
        check(True, "")
    except Exception as e:  # noqa: BLE001
        check(False, f"response_format json_schema (temperature {temp}): {rj.choices[0].message.content!r}: {e}")
ro = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Describe the sky as JSON."}],
                                    temperature=0, max_tokens=120, response_format={"type": "json_object"})
if ro.choices[0].finish_reason == "stop":
    try:
        check(isinstance(json.loads(ro.choices[0].message.content), dict), "json_object: not an object")
    except ValueError as e:
        check(False, f"json_object: {ro.choices[0].message.content!r}: {e}")
else:  # an object that never closes within max_tokens: still a prefix of one
    check(ro.choices[0].message.content.startswith("{"), f"json_object: {ro.choices[0].message.content!r}")

# ---- chat, streamed ------------------------------------------------------------
chunks = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": Q}],
                                             temperature=0, max_tokens=40, stream=True,
                                             stream_options={"include_usage": True}))
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
check(text == want, f"streamed chat {text!r} != {want!r}")
check(chunks[0].choices[0].delta.role == "assistant", "first chunk carries the role")
fin = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
check(fin == [r.choices[0].finish_reason], f"finish reasons in the stream: {fin}")
check(not chunks[-1].choices and chunks[-1].usage is not None
      and chunks[-1].usage.completion_tokens == len(want_ids), f"last chunk is not the usage chunk: {chunks[-1]}")
check(all(c.usage is None for c in chunks[:-1]), "usage before the last chunk")
check(len({c.id for c in chunks}) == 1, "chunks of one stream share an id")
# without include_usage: no usage chunk
chunks = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": Q}],
                                             temperature=0, max_tokens=8, stream=True))
check(all(c.choices for c in chunks), "a usage chunk came without stream_options.include_usage")

# the raw stream ends with data: [DONE]
u = urllib.parse.urlparse(BASE)
hc = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
hc.request("POST", "/v1/chat/completions", json.dumps({"model": MODEL, "stream": True, "max_tokens": 4,
                                                       "messages": [{"role": "user", "content": Q}]}),
           {"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
resp = hc.getresponse()
raw = resp.read().decode()
hc.close()
check(resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event-stream"),
      f"stream status {resp.status} {resp.getheader('Content-Type')}")
check(raw.rstrip("\n").endswith("data: [DONE]"), f"stream does not end with data: [DONE]: {raw[-80:]!r}")

# ---- completions: greedy text equals `pagoda generate -p` -------------------------
P = "Once upon a time, there was a little"
want_c = generate("-p", P, "-n", "48")
rc = client.completions.create(model=MODEL, prompt=P, temperature=0, max_tokens=48)
check(rc.choices[0].text == want_c, f"completion {rc.choices[0].text!r} != {want_c!r}")
check(rc.object == "text_completion", "completion object")
sc = "".join(c.choices[0].text for c in client.completions.create(model=MODEL, prompt=P, temperature=0,
                                                                  max_tokens=48, stream=True) if c.choices)
check(sc == want_c, f"streamed completion {sc!r} != {want_c!r}")
# a prompt of token ids answers like its text
MODEL_FILE = sys.argv[5]
for flags in ([], ["--bos"]):
    ids = [int(x) for x in subprocess.run([PAGODA, "tokenize", "-m", MODEL_FILE, *flags], input=P.encode(),
                                          capture_output=True, check=True).stdout.split()]
    if len(ids) == rc.usage.prompt_tokens:
        break
ri = client.completions.create(model=MODEL, prompt=ids, temperature=0, max_tokens=48)
check(ri.usage.prompt_tokens == len(ids) and ri.choices[0].text == want_c,
      f"prompt as ids {ids}: {ri.choices[0].text!r}, usage {ri.usage}")
# ---- stop --------------------------------------------------------------------------
words = want_c.split()
if len(words) >= 4:
    stop = words[3]
    rs = client.completions.create(model=MODEL, prompt=P, temperature=0, max_tokens=48, stop=[stop])
    cut = want_c[:want_c.index(stop)]
    check(rs.choices[0].text == cut, f"stop {stop!r}: {rs.choices[0].text!r} != {cut!r}")
    check(rs.choices[0].finish_reason == "stop", f"stop: finish_reason {rs.choices[0].finish_reason}")
else:
    check(False, f"greedy completion too short for the stop check: {want_c!r}")

# ---- seed --------------------------------------------------------------------------
a = client.completions.create(model=MODEL, prompt=P, temperature=1.0, max_tokens=32, seed=1234)
b = client.completions.create(model=MODEL, prompt=P, temperature=1.0, max_tokens=32, seed=1234)
check(a.choices[0].text == b.choices[0].text, "the same seed gave different text")
texts = {client.completions.create(model=MODEL, prompt=P, temperature=1.0, max_tokens=32, seed=s).choices[0].text
         for s in (1, 2, 3, 4)}
check(len(texts) > 1, "four seeds gave one text: the seed is not used")

# ---- n choices: seeds seed, seed + 1, ...; the prompt prefilled once -------------
LP = ("In a village %d by the sea, " % time.time_ns()) + "the fishermen went out every morning. " * 12
before = metrics()
rn = client.completions.create(model=MODEL, prompt=LP, temperature=1.0, max_tokens=16, seed=77, n=3)
hits = m(metrics(), "vllm:prefix_cache_hits_total") - m(before, "vllm:prefix_cache_hits_total")
check([c.index for c in rn.choices] == [0, 1, 2], f"n=3: choice indices {[c.index for c in rn.choices]}")
singles = [client.completions.create(model=MODEL, prompt=LP, temperature=1.0, max_tokens=16, seed=77 + i)
           for i in range(3)]
for i, one in enumerate(singles):
    check(rn.choices[i].text == one.choices[0].text,
          f"n=3 choice {i} {rn.choices[i].text!r} != seed {77 + i}'s {one.choices[0].text!r}")
check(len({c.text for c in rn.choices}) > 1, "n=3 gave three equal texts")
check(rn.usage.completion_tokens == sum(x.usage.completion_tokens for x in singles)
      and rn.usage.prompt_tokens == singles[0].usage.prompt_tokens, f"n=3 usage {rn.usage}")
check(hits >= 2 * 64, f"n=3 on a {rn.usage.prompt_tokens}-token prompt: {hits} prefix-cache hits, want the "
      "2 later choices to find the first's prompt")
# streamed chat, n=2: each index spells its choice, one finish each, one usage
mq = [{"role": "user", "content": Q}]
wn = client.chat.completions.create(model=MODEL, messages=mq, temperature=0.8, max_tokens=12, seed=5, n=2)
sn = list(client.chat.completions.create(model=MODEL, messages=mq, temperature=0.8, max_tokens=12, seed=5, n=2,
                                         stream=True, stream_options={"include_usage": True}))
for i in range(2):
    txt = "".join(c.choices[0].delta.content or "" for c in sn if c.choices and c.choices[0].index == i)
    check(txt == wn.choices[i].message.content, f"streamed n=2 choice {i}: {txt!r} != {wn.choices[i].message.content!r}")
    fins = [c for c in sn if c.choices and c.choices[0].index == i and c.choices[0].finish_reason]
    check(len(fins) == 1, f"streamed n=2 choice {i}: {len(fins)} finish chunks")
check(sn[-1].usage is not None and sn[-1].usage.completion_tokens == wn.usage.completion_tokens,
      f"streamed n=2 usage {sn[-1].usage} != {wn.usage}")

# ---- completions logprobs=0: the sampled tokens' own, in the legacy arrays --------
rl = client.completions.create(model=MODEL, prompt=P, temperature=0, max_tokens=24, logprobs=0)
lp = rl.choices[0].logprobs
check(lp is not None and "".join(lp.tokens) == rl.choices[0].text, "completions logprobs tokens do not spell the text")
check(lp is not None and len(lp.token_logprobs) == rl.usage.completion_tokens
      and all(-100 < x <= 0 for x in lp.token_logprobs), "completions token_logprobs")
check(lp is not None and lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))],
      f"completions text_offset {lp.text_offset if lp else None}")
check(lp is not None and lp.top_logprobs is None, "completions logprobs=0 gave top_logprobs")
# logprobs=3: per token the 3 most likely as {token: logprob}, the greedy one among them, the best
r3 = client.completions.create(model=MODEL, prompt=P, temperature=0, max_tokens=24, logprobs=3)
l3 = r3.choices[0].logprobs
check(l3 is not None and l3.token_logprobs == lp.token_logprobs and len(l3.top_logprobs) == len(l3.tokens)
      and all(1 <= len(d) <= 3 for d in l3.top_logprobs), "completions logprobs=3: top_logprobs")
check(l3 is not None and all(abs(max(d.values()) - x) < 1e-6 for d, x in zip(l3.top_logprobs, l3.token_logprobs)),
      "completions logprobs=3: the greedy token is not the most likely alternative")
sl = [c for c in client.completions.create(model=MODEL, prompt=P, temperature=0, max_tokens=24, logprobs=0,
                                           stream=True) if c.choices and c.choices[0].logprobs]
check([x for c in sl for x in c.choices[0].logprobs.token_logprobs] == lp.token_logprobs,
      "streamed completions logprobs differ from the whole answer's")
check([x for c in sl for x in c.choices[0].logprobs.text_offset] == lp.text_offset,
      "streamed completions text_offset differs from the whole answer's")

# ---- cached tokens from the prefix cache -----------------------------------------
sysmsg = ("You are a careful assistant %d. " % time.time_ns()) + "Answer in one short sentence. " * 12
msgs = [{"role": "system", "content": sysmsg}, {"role": "user", "content": Q}]
c1 = client.chat.completions.create(model=MODEL, messages=msgs, temperature=0, max_tokens=4)
c2 = client.chat.completions.create(model=MODEL, messages=msgs[:1] + [{"role": "user", "content": "Why?"}],
                                    temperature=0, max_tokens=4)
check(c1.usage.prompt_tokens_details.cached_tokens == 0,
      f"first request cached_tokens {c1.usage.prompt_tokens_details.cached_tokens}, expected 0")
check(c2.usage.prompt_tokens_details.cached_tokens >= 64,
      f"second request shares {c1.usage.prompt_tokens}-token prefix but cached_tokens is "
      f"{c2.usage.prompt_tokens_details.cached_tokens}")

# ---- each API key is its own prefix-cache scope ------------------------------------
other = OpenAI(base_url=BASE + "/v1", api_key="second-key", max_retries=0, timeout=120)
c3 = other.chat.completions.create(model=MODEL, messages=msgs, temperature=0, max_tokens=4)
c4 = other.chat.completions.create(model=MODEL, messages=msgs, temperature=0, max_tokens=4)
check(c3.usage.prompt_tokens_details.cached_tokens == 0,
      f"another API key found {c3.usage.prompt_tokens_details.cached_tokens} of the first key's tokens cached")
check(c4.usage.prompt_tokens_details.cached_tokens >= 64,
      f"the second key's repeat found {c4.usage.prompt_tokens_details.cached_tokens} cached (want >= 64)")
check(c3.choices[0].message.content == c1.choices[0].message.content, "scopes changed the greedy reply")

# ---- errors, in OpenAI's error object ----------------------------------------------
def expect_error(cls, status, fn, what, param=None):
    try:
        fn()
    except cls as e:
        check(e.status_code == status, f"{what}: status {e.status_code}, expected {status}")
        body = e.body if isinstance(e.body, dict) else {}
        check(isinstance(body.get("message"), str) and body.get("message"), f"{what}: no error message: {e.body}")
        if param:
            check(body.get("param") == param, f"{what}: param {body.get('param')}, expected {param}")
        return
    except Exception as e:  # noqa: BLE001
        check(False, f"{what}: raised {type(e).__name__}: {e}")
        return
    check(False, f"{what}: no error")


msg1 = [{"role": "user", "content": "hi"}]
expect_error(openai.BadRequestError, 400, lambda: client.chat.completions.create(model=MODEL, messages=msg1, n=17),
             "n=17", "n")
expect_error(openai.BadRequestError, 400, lambda: client.completions.create(model=MODEL, prompt="x", logprobs=21),
             "completions logprobs=21", "logprobs")
expect_error(openai.BadRequestError, 400, lambda: client.chat.completions.create(
    model=MODEL, messages=msg1, response_format={"type": "json_schema", "json_schema": {
        "name": "r", "schema": {"$ref": "https://example.com/s.json"}}}), "a schema the daemon refuses")
expect_error(openai.BadRequestError, 400, lambda: client.chat.completions.create(
    model=MODEL, messages=msg1, response_format={"type": "yaml"}), "response_format yaml", "response_format")
expect_error(openai.BadRequestError, 400, lambda: client.chat.completions.create(
    model=MODEL, messages=msg1, top_logprobs=2), "top_logprobs without logprobs", "top_logprobs")
expect_error(openai.BadRequestError, 400, lambda: client.chat.completions.create(
    model=MODEL, messages=msg1, presence_penalty=2.5), "presence_penalty 2.5", "presence_penalty")
expect_error(openai.BadRequestError, 400, lambda: client.chat.completions.create(
    model=MODEL, messages=msg1, temperature=3), "temperature 3", "temperature")
expect_error(openai.BadRequestError, 400, lambda: client.chat.completions.create(
    model=MODEL, messages=[]), "no messages", "messages")
expect_error(openai.BadRequestError, 400, lambda: client.chat.completions.create(
    model=MODEL, messages=[{"role": "wizard", "content": "x"}]), "bad role", "messages")
expect_error(openai.BadRequestError, 400, lambda: client.completions.create(
    model=MODEL, prompt="x", stop=["a", "b", "c", "d", "e"]), "5 stops", "stop")
expect_error(openai.BadRequestError, 400, lambda: client.completions.create(
    model=MODEL, prompt=P, max_tokens=1 << 20), "beyond the context")
expect_error(openai.BadRequestError, 400, lambda: client.completions.create(
    model=MODEL, prompt=["a", "b"]), "batch of prompts", "prompt")
bad = OpenAI(base_url=BASE + "/v1", api_key="not-the-key", max_retries=0)
expect_error(openai.AuthenticationError, 401, lambda: bad.models.list(), "wrong API key")
for path, body, status in (("/v1/chat/completions", b"{not json", 400), ("/v1/nothing", b"", 404),
                           ("/v1/chat/completions", b"x" * (5 << 20), 413)):
    hc = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        hc.request("POST", path, body, {"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
        resp = hc.getresponse()
        data = resp.read()
        check(resp.status == status, f"POST {path}: {resp.status}, expected {status}")
        check("error" in json.loads(data), f"POST {path}: not an error object: {data[:100]!r}")
    except (ConnectionError, http.client.HTTPException) as e:
        check(status == 413, f"POST {path}: {e}")
    finally:
        hc.close()

# ---- metrics: R requests show R in the counters -----------------------------------
before = metrics()
R = 5
usages = [client.completions.create(model=MODEL, prompt=f"Tom had {i} apples and", temperature=0,
                                    max_tokens=6 + i).usage for i in range(R)]
after = metrics()
d = lambda name, **kw: m(after, name, **kw) - m(before, name, **kw)  # noqa: E731
check(d("pagoda_requests_finished_total") == R, f"requests_finished delta {d('pagoda_requests_finished_total')} != {R}")
check(d("vllm:e2e_request_latency_seconds_count") == R, f"e2e histogram count delta {d('vllm:e2e_request_latency_seconds_count')}")
check(d("vllm:time_to_first_token_seconds_count") == R, "ttft histogram count delta")
check(d("vllm:generation_tokens_total") == sum(x.completion_tokens for x in usages),
      f"generation_tokens delta {d('vllm:generation_tokens_total')} != {sum(x.completion_tokens for x in usages)}")
check(d("vllm:prompt_tokens_total") == sum(x.prompt_tokens for x in usages),
      f"prompt_tokens delta {d('vllm:prompt_tokens_total')} != {sum(x.prompt_tokens for x in usages)}")
check(d("vllm:prefix_cache_hits_total") == sum(x.prompt_tokens_details.cached_tokens for x in usages),
      "prefix_cache_hits delta != the usages' cached_tokens")
check(d("vllm:request_success_total", finished_reason="length") == R, "request_success_total{length} delta")
# the engine counts its running set at the end of a step, just after it
# sent the step's DONE events: a scrape in between sees the last one running
idle = after
for _ in range(50):
    if m(idle, "vllm:num_requests_running") == 0 and m(idle, "vllm:num_requests_waiting") == 0:
        break
    time.sleep(0.1)
    idle = metrics()
check(m(idle, "vllm:num_requests_running") == 0 and m(idle, "vllm:num_requests_waiting") == 0,
      f"idle gauges: running {m(idle, 'vllm:num_requests_running')}, waiting {m(idle, 'vllm:num_requests_waiting')}")
check(0 <= m(after, "vllm:kv_cache_usage_perc") <= 1, "kv_cache_usage_perc out of [0, 1]")
check(m(after, "pagoda_up") == 1, "pagoda_up")
check(m_any(after, "pagoda_gateway_http_requests_total") > m_any(before, "pagoda_gateway_http_requests_total"),
      "http request counter")

# ---- concurrent requests multiplexed over the gateway's connections -----------------
prompts = [f"{w}, said the" for w in ("Hello", "Look", "Stop", "Come", "Yes", "No", "Wait", "Run")]
solo = {p: generate("-p", p, "-n", "24") for p in prompts}
res = {}


def one(p):
    s = client.completions.create(model=MODEL, prompt=p, temperature=0, max_tokens=24, stream=True)
    res[p] = "".join(c.choices[0].text for c in s if c.choices)


ths = [threading.Thread(target=one, args=(p,)) for p in prompts]
for t in ths:
    t.start()
for t in ths:
    t.join()
for p in prompts:
    check(res.get(p) == solo[p], f"concurrent {p!r}: {res.get(p)!r} != solo {solo[p]!r}")

# ---- a client that disconnects mid-stream cancels its request ------------------------
before = metrics()
hc = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
hc.request("POST", "/v1/completions", json.dumps({"model": MODEL, "prompt": "Once upon a time", "stream": True,
                                                  "max_tokens": 1500, "temperature": 0}),
           {"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
resp = hc.getresponse()
got = b""
while got.count(b"data: ") < 3:
    got += resp.read1(4096)
hc.sock.shutdown(2)
hc.close()
deadline = time.time() + 10
while time.time() < deadline:
    now = metrics()
    if m(now, "pagoda_requests_cancelled_total") > m(before, "pagoda_requests_cancelled_total"):
        break
    time.sleep(0.2)
check(m(now, "pagoda_requests_cancelled_total") - m(before, "pagoda_requests_cancelled_total") == 1,
      "the disconnected stream was not cancelled within 10 s")
check(m(now, "pagoda_requests_finished_total") == m(before, "pagoda_requests_finished_total"),
      "the disconnected stream ran to its end")
check(m(now, "vllm:num_requests_running") == 0, "a request still running after the disconnect")

print(f"gateway_openai.py: {checks - fails} passed, {fails} failed", file=sys.stderr)
sys.exit(1 if fails else 0)
