"""Chaos: real processes, replicas that fail in every way, clients that stream and don't.

The gateway runs over two mockllm replicas per pool. In each pool one replica stays healthy and
the other misbehaves: fast-err answers every generation with 500; slow-x serves normally, is
killed with SIGKILL while it streams, comes back stalled (accepts, never answers), is killed
again and comes back healthy. Eight clients run throughout, half streaming.

Asserted: no request that had not started streaming fails (every answer is a 200: connection
failures, first-byte timeouts and 500s are retried on the healthy replica, which the pools'
retry.on is widened to allow: mockllm's answers cost nothing to repeat, and what is under test
is that a retry hides the replica's failure; the default rule retries only what was certainly
not executed, docs/configuration.md#retries); a stream cut
mid-way ends with a clean SSE error event in the OpenAI shape, then [DONE], and a complete
chunked body; the faulty replicas are ejected, slow-x comes back once it recovers and serves
again; the slow-path and in-flight gauges return to 0.
"""
import json
import threading
import time

import httpx2 as httpx

from conftest import Gateway, Mock

SLOW_PROMPT = "Write a short story about a lighthouse keeper who befriends a whale."
FAST_PROMPT = "Classify each of these as a fruit or a vegetable: apple, carrot, banana, leek."


def metric(text, name, **labels):
    """Sum of the samples of name whose labels include labels, or None if there is none."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        if series.split("{")[0] != name:
            continue
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            total, found = total + float(value), True
    return total if found else None


def wait_for(cond, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Clients:
    """n client threads posting until stopped; even ones stream."""

    def __init__(self, url, n=8):
        self.url, self.stop, self.results, self.lock = url, threading.Event(), [], threading.Lock()
        self.streaming = {}  # replica -> streams that have received events and not ended
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def run(self, i):
        stream = i % 2 == 0
        with httpx.Client(timeout=60) as c:
            k = 0
            while not self.stop.is_set():
                prompt = SLOW_PROMPT if (k + i // 2) % 2 == 0 else FAST_PROMPT
                body = {"model": "auto", "stream": stream, "max_tokens": 30 if stream else 15,
                        "messages": [{"role": "user", "content": f"{prompt} #{i}-{k}"}]}
                k += 1
                r = {"stream": stream, "prompt": prompt}
                try:
                    if stream:
                        with c.stream("POST", self.url + "/v1/chat/completions", json=body) as resp:
                            r["status"] = resp.status_code
                            r["replica"] = resp.headers.get("x-router-replica")
                            r["lines"] = []
                            try:
                                for line in resp.iter_lines():
                                    if not r["lines"]:
                                        self.count(r["replica"], 1)
                                    r["lines"].append(line)
                            finally:
                                if r["lines"]:
                                    self.count(r["replica"], -1)
                    else:
                        resp = c.post(self.url + "/v1/chat/completions", json=body)
                        r["status"], r["replica"], r["body"] = resp.status_code, resp.headers.get("x-router-replica"), resp.text
                except httpx.HTTPError as e:
                    r["exc"] = repr(e)
                with self.lock:
                    self.results.append(r)

    def count(self, replica, d):
        with self.lock:
            self.streaming[replica] = self.streaming.get(replica, 0) + d

    def live(self, replica):
        with self.lock:
            return self.streaming.get(replica, 0)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)
        return self.results


def test_chaos():
    slow_flags = ("--decode-per-token", "30ms", "--jitter", "0")
    mocks = {
        "fast-ok": Mock("fast-ok", "fast"),
        "fast-err": Mock("fast-err", "fast", "--error-rate", "1"),
        "slow-ok": Mock("slow-ok", "slow", *slow_flags),
        "slow-x": Mock("slow-x", "slow", *slow_flags),
    }
    # The classifier's own load shedding (batcher.max_queue_delay) is not under test here, and
    # on a shared CI machine its inference time varies: it is turned off.
    gw = Gateway([mocks["fast-ok"], mocks["fast-err"]], [mocks["slow-ok"], mocks["slow-x"]],
                 cooldown="1s", first_byte="2s", extra_yaml="batcher:\n  max_queue_delay: 0s\n",
                 retry_on=["dial_error", "reset_before_write", "reset_before_headers", "first_byte_timeout",
                           "status_429", "status_503_retry_after", "status_503", "status_500", "status_502"])
    clients = None
    try:
        m = lambda: httpx.get(gw.url + "/metrics").text  # noqa: E731
        clients = Clients(gw.url)

        # 500s: fast-err is ejected; its requests went to fast-ok.
        wait_for(lambda: (metric(m(), "triage_upstream_ejections_total", replica="fast-err") or 0) >= 1,
                 "fast-err ejected")

        # kill -9 while it streams: its streams are cut mid-way.
        wait_for(lambda: clients.live("slow-x") >= 1, "a stream running on slow-x")
        mocks["slow-x"].kill()
        wait_for(lambda: metric(m(), "triage_upstream_replica_healthy", replica="slow-x") == 0, "slow-x ejected")
        ejected_after_kill = metric(m(), "triage_upstream_ejections_total", replica="slow-x")

        # Back, but stalled: health checks pass, generations never answer. The first-byte
        # timeout ejects it again and its requests go on to slow-ok.
        mocks["slow-x"].start("--stall-first-byte", "1h", *slow_flags)
        wait_for(lambda: metric(m(), "triage_upstream_ejections_total", replica="slow-x") > ejected_after_kill
                 and (metric(m(), "triage_upstream_requests_total", replica="slow-x", outcome="retried") or 0) >= 1,
                 "stalled slow-x timed out and ejected")

        # Recovered: it comes back and serves again.
        mocks["slow-x"].kill()
        served = metric(m(), "triage_upstream_requests_total", replica="slow-x", outcome="ok") or 0
        mocks["slow-x"].start(*slow_flags)
        wait_for(lambda: metric(m(), "triage_upstream_replica_healthy", replica="slow-x") == 1
                 and (metric(m(), "triage_upstream_requests_total", replica="slow-x", outcome="ok") or 0) > served,
                 "slow-x back in rotation and serving")

        results = clients.finish()
        clients = None
        failed = [r for r in results if r.get("status") != 200]
        assert not failed, f"{len(failed)} of {len(results)} requests failed: {failed[:3]}"

        cut = 0
        for r in results:
            if not r["stream"]:
                assert json.loads(r["body"])["object"] == "chat.completion"
                continue
            data = [l[len("data: "):] for l in r["lines"] if l.startswith("data: ")]
            assert data and data[-1] == "[DONE]", f"every stream ends with [DONE]: {r['lines'][-4:]}"
            if "event: error" in r["lines"]:
                cut += 1
                i = r["lines"].index("event: error")
                err = json.loads(r["lines"][i + 1][len("data: "):])["error"]
                assert err["type"] == "upstream_error" and "slow/slow-x" in err["message"], err
                assert r["lines"][i + 2:] == ["", "data: [DONE]", ""], r["lines"][i:]
                assert r["replica"] == "slow-x"
            else:
                assert all(json.loads(d)["object"] == "chat.completion.chunk" for d in data[:-1])
        assert cut >= 1, "the kill cut at least one stream"

        # triage_inflight_requests counts the /metrics request reading it.
        gauges = lambda: {k: metric(m(), k) for k in  # noqa: E731
                          ("triage_slow_active", "triage_inflight_requests", "triage_upstream_inflight")}
        idle = {"triage_slow_active": 0, "triage_inflight_requests": 1, "triage_upstream_inflight": 0}
        try:
            wait_for(lambda: gauges() == idle, "slow-path and in-flight gauges back to 0", timeout=10)
        except AssertionError:
            raise AssertionError(f"gauges stay at {gauges()}; {[l for l in m().splitlines() if 'inflight{' in l]}")
        text = m()
        print(f"chaos: {len(results)} requests ({sum(r['stream'] for r in results)} streamed), all 200; "
              f"{cut} streams cut by the kill ended with an error event; retries "
              f"{metric(text, 'triage_upstream_retries_total'):.0f}; ejections fast-err "
              f"{metric(text, 'triage_upstream_ejections_total', replica='fast-err'):.0f}, slow-x "
              f"{metric(text, 'triage_upstream_ejections_total', replica='slow-x'):.0f}")
    finally:
        if clients:
            clients.finish()
        gw.stop()
        for mock in mocks.values():
            mock.kill()
