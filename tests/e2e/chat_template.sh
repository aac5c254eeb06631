#!/bin/sh
# `pagoda chat-template -t` renders every case of testdata/chat byte for byte,
# and (with Jinja2, installed by pip into the build folder when missing)
# matches Jinja2 on snippets of the subset and on $CHAT_TEMPLATES, a folder
# of templates this repository does not carry.
. "$(dirname "$0")/lib.sh"
need_testdata chat/cases.jsonl
if ! python3 -c 'import jinja2' 2>/dev/null; then
	pip install -q --target "$B/py" 'jinja2>=3.1,<3.2' >/dev/null 2>&1 ||
		echo "note: Jinja2 not installable (no PyPI?): only cases.jsonl is checked" >&2
	export PYTHONPATH="$B/py${PYTHONPATH:+:$PYTHONPATH}"
fi
PYTHONDONTWRITEBYTECODE=1 PAGODA_BUILD=$B PAGODA_TESTDATA=$T python3 "$(dirname "$0")/chat_template.py" && ok || bad "chat-template differs from Jinja2 (above)"
finish
