"""Loaded by every Python process of a vLLM engine started by tests/test_pd_vllm.py (its
PYTHONPATH), to make two NIXL engines share a 2-core machine:

- nixl 1.5.1's agent polls its progress thread with pthrDelay 0: a full core per engine even
  idle. Every agent is created with TRIAGE_NIXL_PTHR_DELAY_US (default 10 ms) instead.
- vLLM's NIXL worker on CPU moves the model thread to the last core of each NUMA node, so both
  engines would share core 1. With TRIAGE_PIN_CORE set, every sched_setaffinity of the process
  pins to that core instead.
"""
import os

_pin = os.environ.get("TRIAGE_PIN_CORE")
if _pin is not None:
    _real_setaffinity = os.sched_setaffinity

    def _pinned(pid, cpus, _core=int(_pin)):
        return _real_setaffinity(pid, {_core})

    os.sched_setaffinity = _pinned

_delay = int(os.environ.get("TRIAGE_NIXL_PTHR_DELAY_US", "10000"))
try:
    import nixl_cu13._api as _api
except ImportError:  # not a NIXL engine's environment
    _api = None
if _api is not None:
    _bind = _api.nixlBind
    _real_agent = _bind.nixlAgent

    class _Bind:
        """nixl_cu13._bindings with nixlAgent created at TRIAGE_NIXL_PTHR_DELAY_US."""

        def __getattr__(self, name):
            return getattr(_bind, name)

        @staticmethod
        def nixlAgent(name, config):
            config.pthrDelay = _delay
            return _real_agent(name, config)

    _api.nixlBind = _Bind()
