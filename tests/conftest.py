"""Real processes for the gateway integration tests: mockllm replicas and triage.

Everything listens on 127.0.0.1 with ports picked by the OS; every process is
killed at the end of its fixture. The binaries come from `make build` (bin/).
"""
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx2 as httpx  # the HTTP client the openai package itself uses
import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = REPO / "bin"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=60.0, proc=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            r = httpx.get(url, timeout=1.0)
            if r.status_code == 200:
                return
            last = f"status {r.status_code}: {r.text[:200]}"
        except httpx.HTTPError as e:
            last = repr(e)
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready after {timeout}s: {last}")


class Mock:
    def __init__(self, name, preset, *extra):
        self.port = free_port()
        self.name = name
        self.preset = preset
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix=f"mockllm-{name}-", suffix=".log", delete=False)
        self.start(*extra)

    def start(self, *extra):
        """(Re)starts the replica on its port with the given extra flags."""
        self.proc = subprocess.Popen(
            [str(BIN / "mockllm"), "--listen", f"127.0.0.1:{self.port}", "--name", self.name, "--preset", self.preset,
             "--log-level", "warn", *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_http(self.url + "/health", proc=self.proc)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


class Gateway:
    def __init__(self, fast, slow, extra_yaml="", cooldown="30s", first_byte=None, prices=None, retry_on=None, apis=None):
        """prices: {"fast": (input, output), "slow": (...)} per million tokens; None for none.
        retry_on: both pools' retry.on (a list of failure names); None keeps the default.
        apis: {"fast": ["chat", ...]}: the APIs a pool's replicas are said to speak; None for all."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = tempfile.NamedTemporaryFile("w", prefix="triage-", suffix=".yaml", delete=False)

        def pool(name, model, mocks):
            lines = [f"  {name}:", f"    name: {name}", f"    model: {model}", "    replicas:"]
            lines += [f"      - url: {m.url}\n        id: {m.name}" for m in mocks]
            lines += ["    health_check:", "      interval: 500ms", "      timeout: 400ms",
                      "    passive_ejection:", "      consecutive_failures: 1", f"      cooldown: {cooldown}"]
            if first_byte:
                lines += ["    timeouts:", f"      first_byte: {first_byte}"]
            if retry_on is not None:
                lines += ["    retry:", f"      on: [{', '.join(retry_on)}]"]
            if apis and name in apis:
                lines += [f"    apis: [{', '.join(apis[name])}]"]
            if prices and name in prices:
                i, o = prices[name]
                lines += [f"    prices: {{input_per_million: {i}, output_per_million: {o}}}"]
            return "\n".join(lines)

        cfg.write("pools:\n" + pool("fast", "small-model", fast) + "\n" + pool("slow", "big-model", slow) + "\n" + extra_yaml)
        cfg.close()
        self.log = tempfile.NamedTemporaryFile(prefix="triage-", suffix=".log", delete=False)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
        self.proc = subprocess.Popen(
            [str(BIN / "triage"), "--config", cfg.name, "--listen", f"127.0.0.1:{self.port}"],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        wait_http(self.url + "/readyz", timeout=120, proc=self.proc)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# Per million tokens (input, output): the stack's pools are priced, for the cost counters.
PRICES = {"fast": (0.15, 0.6), "slow": (2.5, 10.0)}


@pytest.fixture(scope="module")
def stack():
    """Two fast and two slow mockllm replicas behind one gateway."""
    mocks = [Mock("fast-0", "fast"), Mock("fast-1", "fast"),
             Mock("slow-0", "slow", "--decode-per-token", "2ms", "--jitter", "0"),
             Mock("slow-1", "slow", "--decode-per-token", "2ms", "--jitter", "0")]
    gw = Gateway(mocks[:2], mocks[2:], prices=PRICES)
    yield gw, mocks
    gw.stop()
    for m in mocks:
        m.kill()
