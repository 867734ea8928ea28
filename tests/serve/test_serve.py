"""tfm serve against OpenAI's wire format, with the openai client and raw HTTP."""
import http.client
import json
import math
import os
import re
import socket
import threading
import time
import urllib.request

import jinja2
import pytest
import tokenizers

from conftest import CHAT_TEMPLATE, DEMO, Server

PROMPT = "ROMEO:"


def post(server, path, body, headers=None):
    """Raw HTTP: (status, parsed JSON body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(server.url + path, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get(server, path):
    with urllib.request.urlopen(server.url + path, timeout=60) as r:
        return r.status, r.read().decode()


def stream_events(server, path, body):
    """The server-sent events of a streamed request, parsed, and whether [DONE] ended them."""
    host, port = server.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", path, json.dumps({**body, "stream": True}),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type").startswith("text/event-stream")
    events, done = [], False
    for block in response.read().decode().split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: ")
        if block == "data: [DONE]":
            done = True
            continue
        assert not done, "an event after [DONE]"
        events.append(json.loads(block[len("data: "):]))
    conn.close()
    return events, done


def metric(server, name):
    _, text = get(server, "/metrics")
    match = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    return float(match.group(1))


def reference_tokenizer():
    return tokenizers.Tokenizer.from_file(os.path.join(DEMO, "tokenizer.json"))


def test_health_models_and_metrics(server):
    status, body = get(server, "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, body = get(server, "/v1/models")
    models = json.loads(body)
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["demo"]
    _, text = get(server, "/metrics")
    for name in ("tfm_requests_total", "tfm_prompt_tokens_total", "tfm_generation_tokens_total",
                 "tfm_time_to_first_token_seconds", "tfm_inter_token_latency_seconds",
                 "tfm_num_requests_running", "tfm_num_requests_waiting",
                 "tfm_graphs_compiled_total", "tfm_graph_cache_hits_total"):
        assert "# TYPE " + name in text
    # Every graph was compiled at start: serving compiles none.
    compiled = metric(server, "tfm_graphs_compiled_total")
    post(server, "/v1/completions", {"prompt": "KING:", "max_tokens": 5})
    assert metric(server, "tfm_graphs_compiled_total") == compiled


def test_greedy_completion_is_tfm_generate(client, generate):
    text, ids = generate(PROMPT, 40)
    out = client.completions.create(model="demo", prompt=PROMPT, max_tokens=40, temperature=0)
    assert PROMPT + out.choices[0].text == text
    prompt_ids = reference_tokenizer().encode(PROMPT).ids
    assert out.usage.prompt_tokens == len(prompt_ids)
    assert out.usage.completion_tokens == len(ids) - len(prompt_ids)
    assert out.usage.total_tokens == len(ids)
    ran_out = len(ids) - len(prompt_ids) == 40
    assert out.choices[0].finish_reason == ("length" if ran_out else "stop")


def test_chat_uses_the_template_and_counts_as_transformers(client, generate, model_dir):
    messages = [{"role": "user", "content": "JULIET:\nWherefore art thou?"}]
    out = client.chat.completions.create(model="demo", messages=messages, max_tokens=30,
                                         temperature=0)
    # transformers renders chat templates with jinja2 (trim_blocks, lstrip_blocks).
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    rendered = env.from_string(CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=True)
    prompt_ids = reference_tokenizer().encode(rendered, add_special_tokens=False).ids
    assert out.usage.prompt_tokens == len(prompt_ids)
    text, ids = generate(messages[0]["content"], 30, chat=True)
    assert rendered + out.choices[0].message.content == text
    assert out.usage.completion_tokens == len(ids) - len(prompt_ids)
    assert out.choices[0].message.role == "assistant"


@pytest.mark.parametrize("chat", [False, True])
def test_streamed_text_is_the_whole_text(server, chat):
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = {"model": "demo", "max_tokens": 24, "temperature": 0}
    if chat:
        body["messages"] = [{"role": "user", "content": "KING:"}]
    else:
        body["prompt"] = PROMPT
    status, whole = post(server, path, body)
    assert status == 200
    events, done = stream_events(server, path,
                                 {**body, "stream_options": {"include_usage": True}})
    assert done
    assert len({e["id"] for e in events}) == 1
    choice_events = [e for e in events if e["choices"]]
    if chat:
        assert choice_events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in choice_events)
        assert text == whole["choices"][0]["message"]["content"]
        assert all(e["object"] == "chat.completion.chunk" for e in events)
    else:
        text = "".join(e["choices"][0]["text"] for e in choice_events)
        assert text == whole["choices"][0]["text"]
    reasons = [e["choices"][0]["finish_reason"] for e in choice_events]
    assert reasons[-1] == whole["choices"][0]["finish_reason"]
    assert all(r is None for r in reasons[:-1])
    assert events[-1]["choices"] == [] and events[-1]["usage"] == whole["usage"]


def test_stop_strings_across_token_boundaries(server, client):
    out = client.completions.create(model="demo", prompt=PROMPT, max_tokens=40, temperature=0,
                                    logprobs=0)
    text, tokens = out.choices[0].text, out.choices[0].logprobs.tokens
    # A stop string made of the end of one token and the start of the next.
    i = next(i for i in range(5, len(tokens) - 1)
             if len(tokens[i].strip()) >= 2 and len(tokens[i + 1].strip()) >= 2)
    stop = tokens[i][-2:] + tokens[i + 1][:2]
    want = text[:text.index(stop)]
    cut = client.completions.create(model="demo", prompt=PROMPT, max_tokens=40, temperature=0,
                                    stop=[stop, "never appears"])
    assert cut.choices[0].text == want and cut.choices[0].finish_reason == "stop"
    events, done = stream_events(server, "/v1/completions",
                                 {"prompt": PROMPT, "max_tokens": 40, "temperature": 0,
                                  "stop": stop})
    assert done
    assert "".join(e["choices"][0]["text"] for e in events) == want
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


def test_n_choices(client, generate):
    text, _ = generate(PROMPT, 16)
    greedy = client.completions.create(model="demo", prompt=PROMPT, max_tokens=16, temperature=0,
                                       n=3)
    assert sorted(c.index for c in greedy.choices) == [0, 1, 2]
    assert all(PROMPT + c.text == text for c in greedy.choices)
    assert greedy.usage.completion_tokens == 3 * 16
    sampled = [client.completions.create(model="demo", prompt=PROMPT, max_tokens=16, n=3,
                                         seed=11, temperature=1.0) for _ in range(2)]
    texts = [[c.text for c in s.choices] for s in sampled]
    assert texts[0] == texts[1]  # a seed makes the choices reproducible
    assert len(set(texts[0])) > 1  # and the choices differ from each other


def test_several_prompts_give_n_choices_each(client, generate):
    prompts = [PROMPT, "JULIET:"]
    out = client.completions.create(model="demo", prompt=prompts, max_tokens=12, temperature=0,
                                    n=2)
    assert sorted(c.index for c in out.choices) == [0, 1, 2, 3]
    by_index = {c.index: c.text for c in out.choices}
    for p, prompt in enumerate(prompts):
        text, _ = generate(prompt, 12)
        assert [prompt + by_index[2 * p + i] for i in range(2)] == [text, text]
    counted = sum(len(reference_tokenizer().encode(p).ids) for p in prompts)
    assert out.usage.prompt_tokens == counted  # each prompt once, as OpenAI counts
    assert out.usage.completion_tokens == 4 * 12


def test_logprobs_join_back_to_the_text(client):
    out = client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "KING:"}], max_tokens=20,
        temperature=0, logprobs=True, top_logprobs=3)
    content = out.choices[0].logprobs.content
    assert "".join(t.token for t in content) == out.choices[0].message.content
    for t in content:
        assert t.logprob <= 0 and bytes(t.bytes).decode() == t.token
        assert len(t.top_logprobs) == 3
        # Greedy: the chosen token is the likeliest, and the probabilities sum to at most 1.
        assert t.top_logprobs[0].token == t.token
        assert math.isclose(t.top_logprobs[0].logprob, t.logprob, abs_tol=1e-6)
        assert sum(math.exp(x.logprob) for x in t.top_logprobs) <= 1 + 1e-5


@pytest.mark.parametrize("body,status,param", [
    (b"{not json", 400, None),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, 400, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}, 400, "max_tokens"),
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"}, 404, "model"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}, 400, None),
])
def test_bad_requests_get_openai_errors_and_the_server_goes_on(server, client, body, status,
                                                               param):
    got, error = post(server, "/v1/chat/completions", body)
    assert got == status
    assert set(error["error"]) == {"message", "type", "param", "code"}
    assert error["error"]["param"] == param and error["error"]["message"]
    out = client.completions.create(model="demo", prompt=PROMPT, max_tokens=4, temperature=0)
    assert out.choices[0].finish_reason in ("length", "stop")


def test_unknown_routes_and_oversized_bodies(server):
    status, error = post(server, "/v1/embeddings", {"input": "x"})
    assert status == 404 and error["error"]["code"] == 404
    status, error = post(server, "/v1/completions", b'{"prompt": "' + b"a" * (9 << 20) + b'"}')
    assert status == 413 and error["error"]["code"] == 413


def test_openai_client_errors(client):
    import openai
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="demo", messages=[], max_tokens=4)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])


def test_32_concurrent_streams_each_get_their_greedy_answer(server, client):
    prompts = [f"CITIZEN {i}:" for i in range(32)]
    sequential = [client.completions.create(model="demo", prompt=p, max_tokens=32,
                                            temperature=0).choices[0].text for p in prompts]
    results = [None] * 32

    def run(i):
        events, done = stream_events(server, "/v1/completions",
                                     {"prompt": prompts[i], "max_tokens": 32, "temperature": 0})
        results[i] = ("".join(e["choices"][0]["text"] for e in events), done)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [r[1] for r in results] == [True] * 32
    assert [r[0] for r in results] == sequential


def test_killed_clients_free_their_rows(server):
    cancelled = metric(server, "tfm_sequences_cancelled_total")
    host, port = server.url.split("//")[1].split(":")
    body = json.dumps({"prompt": PROMPT, "max_tokens": 480, "stream": True}).encode()
    sockets = []
    for _ in range(8):
        s = socket.create_connection((host, int(port)))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert s.recv(64).startswith(b"HTTP/1.1 200")
        sockets.append(s)
    for s in sockets:
        s.close()
    # Each of the 480-token sequences is dropped at its next step once its client is gone.
    deadline = time.time() + 30
    while (time.time() < deadline
           and metric(server, "tfm_sequences_cancelled_total") < cancelled + 8):
        time.sleep(0.05)
    assert metric(server, "tfm_sequences_cancelled_total") - cancelled == 8
    assert metric(server, "tfm_num_requests_running") == 0
    assert metric(server, "tfm_num_requests_waiting") == 0


def test_api_key(model_dir):
    s = Server(model_dir, "--api-key", "sesame")
    try:
        status, error = post(s, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
        assert status == 401 and error["error"]["code"] == 401
        status, _ = post(s, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2},
                         {"Authorization": "Bearer sesame"})
        assert status == 200
        assert get(s, "/health")[0] == 200  # no key needed outside /v1/
    finally:
        s.stop()


def test_a_full_queue_answers_503(model_dir):
    s = Server(model_dir, "--max-waiting", "1", max_num_seqs=1)
    try:
        host, port = s.url.split("//")[1].split(":")
        body = json.dumps({"prompt": PROMPT, "max_tokens": 480, "ignore_eos": True,
                           "stream": True}).encode()
        request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

        def fill_row_and_queue():
            running = socket.create_connection((host, int(port)))
            running.sendall(request)
            assert running.recv(64).startswith(b"HTTP/1.1 200")  # it holds the one row
            waiting = socket.create_connection((host, int(port)))
            waiting.sendall(request)  # the one place in the queue
            # Polled, not slept for: on a loaded machine the second request can take a while to
            # queue, and the demo model may decode the first one's 480 tokens before it does.
            deadline = time.time() + 3
            while time.time() < deadline:
                if (metric(s, "tfm_num_requests_waiting") >= 1
                        and metric(s, "tfm_num_requests_running") >= 1):
                    return running, waiting
                time.sleep(0.005)
            running.close()
            waiting.close()
            return None

        for _ in range(5):
            sockets = fill_row_and_queue()
            if sockets:
                break
            # The first request ended before the second queued: let both go and try again.
            deadline = time.time() + 30
            while time.time() < deadline and (metric(s, "tfm_num_requests_waiting") > 0
                                              or metric(s, "tfm_num_requests_running") > 0):
                time.sleep(0.05)
        assert sockets, "never saw one request running and one waiting"
        running, waiting = sockets
        status, error = post(s, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
        assert status == 503 and error["error"]["code"] == 503
        cancelled = metric(s, "tfm_sequences_cancelled_total")
        running.close()
        waiting.close()
        # Both are dropped once their next token finds the client gone; then the queue has room.
        deadline = time.time() + 30
        while time.time() < deadline and metric(s, "tfm_sequences_cancelled_total") < cancelled + 2:
            time.sleep(0.05)
        status, _ = post(s, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
        assert status == 200
    finally:
        s.stop()
