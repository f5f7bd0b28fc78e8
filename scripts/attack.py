#!/usr/bin/env python3
"""Black-box checks of the gateway as an attacker would run them; each prints what it measured.

Start a gateway first (for instance `bin/triage --simulate` with the built-in pools on 127.0.0.1:8080), then:

    scripts/attack.py slowbody --conns 5000          # declared-but-unsent bodies: RSS before/after
    scripts/attack.py users --requests 20000         # a new `user` per request (vtc-basic state)
    scripts/attack.py early413 --mib 4               # urllib writes a too-large body before reading
    scripts/attack.py leave --clients 20             # clients that leave a ~10 s generation after 1 s

The gateway's RSS is read from /proc/<pid>/status; --pid defaults to the process listening on
the target port. Needs only the standard library (and psutil to find the pid when --pid is not
given).
"""
import argparse
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def find_pid(port):
    import psutil
    for c in psutil.net_connections("tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid:
            return c.pid
    raise RuntimeError(f"no process listens on port {port}; pass --pid")


def timed_request(base, path, body, headers=None, timeout=30):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        e.read()
        status = e.code
    return status, (time.monotonic() - t0) * 1000


def slowbody(a):
    pid = a.pid or find_pid(a.port)
    before = rss_kib(pid)
    socks, refused = [], 0
    head = (f"POST /v1/classify HTTP/1.1\r\nHost: {a.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {a.declared}\r\n\r\n{{\"text\":\"").encode()
    if a.send == "headers":  # headers never finished
        head = f"POST /v1/classify HTTP/1.1\r\nHost: {a.host}\r\nX-Pad: ".encode()
    elif a.send == "past-prefetch":  # more than the 8 KiB fasthttp reads before the handler
        head += b"x" * (9 << 10)
    for _ in range(a.conns):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            s.connect((a.host, a.port))
            s.sendall(head)
            socks.append(s)
        except OSError:
            refused += 1
            s.close()
    time.sleep(a.settle)
    # Connections the gateway refused (over server.max_connections) are answered and closed.
    answered = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(1, socket.MSG_PEEK):
                answered += 1
        except BlockingIOError:
            pass
        except OSError:
            answered += 1
        s.setblocking(True)
    during = rss_kib(pid)
    status, ms = timed_request(f"http://{a.host}:{a.port}", "/v1/classify", {"text": "is it still serving?"})
    held = len(socks) - answered
    print(json.dumps({
        "send": a.send, "connections_opened": len(socks), "connect_failed": refused, "answered_or_closed_by_gateway": answered,
        "held_open": held, "rss_before_mib": round(before / 1024, 1), "rss_during_mib": round(during / 1024, 1),
        "rss_growth_kib_per_held_connection": round((during - before) / max(held, 1), 1),
        "other_request_status": status, "other_request_ms": round(ms, 1),
    }))
    for s in socks:
        s.close()


def users(a):
    base = f"http://{a.host}:{a.port}"
    pid = a.pid or find_pid(a.port)
    before = rss_kib(pid)
    codes = {}
    for i in range(a.requests):
        status, _ = timed_request(base, "/v1/chat/completions",
                                  {"user": f"user-{i}-{os.getpid()}", "max_tokens": 1,
                                   "messages": [{"role": "user", "content": "hi"}]})
        codes[status] = codes.get(status, 0) + 1
    after = rss_kib(pid)
    metrics = urllib.request.urlopen(base + "/metrics").read().decode()
    lines = [l for l in metrics.splitlines() if l.startswith("triage_upstream_policy_")]
    print(json.dumps({"requests": a.requests, "statuses": codes, "rss_before_mib": round(before / 1024, 1),
                      "rss_after_mib": round(after / 1024, 1), "policy_metrics": lines}))


def early413(a):
    base = f"http://{a.host}:{a.port}"
    body = b'{"text":"' + b"x" * (a.mib << 20) + b'"}'
    results = {}
    for i in range(a.tries):
        req = urllib.request.Request(base + "/v1/classify", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                key = f"status {r.status}"
        except urllib.error.HTTPError as e:
            key = f"status {e.code} {json.loads(e.read())['error'].get('code')}"
        except (ConnectionError, urllib.error.URLError) as e:
            key = type(getattr(e, "reason", e)).__name__
        results[key] = results.get(key, 0) + 1
    print(json.dumps({"body_bytes": len(body), "tries": a.tries, "results": results}))


def metric_sum(text, name):
    """Sum of the samples of the family name (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def leave(a):
    """Clients send non-streaming chat completions pinned to the slow pool (its model, mock-slow
    with the built-in pools), long enough to take ~10 s, and close their connection after
    --after seconds. Prints how long the slow-path slots and in-flight counts took to come back."""
    base = f"http://{a.host}:{a.port}"
    gauges = ("triage_slow_active", "triage_inflight_requests", "triage_upstream_inflight")

    def read():
        text = urllib.request.urlopen(base + "/metrics").read().decode()
        return {k: metric_sum(text, k) for k in gauges + ("triage_server_client_gone_total",)}

    before = read()
    body = json.dumps({"model": a.model, "max_tokens": a.max_tokens,
                       "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}]}).encode()
    req = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {a.host}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    socks = []
    for _ in range(a.clients):
        s = socket.create_connection((a.host, a.port))
        s.sendall(req)
        socks.append(s)
    time.sleep(a.after)
    during = read()
    for s in socks:
        s.close()
    left = time.monotonic()
    released, after = None, during
    while time.monotonic() - left < a.wait:
        after = read()
        # The /metrics request reading them is itself in flight.
        if all(after[k] <= before[k] + (1 if k == "triage_inflight_requests" else 0) for k in gauges):
            released = round((time.monotonic() - left) * 1000)
            break
        time.sleep(0.05)
    print(json.dumps({"clients": a.clients, "left_after_s": a.after, "while_waiting": during,
                      "released_ms": released, "after": after,
                      "client_gone": after["triage_server_client_gone_total"] - before["triage_server_client_gone_total"]}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--pid", type=int, default=0)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("slowbody")
    s.add_argument("--conns", type=int, default=5000)
    s.add_argument("--declared", type=int, default=100000)
    s.add_argument("--settle", type=float, default=3.0, help="seconds to wait before measuring")
    s.add_argument("--send", choices=["body-start", "headers", "past-prefetch"], default="body-start",
                   help="what each connection sends before stalling: the headers and the body's first bytes "
                        "(default), half a header, or the headers and 9 KiB of the body")
    u = sub.add_parser("users")
    u.add_argument("--requests", type=int, default=20000)
    e = sub.add_parser("early413")
    e.add_argument("--mib", type=int, default=4)
    e.add_argument("--tries", type=int, default=20)
    lv = sub.add_parser("leave")
    lv.add_argument("--clients", type=int, default=20)
    lv.add_argument("--after", type=float, default=1.0, help="seconds before each client closes")
    lv.add_argument("--model", default="mock-slow", help="a model the slow pool serves (pins the requests there)")
    lv.add_argument("--max-tokens", type=int, default=250, help="250 tokens at the slow simulator's 40 ms: ~10 s")
    lv.add_argument("--wait", type=float, default=15.0, help="how long to wait for the release")
    a = p.parse_args()
    {"slowbody": slowbody, "users": users, "early413": early413, "leave": leave}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
