"""Black-box checks of the gateway as a hostile or careless client uses it (docs/security.md).

- Slow bodies: connections that declare a 100,000-byte body and send a few bytes hold a bounded
  amount of the gateway's memory each (RSS from /proc), others are still served, and past
  server.max_connections a new connection gets a 503 in the OpenAI shape.
- Early 413: Python's urllib, which writes the whole body before reading, reads the 413.
- Cut streams: clients that disconnect mid-stream give their slow-path slots back at once.
- API keys: the official OpenAI client is refused without a key and served with one.
"""
import hashlib
import json
import socket
import tempfile
import time
import urllib.error
import urllib.request

import httpx2 as httpx
import openai
import pytest

from conftest import Gateway, Mock

SLOW_PROMPT = "Write a short story about a lighthouse keeper who befriends a whale."
MAX_CONNECTIONS = 2000


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def slow_active(url):
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("triage_slow_active "):
            return float(line.split()[1])
    return None


@pytest.fixture(scope="module")
def gateway():
    mocks = [Mock("h-fast-0", "fast"), Mock("h-slow-0", "slow", "--decode-per-token", "50ms", "--jitter", "0")]
    gw = Gateway(mocks[:1], mocks[1:], extra_yaml=f"server:\n  max_connections: {MAX_CONNECTIONS}\n")
    yield gw
    gw.stop()
    for m in mocks:
        m.kill()


def open_slow_body(port):
    """A connection that declares a 100,000-byte body, waits for 100 Continue (so the gateway
    has parsed its headers and started on its body) and sends 9 bytes of it."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Expect: 100-continue\r\nContent-Length: 100000\r\n\r\n")
    s.settimeout(30)
    got = b""
    while not got.endswith(b"\r\n\r\n"):
        chunk = s.recv(64)
        assert chunk, "closed before 100 Continue"
        got += chunk
    assert got.startswith(b"HTTP/1.1 100"), got
    s.sendall(b'{"text":"')
    return s


def test_slow_bodies_hold_bounded_memory(gateway):
    httpx.post(gateway.url + "/v1/classify", json={"text": "warm up"})
    before = rss_kib(gateway.proc.pid)
    n = MAX_CONNECTIONS - 10
    socks = [open_slow_body(gateway.port) for _ in range(n)]
    try:
        per = (rss_kib(gateway.proc.pid) - before) / n
        print(f"slow bodies: {n} connections, {per:.1f} KiB of RSS each")
        assert per < 64, "memory per connection must not follow the declared body (140 KiB before)"
        r = httpx.post(gateway.url + "/v1/classify", json={"text": "still served?"}, timeout=30)
        assert r.status_code == 200, r.text

        # Fill the cap with keep-alive connections until one is refused.
        for _ in range(100):
            c = socket.create_connection(("127.0.0.1", gateway.port))
            socks.append(c)
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            c.settimeout(10)
            head = c.recv(4096).decode()
            if not head.startswith("HTTP/1.1 200"):
                break
        status, _, rest = head.partition("\r\n")
        assert status == "HTTP/1.1 503 Service Unavailable", head
        assert "Retry-After: 1" in rest and '"code":"too_many_connections"' in rest, head
        assert len(socks) >= MAX_CONNECTIONS, "refused only at the cap"
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 10
    while httpx.get(gateway.url + "/healthz").status_code != 200:
        assert time.monotonic() < deadline, "closed connections free their slots"
        time.sleep(0.05)


def test_urllib_reads_an_early_413(gateway):
    body = json.dumps({"text": "x" * (4 << 20)}).encode()
    for _ in range(5):
        req = urllib.request.Request(gateway.url + "/v1/classify", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        assert e.value.code == 413
        assert json.loads(e.value.read())["error"]["code"] == "body_too_large"


def test_cut_streams_give_back_their_slots(gateway):
    body = {"model": "x", "stream": True, "max_tokens": 200, "messages": [{"role": "user", "content": SLOW_PROMPT}]}
    for i in range(20):
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, timeout=30) as r:
            assert r.status_code == 200 and r.headers["x-router-path"] == "slow"
            next(r.iter_lines())  # one event, then the client goes away mid-stream
    deadline = time.monotonic() + 5
    while slow_active(gateway.url) != 0:
        assert time.monotonic() < deadline, "slots released once the clients left"
        time.sleep(0.05)


def test_api_keys_with_the_openai_client():
    key = "sk-" + "7f3a9c" * 8
    keys = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    keys.write(f"keys:\n  - name: team-a\n    sha256: {hashlib.sha256(key.encode()).hexdigest()}\n")
    keys.close()
    mocks = [Mock("k-fast-0", "fast"), Mock("k-slow-0", "slow", "--decode-per-token", "2ms")]
    gw = Gateway(mocks[:1], mocks[1:], extra_yaml=f"auth:\n  keys_file: {keys.name}\n")
    try:
        messages = [{"role": "user", "content": "Name a fruit."}]
        for wrong in ["", "sk-wrong-key-0123456789abcdef"]:
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key=wrong or "unused", max_retries=0)
            if not wrong:
                client = client.with_options(default_headers={"Authorization": ""})
            with pytest.raises(openai.AuthenticationError) as e:
                client.chat.completions.create(model="auto", messages=messages, max_tokens=3)
            assert e.value.status_code == 401
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)
        assert client.chat.completions.create(model="auto", messages=messages, max_tokens=3).choices
        assert {m.id for m in client.models.list().data} >= {"small-model", "big-model"}
        metrics = httpx.get(gw.url + "/metrics").text
        assert 'triage_auth_requests_total{key="team-a",outcome="ok"} 2' in metrics
        assert key not in metrics
    finally:
        gw.stop()
        for m in mocks:
            m.kill()
