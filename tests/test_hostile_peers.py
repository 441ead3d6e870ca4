"""Hostile peers against a live parameter server on loopback sockets: every stranger is refused or
dropped within the handshake timeout plus a slack, the legitimate workers keep advancing, and the
final flush conserves every committed row (compression off)."""

from __future__ import annotations

import secrets
import socket
import time

import pytest

from benchmarks.faults.hostile_peers import ATTACKS, SLACK_S, attack_silent, hostile_peers
from benchmarks.faults.registry import ScenarioContext
from rog.transport import Listener, TransportConfig


def test_every_attack_is_refused_while_training_goes_on(tmp_path):
    out = hostile_peers(ScenarioContext(work_dir=tmp_path, quick=True, seed=0))
    d = out["details"]
    assert out["passed"], out.get("error")
    assert set(d["attacks"]) == set(ATTACKS)
    for name, a in d["attacks"].items():
        assert a["refused"], name
        assert a["seconds"] is not None and a["seconds"] <= d["bound_s"], (name, a["seconds"])
        before, after = a["legit_iterations"]
        assert min(after) > max(before) - 1 and after != before, name  # the legitimate workers advanced
    # the ones that reach the handshake's deadline took at least the timeout (they were not dropped early by luck)
    for name in ("silent", "slowloris"):
        assert d["attacks"][name]["seconds"] >= d["handshake_timeout_s"] * 0.9
    assert d["attacks"]["flood"]["closed"] == d["attacks"]["flood"]["opened"] == 100
    assert out["rows_lost"] == 0 and d["rows_lost"] == 0
    reasons = " ".join(d["refusal_reasons"])
    for why in ("failed to prove the shared secret", "protocol version mismatch", "handshake timeout",
                "too many handshakes in progress", "not a ROG transport stream", "exceeds its bound"):
        assert why in reasons, why


def test_silent_peer_drop_follows_the_configured_timeout():
    """A longer handshake_timeout_s keeps a silent peer longer: the bound is the configuration, not a constant."""
    took = {}
    for timeout_s in (0.3, 1.2):
        cfg = TransportConfig(secret=secrets.token_bytes(32), handshake_timeout_s=timeout_s)
        with Listener("127.0.0.1", 0, config=cfg) as lst:
            took[timeout_s] = attack_silent(lst.address, cfg, timeout_s + SLACK_S)["seconds"]
            assert any("handshake timeout" in why for _, why in lst.refused)
    assert took[0.3] is not None and took[1.2] is not None
    assert took[0.3] >= 0.3 * 0.9 and took[1.2] >= 1.2 * 0.9
    assert took[1.2] > took[0.3]
