#!/bin/sh
# Seeds the template fuzzer with real chat templates and a JSON message.
out=$1
[ -n "$PAGODA_TESTDATA" ] || exit 0
for f in "$PAGODA_TESTDATA"/chat/templates/*.jinja; do
	[ -e "$f" ] && cp "$f" "$out/seed-$(basename "$f")"
done
printf '%s' "{% macro f(a, b=2) %}{{ caller(a) }}{% endmacro %}{% call(x) f(1) %}{{ x | batch(2) | list }}{% endcall %}{% with y = 1 %}{% raw %}{{ {% endraw %}{{ '%5.2f %(k)s' % 1.5 }}{% endwith %}{% for m in messages if m.role %}{{ loop.cycle('a', 'b') }}{% filter upper %}{{ m.content | truncate(3) | center(9) }}{% endfilter %}{% endfor %}" > "$out/seed-constructs"
printf 'J{"messages": [{"role": "user", "content": "hi \\u00e9 \\ud83d\\ude00", "n": [1, -2.5e3, true, null]}]}' > "$out/seed-json"
exit 0
