"""The APIs agents use, through the gateway with its built-in simulated pools, with the
official clients: Anthropic's SDK (messages.create, streaming, count_tokens, a tool-use
round trip, errors) and OpenAI's Responses (create, streaming, a three-turn
previous_response_id chain that must stay on the replica holding its state, retrieve and
delete).

The simulator's text is deterministic (see test_openai_gateway.expected_text): the prompt it
hashes is "role: text\\n" per turn, the system prompt or instructions first.
"""
import os
import signal
import subprocess
import tempfile

import anthropic
import httpx2 as httpx
import openai
import pytest

from conftest import BIN, REPO, Gateway, Mock, free_port, wait_http
from test_openai_gateway import FAST_PROMPT, expected_text


def tokens(text):
    """The simulator's token count: ceil(bytes / 4)."""
    return (len(text.encode()) + 3) // 4


@pytest.fixture(scope="module")
def gateway():
    """The gateway with its built-in simulated pools (--simulate): two fast and two slow
    replicas that speak every API natively."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="triage-agent-", suffix=".log", delete=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
    proc = subprocess.Popen([str(BIN / "triage"), "--simulate", "--listen", f"127.0.0.1:{port}"],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/readyz", timeout=120, proc=proc)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def claude(gateway):
    # The SDK appends /v1/messages to base_url; the key goes in x-api-key.
    return anthropic.Anthropic(base_url=gateway, api_key="unused", max_retries=0, timeout=30)


@pytest.fixture(scope="module")
def oai(gateway):
    return openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=0, timeout=30)


SYSTEM = "Answer in one word."


def test_messages_create(claude):
    raw = claude.messages.with_raw_response.create(
        model="auto", max_tokens=6, system=SYSTEM, messages=[{"role": "user", "content": FAST_PROMPT}])
    assert raw.headers["x-router-path"] in ("fast", "slow")
    assert raw.headers["x-router-reason"]
    assert raw.headers["x-router-replica"]
    assert "x-router-translated" not in raw.headers
    msg = raw.parse()
    prompt = f"system: {SYSTEM}\nuser: {FAST_PROMPT}\n"
    assert msg.type == "message" and msg.role == "assistant"
    assert msg.content[0].type == "text"
    assert msg.content[0].text == expected_text(prompt, 6)
    assert msg.stop_reason == "max_tokens"
    assert msg.usage.output_tokens == 6
    assert msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) == tokens(prompt)
    assert int(raw.headers["x-router-completion-tokens"]) == 6
    assert int(raw.headers["x-router-prompt-tokens"]) == tokens(prompt)


def test_messages_streaming(claude):
    prompt = f"user: {FAST_PROMPT}\n"
    with claude.messages.stream(model="auto", max_tokens=5, messages=[{"role": "user", "content": FAST_PROMPT}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == expected_text(prompt, 5)
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 5

    events = [e.type for e in claude.messages.create(
        model="auto", max_tokens=2, stream=True, messages=[{"role": "user", "content": FAST_PROMPT}])]
    # The SDK hands over every named event but the keep-alive ping.
    assert events == ["message_start", "content_block_start", "content_block_delta", "content_block_delta",
                      "content_block_stop", "message_delta", "message_stop"]


def test_count_tokens(claude):
    n = claude.messages.count_tokens(model="auto", system=SYSTEM, messages=[{"role": "user", "content": FAST_PROMPT}])
    assert n.input_tokens == tokens(f"system: {SYSTEM}\nuser: {FAST_PROMPT}\n")


WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_tool_use_round_trip(claude):
    question = {"role": "user", "content": "What is the weather in Oslo? Use the tool."}
    raw = claude.messages.with_raw_response.create(model="auto", max_tokens=8, tools=[WEATHER], messages=[question])
    first = raw.parse()
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather" and call.id
    raw2 = claude.messages.with_raw_response.create(model="auto", max_tokens=8, tools=[WEATHER], messages=[
        question,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 degrees."}]},
    ])
    # The tool's turn is classified by the task: its text again (a cache hit), its pool.
    assert raw2.headers["x-router-path"] == raw.headers["x-router-path"]
    assert raw2.headers["x-router-cache"] == "hit"
    second = raw2.parse()
    assert second.stop_reason == "max_tokens"
    assert second.content[0].type == "text" and second.content[0].text


def test_agent_loop_classified_by_its_task(claude, gateway):
    """Claude Code's shape: a <system-reminder> block before the user's words and one beside
    each tool result. Every turn is classified by the words alone (the P(slow) /v1/classify
    gives them), the tool turns as result-cache hits on the task's pool."""
    task = "Write a short story about a lighthouse keeper who befriends a storm."
    alone = httpx.post(gateway + "/v1/classify", json={"text": task}).json()["results"][0]
    reminder = {"type": "text", "text": "<system-reminder>\nFollow the project's style guide.\n</system-reminder>"}
    msgs = [{"role": "user", "content": [reminder, {"type": "text", "text": task}]}]
    raw = claude.messages.with_raw_response.create(model="auto", max_tokens=4, tools=[WEATHER], messages=msgs)
    assert raw.headers["x-router-path"] == alone["path"]
    assert float(raw.headers["x-router-p-slow"]) == pytest.approx(alone["p_slow"], abs=1e-4)
    for i, output in enumerate(["README.md\nmain.go", '{"ok": true, "items": []}', "--- FAIL: TestX (0.01s)"]):
        msgs.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "get_weather", "input": {"city": "x"}}]})
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": output}, reminder]})
        turn = claude.messages.with_raw_response.create(model="auto", max_tokens=4, tools=[WEATHER], messages=msgs)
        assert turn.headers["x-router-path"] == alone["path"], output
        assert turn.headers["x-router-cache"] == "hit", output


# A row of Dolly's summarization test split.
SUMMARIZE = "Summarize Roosevelt's accomplishments described in this paragraph."
ARTICLE = ("Beginning in 1925, Roosevelt spent most of his time in the Southern United States, at first on his "
           "houseboat, the Larooco. Intrigued by the potential benefits of hydrotherapy, he established a "
           "rehabilitation center at Warm Springs, Georgia, in 1926. To create the rehabilitation center, he "
           "assembled a staff of physical therapists and used most of his inheritance to purchase the Merriweather "
           "Inn. In 1938, he founded the National Foundation for Infantile Paralysis, leading to the development "
           "of polio vaccines.")


def test_pasted_document_classified_by_its_request(claude, oai, gateway):
    """A summarization request with its article pasted into the one message, before or after it,
    a blank line or a single newline apart, is classified as the request with the article as its
    context (docs/http-api.md, "Pasted documents"): the P(slow) /v1/classify gives with the
    context apart, on every API."""
    apart = httpx.post(gateway + "/v1/classify", json={"text": SUMMARIZE, "context": ARTICLE}).json()["results"][0]
    whole = httpx.post(gateway + "/v1/classify", json={"text": SUMMARIZE + " " + ARTICLE}).json()["results"][0]
    assert apart["path"] == "fast" and whole["path"] == "slow", "one line: no split, read as a long request"
    before = pasted_count(gateway)
    for text in (SUMMARIZE + "\n\n" + ARTICLE, ARTICLE + "\n\n" + SUMMARIZE, SUMMARIZE + "\n" + ARTICLE,
                 ARTICLE + "\n" + SUMMARIZE):
        heads = [
            claude.messages.with_raw_response.create(
                model="auto", max_tokens=4, messages=[{"role": "user", "content": text}]).headers,
            oai.chat.completions.with_raw_response.create(
                model="auto", max_tokens=4, messages=[{"role": "user", "content": text}]).headers,
            oai.responses.with_raw_response.create(model="auto", max_output_tokens=16, input=text).headers,
        ]
        for h in heads:
            assert h["x-router-path"] == "fast"
            assert float(h["x-router-p-slow"]) == pytest.approx(apart["p_slow"], abs=1e-4)
    assert pasted_count(gateway) == before + 12


def pasted_count(gateway):
    for line in httpx.get(gateway + "/metrics").text.splitlines():
        if line.startswith("triage_pasted_documents_total "):
            return float(line.split()[1])
    raise AssertionError("triage_pasted_documents_total missing")


def test_messages_errors_in_anthropic_shape(claude, gateway):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="auto", max_tokens=0, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in e.value.body["error"]["message"]

    r = httpx.post(gateway + "/v1/messages", json={"max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "messages[0].role" in r.json()["error"]["message"]


def test_responses_create(oai):
    raw = oai.responses.with_raw_response.create(model="auto", input=FAST_PROMPT, max_output_tokens=6)
    assert raw.headers["x-router-path"] in ("fast", "slow")
    r = raw.parse()
    prompt = f"user: {FAST_PROMPT}\n"
    assert r.output_text == expected_text(prompt, 6)
    assert r.usage.output_tokens == 6
    assert r.usage.input_tokens == tokens(prompt)
    assert int(raw.headers["x-router-prompt-tokens"]) == tokens(prompt)


def test_responses_streaming(oai):
    stream = oai.responses.create(model="auto", input=FAST_PROMPT, max_output_tokens=4, stream=True)
    events = list(stream)
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == expected_text(f"user: {FAST_PROMPT}\n", 4)
    assert events[-1].response.usage.output_tokens == 4
    assert events[-1].response.id == events[0].response.id


def test_responses_chain_stays_on_its_replica(oai):
    turns = [FAST_PROMPT, "Now the colours of each.", "And their prices?"]
    prev, replica, conversation = None, None, ""
    for i, text in enumerate(turns):
        kwargs = {"previous_response_id": prev} if prev else {}
        raw = oai.responses.with_raw_response.create(
            model="auto", input=[{"role": "user", "content": text}], max_output_tokens=3, stream=False, **kwargs)
        r = raw.parse()
        if replica is None:
            replica = raw.headers["x-router-replica"]
        else:
            assert raw.headers["x-router-replica"] == replica, f"turn {i + 1} left the replica that holds its state"
            assert raw.headers["x-router-affinity"] == "previous_response_id"
            assert r.previous_response_id == prev
        conversation += f"user: {text}\n"
        assert r.output_text == expected_text(conversation, 3), f"turn {i + 1} saw the whole conversation"
        conversation += f"assistant: {r.output_text}\n"
        prev = r.id

    got = oai.responses.retrieve(prev)
    assert got.id == prev and got.output_text
    oai.responses.delete(prev)
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.retrieve(prev)
    assert e.value.body["code"] == "response_not_found"
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model="auto", input="more", previous_response_id="resp_never_seen")


@pytest.fixture(scope="module")
def chat_only():
    """A gateway whose pools are said to speak chat and completions only: Messages requests are
    translated to chat completions and back."""
    mocks = [Mock("co-fast-0", "fast"), Mock("co-slow-0", "slow", "--decode-per-token", "2ms", "--jitter", "0")]
    gw = Gateway(mocks[:1], mocks[1:], apis={"fast": ["chat", "completions"], "slow": ["chat", "completions"]})
    yield gw
    gw.stop()
    for m in mocks:
        m.kill()


def test_messages_translated_for_a_chat_only_pool(chat_only):
    claude = anthropic.Anthropic(base_url=chat_only.url, api_key="unused", max_retries=0, timeout=30)
    messages = [{"role": "user", "content": FAST_PROMPT}]
    # The chat prompt the replica sees renders the system prompt and turns as the Messages one would.
    prompt = f"system: {SYSTEM}\nuser: {FAST_PROMPT}\n"
    raw = claude.messages.with_raw_response.create(model="auto", max_tokens=5, system=SYSTEM, messages=messages)
    assert raw.headers["x-router-translated"] == "chat"
    msg = raw.parse()
    assert msg.type == "message" and msg.id.startswith("msg_")
    assert msg.content[0].text == expected_text(prompt, 5)
    assert msg.stop_reason == "max_tokens"
    assert msg.usage.output_tokens == 5
    assert msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) == tokens(prompt)

    with claude.messages.stream(model="auto", max_tokens=4, system=SYSTEM, messages=messages) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == expected_text(prompt, 4)
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 4

    n = claude.messages.count_tokens(model="auto", messages=messages)
    assert n.input_tokens > 0  # estimated: a chat-only pool cannot count

    # The tool loop, through the translation: tool_calls come back as tool_use, and the
    # tool_result turn reaches the replica as a tool message.
    question = {"role": "user", "content": "What is the weather in Oslo? Use the tool."}
    first = claude.messages.create(model="auto", max_tokens=8, tools=[WEATHER], messages=[question])
    assert first.stop_reason == "tool_use"
    call = next(b for b in first.content if b.type == "tool_use")
    assert call.name == "get_weather"
    with claude.messages.stream(model="auto", max_tokens=8, tools=[WEATHER], messages=[question]) as s:
        streamed = s.get_final_message()
    assert streamed.stop_reason == "tool_use" and streamed.content[0].type == "tool_use"
    assert streamed.content[0].input == call.input
    second = claude.messages.create(model="auto", max_tokens=8, tools=[WEATHER], messages=[
        question, {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny."}]},
    ])
    assert second.stop_reason == "max_tokens" and second.content[0].type == "text"



def test_responses_translated_for_a_chat_only_pool(chat_only):
    """The Responses API through the translation to chat: the replica sees the instructions and
    the input as chat messages, the client gets a response (not stored) and its typed events."""
    oai = openai.OpenAI(base_url=chat_only.url + "/v1", api_key="unused", max_retries=0, timeout=30)
    prompt = f"system: {SYSTEM}\nuser: {FAST_PROMPT}\n"
    raw = oai.responses.with_raw_response.create(model="auto", instructions=SYSTEM, input=FAST_PROMPT, max_output_tokens=5)
    assert raw.headers["x-router-translated"] == "chat"
    r = raw.parse()
    assert r.output_text == expected_text(prompt, 5)
    assert r.status == "incomplete" and r.usage.output_tokens == 5 and r.usage.input_tokens == tokens(prompt)
    assert r.store is False
    events = list(oai.responses.create(model="auto", instructions=SYSTEM, input=FAST_PROMPT, max_output_tokens=4, stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == expected_text(prompt, 4)
    assert events[-1].response.usage.output_tokens == 4
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model="auto", input="more", previous_response_id=r.id)
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="auto", input=FAST_PROMPT, tools=[{"type": "function", "name": "f", "parameters": {}}])
    assert e.value.body["code"] == "api_not_supported" and e.value.body["param"] == "tools"
