# tests/e2e/chat_template.py — `pagoda chat-template` against Jinja2.
# 1. every case of $PAGODA_TESTDATA/chat/cases.jsonl renders byte for byte
#    (a `raises` case exits 1 with that message; `undetermined` gives no verdict);
# 2. with Jinja2 (tests/e2e/jinja_oracle.py configures it as transformers does):
#    snippets covering the subset, and every template in $CHAT_TEMPLATES (a
#    folder of *.jinja: templates this repository never saw) rendered for
#    the contexts of cases.jsonl, must equal Jinja2's output.
# Prints "FAIL: ..." lines and the counts; exit 1 on any failure.
import json
import os
import subprocess
import sys
import tempfile

B = os.environ.get("PAGODA_BUILD", "build")
T = os.environ["PAGODA_TESTDATA"]
NOW = "1796529600"  # 2026-12-06 04:00 UTC, the cases' frozen strftime_now
ENV = dict(os.environ, TZ="UTC")
fails = checks = 0


def ours(template_path, context):
    p = subprocess.run([B + "/pagoda", "chat-template", "-t", template_path, "--now", NOW],
                       input=json.dumps(context).encode(), capture_output=True, env=ENV, timeout=60)
    if p.returncode == 0:
        return "ok", p.stdout.decode()
    return "fail", p.stderr.decode().rstrip("\n")


def check(name, want_kind, want, template_path, context):
    global fails, checks
    checks += 1
    kind, got = ours(template_path, context)
    if (want_kind == "ok" and kind == "ok" and got == want) or \
       (want_kind == "raise" and kind == "fail" and got == want):
        return
    fails += 1
    print("FAIL: %s: want %s %r, got %s %r" % (name, want_kind, want[:300], kind, got[:300]))


cases = [json.loads(line) for line in open(os.path.join(T, "chat/cases.jsonl"))]
contexts = {}
for c in cases:
    ctx = {k: v for k, v in c.items() if k not in ("template", "case", "expected", "raises", "undetermined")}
    contexts.setdefault(c["case"], ctx)
    if "expected" in c:
        check(c["template"] + "/" + c["case"], "ok", c["expected"],
              os.path.join(T, "chat/templates", c["template"]), ctx)
    elif "raises" in c:
        check(c["template"] + "/" + c["case"], "raise", c["raises"],
              os.path.join(T, "chat/templates", c["template"]), ctx)
print("cases.jsonl: %d checked, %d failed" % (checks, fails))

try:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import jinja_oracle
except ImportError as e:
    print("SKIP: Jinja2 differential checks (%s)" % e)
    sys.exit(1 if fails else 0)

ctx = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "héllo \"q\" <b>"}], "x": 3, "f": 2.5, "s": "  Hello World  ", "l": [3, 1, 2], "d": {"b": 1, "a": [1, 2]}, "n": None, "t": True}
snips = [
 "{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % -3 }}|{{ 2 ** 10 }}|{{ 7 / 2 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}|{{ 1.0 }}|{{ 1e-5 }}|{{ 123456789012345678.0 }}",
 "{{ l }}|{{ d }}|{{ (1, 'a') }}|{{ (1,) }}|{{ n }}|{{ t }}|{{ 'it\\'s' }}|{{ ['it\\'s', \"a\\\"b\"] }}|{{ {'k': none} }}",
 "{{ s | trim }}|{{ s.strip() }}|{{ s.lstrip() }}.|{{ s.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b c'.split(' ', 1) }}|{{ s|upper }}|{{ s|lower }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}",
 "{{ l|sort }}|{{ l|sort(reverse=true) }}|{{ l|first }}|{{ l|last }}|{{ l|length }}|{{ l|join(', ') }}|{{ l|sum }}|{{ l|min }}|{{ l|max }}|{{ l|reverse|list }}|{{ 'abc'|reverse }}|{{ ['B','a','b','A']|unique|list }}",
 "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ messages|tojson }}|{{ {'a': 'é'}|tojson(ensure_ascii=True) }}|{{ d|dictsort }}|{{ d|items|list }}|{{ f|tojson }}|{{ [1.0, 2.5e-7, 1e300]|tojson }}",
 "{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ m.role }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}{{ loop.previtem.role if loop.previtem is defined }}{% endfor %}",
 "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for x in [] %}x{% else %}empty{% endfor %}{% for x in l if x > 1 %}{{ x }}{{ loop.index }}{% endfor %}",
 "{% set ns = namespace(c=0) %}{% for x in l %}{% set ns.c = ns.c + x %}{% set y = x %}{% endfor %}{{ ns.c }}|{{ y is defined }}",
 "{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}",
 "{% set x %}  captured {{ 1 }}  {% endset %}[{{ x }}]{% set y | trim %}  t  {% endset %}[{{ y }}]{% filter upper %}abc{% endfilter %}",
 "a\n  {% if true %}\n    b\n  {% endif %}\n  c {{- ' d ' -}} e\n{# comment #}\nf\n{%- if true %} g {% endif -%}\nh\n",
 "{{ 'abcdef'[1:3] }}|{{ 'abcdef'[::-1] }}|{{ l[-1] }}|{{ l[1:] }}|{{ 'héllo'[1] }}|{{ 'héllo'[-4:] }}|{{ l[::2] }}|{{ l[5:1:-1] }}",
 "{{ x is odd }}{{ x is even }}{{ x is divisibleby 3 }}{{ n is none }}{{ s is string }}{{ d is mapping }}{{ l is iterable }}{{ undefined_thing is defined }}{{ x is number }}{{ t is boolean }}{{ x is integer }}{{ f is float }}{{ l is sequence }}{{ x is eq 3 }}{{ 2 is in l }}",
 "{{ 'a' in 'cat' }}{{ 2 in l }}{{ 'b' in d }}{{ 5 not in l }}{{ 1 < 2 < 3 }}{{ 'a' ~ 1 ~ none }}{{ x if t else 'no' }}{{ 'yes' if n }}.{{ n or 'dflt' }}{{ 0 and 1 }}{{ not n }}",
 "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}|{{ messages | rejectattr('role', 'eq', 'user') | list | length }}|{{ l | select('odd') | list }}|{{ l | map('string') | join }}|{{ messages|map(attribute='nope', default='z')|list }}",
 "{{ undefined_x | default('D') }}|{{ '' | default('E', true) }}|{{ n | default('F') }}|{{ d.get('zz', 'G') }}|{{ d.get('b') }}|{{ d.zz is defined }}|{{ d['a'][0] }}|{{ d.keys()|list }}|{{ d.values()|list }}",
 "{{ 'x{}y{}'.format(1, 'b') }}|{{ '{0}-{0}'.format('q') }}|{{ '{a}!'.format(a=5) }}|{{ 'aXbXc'.replace('X', '-') }}|{{ 'aXbXc'|replace('X', '') }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'abcabc'.find('c') }}|{{ 'abcabc'.count('bc') }}",
 "{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, first=true) }}|{{ 'a\n\nb'|indent(4, blank=true) }}|{{ '3'|int + 1 }}|{{ '2.5'|float }}|{{ 3.7|int }}|{{ 'x'|int }}|{{ 2.5|round }}|{{ 3.14159|round(2) }}|{{ -3|abs }}",
 "{{ range(3)|list }}|{{ range(1, 10, 3)|list }}|{{ range(5, 0, -2)|list }}|{{ strftime_now('%Y-%m-%d %H:%M %b %-d') }}|{{ dict(a=1) }}|{{ namespace(a=1).a }}",
 "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
 "{%- for m in messages -%}\n  {%- if m.role == 'system' -%}\n    <<{{ m.content }}>>\n  {%- else -%}\n    {{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}\n  {%- endif -%}\n{%- endfor -%}\n",
 "{% if x > 5 %}big{% elif x > 2 %}mid{% else %}small{% endif %}|{{ [1, 2] + [3] }}|{{ 'ab' * 3 }}|{{ [0] * 3 }}|{{ (l|length) - 1 }}|{{ -x }}",
 "{{ \"<b>\"|safe + '<i>' }}|{{ '<i>'|e }}|{{ 'a' 'b' }}|{{ l|count }}|{{ d|length }}|{{ 'x'|list }}|{{ messages[0]['content'] }}|{{ messages[-1].content|length }}|{{ 'héllo'|length }}",
 "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}|{% set a, b = 1, 2 %}{{ a }}{{ b }}|{{ ('a', 'b')|join('-') }}|{{ [[1, 2], [3]]|map('length')|list }}",
 "{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(5) }}",
 "{{ raise_exception('boom ' ~ x) }}",
 "  {% if true %}\n  x\n  {%+ if true %}y{% endif %}\n{% endif %}\n\n",
 "{{ messages[0].content.split('.')[0] }}|{{ '  a  '.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a-b-c'.split('-', 1) }}|{{ 'A'.lower() }}{{ 'a'.upper() }}|{{ '12'.isdigit() }}",
 "{{ l|sort|first }}|{{ messages|sort(attribute='role')|map(attribute='role')|join(',') }}|{{ {'b': 2, 'a': 1}|dictsort(by='value') }}|{{ ['b', 'A', 'a']|sort }}|{{ ['b', 'A', 'a']|sort(case_sensitive=true) }}",
 "{{ '%s is %d years, %.2f%%' % ('Bob', 42, 3.14159) }}|{{ '%-5s|%5s|%03d' % ('a', 'b', 7) }}|{{ 'x=%r' % 'q' }}|{{ '%s'|format(l) }}|{{ '%s-%s'|format(1, 2) }}|{{ 'n: %s' % none }}",
 "{% for m in messages %}{{ loop.cycle('odd', 'even') }} {% endfor %}|{% raw %}{{ not rendered }} {% if %}{% endraw %}|{%- raw -%}  x  {%- endraw -%}|",
 "{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ {1: 'a', true: 'b'} }}|{{ {'x': [1, {'y': none}]}|tojson(indent=4) }}|{{ 'tab\there\n'|tojson }}|{{ '\u0001'|tojson }}",
]
snips += [
 "a\n  {% raw %}\n  {{ x }}\n  {% endraw %}\nb",
 "a {%- raw %} y {% endraw -%} b",
 "{% raw -%}\n\n  q  \n{%- endraw %}\nz",
 "{{ x }}  {% raw %}r{% endraw %}  \n  {% if true %}t{% endif %}",
 "{% for i in l %}{{ loop.revindex }}{{ loop.cycle('a','b','c') }}{% endfor %}",
 "{{ '%5.1f|%x|%o|%+d|% d' % (3.14159, 255, 8, 5, 7) }}",
 "{{ '%(a)s' % d }}",
 "{{ 'a' if x > 1 else 'b' if x > 0 else 'c' }}",
 "{{ l | map('tojson') | join(',') }}",
 "{{ messages | selectattr('role', 'defined') | list | length }}",
 "{{ messages | selectattr('nope', 'undefined') | list | length }}",
 "{{ l | select('greaterthan', 1) | list }}",
 "{{ l | reject('equalto', 2) | list }}",
 "{{ 'abc' | batch(2) | list }}",
 "{{ 'hello world' | truncate(5) }}",
 "{{ l | batch(2) | list }}",
 "{{ 'a b' | center(9) }}",
 "{% set x = 5 %}{% macro f() %}{{ x }}{% endmacro %}{% set x = 6 %}{{ f() }}",
 "{% macro f() %}{{ caller() }}{% endmacro %}{% call f() %}inside{% endcall %}",
 "{% with y = 2 %}{{ y }}{% endwith %}",
 "{{ x is not defined }}{{ nothing is none }}{{ none is not none }}",
 "{% if messages[0].content is string and messages[0].content|length > 0 %}ok{% endif %}",
 "{{ messages[0]['role'] | upper }} {{ messages | first | attr('role') }}",
 "{{ {'a': 1, 'b': 2} | items | map('last') | list }}",
 "{{ l | sum(start=10) }} {{ [1.5, 2] | sum }} {{ l | max }} {{ ['b','A'] | min }}",
 "{{ (l | map('string') | join('') | int) + 1 }}",
 "{{ \"%s\" % (1,) }} {{ \"%s %s\" % (1, 'a') }}",
 "{%- for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}",
 "{{ range(3) | list | tojson }} {{ range(0) | list }}",
 "{{ 10 // 3 }} {{ 10 % 3 }} {{ -10 // 3 }} {{ 2 ** -1 }} {{ 10 / 4 }} {{ 1.5 // 1 }} {{ -1.5 % 1 }}",
 "{{ \"abc\"[5:] }}|{{ \"abc\"[-10:] }}|{{ l[10:] }}|{{ l[:-10] }}|{{ l[::-2] }}",
 "{{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ none == false }}",
 "{{ 'x' ~ 1.0 ~ true ~ [1] ~ {'a': none} }}",
 "{{ '\\u00e9\\N{BULLET}' if false else '\\x41\\101\\u263a' }}",
 "{%- set a = [1, 2] -%}{%- set b = a + [3] -%}{{ a }}{{ b }}",
 "{% set ns = namespace(items=[]) %}{% set ns.items = ns.items + [1] %}{{ ns.items }}",
 "{{ ns }}",
 "{% for x in 'ab' %}{{ x }}{% else %}no{% endfor %}",
 "{{ [3, 1, 2] | sort | join }} {{ ['b', 'a'] | sort(reverse=true) | first }}",
 "{{ 'ABC'.lower().startswith('ab') }} {{ ' x '.strip() == 'x' }}",
 "{{ d.a }} {{ d['a'] }} {{ d.get('a') }} {{ d.b is defined }} {{ d | length }}",
 "{{ l.index(2) }} {{ l.count(2) }} {{ 'a,b'.split(',') | length }}",
 "{{ \"a\\tb\" | tojson }} {{ \"\\u2028\" | tojson }} {{ \"\\x7f\" | tojson }} {{ 1e100 | tojson }} {{ -0.0 }}",
 "{{ 123456789.123 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 100.0 }} {{ 3.0e15 }} {{ 0.1 * 3 }}",
 "{% macro list(items) %}<{% for i in items %}{{ caller(i) }}{% endfor %}>{% endmacro %}{% call(x) list(l) %}[{{ x }}]{% endcall %}",
 "{% with %}{% set q = 1 %}{{ q }}{% endwith %}{{ q is defined }}",
 "{% with a = 1, b = x %}{{ a + b }}{% endwith %}",
 "{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}"
]

with tempfile.TemporaryDirectory() as d:
    for i, s in enumerate(snips):
        path = os.path.join(d, "snippet%d.jinja" % i)
        with open(path, "w") as f:
            f.write(s)
        kind, want = jinja_oracle.render(s, ctx)
        if kind == "error":
            print("FAIL: snippet %d %r fails inside Jinja2 itself: %s" % (i, s[:60], want))
            fails += 1
            continue
        check("snippet %d %r" % (i, s[:60]), kind, want, path, ctx)
extra = os.environ.get("CHAT_TEMPLATES")
if extra:
    for name in sorted(os.listdir(extra)):
        if not name.endswith(".jinja"):
            continue
        src = open(os.path.join(extra, name)).read()
        for case, c in contexts.items():
            kind, want = jinja_oracle.render(src, dict(c, bos_token="<s>", eos_token="</s>"))
            if kind == "error":
                continue  # failed inside Jinja2: no verdict
            check(name + "/" + case, kind, want, os.path.join(extra, name), dict(c, bos_token="<s>", eos_token="</s>"))
print("total: %d checked, %d failed" % (checks, fails))
sys.exit(1 if fails else 0)
