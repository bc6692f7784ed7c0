"""The official openai SDK against a running mlaserve: completions, chat, streaming, n, stop, logprobs, usage."""
import openai
import pytest

from conftest import MODEL, wait_idle


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_completion_and_usage(client, server):
    r = client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=6, temperature=0)
    assert r.object == "text_completion"
    assert len(r.choices) == 1 and r.choices[0].finish_reason == "length"
    assert isinstance(r.choices[0].text, str) and r.choices[0].text
    n_prompt = server.post("/tokenize", json={"prompt": "The quick brown fox"}).json()["count"]
    assert r.usage.prompt_tokens == n_prompt
    assert r.usage.completion_tokens == 6
    assert r.usage.total_tokens == n_prompt + 6


def test_chat_completion(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "system", "content": "Be brief."},
                                                               {"role": "user", "content": "Hello there"}],
                                       max_tokens=5, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 5


def test_chat_prompt_is_the_rendered_template_once(client, server):
    """The chat template writes BOS itself: the prompt is its rendering tokenized without adding
    special tokens again (as HF's apply_chat_template(tokenize=True) and SGLang)."""
    import json
    import subprocess
    from conftest import BINARY, TOKENIZER
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    rendered = subprocess.run([BINARY, "chat-template", "--tokenizer", TOKENIZER, "--add-generation-prompt"],
                              input=json.dumps(messages), capture_output=True, text=True, check=True).stdout
    ids = server.post("/tokenize", json={"prompt": rendered, "add_special_tokens": False}).json()["tokens"]
    assert ids[0] == 0 and ids[1] != 0  # one BOS, from the template
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, temperature=0)
    assert r.usage.prompt_tokens == len(ids)


def test_chat_template_flag_replaces_the_tokenizers():
    import json
    import os
    import subprocess
    from conftest import BINARY, TOKENIZER, Server
    template = os.path.join(os.path.dirname(__file__), "..", "fixtures", "chat_templates", "plain_roles.jinja")
    messages = [{"role": "user", "content": "Hello there"}]
    rendered = subprocess.run([BINARY, "chat-template", "--tokenizer", TOKENIZER, "--add-generation-prompt",
                               "--template", template], input=json.dumps(messages), capture_output=True, text=True,
                              check=True).stdout
    assert rendered.endswith("user: Hello there\nassistant:")
    s = Server("--max-total-tokens", "4096", "--chat-template", template)
    try:
        ids = s.post("/tokenize", json={"prompt": rendered, "add_special_tokens": False}).json()["tokens"]
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=300)
        r = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, temperature=0)
        assert r.usage.prompt_tokens == len(ids)
    finally:
        s.stop()


def test_tools_reach_a_template_that_renders_them(client):
    """Tools need --tool-call-parser and a template that renders them; the calls' parsing is in
    tests/unit/tool_call_parser_test.cc (the dummy model writes none)."""
    import json
    import os
    import subprocess
    from conftest import BINARY, TOKENIZER, Server
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    kwargs = dict(model=MODEL, messages=messages, max_tokens=2, temperature=0)
    with pytest.raises(openai.BadRequestError, match="--tool-call-parser"):
        client.chat.completions.create(**kwargs, tools=tools)
    assert client.chat.completions.create(**kwargs, tools=tools, tool_choice="none").choices[0].message.content
    templates = os.path.join(os.path.dirname(__file__), "..", "fixtures", "chat_templates")
    s = Server("--max-total-tokens", "4096", "--tool-call-parser", "deepseekv3")
    try:  # DeepSeek-V3's own template has no place for tools
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=300)
        with pytest.raises(openai.BadRequestError, match="--chat-template"):
            c.chat.completions.create(**kwargs, tools=tools)
    finally:
        s.stop()
    template = os.path.join(templates, "tools_list.jinja")
    s = Server("--max-total-tokens", "4096", "--tool-call-parser", "deepseekv3", "--chat-template", template)
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=300)
        def prompt_tokens(payload):
            rendered = subprocess.run([BINARY, "chat-template", "--tokenizer", TOKENIZER, "--add-generation-prompt",
                                       "--template", template], input=json.dumps(payload), capture_output=True,
                                      text=True, check=True).stdout
            return len(s.post("/tokenize", json={"prompt": rendered, "add_special_tokens": False}).json()["tokens"])
        with_tools = c.chat.completions.create(**kwargs, tools=tools)
        assert with_tools.usage.prompt_tokens == prompt_tokens({"messages": messages, "tools": tools})
        assert with_tools.choices[0].finish_reason == "length" and not with_tools.choices[0].message.tool_calls
        without = c.chat.completions.create(**kwargs, tools=tools, tool_choice="none")
        assert without.usage.prompt_tokens == prompt_tokens(messages) < with_tools.usage.prompt_tokens
        streamed = "".join(ch.choices[0].delta.content or "" for ch in
                           c.chat.completions.create(**kwargs, tools=tools, stream=True))
        assert streamed == with_tools.choices[0].message.content
        for bad in [{"tool_choice": "required"}, {"tool_choice": {"type": "function", "function": {"name": "x"}}},
                    {"tools": [{"type": "function"}]}, {"tools": "all"}]:
            r = s.post("/v1/chat/completions", json={"messages": messages, "tools": tools, **bad})
            assert r.status_code == 400 and r.json()["error"]["param"] in ("tools", "tool_choice"), (bad, r.text)
    finally:
        s.stop()


def test_streaming_equals_non_streaming(client):
    kwargs = dict(model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=0)
    full = client.completions.create(**kwargs).choices[0].text
    pieces, finish = [], None
    for chunk in client.completions.create(stream=True, **kwargs):
        pieces.append(chunk.choices[0].text)
        finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces) == full and finish == "length"

    msgs = [{"role": "user", "content": "Count to five."}]
    chat_full = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=10, temperature=0)
    stream = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=10, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    text, usage = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    assert text == chat_full.choices[0].message.content
    assert usage is not None and usage.completion_tokens == 10 and usage.prompt_tokens == chat_full.usage.prompt_tokens


def test_n_choices_and_seeds(client, server):
    r = client.completions.create(model=MODEL, prompt="Pick a number:", max_tokens=8, n=3, temperature=1.0, seed=5)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    # A cached prefix changes the last bits of the logits (another attention form): sampled
    # tokens are reproducible for the same computation, so start again from an empty cache.
    assert server.post("/flush_cache").status_code == 200
    again = client.completions.create(model=MODEL, prompt="Pick a number:", max_tokens=8, n=3, temperature=1.0, seed=5)
    assert [c.text for c in r.choices] == [c.text for c in again.choices]  # same seed, same samples
    assert len({c.text for c in r.choices}) > 1  # different seeds per choice
    assert r.usage.completion_tokens == 24
    greedy = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], n=2,
                                            max_tokens=6, temperature=0)
    assert greedy.choices[0].message.content == greedy.choices[1].message.content


def metric(server, name):
    for line in server.get("/metrics").text.splitlines():
        if line.startswith("mlaserve:" + name + "{"):
            return float(line.split()[-1])
    raise KeyError(name)


def test_stop_strings(client, server):
    base = client.completions.create(model=MODEL, prompt="Alpha beta gamma", max_tokens=16, temperature=0)
    text = base.choices[0].text
    assert len(text) > 4
    stop = text[len(text) // 2: len(text) // 2 + 2]
    r = client.completions.create(model=MODEL, prompt="Alpha beta gamma", max_tokens=16, temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == text[: text.index(stop)]
    # A stop string ends the request as finished, not aborted.
    wait_idle(server)
    finished, aborted = metric(server, "num_requests_total"), metric(server, "num_aborted_requests_total")
    client.completions.create(model=MODEL, prompt="Alpha beta gamma", max_tokens=16, temperature=0, stop=[stop])
    wait_idle(server)
    assert metric(server, "num_requests_total") == finished + 1
    assert metric(server, "num_aborted_requests_total") == aborted
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="Alpha beta gamma", max_tokens=16, temperature=0, stop=stop, stream=True))
    assert streamed == r.choices[0].text


def test_logprobs(client):
    r = client.completions.create(model=MODEL, prompt="Logprobs please", max_tokens=4, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 4 and len(lp.token_logprobs) == 4
    for value, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert value <= 0 and len(top) == 3
        assert abs(max(top.values()) - value) < 1e-4  # greedy: the chosen token is the best one
    c = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=3,
                                       temperature=0, logprobs=True, top_logprobs=2)
    content = c.choices[0].logprobs.content
    assert len(content) == 3 and all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)


def test_reasoning_parser_gives_reasoning_content():
    """--reasoning-parser deepseek-r1: R1's template opens <think>, so a greedy answer with no
    </think> (the dummy model's) is all reasoning, streamed as reasoning_content deltas; the split
    itself is checked in tests/unit/reasoning_parser_test.cc."""
    from conftest import Server
    s = Server("--max-total-tokens", "4096", "--reasoning-parser", "deepseek-r1")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=300)
        kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "Why?"}], max_tokens=10, temperature=0)
        plain = c.chat.completions.create(**kwargs, extra_body={"separate_reasoning": False}).choices[0].message
        whole = c.chat.completions.create(**kwargs).choices[0].message
        assert plain.content and whole.content == ""
        assert whole.model_extra["reasoning_content"] == plain.content.strip()
        for stream_reasoning in (True, False):
            reasoning, content, chunks = "", "", 0
            for chunk in c.chat.completions.create(**kwargs, stream=True,
                                                   extra_body={"stream_reasoning": stream_reasoning}):
                delta = chunk.choices[0].delta
                reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
                content += delta.content or ""
                chunks += 1
            assert reasoning == plain.content and content == "", stream_reasoning
            assert chunks > (2 if stream_reasoning else 0)
        bad = s.post("/v1/chat/completions", json={**kwargs, "separate_reasoning": "yes"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "separate_reasoning"
    finally:
        s.stop()
