"""ScaDLES's run.py flags (Top-k, partitions, injection): checks with one clear line, config entries,
the label partitions, the injection plan and batches, and the injection relay's wire format."""

from __future__ import annotations

import math
import socket

import numpy as np
import pytest

from rog.experiment import topk_options as TO
from rog.experiment.cli import parse_args
from rog.streams.inject import InjectedBatches, plan, samples_per_sender
from rog.workloads.split import PartitionSpecError, labels_split, parse_partition, partition


def args(*extra):
    return parse_args(["--testbed", "loopback", *extra])


@pytest.mark.parametrize("flags, needle", [
    (["--compression", "topk", "--topk-ratio", "0"], "--topk-ratio must lie in (0, 1]"),
    (["--compression", "topk", "--topk-ratio", "1.2"], "--topk-ratio must lie in (0, 1]"),
    (["--topk-gate-delta", "1.5"], "--topk-gate-delta must lie in [0, 1]"),
    (["--partition", "dirichlet:0"], "--partition: 'dirichlet:0': the Dirichlet alpha must be > 0"),
    (["--partition", "dirichlet:-1"], "the Dirichlet alpha must be > 0"),
    (["--partition", "labels:x"], "labels needs a whole number"),
    (["--partition", "shards"], "is not a partition"),
    (["--inject-alpha", "0.25"], "--inject-alpha and --inject-beta go together"),
    (["--inject-alpha", "2", "--inject-beta", "0.5"], "--inject-alpha must lie in [0, 1]"),
    (["--inject-alpha", "0.5", "--inject-beta", "0.5", "--workers", "1"], "at least 2 workers"),
])
def test_bad_flags_exit_with_one_line_naming_the_flag(flags, needle, capsys):
    with pytest.raises(SystemExit) as e:
        args(*flags)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert needle in err and err.startswith("run.py: error:")


def test_config_entries_record_the_choices(run_config):
    a = args("--compression", "topk", "--topk-ratio", "0.01", "--topk-gate", "off", "--partition", "labels:2",
             "--inject-alpha", "0.25", "--inject-beta", "0.5", "--inject-mode", "local")
    c = TO.config_entries(a)
    assert c == dict(compression_options=dict(ratio=0.01, gate=False, delta=0.3, smoothing=0.9, statistic="norm"),
                     partition="labels:2", inject=dict(alpha=0.25, beta=0.5, mode="local"))
    cfg = run_config().replace(compression="topk", **c)
    assert TO.codec_options(cfg) == dict(ratio=0.01, gate=False, delta=0.3, smoothing=0.9, statistic="norm")
    assert TO.codec_options(cfg.replace(compression_options=dict(c["compression_options"], statistic="energy")))[
        "statistic"] == "energy"
    assert TO.codec_options(cfg, ps_workers=4)["ps_workers"] == 4
    assert TO.codec_options(cfg.replace(compression="sign", compression_options=None), ps_workers=4) == {}  # no gate
    assert TO.config_entries(args())["inject"] is None


def test_parse_partition_forms():
    assert parse_partition("iid") == ("iid", {})
    assert parse_partition("labels:3") == ("labels", {"k": 3})
    assert parse_partition("dirichlet:0.1") == ("dirichlet", {"alpha": 0.1})
    with pytest.raises(PartitionSpecError):
        parse_partition("labels:0")


def test_labels_split_gives_each_worker_exactly_k_labels_and_shares_cut_evenly():
    y = np.repeat(np.arange(10), 30)
    parts = labels_split(y, 5, 2)
    assert [sorted(set(y[p])) for p in parts] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert sorted(np.concatenate(parts).tolist()) == list(range(300))  # k N = L: every sample once
    parts = labels_split(y, 4, 3)  # 12 label slots over 10 labels: labels 0 and 1 are shared
    assert [sorted(set(y[p])) for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 1, 9]]
    for lab in (0, 1):
        a, b = (np.isin(parts[w], np.flatnonzero(y == lab)).sum() for w in (0, 3))
        assert a + b == 30 and abs(a - b) <= 1
    assert len(np.intersect1d(parts[0], parts[3])) == 0
    assert [sorted(set(y[p])) for p in partition(y, 5, "labels:1")] == [[0], [1], [2], [3], [4]]


def test_injection_plan_is_shared_and_has_ceil_alpha_n_senders_to_other_workers():
    for it in range(1, 50):
        pairs = plan(5, 0.25, it, seed=3)
        assert pairs == plan(5, 0.25, it, seed=3)
        assert len(pairs) == math.ceil(0.25 * 5) == len({s for s, _ in pairs})
        assert all(s != r and 0 <= r < 5 for s, r in pairs)
    assert samples_per_sender(0.25, 32) == 8 and samples_per_sender(0.01, 32) == 1


def test_local_injection_adds_int_beta_b_samples_of_ceil_alpha_n_foreign_labels():
    import torch

    y_all = np.repeat(np.arange(6), 10)
    x_all = np.arange(60, dtype=np.float32).reshape(60, 1, 1, 1).repeat(2, axis=1)

    def own():
        while True:
            yield torch.zeros(8, 2, 1, 1), torch.zeros(8, dtype=torch.int64)

    logged = []
    inj = InjectedBatches(own(), 0, 4, 0.5, 0.25, 0, "local", pool=(x_all, y_all, np.array([0])),
                          log=lambda **f: logged.append(f))
    x, y = next(inj)
    assert x.shape[0] == 8 + 2 * 2  # ceil(0.5 x 4) labels x int(0.25 x 8) samples
    extra = y[8:].numpy()
    assert len(set(extra.tolist())) == 2 and 0 not in extra
    assert np.array_equal(x[8:, 0, 0, 0].numpy() // 10, extra)  # the samples belong to their labels
    assert logged[0]["bytes"] == 0 and logged[0]["samples"] == 4


def test_streamed_batches_of_changing_size_send_beta_of_their_own_batch():
    """Injection on a stream's batches (issue 31): each iteration's sender sends floor(beta b) of *that* batch, b
    its own size (here 10, 40, 7), and what it received is appended; the plan is the one every worker draws."""
    import torch

    from rog.experiment.inject_setup import inject_streamed

    class Exchange:
        def __init__(self):
            self.sent, self.inbox = [], []

        def send(self, dst, it, x, y):
            self.sent.append((dst, it, x.copy(), y.copy()))
            return 100 + x.nbytes

        def drain(self):
            out, self.inbox = self.inbox, []
            return out

    ex = Exchange()
    inj = InjectedBatches(iter(()), 1, 2, 1.0, 0.5, 7, "network", exchange=ex)  # alpha 1: both workers send
    for it, b in enumerate((10, 40, 7), start=1):
        ex.inbox = [(0, it, np.full((3, 1), -1.0, np.float32), np.full(3, 9, np.int64), 200)]
        x = torch.arange(b, dtype=torch.float32).reshape(b, 1)
        y = torch.arange(b, dtype=torch.int64)
        [(xi, yi)] = inject_streamed(inj, [(x, y)])
        dst, sent_it, xs, ys = ex.sent[-1]
        assert (dst, sent_it) == (0, it) and plan(2, 1.0, it, 7) == [(0, 1), (1, 0)]
        assert len(ys) == b // 2 and np.array_equal(ys, np.arange(b // 2))  # the first floor(0.5 b) of this batch
        assert xi.shape[0] == b + 3 and yi[b:].tolist() == [9, 9, 9]  # the 3 received samples appended
    assert inj.sent_samples == 5 + 20 + 3 and inj.received_samples == 9
    assert inject_streamed(iter(()), [(x, y)]) == [(x, y)] and inject_streamed(inj, None) is None  # no injection


def test_relay_forwards_raw_samples_between_workers_and_refuses_a_wrong_secret():
    import time

    from rog.streams.inject_relay import HEADER_BYTES, InjectClient, InjectRelay

    relay = InjectRelay("127.0.0.1", 0, 3, b"s3cret")
    try:
        a = InjectClient(relay.address, 0, b"s3cret")
        x = np.random.default_rng(0).standard_normal((4, 3, 2, 2)).astype(np.float32)
        y = np.array([1, 2, 3, 4])
        sent = a.send(2, 7, x, y)  # worker 2 is not connected yet: the relay keeps it
        assert sent == HEADER_BYTES + 4 * 8 + x.nbytes
        c = InjectClient(relay.address, 2, b"s3cret")
        deadline = time.monotonic() + 10
        got = []
        while not got and time.monotonic() < deadline:
            got = c.drain()
            time.sleep(0.01)
        (src, it, gx, gy, nbytes), = got
        assert (src, it, nbytes) == (0, 7, sent)
        np.testing.assert_array_equal(gx, x)
        np.testing.assert_array_equal(gy, y)
        bad = InjectClient(relay.address, 1, b"wrong")
        deadline = time.monotonic() + 10
        while not relay.errors and time.monotonic() < deadline:
            time.sleep(0.01)
        assert relay.errors and "wrong secret" in relay.errors[0]
        for cl in (c, bad):
            cl.close()
    finally:
        relay.close()
    # the relay gone (a restarted parameter server): sends return 0 and say why, training goes on
    deadline = time.monotonic() + 10
    while a.send(1, 8, x, y) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert a.send(1, 9, x, y) == 0 and "relay is gone" in a.error
    a.close()


def test_steps_name_their_folders_and_flags():
    from pathlib import Path

    from rog.papers.scadles import topk_steps as S

    st = S.steps(Path("R"))
    assert len(st) == len(S.NONIID_RUNS) + len(S.RATIOS) * (len(S.DELTAS) * len(S.STATISTICS) + 1)
    for folder, argv in st:
        assert argv[:2] == ["-m", "rog.experiment"] and folder.startswith(str(Path("R") / "scadles"))
        note = argv[argv.index("-n") + 1]
        assert Path(folder).name == note and argv[argv.index("--result-dir") + 1] == folder
        args(*[x for x in argv[2:] if x != "--no-progress"])  # every step's flags parse
    assert S.ESTIMATE_S > 0
