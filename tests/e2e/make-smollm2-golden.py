# tests/e2e/make-smollm2-golden.py LLAMA_BIN_DIR MODEL.gguf > tests/e2e/data/smollm2-chat.golden
# Makes the SmolLM2 chat golden with llama.cpp (not run by the tests): for
# each request, the text Jinja2 renders from the GGUF's own template
# (jinja_oracle, as transformers), llama.cpp's prompt token ids for it
# (llama-completion --verbose-prompt) and its greedy reply, 64 tokens at most
# (llama-completion --temp 0 -n 64; "eos" when it ended at end of turn).
# One JSON object a line.
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

bindir, model = sys.argv[1], sys.argv[2]
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
    print(json.dumps({"request": req, "prompt": prompt, "prompt_ids": ids, "reply": reply, "eos": eos},
                     ensure_ascii=False))
