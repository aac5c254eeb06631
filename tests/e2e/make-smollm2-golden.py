# tests/e2e/make-smollm2-golden.py LLAMA_BIN_DIR GREEDY MODEL.gguf > tests/e2e/data/smollm2-chat.golden
# Makes the SmolLM2 chat golden with llama.cpp (not run by the tests): for
# each request, the text Jinja2 renders from the GGUF's own template
# (jinja_oracle, as transformers), llama.cpp's prompt token ids for it
# (llama-completion --verbose-prompt) and its greedy reply, 64 tokens at most
# (llama-completion --temp 0 -n 64; "eos" when it ended at end of turn), and
# the reply's token ids: GREEDY (tests/peer/greedy.c, built against the same
# llama.cpp as tests/make-testdata.sh builds it) decoding from exactly those
# prompt ids, which must stream the same text and end the same way.
# One JSON object a line; "reply_ids_from" says how the ids were made.
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja_oracle  # noqa: E402

REQUESTS = [
    {"messages": [{"role": "user", "content": "Write one sentence about cats."}],
     "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": "You are a concise assistant."},
                  {"role": "user", "content": "What color is the sky?"},
                  {"role": "assistant", "content": "Blue."},
                  {"role": "user", "content": "And the grass?"}],
     "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "What is the capital of France?"}],
     "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "Hello! Who are you?"}],
     "add_generation_prompt": True},
]

bindir, greedy, model = sys.argv[1], sys.argv[2], sys.argv[3]
version = subprocess.run([os.path.join(bindir, "llama-completion"), "--version"],
                         capture_output=True)
build = re.search(r"\(build (\d+)", (version.stdout + version.stderr).decode()).group(1)
here = os.path.dirname(os.path.abspath(__file__))
template = subprocess.run([sys.executable, os.path.join(here, "gguf_template.py"), model],
                          capture_output=True, check=True).stdout.decode()
for req in REQUESTS:
    kind, prompt = jinja_oracle.render(template, dict(req, bos_token="<|im_start|>", eos_token="<|im_end|>"))
    assert kind == "ok", prompt
    p = subprocess.run([os.path.join(bindir, "llama-completion"), "-m", model, "-p", prompt, "-n", "64",
                        "--temp", "0", "-no-cnv", "-t", "2", "--verbose-prompt", "--no-display-prompt",
                        "--no-warmup", "-c", "2048"], capture_output=True, check=True)
    ids = [int(m) for m in re.findall(r"^\S+ I +(\d+) -> '", p.stderr.decode(), re.M)]
    # llama-completion ends its output with "\n\n", after " [end of text]\n" at an end of turn
    out = p.stdout.decode()
    assert out.endswith("\n\n"), repr(out[-20:])
    reply = out[:-2]
    eos = reply.endswith(" [end of text]\n")
    if eos:
        reply = reply[:-len(" [end of text]\n")]
    text = os.path.join(os.environ.get("TMPDIR", "/tmp"), "smollm2-golden-%d.txt" % os.getpid())
    g = subprocess.run([greedy, "--ids", model, " ".join(map(str, ids)), "64", text],
                       capture_output=True, check=True).stdout.decode().splitlines()
    assert g[0].split()[1:] == list(map(str, ids)), g[0]
    reply_ids = [int(t) for t in g[1].split()[1:]]
    with open(text, encoding="utf-8") as f:
        assert f.read() == reply, "greedy.c's reply differs from llama-completion's"
    os.unlink(text)
    assert (len(reply_ids) < 64) == eos, (len(reply_ids), eos)
    print(json.dumps({"request": req, "prompt": prompt, "prompt_ids": ids, "reply": reply, "eos": eos,
                      "reply_ids": reply_ids,
                      "reply_ids_from": "tests/peer/greedy.c --ids PROMPT_IDS 64, llama.cpp b%s" % build},
                     ensure_ascii=False))
