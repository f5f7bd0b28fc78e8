"""vLLM CPU engines for the tests: start N replicas of tiny-llama on 127.0.0.1, kill them after.

The engine and the model come from `make setup-vllm` (scripts/setup.sh, step vllm), linked from
.deps/vllm-venv and .deps/tiny-llama. Each engine is its own process group (the API server and its
engine-core child), pinned to one core with VLLM_CPU_OMP_THREADS_BIND, with a small KV cache so
that a few concurrent requests move vllm:kv_cache_usage_perc. Nothing is skipped when the engine
is missing: start() fails with the reason and the log's tail.
"""
import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx2 as httpx

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".deps" / "vllm-venv"
MODEL = REPO / ".deps" / "tiny-llama"
SERVED_NAME = "tiny-llama"

# The KV cache: BLOCKS blocks of BLOCK_SIZE tokens (on CPU the block size must be a multiple of
# 32). 512 x 32 = 16,384 tokens (32 MiB at tiny-llama's 2 KiB a token), four max-length
# requests: enough for the suite's load, small enough that it shows in vllm:kv_cache_usage_perc.
BLOCK_SIZE = 32
BLOCKS = 512
MAX_MODEL_LEN = 4096
# KV-cache events on a port each engine picks (tcp://*:0 binds VLLM_HOST_IP, 127.0.0.1 here, on a
# free port), which only GET /kv_event_sources tells: the gateway's endpoint discovery is tested
# against it. Nobody subscribed, vLLM drops them.
KV_EVENTS = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:0", "topic": "kv-events"}
# From a warm page cache an engine answers /health after about 40 s on this 2-core machine;
# a cold first start (imports read from disk, torch's first init) takes longer.
START_TIMEOUT = 420.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Engine:
    """One vLLM OpenAI-compatible server. start() returns once /health answers 200."""

    def __init__(self, name, core, env=None, aliases=(), args=()):
        """env: variables added to the engine's environment; aliases: more names it serves the
        model under (after SERVED_NAME, which its answers carry), so that a gateway can give
        each of its pools a name of its own on the same engine; args: more server flags."""
        self.name = name
        self.core = core
        self.extra_env = dict(env or {})
        self.aliases = tuple(aliases)
        self.args = tuple(args)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.log_path = Path(tempfile.mkstemp(prefix=f"vllm-{name}-", suffix=".log")[1])

    def command(self):
        return [
            str(VENV / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(MODEL.resolve()), "--served-model-name", SERVED_NAME, *self.aliases,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN),
            "--block-size", str(BLOCK_SIZE), "--num-gpu-blocks-override", str(BLOCKS),
            "--max-num-seqs", "32", "--enforce-eager",
            # On CPU this fraction of the machine's memory must be free at start (default 0.92);
            # the KV cache is sized by --num-gpu-blocks-override, not by it.
            "--gpu-memory-utilization", "0.1",
            "--enable-prefix-caching", "--enable-prompt-tokens-details",
            "--generation-config", "vllm",  # sampling defaults from the request alone
            "--kv-events-config", json.dumps(KV_EVENTS),
            *self.args,
        ]

    def environment(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "HF_", "TRANSFORMERS_"))}
        env.update({
            "VLLM_CPU_OMP_THREADS_BIND": str(self.core),  # one core per engine
            "OMP_NUM_THREADS": "1",
            "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",  # the model is a local folder; no hub is reachable anyway
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            # Not VLLM_ENABLE_RESPONSES_API_STORE=1: with it, vllm-cpu 0.32 ran this suite's
            # concurrent completions one at a time (test_scraped_signals_follow_the_engines saw
            # at most one running request, and passes without it). The engines of
            # test_vllm_agent_apis.py ask for it through env.
        })
        env.update(self.extra_env)
        return env

    def launch(self):
        """Starts the server and returns at once; wait() then waits for /health."""
        for what, path in (("engine venv", VENV / "bin" / "python"), ("model", MODEL / "config.json")):
            if not path.exists():
                raise RuntimeError(f"{what} missing: {path} (run `make setup-vllm`)")
        self.started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         env=self.environment(), cwd=tempfile.gettempdir(),
                                         start_new_session=True)
        return self

    def wait(self, timeout=START_TIMEOUT):
        deadline = self.started + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM {self.name} exited with {self.proc.returncode} before /health answered\n"
                                   + self.log_tail())
            try:
                r = httpx.get(self.url + "/health", timeout=2.0)
                if r.status_code == 200:
                    self.startup_seconds = time.monotonic() - self.started
                    return self
                last = f"status {r.status_code}"
            except httpx.HTTPError as e:
                last = repr(e)
            time.sleep(0.5)
        self.kill()
        raise TimeoutError(f"vLLM {self.name} not healthy after {timeout:.0f}s ({last})\n" + self.log_tail())

    def start(self, timeout=START_TIMEOUT):
        return self.launch().wait(timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """SIGKILL the whole process group: the API server and its engine-core process."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)

    def metrics(self, prefix=""):
        """The engine's own /metrics as {name: [(labels, value)]}, text format; only the names
        that start with prefix (parsing all of it takes a while on a busy core)."""
        text = httpx.get(self.url + "/metrics", timeout=10.0).text
        out = {}
        for line in text.splitlines():
            if not line.startswith(prefix) or not line or line.startswith("#"):
                continue
            head, value = line.rsplit(" ", 1)
            name, _, labels = head.partition("{")
            out.setdefault(name, []).append((labels.rstrip("}"), float(value)))
        return out

    def gauge(self, name):
        """The sum of a family's samples (one per engine and model here)."""
        return sum(v for _, v in self.metrics(name).get(name, []))

    def gauges(self, *names):
        """Several families' sums from one scrape."""
        m = self.metrics("vllm:")
        return tuple(sum(v for _, v in m.get(name, [])) for name in names)

    def core_pids(self):
        """The processes under the API server (vLLM's engine core, which runs the model, and any
        helper it spawned), from /proc."""
        children = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue  # gone meanwhile
            ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces
            children.setdefault(ppid, []).append(int(entry))
        out, todo = [], [self.proc.pid]
        while todo:
            for child in children.get(todo.pop(), []):
                out.append(child)
                todo.append(child)
        return out

    def log_tail(self, lines=40):
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError as e:
            return f"(no log: {e})"
        return f"--- last {min(lines, len(text))} lines of {self.log_path} ---\n" + "\n".join(text[-lines:])


@contextlib.contextmanager
def frozen(engines):
    """Stops the engines' engine cores (SIGSTOP) for the with block and continues them after.
    Each API server keeps answering, /metrics and /health included, and its gauges hold the
    values of the core's last step: a load state that stands still long enough for a scraper
    and a test to read the same numbers, however fast or slow the machine. Requests in flight
    just wait."""
    pids = [pid for e in engines for pid in e.core_pids()]
    assert pids, "no engine-core process under the engines' API servers"
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        yield
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def start_engines(n, prefix="vllm", **kw):
    """n engines started side by side, engine i pinned to core i % cpus; returns once every one
    is healthy, or kills them all and raises with the failing engine's log tail. kw: Engine's
    env, aliases and args."""
    cpus = os.cpu_count() or 1
    engines = [Engine(f"{prefix}-{i}", i % cpus, **kw) for i in range(n)]
    try:
        for e in engines:
            e.launch()
        for e in engines:
            e.wait()
    except BaseException:
        for e in engines:
            e.kill()
        raise
    return engines
