"""A benchmark client nobody here wrote: NVIDIA's aiperf, against the gateway's built-in pools.

aiperf (pinned with hashes in tests/aiperf/requirements.txt, installed into
.deps/aiperf-venv by `scripts/setup.sh aiperf`) runs as a user would run it: model
readiness on ("both": `auto` must be listed by GET /v1/models, then a one-token inference
must answer), streaming chat at 16 concurrent requests for 15 s, new 256-token prompts.
Its tokenizer is the local MiniLM tokenizer.json: no model hub is reachable, and only
prompt sizing depends on it. Every request must succeed.
"""
import json
import os
import signal
import subprocess
import tempfile

import pytest

from conftest import BIN, REPO, free_port, wait_http

AIPERF = REPO / ".deps" / "aiperf-venv" / "bin" / "aiperf"
TOKENIZER = REPO / ".deps" / "encoders" / "all-minilm-l6-v2"


@pytest.fixture(scope="module")
def builtin_gateway():
    """The gateway with its built-in simulated fast and slow pools (--simulate)."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="triage-aiperf-", suffix=".log", delete=False)
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


def test_aiperf_streaming_chat_has_no_errors(builtin_gateway, tmp_path):
    assert AIPERF.exists(), f"{AIPERF} is missing: run make setup-aiperf (make test does)"
    assert (TOKENIZER / "tokenizer.json").exists(), "run scripts/setup.sh encoders"
    out = tmp_path / "aiperf"
    cmd = [str(AIPERF), "profile",
           "--model", "auto", "--url", builtin_gateway,
           "--endpoint-type", "chat", "--streaming",
           "--wait-for-model-timeout", "30", "--wait-for-model-mode", "both", "--wait-for-model-interval", "1",
           "--concurrency", "16", "--benchmark-duration", "15",
           "--isl", "256", "--osl", "16", "--random-seed", "1",
           "--tokenizer", str(TOKENIZER), "--use-server-token-count",
           "--ui-type", "none", "--artifact-dir", str(out)]
    env = dict(os.environ, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_IMPLICIT_TOKEN="1")
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    log = run.stdout + run.stderr
    assert run.returncode == 0, f"aiperf exited {run.returncode}:\n{log[-4000:]}"
    assert "Model 'auto' ready" in log, "the model-readiness probe must find auto in /v1/models"

    result = json.loads((out / "profile_export_aiperf.json").read_text())
    assert result["error_summary"] == [], result["error_summary"]
    assert result["request_error_rate"]["avg"] == 0
    assert result.get("error_request_count") is None
    assert result["completed_request_count"]["avg"] >= 100, "16 clients for 15 s complete hundreds of requests"
    assert result["was_cancelled"] is False

    # aiperf scrapes the gateway's /metrics on its own; the router's latency is among them.
    server_metrics = (out / "server_metrics_export.json").read_text()
    assert "triage_router_latency_seconds" in server_metrics
