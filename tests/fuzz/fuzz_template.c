// fuzz-sources: daemon/template/value.c daemon/template/json.c daemon/template/lex.c daemon/template/parse.c daemon/template/render.c daemon/template/builtins.c
/* libFuzzer target: the Jinja engine and the JSON reader on arbitrary
 * bytes. An input starting with 'J' is JSON for tpl_json_parse; any other
 * is a template, compiled and rendered with a small chat (messages, tools)
 * in a heap capped at 16 MiB: every outcome must be a result or an error. */
#include "daemon/template/template.h"

#include <stdlib.h>
#include <string.h>

static const char chat[] =
	"{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
	" {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"h\\u00e9llo\"}]},"
	" {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"abc\", \"type\": \"function\","
	" \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [true, null]}}}]},"
	" {\"role\": \"tool\", \"content\": \"42\"}],"
	" \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}],"
	" \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tpl_heap *h = tpl_heap_new(16u << 20);
	struct tpl_val *v;
	char err[128];
	if (size && data[0] == 'J') {
		if (tpl_json_parse(h, (const char *)data + 1, size - 1, &v, err, sizeof err) == 0 && !v)
			abort();
		tpl_heap_free(h);
		return 0;
	}
	if (tpl_json_parse(h, chat, sizeof chat - 1, &v, err, sizeof err))
		abort();
	struct tpl_template *t;
	struct tpl_error e;
	if (tpl_compile((const char *)data, size, &t, &e) == 0) {
		struct tpl_opts o = { .now = 1796529600, .max_output = 1u << 20 };
		char *out = NULL;
		size_t n;
		if (tpl_render(t, h, v, &o, &out, &n, &e) == 0 && strlen(out) > n)
			abort();
		free(out);
		tpl_free(t);
	} else if (!e.msg[0]) {
		abort();   /* every failure says why */
	}
	tpl_heap_free(h);
	return 0;
}
