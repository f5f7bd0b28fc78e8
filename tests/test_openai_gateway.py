"""The official OpenAI Python client, streaming and not, through the gateway.

Checks content (mockllm's deterministic text), decision headers and the SSE
terminator, token accounting against mockllm's usage (non-streaming, and
streaming with and without include_usage), and that killing a replica costs no
request that had not started streaming.
"""
import json
from concurrent.futures import ThreadPoolExecutor

import httpx2 as httpx  # the HTTP client the openai package itself uses
import openai
import pytest

from conftest import PRICES, Gateway, Mock

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
         "kilo", "lima", "mike", "november", "oscar", "papa"]


def fnv1a64(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def expected_text(prompt: str, n: int) -> str:
    """mockllm's generated text: word i is WORDS[(fnv1a64(prompt) + i) % 16]."""
    h = fnv1a64(prompt.encode())
    return " ".join(WORDS[(h + i) % 16] for i in range(n))


def read_stream(chunks):
    """A streamed chat completion's text pieces, last finish_reason and usage (None if absent)."""
    parts, finish, usage = [], None, None
    for chunk in chunks:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                parts.append(c.delta.content)
            finish = c.finish_reason or finish
    return parts, finish, usage


def render(messages):
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages)


@pytest.fixture(scope="module")
def client(stack):
    gw, _ = stack
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0, timeout=30)


SLOW_PROMPT = "Write a short story about a lighthouse keeper who befriends a whale."
FAST_PROMPT = "Classify each of these as a fruit or a vegetable: apple, carrot, banana, leek."


@pytest.mark.parametrize("prompt,path,model", [(SLOW_PROMPT, "slow", "big-model"), (FAST_PROMPT, "fast", "small-model")])
def test_chat_non_streaming(client, prompt, path, model):
    messages = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": prompt}]
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=messages, max_tokens=7)
    resp = raw.parse()
    assert resp.choices[0].message.content == expected_text(render(messages), 7)
    assert resp.choices[0].finish_reason == "length"
    assert resp.model == model, "the gateway rewrites the model to the chosen pool's"
    assert resp.usage.completion_tokens == 7
    h = raw.headers
    assert h["x-router-path"] == path
    assert h["x-router-reason"] == ("slow_granted" if path == "slow" else "fast_model")
    assert 0 <= float(h["x-router-p-slow"]) <= 1
    assert float(h["x-router-threshold"]) >= 0.5
    assert h["x-router-replica"].startswith(path + "-")
    assert float(h["x-router-latency"]) >= 0
    assert "inference" in h["server-timing"]


def test_chat_streaming(client):
    messages = [{"role": "user", "content": SLOW_PROMPT}]
    stream = client.chat.completions.create(model="auto", messages=messages, max_tokens=9, stream=True,
                                            stream_options={"include_usage": True})
    parts, finish, usage = read_stream(stream)
    assert "".join(parts) == expected_text(render(messages), 9)
    assert len(parts) == 9, "one SSE event per token, passed through as they come"
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == 9


def test_stream_ends_with_done_and_carries_headers(stack):
    gw, _ = stack
    body = {"model": "x", "stream": True, "max_tokens": 4, "messages": [{"role": "user", "content": SLOW_PROMPT}]}
    with httpx.stream("POST", gw.url + "/v1/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-router-path"] == "slow"
        events = [line[len("data: "):] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert len(events) == 5
    assert all(json.loads(e)["object"] == "chat.completion.chunk" for e in events[:-1])


def test_completions(client):
    prompt = "Summarize: The Nile is a major north-flowing river in northeastern Africa."
    resp = client.completions.create(model="auto", prompt=prompt, max_tokens=5)
    assert resp.choices[0].text == expected_text(prompt, 5)
    text = "".join(c.choices[0].text for c in client.completions.create(model="auto", prompt=prompt, max_tokens=5, stream=True))
    assert text == expected_text(prompt, 5)


def test_models(client):
    ids = {m.id for m in client.models.list().data}
    assert {"small-model", "big-model"} <= ids


def test_clients_conventions(client, stack):
    """GET /health answers as vLLM's does, auto is the first model listed, and a model one
    pool serves pins the request there without classification."""
    gw, _ = stack
    r = httpx.get(gw.url + "/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    models = client.models.list().data
    assert models[0].id == "auto"
    assert {m.id: m.owned_by for m in models[1:]} == {"small-model": "triage/fast", "big-model": "triage/slow"}

    messages = [{"role": "user", "content": FAST_PROMPT}]  # the classifier would say fast
    raw = client.chat.completions.with_raw_response.create(model="big-model", messages=messages, max_tokens=3)
    assert raw.headers["x-router-path"] == "slow"
    assert raw.headers["x-router-reason"] == "pinned"
    assert "x-router-p-slow" not in raw.headers, "nothing was classified"
    resp = raw.parse()
    assert resp.model == "big-model"
    assert resp.choices[0].message.content == expected_text(render(messages), 3)


def test_bad_requests_are_4xx_with_openai_errors(client, stack):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="auto", messages=[])
    assert e.value.status_code == 400
    gw, _ = stack
    r = httpx.post(gw.url + "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "error" in r.json()


class Meter:
    """The gateway's token and cost counters for one pool, summed over its replicas."""

    def __init__(self, gw, pool):
        text = httpx.get(gw.url + "/metrics").text
        self.prompt = self.completion = self.unmetered = self.cost = self.baseline = 0.0
        for line in text.splitlines():
            if f'pool="{pool}"' not in line:
                continue
            name, value = line.split("{", 1)[0], float(line.rsplit(" ", 1)[1])
            if name == "triage_upstream_tokens_total":
                if 'kind="prompt"' in line:
                    self.prompt += value
                else:
                    self.completion += value
            elif name == "triage_upstream_unmetered_total":
                self.unmetered += value
            elif name == "triage_upstream_cost_total":
                self.cost += value
            elif name == "triage_upstream_cost_baseline_total":
                self.baseline += value

    def since(self, before):
        return {k: getattr(self, k) - getattr(before, k) for k in vars(self)}


def cost(prompt, completion, prices):
    return (prompt * prices[0] + completion * prices[1]) / 1e6


@pytest.mark.parametrize("prompt,path", [(SLOW_PROMPT, "slow"), (FAST_PROMPT, "fast")])
def test_tokens_counted_non_streaming(client, stack, prompt, path):
    """A non-streaming answer: the gateway counts exactly the replica's usage, says so in the
    token headers, and prices it at the pool's prices and at the slow pool's."""
    gw, _ = stack
    before = Meter(gw, path)
    messages = [{"role": "user", "content": prompt + " (tokens)"}]
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=messages, max_tokens=6)
    resp = raw.parse()
    assert raw.headers["x-router-path"] == path
    u = resp.usage
    assert u.completion_tokens == 6 and u.prompt_tokens > 0
    assert raw.headers["x-router-prompt-tokens"] == str(u.prompt_tokens)
    assert raw.headers["x-router-completion-tokens"] == str(u.completion_tokens)
    d = Meter(gw, path).since(before)
    assert d["prompt"] == u.prompt_tokens and d["completion"] == u.completion_tokens
    assert d["unmetered"] == 0
    assert d["cost"] == pytest.approx(cost(u.prompt_tokens, u.completion_tokens, PRICES[path]))
    assert d["baseline"] == pytest.approx(cost(u.prompt_tokens, u.completion_tokens, PRICES["slow"]))


def read_stream_usage(stream):
    """Content, every chunk's usage, and the number of usage-only chunks (empty choices)."""
    parts, usages, usage_chunks = [], [], 0
    for chunk in stream:
        usages.append(chunk.usage)
        if not chunk.choices:
            usage_chunks += 1
        for c in chunk.choices:
            if c.delta.content:
                parts.append(c.delta.content)
    return "".join(parts), usages, usage_chunks


@pytest.mark.parametrize("prompt,path", [(SLOW_PROMPT, "slow"), (FAST_PROMPT, "fast")])
def test_tokens_counted_streaming_with_and_without_include_usage(client, stack, prompt, path):
    """The same stream twice: asking for usage, the client gets the usage chunk and the gateway
    counts exactly its numbers; not asking, the client gets no usage chunk (the gateway asked
    the replica for it and kept it) and the gateway counts the same numbers anyway."""
    gw, _ = stack
    messages = [{"role": "user", "content": prompt + " (stream tokens)"}]

    before = Meter(gw, path)
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=messages, max_tokens=8, stream=True,
                                                            stream_options={"include_usage": True})
    assert raw.headers["x-router-path"] == path
    assert "x-router-prompt-tokens" not in raw.headers, "a stream's headers go before its usage exists"
    text, usages, usage_chunks = read_stream_usage(raw.parse())
    assert text == expected_text(render(messages), 8)
    assert usage_chunks == 1
    u = usages[-1]
    assert u is not None and u.completion_tokens == 8 and u.prompt_tokens > 0
    d = Meter(gw, path).since(before)
    assert (d["prompt"], d["completion"], d["unmetered"]) == (u.prompt_tokens, 8, 0)

    before = Meter(gw, path)
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=messages, max_tokens=8, stream=True)
    assert raw.headers["x-router-path"] == path
    text, usages, usage_chunks = read_stream_usage(raw.parse())
    assert text == expected_text(render(messages), 8)
    assert usage_chunks == 0 and all(x is None for x in usages), "no usage reaches a client that did not ask"
    d = Meter(gw, path).since(before)
    assert (d["prompt"], d["completion"], d["unmetered"]) == (u.prompt_tokens, 8, 0)
    assert d["cost"] == pytest.approx(cost(u.prompt_tokens, 8, PRICES[path]))


def test_completions_stream_tokens_counted(client, stack):
    """Legacy completions stream the same way: no usage chunk unless asked, tokens counted."""
    gw, _ = stack
    prompt = "Summarize: the Danube flows through ten countries. (tokens)"
    befores = {p: Meter(gw, p) for p in ("fast", "slow")}
    chunks = list(client.completions.create(model="auto", prompt=prompt, max_tokens=5, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == expected_text(prompt, 5)
    assert all(c.choices and c.usage is None for c in chunks)
    completion = sum(Meter(gw, p).since(befores[p])["completion"] for p in ("fast", "slow"))
    assert completion == 5


def test_killed_replica_costs_no_unstarted_request():
    """Kill one fast and one slow replica while requests run: every non-streaming
    request (none has started streaming when its replica dies) still succeeds,
    via the retry before the first byte and passive ejection. The requests the kill
    cuts were written whole, so only a pool whose retry.on lists reset_before_headers
    retries them: self-hosted replicas, where a generation cut by a crash costs
    nothing to repeat (the default rule does not, docs/configuration.md#retries)."""
    mocks = [Mock("k-fast-0", "fast", "--decode-per-token", "20ms", "--jitter", "0"),
             Mock("k-fast-1", "fast", "--decode-per-token", "20ms", "--jitter", "0"),
             Mock("k-slow-0", "slow", "--decode-per-token", "20ms", "--jitter", "0"),
             Mock("k-slow-1", "slow", "--decode-per-token", "20ms", "--jitter", "0")]
    gw = Gateway(mocks[:2], mocks[2:], retry_on=["dial_error", "reset_before_write", "reset_before_headers",
                                                 "status_429", "status_503_retry_after"])
    try:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0, timeout=30)
        prompts = [SLOW_PROMPT, FAST_PROMPT] * 40

        def call(i):
            messages = [{"role": "user", "content": f"{prompts[i]} (#{i})"}]
            r = client.chat.completions.create(model="auto", messages=messages, max_tokens=10)
            return r.choices[0].message.content == expected_text(render(messages), 10)

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(call, i) for i in range(len(prompts))]
            # Kill once the first requests are in flight.
            futures[8].result()
            mocks[0].kill()
            mocks[2].kill()
            results = [f.result() for f in futures]
        assert all(results)
        metrics = httpx.get(gw.url + "/metrics").text
        retries = sum(float(l.rsplit(" ", 1)[1]) for l in metrics.splitlines()
                      if l.startswith("triage_upstream_retries_total"))
        assert retries >= 1, "the kill should have forced at least one retry on another replica"
    finally:
        gw.stop()
        for m in mocks:
            m.kill()
