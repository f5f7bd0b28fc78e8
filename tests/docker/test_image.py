"""The image run for real: containers of triage:dev (`make image`; $IMAGE overrides).

- the default container (built-in simulated pools) starts as uid 10001 on a read-only root
  file system, becomes ready, answers /v1/query-process, and its HEALTHCHECK turns healthy;
- a second gateway container, its pools two mockllm containers of the same image on a
  network of their own, serves the official openai client (streaming and not) with
  mockllm's deterministic text and the decision headers;
- SIGTERM (docker stop) drains an in-flight stream to its end and exits 0 within the grace
  period.

Containers publish on 127.0.0.1 only, are labelled org.triage.test=<this run>, and are
removed at the end (a session finalizer removes anything the run labelled). `make
test-docker` runs this file after `make image`; without the engine or the image it fails.
"""
import json
import os
from datetime import datetime
import subprocess
import tempfile
import threading
import time

import httpx2 as httpx  # the HTTP client the openai package itself uses
import openai
import pytest

from conftest import wait_http
from test_openai_gateway import FAST_PROMPT, SLOW_PROMPT, expected_text, read_stream, render

IMAGE = os.environ.get("IMAGE", "triage:dev")
RUN = f"triage-pytest-{os.getpid()}"
LABEL = f"org.triage.test={RUN}"
STOP_TIMEOUT = 20  # seconds: above server.shutdown_timeout (15s), as compose and Kubernetes set it


def docker(*args, timeout=120, check=True):
    r = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout.strip()


class Container:
    """A container of IMAGE: read-only root, /tmp tmpfs, published ports on 127.0.0.1."""

    def __init__(self, name, *args, publish=(), network=None, entrypoint=None, command=()):
        self.name = f"{RUN}-{name}"
        run = ["run", "-d", "--name", self.name, "--label", LABEL, "--read-only", "--tmpfs", "/tmp",
               "--stop-timeout", str(STOP_TIMEOUT)]
        for port in publish:
            run += ["-p", f"127.0.0.1:0:{port}"]
        if network:
            run += ["--network", network]
        if entrypoint:
            run += ["--entrypoint", entrypoint]
        docker(*run, *args, IMAGE, *command)

    def url(self, port):
        return "http://" + docker("port", self.name, f"{port}/tcp").splitlines()[0]

    def inspect(self, fmt):
        return docker("inspect", "-f", fmt, self.name)

    def logs(self):
        r = subprocess.run(["docker", "logs", self.name], capture_output=True, text=True, timeout=60)
        return r.stdout + r.stderr

    def exec(self, *cmd):
        return subprocess.run(["docker", "exec", self.name, *cmd], capture_output=True, text=True, timeout=60)

    def remove(self):
        docker("rm", "-f", "-v", self.name, check=False)


@pytest.fixture(scope="session", autouse=True)
def engine_and_image():
    try:
        docker("image", "inspect", IMAGE, timeout=30)
    except (RuntimeError, FileNotFoundError) as e:
        pytest.fail(f"image {IMAGE} is not in the Docker engine (run `make image`; make test-docker does): {e}")
    yield
    left = docker("ps", "-aq", "--filter", f"label={LABEL}", check=False).split()
    if left:
        docker("rm", "-f", "-v", *left, check=False)
    nets = docker("network", "ls", "-q", "--filter", f"label={LABEL}", check=False).split()
    if nets:
        docker("network", "rm", *nets, check=False)


def ready(container, port=8080, timeout=120):
    url = container.url(port)
    try:
        wait_http(url + "/readyz", timeout=timeout)
    except Exception as e:
        raise AssertionError(f"{container.name} not ready: {e}\n{container.logs()[-4000:]}") from e
    return url


# ---- the default container: built-in simulated pools --------------------------------------

@pytest.fixture(scope="module")
def solo():
    # The image's default config has no replicas: without --simulate it would stop (fail closed).
    c = Container("solo", publish=[8080], command=["--simulate"])
    try:
        yield c, ready(c)
    finally:
        c.remove()


def test_runs_as_uid_10001_on_a_read_only_root(solo):
    c, _ = solo
    assert c.inspect("{{.Config.User}}") == "10001:10001"
    assert c.inspect("{{.HostConfig.ReadonlyRootfs}}") == "true"
    assert c.exec("id", "-u").stdout.strip() == "10001"
    ps = c.exec("cat", "/proc/1/status").stdout
    assert any(line.split()[:2] == ["Uid:", "10001"] for line in ps.splitlines()), "the gateway process runs as 10001"
    denied = c.exec("touch", "/app/written")
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr
    assert c.exec("touch", "/tmp/written").returncode == 0, "the /tmp tmpfs is writable"


def test_bare_image_fails_closed():
    """The image's default config lists no replica: started without --simulate it must stop,
    naming the pools, rather than answer with the simulators' made-up text."""
    r = subprocess.run(["docker", "run", "--rm", "--label", LABEL, "--read-only", "--tmpfs", "/tmp", IMAGE],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert 'pool "fast" has no replica' in r.stderr and "--simulate" in r.stderr, r.stderr


def test_simulated_answers_say_so(solo):
    _, url = solo
    ready = httpx.get(url + "/readyz", timeout=10).json()
    assert ready["simulated"] is True and "made up" in ready["warning"]
    r = httpx.post(url + "/v1/chat/completions", timeout=30,
                   json={"max_tokens": 2, "messages": [{"role": "user", "content": "Say hi"}]})
    assert r.status_code == 200 and r.headers["x-simulated"] == "true", r.text


def test_ready_and_query_process(solo):
    _, url = solo
    r = httpx.get(url + "/readyz", timeout=10)
    assert r.status_code == 200 and r.json()["ready"] is True
    labels = {}
    for name, text in [("slow", SLOW_PROMPT), ("fast", FAST_PROMPT)]:
        r = httpx.post(url + "/v1/query-process", json={"text": text}, timeout=30)
        assert r.status_code == 200, r.text
        assert set(r.json()) == {"label"}
        labels[name] = r.json()["label"]
    assert labels == {"slow": "1", "fast": "0"}


def test_healthcheck_turns_healthy(solo):
    c, _ = solo
    # --start-period 30s, --interval 10s: the first probe runs about 10 s after the start.
    deadline = time.monotonic() + 60
    status = None
    while time.monotonic() < deadline:
        status = c.inspect("{{.State.Health.Status}}")
        if status == "healthy":
            break
        assert status == "starting", f"HEALTHCHECK: {status}: {c.inspect('{{json .State.Health.Log}}')}"
        time.sleep(1)
    assert status == "healthy", c.inspect("{{json .State.Health}}")
    probe = json.loads(c.inspect("{{json .State.Health.Log}}"))[-1]
    assert probe["ExitCode"] == 0


# ---- a gateway container with mockllm containers as its replicas ----------------------------

@pytest.fixture(scope="module")
def replicas():
    """One fast and one slow mockllm container of the image, on a network of their own."""
    net = f"{RUN}-net"
    docker("network", "create", "--label", LABEL, net)
    mocks = {}
    try:
        for pool, extra in [("fast", []), ("slow", ["--decode-per-token", "20ms", "--jitter", "0"])]:
            mocks[pool] = Container(
                f"mock-{pool}", network=net, entrypoint="mockllm",
                command=["--preset", pool, "--listen", "0.0.0.0:8000", "--name", f"{pool}-0", "--seed", "1", *extra])
        yield net, mocks
    finally:
        for m in mocks.values():
            m.remove()
        docker("network", "rm", net, check=False)


def start_gateway(name, replicas):
    net, mocks = replicas
    cfg_dir = tempfile.mkdtemp(prefix="triage-docker-")
    os.chmod(cfg_dir, 0o755)
    cfg = os.path.join(cfg_dir, "triage.yaml")

    def pool(p, model):
        return (f"  {p}:\n    name: {p}\n    model: {model}\n"
                f"    replicas:\n      - {{url: \"http://{mocks[p].name}:8000\", id: {p}-0}}\n"
                f"    health_check: {{path: /health, interval: 500ms, timeout: 400ms}}\n")

    with open(cfg, "w") as f:
        f.write("pools:\n" + pool("fast", "small-model") + pool("slow", "big-model"))
    os.chmod(cfg, 0o644)  # read by uid 10001
    c = Container(name, "-v", f"{cfg}:/etc/triage/triage.yaml:ro", publish=[8080], network=net)
    return c, ready(c)


@pytest.fixture(scope="module")
def gateway(replicas):
    c, url = start_gateway("gateway", replicas)
    try:
        yield c, url
    finally:
        c.remove()


@pytest.fixture(scope="module")
def client(gateway):
    _, url = gateway
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)


@pytest.mark.parametrize("prompt,path,model", [(SLOW_PROMPT, "slow", "big-model"), (FAST_PROMPT, "fast", "small-model")])
def test_openai_chat_through_the_container(client, prompt, path, model):
    messages = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": prompt}]
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=messages, max_tokens=7)
    resp = raw.parse()
    assert resp.choices[0].message.content == expected_text(render(messages), 7), "mockllm's text, through the gateway"
    assert resp.choices[0].finish_reason == "length"
    assert resp.model == model
    h = raw.headers
    assert h["x-router-path"] == path
    assert h["x-router-reason"] == ("slow_granted" if path == "slow" else "fast_model")
    assert 0 <= float(h["x-router-p-slow"]) <= 1
    assert float(h["x-router-threshold"]) >= 0.5
    assert h["x-router-replica"] == f"{path}-0"
    assert h["x-mockllm-replica"] == f"{path}-0", "the answer came from the mockllm container"
    assert float(h["x-router-latency"]) >= 0


def test_openai_streaming_through_the_container(client):
    messages = [{"role": "user", "content": SLOW_PROMPT}]
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=messages, max_tokens=9, stream=True, stream_options={"include_usage": True})
    assert raw.headers["x-router-path"] == "slow"
    assert raw.headers["x-router-replica"] == "slow-0"
    parts, finish, usage = read_stream(raw.parse())
    assert "".join(parts) == expected_text(render(messages), 9)
    assert len(parts) == 9, "one SSE event per token"
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == 9


def test_query_process_through_the_container(gateway):
    _, url = gateway
    r = httpx.post(url + "/v1/query-process", json={"text": SLOW_PROMPT}, timeout=30)
    assert r.status_code == 200 and r.json() == {"label": "1"}
    metrics = httpx.get(url + "/metrics", timeout=10).text
    assert 'triage_upstream_requests_total{' in metrics


def test_sigterm_drains_the_stream_and_exits_0(replicas):
    """docker stop sends SIGTERM: the listener closes, the stream in flight runs to [DONE], the
    process exits 0, well before the engine's SIGKILL at --stop-timeout."""
    c, url = start_gateway("drain", replicas)
    try:
        tokens = 150  # 20 ms each on the slow replica: a stream of about 3 s
        body = {"model": "auto", "stream": True, "max_tokens": tokens, "messages": [{"role": "user", "content": SLOW_PROMPT}]}
        first_chunk = threading.Event()
        result = {}

        def stream():
            events, arrived = [], []
            result["arrived"] = arrived
            try:
                with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as r:
                    result["status"] = r.status_code
                    for line in r.iter_lines():
                        if line.startswith("data: "):
                            events.append(line[len("data: "):])
                            arrived.append(time.time())
                            first_chunk.set()
            except httpx.HTTPError as e:
                result["error"] = repr(e)
            finally:
                result["events"] = events
                first_chunk.set()

        reader = threading.Thread(target=stream)
        reader.start()
        assert first_chunk.wait(30), "the stream never started"
        began = time.monotonic()
        stopper = threading.Thread(target=lambda: result.setdefault("stop", docker("stop", c.name, timeout=STOP_TIMEOUT + 30)))
        stopper.start()
        # While it drains, the gateway takes nothing new: /readyz stops answering 200.
        refused = False
        while time.monotonic() - began < 10 and not refused:
            try:
                refused = httpx.get(url + "/readyz", timeout=1).status_code != 200
            except httpx.HTTPError:
                refused = True
            time.sleep(0.05)
        stopper.join(STOP_TIMEOUT + 40)
        took = time.monotonic() - began
        reader.join(30)

        assert refused, "a new request was still answered 200 during the drain"
        assert "error" not in result, result.get("error")
        assert result["status"] == 200
        events = result["events"]
        assert events[-1] == "[DONE]", f"the stream was cut after {len(events)} events"
        text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1]
                       if json.loads(e)["choices"])
        assert text == expected_text(render(body["messages"]), tokens)
        assert c.inspect("{{.State.ExitCode}}") == "0"
        assert c.inspect("{{.State.OOMKilled}}") == "false"
        assert took < STOP_TIMEOUT, f"docker stop took {took:.1f}s: the engine had to SIGKILL"
        logs = c.logs()
        assert '"msg":"shutdown complete"' in logs, logs[-3000:]
        # The stream was in flight when SIGTERM arrived: tokens kept coming after the gateway
        # logged the start of its shutdown.
        sigterm = next((json.loads(line)["time"] for line in logs.splitlines()
                        if '"msg":"shutting down"' in line), None)
        assert sigterm, logs[-3000:]
        day, frac = sigterm.rstrip("Z").split(".")
        at = datetime.fromisoformat(f"{day}.{frac[:6]}+00:00").timestamp()
        after = sum(1 for t in result["arrived"] if t > at)
        assert after >= 10, f"only {after} events arrived after SIGTERM: the drain had nothing to drain"
    finally:
        c.remove()
