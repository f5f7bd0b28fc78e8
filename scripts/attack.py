#!/usr/bin/env python3
"""Black-box checks of the gateway as an attacker would run them; each prints what it measured.

Start a gateway first (for instance `bin/triage --simulate` with the built-in pools on 127.0.0.1:8080), then:

    scripts/attack.py slowbody --conns 5000          # declared-but-unsent bodies: RSS before/after
    scripts/attack.py users --requests 20000         # a new `user` per request (vtc-basic state)
    scripts/attack.py early413 --mib 4               # urllib writes a too-large body before reading

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
    a = p.parse_args()
    {"slowbody": slowbody, "users": users, "early413": early413}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
