/* tests/unit/test_gateway.c — pagoda-gateway's insides without a network:
 * the mapping of OpenAI request bodies onto pagoda requests (req.c), the
 * tool-call parser and the error object (reply.c), and API-key checks
 * (auth.c). The gateway's objects are linked in; the HTTP side is tested
 * end to end by tests/e2e/gateway_openai.sh. */
#include "tools/pagoda-gateway/gw.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse(enum gw_kind k, const char *body, struct gw_req *r, struct gw_err *e)
{
	return gw_req_parse(k, body, strlen(body), r, e);
}

START_TEST(test_chat_mapping)
{
	struct gw_req r;
	struct gw_err e;
	const char *b = "{\"model\":\"x\",\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
			"{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
			"{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
			"\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1}\"}}]},"
			"{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}],"
			"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
			"\"temperature\":0.5,\"top_p\":0.9,\"top_k\":-1,\"min_p\":0.1,\"seed\":9,\"stop\":[\"\\n\\n\",\"END\"],"
			"\"max_completion_tokens\":7,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
			"\"chat_template_kwargs\":{\"enable_thinking\":false}}";
	ck_assert_int_eq(parse(GW_CHAT, b, &r, &e), 0);
	ck_assert(r.stream && r.include_usage && r.tools && r.seed_set && !r.to_context);
	ck_assert_int_eq(r.p.max_tokens, 7);
	ck_assert_float_eq_tol(r.p.temp, 0.5, 1e-6);
	ck_assert_float_eq_tol(r.p.top_p, 0.9, 1e-6);
	ck_assert_int_eq(r.p.top_k, 0);
	ck_assert_uint_eq(r.p.seed, 9);
	ck_assert_int_eq(r.p.n_stop, 2);
	ck_assert_str_eq(r.p.stop[0], "\n\n");
	ck_assert_str_eq(r.p.stop[1], "END");
	json_t *o = json_loads(r.text, 0, NULL);
	ck_assert_ptr_nonnull(o);
	json_t *m = json_object_get(o, "messages");
	ck_assert_int_eq(json_array_size(m), 4);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(m, 0), "role")), "system");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(m, 1), "content")), "ab");
	/* the arguments string became the object the templates expect */
	json_t *call = json_array_get(json_object_get(json_array_get(m, 2), "tool_calls"), 0);
	json_t *args = json_object_get(json_object_get(call, "function"), "arguments");
	ck_assert(json_is_object(args));
	ck_assert_int_eq(json_integer_value(json_object_get(args, "x")), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(m, 3), "tool_call_id")), "c1");
	ck_assert(json_is_true(json_object_get(o, "add_generation_prompt")));
	ck_assert(json_is_false(json_object_get(o, "enable_thinking")));
	ck_assert(json_is_array(json_object_get(o, "tools")));
	json_decref(o);
	gw_req_free(&r);

	/* defaults: OpenAI's temperature 1, chat until the end of the context */
	ck_assert_int_eq(parse(GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r, &e), 0);
	ck_assert(r.to_context && !r.stream && !r.seed_set && !r.tools);
	ck_assert_float_eq_tol(r.p.temp, 1.0, 1e-6);
	gw_req_free(&r);
	/* logprobs: asked of the daemon */
	ck_assert_int_eq(parse(GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true,"
					"\"top_logprobs\":0}", &r, &e), 0);
	ck_assert(r.logprobs && (r.p.flags & PAGODA_LOGPROBS));
	ck_assert_int_eq(r.n, 1);
	gw_req_free(&r);
	/* n choices; completions' logprobs 0: the sampled tokens' own */
	ck_assert_int_eq(parse(GW_COMPLETION, "{\"prompt\":\"x\",\"n\":3,\"logprobs\":0}", &r, &e), 0);
	ck_assert_int_eq(r.n, 3);
	ck_assert(r.logprobs && (r.p.flags & PAGODA_LOGPROBS));
	gw_req_free(&r);
	/* tool_choice none: the tools are not offered to the template */
	ck_assert_int_eq(parse(GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
					"\"tools\":[{\"type\":\"function\"}],\"tool_choice\":\"none\"}", &r, &e), 0);
	ck_assert(!r.tools && !strstr(r.text, "tools"));
	gw_req_free(&r);
}
END_TEST

START_TEST(test_completion_mapping)
{
	struct gw_req r;
	struct gw_err e;
	ck_assert_int_eq(parse(GW_COMPLETION, "{\"prompt\":\"Once\",\"stop\":\"x\"}", &r, &e), 0);
	ck_assert_str_eq(r.text, "Once");
	ck_assert_int_eq(r.p.max_tokens, 16); /* OpenAI's default for completions */
	ck_assert_int_eq(r.p.n_stop, 1);
	gw_req_free(&r);
	ck_assert_int_eq(parse(GW_COMPLETION, "{\"prompt\":[1,2,3]}", &r, &e), 0);
	ck_assert_ptr_null(r.text);
	ck_assert_int_eq(r.n_ids, 3);
	ck_assert_int_eq(r.ids[2], 3);
	gw_req_free(&r);
	ck_assert_int_eq(parse(GW_COMPLETION, "{\"prompt\":[[5,6]],\"max_tokens\":3}", &r, &e), 0);
	ck_assert_int_eq(r.n_ids, 2);
	ck_assert_int_eq(r.p.max_tokens, 3);
	gw_req_free(&r);
	ck_assert_int_eq(parse(GW_COMPLETION, "{\"prompt\":[\"one\"]}", &r, &e), 0);
	ck_assert_str_eq(r.text, "one");
	gw_req_free(&r);
}
END_TEST

/* Each body is refused with a 400 naming the field. */
static const struct {
	enum gw_kind k;
	const char *body, *param;
} refused[] = {
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\"}}", "response_format" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"yaml\"}}", "response_format" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":17}", "n" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}", "n" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", "logprobs" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "top_logprobs" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"presence_penalty\":2.5}", "presence_penalty" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"frequency_penalty\":-3}", "frequency_penalty" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":2.5}", "temperature" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", "max_tokens" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", "tool_choice" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"1\":2}}", "logit_bias" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "messages" },
	{ GW_CHAT, "{\"messages\":[]}", "messages" },
	{ GW_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages" },
	{ GW_COMPLETION, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop" },
	{ GW_COMPLETION, "{\"prompt\":\"x\",\"stop\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}", "stop" },
	{ GW_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt" },
	{ GW_COMPLETION, "{\"prompt\":[-1]}", "prompt" },
	{ GW_COMPLETION, "{\"prompt\":\"\"}", "prompt" },
	{ GW_COMPLETION, "{}", "prompt" },
	{ GW_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", "echo" },
	{ GW_COMPLETION, "{\"prompt\":\"x\",\"best_of\":3}", "best_of" },
	{ GW_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs" },
	{ GW_COMPLETION, "{\"prompt\":\"x\",\"seed\":\"7\"}", "seed" },
	{ GW_COMPLETION, "{\"prompt\":\"x\",\"top_p\":1.5}", "top_p" },
	{ GW_COMPLETION, "[1]", "" },
	{ GW_COMPLETION, "{\"prompt\":\"x\",\"prompt\":\"y\"}", "" },
	{ GW_COMPLETION, "{\"prompt\":\"x\"", "" },
};

/* The fields protocol v3 carries reach pagoda_params. */
START_TEST(test_v3_fields)
{
	struct gw_req r;
	struct gw_err e;
	ck_assert_int_eq(parse(GW_CHAT,
			       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"presence_penalty\":0.5,"
			       "\"frequency_penalty\":-1,\"logprobs\":true,\"top_logprobs\":3,\"response_format\":"
			       "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":{\"type\":\"integer\"}}}}",
			       &r, &e),
			 0);
	ck_assert(r.p.presence_penalty == 0.5f && r.p.frequency_penalty == -1.0f);
	ck_assert_int_eq(r.p.top_logprobs, 3);
	ck_assert(r.p.flags & PAGODA_LOGPROBS);
	ck_assert_int_eq(r.p.constraint_kind, PAGODA_CONSTRAINT_JSON_SCHEMA);
	ck_assert_str_eq(r.p.constraint, "{\"type\":\"integer\"}");
	gw_req_free(&r);
	ck_assert_int_eq(parse(GW_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\"}}", &r, &e),
			 0);
	ck_assert_str_eq(r.p.constraint, "{\"type\":\"object\"}");
	gw_req_free(&r);
	ck_assert_int_eq(parse(GW_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"text\"}}", &r, &e), 0);
	ck_assert_int_eq(r.p.constraint_kind, 0);
	gw_req_free(&r);
}
END_TEST

START_TEST(test_refused)
{
	struct gw_req r;
	struct gw_err e;
	ck_assert_int_eq(parse(refused[_i].k, refused[_i].body, &r, &e), -1);
	ck_assert_int_eq(e.status, 400);
	ck_assert_str_eq(e.param, refused[_i].param);
	ck_assert(e.msg[0]);
	ck_assert_ptr_null(r.text);
	size_t n;
	char *b = gw_error_body(&e, &n);
	json_t *o = json_loadb(b, n, 0, NULL);
	json_t *err = json_object_get(o, "error");
	ck_assert_str_eq(json_string_value(json_object_get(err, "message")), e.msg);
	ck_assert_str_eq(json_string_value(json_object_get(err, "type")), "invalid_request_error");
	json_decref(o);
	free(b);
}
END_TEST

static json_t *calls_of(const char *text, char **content)
{
	size_t n;
	return gw_parse_tool_calls(text, strlen(text), content, &n);
}

START_TEST(test_tool_calls)
{
	char *content;
	/* Hermes / Qwen, two calls after some text */
	json_t *c = calls_of("Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
			     "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>", &content);
	ck_assert_int_eq(json_array_size(c), 2);
	json_t *f = json_object_get(json_array_get(c, 0), "function");
	ck_assert_str_eq(json_string_value(json_object_get(f, "name")), "get_weather");
	json_t *args = json_loads(json_string_value(json_object_get(f, "arguments")), 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(args, "city")), "Paris");
	json_decref(args);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 0), "type")), "function");
	ck_assert(!strncmp(json_string_value(json_object_get(json_array_get(c, 0), "id")), "call_", 5));
	ck_assert_str_eq(content, "Let me look.\n");
	free(content);
	json_decref(c);
	/* Llama 3.x JSON, with the python tag, two calls */
	c = calls_of("<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": 1}}; {\"name\": \"g\", \"parameters\": {}}",
		     &content);
	ck_assert_int_eq(json_array_size(c), 2);
	ck_assert_ptr_null(content);
	f = json_object_get(json_array_get(c, 1), "function");
	ck_assert_str_eq(json_string_value(json_object_get(f, "name")), "g");
	ck_assert_str_eq(json_string_value(json_object_get(f, "arguments")), "{}");
	json_decref(c);
	/* plain text, broken JSON, JSON that names nothing: no tool call */
	ck_assert_ptr_null(calls_of("The sky is blue.", &content));
	ck_assert_ptr_null(calls_of("<tool_call>{\"name\": </tool_call>", &content));
	ck_assert_ptr_null(calls_of("{\"answer\": 42}", &content));
	ck_assert_ptr_null(calls_of("{\"name\": \"f\"} and then some words", &content));
}
END_TEST

/* Streams text in pieces of k bytes through the tool-call streamer: the
 * content it sent, the calls (names joined by ','), and how many bytes had
 * arrived when the first call went out (0: none). */
static void tcs_feed(const char *text, size_t k, char *content, char *names, size_t *first_at)
{
	struct gw_tcs t = { 0 };
	size_t len = strlen(text);
	content[0] = names[0] = 0;
	*first_at = 0;
	for (size_t n = 0; n < len || n == 0;) {
		n = n + k < len ? n + k : len;
		struct gw_tcs_out o;
		gw_tcs_step(&t, text, n, n == len, &o);
		strncat(content, text + o.content_off, o.content_len);
		size_t i;
		json_t *c;
		json_array_foreach(o.calls, i, c) {
			ck_assert_int_eq(json_integer_value(json_object_get(c, "index")), t.n_calls - (int)json_array_size(o.calls) + (int)i);
			if (!*first_at)
				*first_at = n;
			if (names[0])
				strcat(names, ",");
			strcat(names, json_string_value(json_object_get(json_object_get(c, "function"), "name")));
		}
		json_decref(o.calls);
		if (n == len)
			break;
	}
}

START_TEST(test_tool_stream)
{
	char content[256], names[128];
	size_t at;
	static const char hermes[] = "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
				     "</tool_call>\n<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>";
	for (size_t k = 1; k <= 7; k += 3) {
		tcs_feed(hermes, k, content, names, &at);
		ck_assert_str_eq(content, "Let me look.\n");
		ck_assert_str_eq(names, "weather,time");
		/* the first call goes out when its closing tag arrives, not at the end */
		ck_assert_uint_lt(at, strlen(hermes));
		ck_assert_uint_ge(at, (size_t)(strstr(hermes, "</tool_call>") - hermes) + 12);
	}
	/* Llama 3.x: held, parsed at the end */
	tcs_feed("<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}", 2, content, names, &at);
	ck_assert_str_eq(content, "");
	ck_assert_str_eq(names, "f");
	/* plain text streams through whole, a '<' that begins no marker included */
	tcs_feed("a < b, and <tool no", 3, content, names, &at);
	ck_assert_str_eq(content, "a < b, and <tool no");
	ck_assert_str_eq(names, "");
	/* a marker that gives no call: the text after all */
	tcs_feed("x <tool_call>not json</tool_call>", 4, content, names, &at);
	ck_assert_str_eq(content, "x <tool_call>not json</tool_call>");
	ck_assert_str_eq(names, "");
	/* blank before the call: no content */
	tcs_feed("\n<tool_call>{\"name\": \"g\"}</tool_call>", 5, content, names, &at);
	ck_assert_str_eq(content, "");
	ck_assert_str_eq(names, "g");
}
END_TEST

START_TEST(test_text_utf8)
{
	json_t *v = gw_json_text("a\xff" "b\xe2\x82", 5);
	ck_assert_str_eq(json_string_value(v), "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd");
	json_decref(v);
	v = gw_json_text("caf\xc3\xa9", 5);
	ck_assert_str_eq(json_string_value(v), "caf\xc3\xa9");
	json_decref(v);
}
END_TEST

START_TEST(test_api_keys)
{
	char path[] = "/tmp/pagoda-gw-keys-XXXXXX", err[256];
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	const char *keys = "# keys\n  sk-one  \n\nsk-two\n";
	ck_assert_int_eq(write(fd, keys, strlen(keys)), (int)strlen(keys));
	close(fd);
	ck_assert(!gw_auth_enabled());
	ck_assert_int_eq(gw_auth_check(NULL), 0); /* no keys: open, no scope */
	ck_assert_int_eq(gw_auth_load(path, err, sizeof err), 0);
	unlink(path);
	ck_assert(gw_auth_enabled());
	/* each key is its own prefix-cache scope: 1 + its index */
	ck_assert_int_eq(gw_auth_check("Bearer sk-one"), 1);
	ck_assert_int_eq(gw_auth_check("bearer sk-two"), 2);
	ck_assert_int_eq(gw_auth_check("Bearer sk-on"), -1);
	ck_assert_int_eq(gw_auth_check("Bearer sk-one2"), -1);
	ck_assert_int_eq(gw_auth_check("Bearer "), -1);
	ck_assert_int_eq(gw_auth_check("sk-one"), -1);
	ck_assert_int_eq(gw_auth_check(NULL), -1);
	ck_assert_int_eq(gw_auth_load("/nonexistent/keys", err, sizeof err), -1);
	ck_assert(strstr(err, "/nonexistent/keys"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gateway");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_chat_mapping);
	tcase_add_test(tc, test_completion_mapping);
	tcase_add_test(tc, test_v3_fields);
	tcase_add_loop_test(tc, test_refused, 0, sizeof refused / sizeof refused[0]);
	tcase_add_test(tc, test_tool_calls);
	tcase_add_test(tc, test_tool_stream);
	tcase_add_test(tc, test_text_utf8);
	tcase_add_test(tc, test_api_keys);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
