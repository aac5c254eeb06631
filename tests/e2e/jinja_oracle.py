# tests/e2e/jinja_oracle.py — Jinja2 configured as Hugging Face transformers
# renders chat templates (the reference the template engine is checked
# against). render(source, context) -> ("ok", text) | ("raise", message) |
# ("error", text): an error inside Jinja2 itself gives no verdict.
import json
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _Raised(Exception):
    pass


class AssistantTracker(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise(message):
    raise _Raised(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def environment(now=datetime(2026, 12, 6, 4, 0)):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: now.strftime(fmt)
    return env


def render(source, context, env=None):
    env = env or environment()
    try:
        return "ok", env.from_string(source).render(**context)
    except _Raised as e:
        return "raise", str(e)
    except Exception as e:  # noqa: BLE001 - any other failure: no verdict
        return "error", "%s: %s" % (type(e).__name__, e)
