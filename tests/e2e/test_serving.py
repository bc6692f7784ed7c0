"""Serving behaviour: radix cache reuse, output invariance, load with disconnects, retraction,
bad inputs, API key, and draining on SIGTERM."""
import concurrent.futures as futures
import json
import os
import signal
import threading
import time

import requests

from conftest import Server, wait_idle

TEMPLATES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "chat_templates")
PREFIX = "You are a helpful assistant. The following is a long shared system prompt that many requests reuse. " * 4


def greedy(server, prompt, max_tokens=8):
    r = server.post("/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()


def metric(server, name):
    for line in server.get("/metrics").text.splitlines():
        if line.startswith("mlaserve:" + name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def test_shared_prefix_is_cached_and_outputs_unchanged(server, plain_server):
    prompts = [PREFIX + f"Question {i}: what is {i} plus {i}?" for i in range(6)]
    first = greedy(server, prompts[0])
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] <= 1  # at most BOS, shared by every prompt
    rest = [greedy(server, p) for p in prompts[1:]]
    for r in rest:
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] >= 60
    assert metric(server, "cache_hit_rate") > 0
    # Same outputs without the radix cache, with 7-token prefill chunks, 4-token pages, no overlap and
    # the shared experts apart.
    for p, r in zip(prompts, [first] + rest):
        assert greedy(plain_server, p)["choices"][0]["text"] == r["choices"][0]["text"]


def test_greedy_outputs_do_not_depend_on_the_batch(server):
    prompts = [f"Item {i}: " + "lorem ipsum " * (i % 5) for i in range(12)]
    alone = [greedy(server, p, 10)["choices"][0]["text"] for p in prompts]
    with futures.ThreadPoolExecutor(12) as pool:
        together = list(pool.map(lambda p: greedy(server, p, 10)["choices"][0]["text"], prompts))
    assert together == alone


def stream_completion(server, prompt, max_tokens, disconnect_after=None):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=600) as r:
        assert r.status_code == 200
        events, finish = 0, None
        for line in r.iter_lines():
            if not line:
                continue
            assert line.startswith(b"data: ")
            if line == b"data: [DONE]":
                return events, finish == "length"  # complete: every token, no error event
            event = json.loads(line[6:])
            assert "error" not in event, event
            finish = event["choices"][0].get("finish_reason") or finish
            events += 1
            if disconnect_after is not None and events >= disconnect_after:
                return events, False  # closing the response drops the connection
    return events, False


def test_256_concurrent_streams_complete_and_a_third_can_disconnect(server):
    n = 256
    with futures.ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda i: stream_completion(server, f"Every stream {i}", 6), range(n)))
    assert all(done for (_, done) in results)
    info = wait_idle(server)
    assert info["kv_slots_used"] == info["kv_slots_cached"]
    with futures.ThreadPoolExecutor(n) as pool:
        jobs = [pool.submit(stream_completion, server, f"Stream {i} says", 6, 2 if i % 3 == 0 else None)
                for i in range(n)]
        results = [j.result() for j in jobs]
    completed = [done for (i, (_, done)) in enumerate(results) if i % 3 != 0]
    assert all(completed) and len(completed) == n - (n + 2) // 3
    info = wait_idle(server)
    assert info["num_running_requests"] == 0 and info["num_waiting_requests"] == 0
    assert info["kv_slots_used"] == info["kv_slots_cached"]  # only the radix cache holds KV
    assert metric(server, "num_aborted_requests_total") > 0
    # Still serving.
    assert greedy(server, "after the load")["choices"][0]["finish_reason"] == "length"


def test_non_streaming_requests_are_aborted_when_their_client_goes(server):
    """A client that gives up on a non-streaming request (a timeout, perhaps then a retry) must not
    leave it generating: the server sees the closed connection and aborts it, on every route."""
    wait_idle(server)
    aborted, finished = metric(server, "num_aborted_requests_total"), metric(server, "num_requests_total")
    long = 30000  # far more tokens than the tiny model makes in the test's time
    cases = [
        ("/v1/completions", {"prompt": "Give up on me", "max_tokens": long, "ignore_eos": True}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "And me"}], "max_tokens": long,
                                  "ignore_eos": True}),
        ("/generate", {"text": "Me too", "sampling_params": {"max_new_tokens": long, "ignore_eos": True}}),
        ("/v1/completions", {"prompt": ["Two prompts", "and two samples"], "n": 2, "max_tokens": long,
                             "ignore_eos": True}),
    ]
    for path, body in cases:
        try:
            r = server.post(path, json=body, timeout=1.0)
            raise AssertionError(f"{path} answered before the client gave up: {r.status_code}")
        except requests.Timeout:
            pass
        info = wait_idle(server, timeout=10)
        assert info["num_running_requests"] == 0 and info["num_waiting_requests"] == 0, (path, info)
    assert metric(server, "num_aborted_requests_total") == aborted + 1 + 1 + 1 + 4
    assert metric(server, "num_requests_total") == finished
    info = wait_idle(server)
    assert info["kv_slots_used"] == info["kv_slots_cached"]  # only the radix cache holds KV
    assert greedy(server, "still serving")["choices"][0]["finish_reason"] == "length"


def test_small_pool_retracts_and_completes_correctly(server):
    small = Server("--max-total-tokens", "256", "--disable-radix-cache", "--max-running-requests", "64",
                   "--chunked-prefill-size", "32")
    try:
        prompts = [f"Request number {i} with some words" for i in range(16)]
        want = [greedy(server, p, 24)["choices"][0]["text"] for p in prompts]
        with futures.ThreadPoolExecutor(16) as pool:
            got = list(pool.map(lambda p: greedy(small, p, 24)["choices"][0]["text"], prompts))
        assert got == want
        assert metric(small, "num_retractions_total") > 0
        # Two 150-token prompts in 32-token chunks, 50 tokens each: more than the pool holds. The
        # second's prefill must not cut the first off: both give all their tokens, as alone.
        def generate(s, ids):
            body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 50, "temperature": 0, "ignore_eos": True}}
            return s.post("/generate", json=body).json()["output_ids"]
        long_prompts = [[100 + (7 * i + 13 * j) % 5000 for i in range(150)] for j in range(2)]
        want = [generate(server, ids) for ids in long_prompts]
        with futures.ThreadPoolExecutor(2) as pool:
            got = list(pool.map(lambda ids: generate(small, ids), long_prompts))
        assert got == want and all(len(g) == 50 for g in got)
        info = wait_idle(small)
        assert info["kv_slots_used"] == 0
    finally:
        small.stop()


def test_bad_inputs_get_4xx_with_an_error_body(server):
    long_prompt = list(range(5, 5 + 40001))
    cases = [
        ("/v1/completions", b"{not json", 400),
        ("/v1/completions", {"prompt": 5}, 400),
        ("/v1/completions", {"prompt": "x", "max_tokens": -1}, 400),
        ("/v1/completions", {"prompt": "x", "max_tokens": 10**12}, 400),
        ("/v1/completions", {"prompt": "x", "temperature": "hot"}, 400),
        ("/v1/completions", {"prompt": long_prompt, "max_tokens": 1}, 400),
        ("/v1/completions", {"prompt": "x", "model": "gpt-4"}, 404),
        ("/v1/completions", {"prompt": "x", "n": 1000}, 400),
        ("/v1/completions", {"prompt": "x", "bogus_field": 1}, 400),
        ("/v1/completions", {"prompt": [10**9]}, 400),
        ("/v1/completions", b'{"prompt": "\xff\xfe bad utf-8"}', 400),
        ("/v1/chat/completions", {"messages": []}, 400),
        ("/v1/chat/completions", {"messages": [{"content": "no role"}]}, 400),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, 400),
        ("/generate", {"sampling_params": {"max_new_tokens": 2}}, 400),
        ("/generate", {"text": "x", "sampling_params": {"nope": 1}}, 400),
        ("/generate", {"input_ids": "text where ids belong"}, 400),
        ("/generate", {"text": [1, 2, 3]}, 400),
        ("/nowhere", {}, 404),
    ]
    for path, body, status in cases:
        if isinstance(body, bytes):
            r = requests.post(server.url + path, data=body, headers={"Content-Type": "application/json"}, timeout=30)
        else:
            r = requests.post(server.url + path, json=body, timeout=30)
        assert r.status_code == status, (path, body if not isinstance(body, list) else "...", r.status_code, r.text)
        err = r.json()["error"]
        assert err["message"] and err["type"]
    assert server.get("/health").status_code == 200
    assert greedy(server, "still fine")["choices"][0]["text"]


def test_native_generate_tokenize_and_info(server):
    r = server.post("/generate", json={"text": "Hello", "sampling_params": {"max_new_tokens": 3, "temperature": 0}})
    assert r.status_code == 200 and len(r.json()["output_ids"]) == 3
    ids = server.post("/tokenize", json={"prompt": "Hello world"}).json()["tokens"]
    bare = server.post("/v1/tokenize", json={"prompt": "Hello world", "add_special_tokens": False}).json()["tokens"]
    assert ids == [0] + bare  # BOS (id 0) by default, as SGLang and HF encode
    assert server.post("/detokenize", json={"tokens": ids}).json()["text"] == "Hello world"
    kept = server.post("/v1/detokenize", json={"tokens": ids, "skip_special_tokens": False}).json()["text"]
    assert kept.endswith("Hello world") and kept != "Hello world"
    many = server.post("/tokenize", json={"prompt": ["Hello", "Hello world"]}).json()
    assert many["tokens"][1] == ids and many["count"] == [len(many["tokens"][0]), len(ids)]
    texts = server.post("/detokenize", json={"tokens": many["tokens"]}).json()["text"]
    assert texts == ["Hello", "Hello world"]
    # A text prompt is encoded with BOS, like its ids from /tokenize.
    by_text = server.post("/generate", json={"text": "Hello world", "sampling_params": {"max_new_tokens": 4,
                                                                                        "temperature": 0}}).json()
    by_ids = server.post("/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": 4,
                                                                                  "temperature": 0}}).json()
    assert by_text["output_ids"] == by_ids["output_ids"]
    assert by_text["meta_info"]["prompt_tokens"] == len(ids)
    r = server.post("/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": 2}, "stream": True},
                    stream=True)
    lines = [l for l in r.iter_lines() if l]
    assert lines[-1] == b"data: [DONE]" and len(json.loads(lines[-2][6:])["output_ids"]) == 2
    assert server.get("/health_generate").status_code == 200
    assert server.get("/get_model_info").json()["is_generation"] is True
    assert "mlaserve:time_to_first_token_seconds_bucket" in server.get("/metrics").text


def test_abort_request_by_rid(server):
    """/generate's rid names the request in meta_info, and /abort_request stops it (SGLang's API)."""
    wait_idle(server)
    long = {"max_new_tokens": 30000, "ignore_eos": True}

    def abort(rid):  # once the request is in (its route registers it as it submits)
        deadline = time.time() + 30
        while True:
            n = server.post("/abort_request", json={"rid": rid}).json()["aborted"]
            if n or time.time() > deadline:
                return n
            time.sleep(0.05)

    with futures.ThreadPoolExecutor(4) as pool:
        victim = pool.submit(server.post, "/generate",
                             json={"text": "Stop me", "rid": "victim", "sampling_params": long})
        batch = pool.submit(server.post, "/generate", json={"text": ["one", "two"], "rid": ["b1", "b2"],
                                                            "sampling_params": {**long, "n": 2}})
        streamed = pool.submit(server.post, "/generate", json={"text": "Streamed", "rid": "s1", "stream": True,
                                                               "sampling_params": long})
        deadline = time.time() + 30
        while server.info()["num_running_requests"] < 1 + 4 + 1 and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.2)  # each route registers its rids right after the scheduler took the requests
        # A rid in flight cannot be taken again.
        dup = server.post("/generate",
                          json={"text": "again", "rid": "victim", "sampling_params": {"max_new_tokens": 1}})
        assert dup.status_code == 400 and "rid" in dup.json()["error"]["message"], dup.text
        assert abort("victim") == 1
        out = victim.result(timeout=30).json()
        assert out["meta_info"]["id"] == "victim" and out["meta_info"]["finish_reason"]["type"] == "abort"
        assert 0 < out["meta_info"]["completion_tokens"] < 30000
        assert server.post("/abort_request", json={"rid": "nobody"}).json() == {"aborted": 0}
        assert server.post("/abort_request", json={"abort_all": True}).json()["aborted"] >= 4 + 1
        outs = batch.result(timeout=30).json()
        assert [o["meta_info"]["id"] for o in outs] == ["b1", "b1", "b2", "b2"]
        assert all(o["meta_info"]["finish_reason"]["type"] == "abort" for o in outs)
        events = [json.loads(l[6:]) for l in streamed.result(timeout=30).iter_lines() if l and l != b"data: [DONE]"]
        assert events[-1]["meta_info"]["id"] == "s1" and events[-1]["meta_info"]["finish_reason"]["type"] == "abort"
        # The OpenAI routes take a rid too (as SGLang's); their aborted choices end with "abort".
        chat = pool.submit(server.post, "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Chat"}], "rid": "c1", "max_tokens": 30000, "ignore_eos": True})
        completions = pool.submit(server.post, "/v1/completions", json={
            "prompt": ["p1", "p2"], "rid": ["x1", "x2"], "max_tokens": 30000, "ignore_eos": True})
        assert abort("c1") == 1
        assert chat.result(timeout=30).json()["choices"][0]["finish_reason"] == "abort"
        assert abort("x2") == 1 and abort("x1") == 1
        assert [c["finish_reason"] for c in completions.result(timeout=30).json()["choices"]] == ["abort", "abort"]
    info = wait_idle(server)
    assert info["num_running_requests"] == 0 and info["kv_slots_used"] == info["kv_slots_cached"]
    # Unnamed requests get a rid of their own; bad bodies are refused.
    one = server.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 1}}).json()
    rid = one["meta_info"]["id"]
    assert len(rid) == 32 and int(rid, 16) >= 0
    for body in [{}, {"rid": 5}, {"rid": ""}, {"rid": "a", "abort_all": True}, {"abort_all": "yes"}, {"other": 1}]:
        r = server.post("/abort_request", json=body)
        assert r.status_code == 400 and r.json()["error"]["message"], (body, r.text)
    for body in [{"text": "x", "rid": ["a"]}, {"text": ["x", "y"], "rid": "a"}, {"text": ["x", "y"], "rid": ["a", "a"]},
                 {"text": ["x", "y"], "rid": ["a"]}, {"text": "x", "rid": ""}]:
        r = server.post("/generate", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "rid", (body, r.text)


def test_api_key():
    s = Server("--max-total-tokens", "4096", "--api-key", "sekret")
    try:
        assert requests.get(s.url + "/v1/models", timeout=10).status_code == 401
        ok = requests.get(s.url + "/v1/models", headers={"Authorization": "Bearer sekret"}, timeout=10)
        assert ok.status_code == 200
        assert requests.get(s.url + "/health", timeout=10).status_code == 200
    finally:
        s.stop()


def test_fp8_weights_and_kv_cache_serve_and_bad_flags_are_refused():
    s = Server("--max-total-tokens", "4096", "--quantization", "fp8", "--kv-cache-dtype", "fp8_e4m3")
    try:
        r = greedy(s, "FP8 all the way", 6)
        assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 6
    finally:
        s.stop()
    from conftest import BINARY, MODEL, TOKENIZER
    import subprocess
    base = [BINARY, "serve", "--model", MODEL, "--load-format", "dummy", "--tokenizer-path", TOKENIZER, "--port", "1"]
    for flags, reason in [(["--kv-cache-dtype", "fp8_e5m2"], "fp8_e5m2"), (["--quantization", "int4"], "int4"),
                          (["--mem-fraction-static", "1.5"], "--mem-fraction-static"),
                          (["--schedule-policy", "lpm", "--disable-radix-cache"], "radix cache"),
                          (["--enable-mixed-chunk", "--chunked-prefill-size", "-1"], "needs chunked prefill"),
                          (["--cuda-graph-max-bs", "8"], "need --device cuda"),
                          (["--device", "cuda", "--disable-cuda-graph", "--cuda-graph-bs", "4"], "contradicts"),
                          (["--reasoning-parser", "qwen3"], "expected deepseek-r1 or deepseek-v3"),
                          (["--tool-call-parser", "hermes"], "expected deepseekv3 or deepseekv31"),
                          (["--chat-template", "/nonexistent.jinja"], "/nonexistent.jinja: cannot open"),
                          (["--chat-template", TEMPLATES + "/broken.jinja"], "broken.jinja: chat template")]:
        r = subprocess.run(base + flags, capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and reason in r.stdout + r.stderr, (flags, r.stdout[-500:], r.stderr[-500:])


def test_sigterm_drains_running_requests():
    s = Server("--max-total-tokens", "4096")
    result = {}

    def run():
        result["r"] = requests.post(s.url + "/v1/completions", timeout=120,
                                    json={"prompt": "drain me", "max_tokens": 40, "temperature": 0})

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    s.proc.send_signal(signal.SIGTERM)
    t.join()
    assert result["r"].status_code == 200 and result["r"].json()["usage"]["completion_tokens"] == 40
    assert s.proc.wait(timeout=60) == 0
    s.stop()


def test_bench_serving_random_and_sharegpt(server, tmp_path):
    from conftest import BINARY
    import subprocess
    out = tmp_path / "bench.jsonl"
    common = [BINARY, "bench-serving", "--port", str(server.port), "--output-file", str(out)]
    r = subprocess.run(common + ["--num-prompts", "6", "--random-input-len", "32", "--random-output-len", "4",
                                 "--random-range-ratio", "0.5", "--max-concurrency", "3"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Successful requests:                     6 / 6" in r.stdout
    sharegpt = tmp_path / "sharegpt.json"
    sharegpt.write_text(json.dumps([{"conversations": [{"from": "human", "value": f"Question {i}?"},
                                                       {"from": "gpt", "value": "An answer " * (i + 2)}]}
                                    for i in range(5)]))
    r = subprocess.run(common + ["--dataset-name", "sharegpt", "--dataset-path", str(sharegpt), "--num-prompts", "5",
                                 "--request-rate", "20"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [json.loads(l) for l in out.read_text().splitlines()]
    assert len(lines) == 2 and lines[0]["completed"] == 6 and lines[1]["completed"] == 5
    assert lines[1]["input_tokens"] > 5 and lines[0]["ttft_ms"]["median"] > 0
    # Each reply's length in tokens (the server's tokenizer) is the request's output length.
    replies = ["An answer " * (i + 2) for i in range(5)]
    counts = server.post("/tokenize", json={"prompt": replies, "add_special_tokens": False}).json()["count"]
    assert lines[1]["output_tokens"] == sum(counts)
    r = subprocess.run(common + ["--dataset-path", str(sharegpt)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--dataset-path is read only with --dataset-name sharegpt" in r.stderr
