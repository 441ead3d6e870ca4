"""Checkpoints of a worker-held model (rog.checkpoint) and checkpoint testing (scripts/test_checkpoints.py)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from rog import checkpoint as C
from rog.checkpoint import (CheckpointError, CheckpointSchedule, CheckpointWriter, checkpoint_dir, list_checkpoints,
                            load_checkpoint, run_start_s, save_checkpoint, snapshot_state)

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "result" / ".cache"  # the quick workload's default weight cache (pre-trained once per machine)


def small_model(seed: int = 0) -> nn.Module:
    """Conv + BatchNorm + Linear; a few train-mode passes so the running stats are not their defaults."""
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    m.train()
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(8, 3, 8, 8))
    return m


def save(d, it=1, t_s=1.0, state=None, worker=0, **meta):
    return save_checkpoint(d, worker=worker, iteration=it, t_s=t_s, wall_s=1.7e9 + t_s,
                           model_state=state if state is not None else {"w": torch.arange(6.0)}, meta=meta)


# ----------------------------------------------------------------------------- schedule
def test_schedule_grid_by_hand():
    # period 60, tripling after every 2: gaps 60, 60, 180, 180, 540, 540, 1620
    s = CheckpointSchedule(period_s=60.0, triple_every=2)
    assert s.times(7) == [60.0, 120.0, 300.0, 480.0, 1020.0, 1560.0, 3180.0]
    answers = [(s.due(t), t) for t in (0.0, 59.9, 60.0, 60.5, 119.0, 120.0, 299.0, 300.0, 480.0, 1019.9, 1020.0)]
    assert [t for ok, t in answers if ok] == [60.0, 120.0, 300.0, 480.0, 1020.0]
    assert s.next_s == 1560.0 and s.taken == 5


def test_schedule_merges_passed_slots_and_keeps_the_grid():
    s = CheckpointSchedule(period_s=60.0, triple_every=2)
    assert s.due(500.0)  # 60, 120, 300 and 480 have passed: one checkpoint, not four
    assert (s.slots_passed, s.taken, s.next_s) == (4, 1, 1020.0)
    assert not s.due(501.0)
    assert s.due(1020.0) and s.next_s == 1560.0


def test_schedule_default_is_the_artifacts_and_time_scale_shrinks_it():
    s = CheckpointSchedule()
    t = s.times(22)
    assert t[0] == 60.0 and t[19] == 1200.0 and t[20] == 1380.0 and t[21] == 1560.0
    q = CheckpointSchedule(60.0, 20, time_scale=0.25)
    tq = q.times(22)
    assert tq[0] == 15.0 and tq[19] == 300.0 and tq[20] == 345.0 and tq[21] == 390.0
    assert q.next_s == 15.0


@pytest.mark.parametrize("kw, word", [(dict(period_s=0), "period_s"), (dict(period_s=float("nan")), "period_s"),
                                      (dict(triple_every=0), "triple_every"), (dict(triple_every=2.5), "triple_every"),
                                      (dict(time_scale=-1), "time_scale")])
def test_schedule_rejects_bad_arguments(kw, word):
    with pytest.raises(ValueError, match=word):
        CheckpointSchedule(**kw)


# ----------------------------------------------------------------------------- files
def test_round_trip_parameters_and_buffers(tmp_path):
    model = small_model()
    state = snapshot_state(model)
    assert "1.running_mean" in state and "1.num_batches_tracked" in state
    assert int(state["1.num_batches_tracked"]) == 3 and not torch.all(state["1.running_var"] == 1)
    info = save(tmp_path, it=12, t_s=34.5, state=state, model="tiny", run_id="r")
    assert info.path.name == "ckpt-w0-it000012.pt"
    doc = json.loads(info.sidecar.read_text())
    assert doc["sha256"] == hashlib.sha256(info.path.read_bytes()).hexdigest()
    assert (doc["iteration"], doc["t_s"], doc["worker"], doc["model"]) == (12, 34.5, 0, "tiny")
    assert doc["wall_s"] == 1.7e9 + 34.5 and doc["meta"]["run_id"] == "r"
    got, ginfo = load_checkpoint(info.path)
    assert set(got) == set(model.state_dict())
    for k, v in model.state_dict().items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k
    assert ginfo == info
    other = small_model(seed=1)
    other.load_state_dict(got, strict=True)
    other.eval(), model.eval()
    x = torch.randn(4, 3, 8, 8)
    assert torch.equal(other(x), model(x))  # eval mode uses the restored running stats


def test_numpy_state_and_snapshot_is_a_private_copy(tmp_path):
    model = small_model()
    snap = snapshot_state(model)
    before = snap["0.weight"].clone()
    with torch.no_grad():
        model[0].weight.add_(1.0)  # training goes on after the snapshot
    assert torch.equal(snap["0.weight"], before)
    arr = {"a": np.arange(5, dtype=np.float32), "b": np.ones((2, 3), dtype=np.int64)}
    info = save(tmp_path, state=arr)
    got, _ = load_checkpoint(info.sidecar)
    assert np.array_equal(got["a"].numpy(), arr["a"]) and got["b"].dtype == torch.int64


def test_crash_before_replace_leaves_nothing_visible(tmp_path, monkeypatch):
    real = os.replace

    def crash(*a):
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(C.os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        save(tmp_path)
    assert list_checkpoints(tmp_path) == [] and list(tmp_path.iterdir()) == []
    # the crash comes between the tensor file's rename and the sidecar's: the .pt is there, uncommitted
    calls = []

    def second_crashes(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("simulated crash before the sidecar")
        return real(src, dst)

    monkeypatch.setattr(C.os, "replace", second_crashes)
    with pytest.raises(OSError, match="sidecar"):
        save(tmp_path)
    assert (tmp_path / "ckpt-w0-it000001.pt").exists() and list_checkpoints(tmp_path) == []
    with pytest.raises(CheckpointError, match=r"ckpt-w0-it000001\.json.*no checkpoint sidecar"):
        load_checkpoint(tmp_path / "ckpt-w0-it000001.pt")
    # the same crash while replacing a committed checkpoint: the old sidecar must not vouch for the new file
    monkeypatch.setattr(C.os, "replace", real)
    save(tmp_path, it=2, state={"w": torch.zeros(3)})
    calls.clear()
    monkeypatch.setattr(C.os, "replace", second_crashes)
    with pytest.raises(OSError, match="sidecar"):
        save(tmp_path, it=2, state={"w": torch.ones(3)})
    assert list_checkpoints(tmp_path) == []


def test_killed_writer_leaves_no_partial_checkpoint(tmp_path):
    """A process killed between writing the temporary file and the rename: only an ignored temp file remains."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            C.os.replace = lambda *a: os._exit(0)  # die right before the rename
            save(tmp_path)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".ckpt-w0-it000001.pt.tmp-")  # written, never renamed
    assert list_checkpoints(tmp_path) == []


def test_sha_mismatch_truncation_and_missing_files_name_the_file(tmp_path):
    info = save(tmp_path, state={"w": torch.arange(1000.0)})
    good = info.path.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    info.path.write_bytes(bytes(bad))
    with pytest.raises(CheckpointError, match=r"ckpt-w0-it000001\.pt.*sha256 mismatch"):
        load_checkpoint(info.path)
    info.path.write_bytes(good[:-100])
    with pytest.raises(CheckpointError, match=r"ckpt-w0-it000001\.pt.*truncated"):
        load_checkpoint(info.path)
    info.path.unlink()
    with pytest.raises(CheckpointError, match=r"ckpt-w0-it000001\.pt.*missing"):
        load_checkpoint(info)
    info.sidecar.write_text("{not json")
    with pytest.raises(CheckpointError, match=r"ckpt-w0-it000001\.json.*unreadable"):
        list_checkpoints(tmp_path)


def test_replacing_a_checkpoint_and_listing_sorted_by_time(tmp_path):
    d = checkpoint_dir(tmp_path)
    save(d, it=5, t_s=30.0)
    save(d, it=3, t_s=20.0, state={"w": torch.zeros(2)})
    save(d, it=3, t_s=20.0, state={"w": torch.ones(2)})  # a re-run replaces it
    save(d, it=4, t_s=25.0, worker=1)
    save(tmp_path, it=1, t_s=5.0)  # also found directly in the run folder
    got = list_checkpoints(tmp_path)
    assert [(c.worker, c.iteration, c.t_s) for c in got] == [(0, 1, 5.0), (0, 3, 20.0), (1, 4, 25.0), (0, 5, 30.0)]
    assert [c.iteration for c in list_checkpoints(tmp_path, worker=0)] == [1, 3, 5]
    assert torch.equal(load_checkpoint(got[1])[0]["w"], torch.ones(2))


def test_save_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="iteration"):
        save(tmp_path, it=-1)
    with pytest.raises(ValueError, match="t_s"):
        save(tmp_path, t_s=float("inf"))
    with pytest.raises(ValueError, match="model_state"):
        save(tmp_path, state={})
    with pytest.raises(ValueError, match=r"model_state\['x'\]"):
        save(tmp_path, state={"x": [1, 2]})
    with pytest.raises(ValueError, match="meta"):
        save(tmp_path, bad=object())


def test_run_start_is_the_first_worker_run_start(tmp_path):
    assert run_start_s(tmp_path) == 0.0
    (tmp_path / "events-ps.jsonl").write_text('{"kind":"header"}\n{"kind":"run_start","t_s":1.0}\n')
    (tmp_path / "events-w0.jsonl").write_text('{"kind":"header"}\n{"kind":"run_start","t_s":4.5}\n{"kind":"eval",')
    (tmp_path / "events-w1.jsonl").write_text('{"kind":"header"}\n{"kind":"compute","t_s":3.0}\n'
                                              '{"kind":"run_start","t_s":4.0}\n')
    assert run_start_s(tmp_path) == 4.0


# ----------------------------------------------------------------------------- background writer
def test_writer_never_runs_two_writes_at_once_and_counts_skips(tmp_path, monkeypatch):
    gate, started = threading.Event(), threading.Event()
    lock = threading.Lock()
    live, peak, order = [0], [0], []
    real = C.save_checkpoint

    def slow_save(directory, **kw):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        started.set()
        gate.wait()
        try:
            order.append(kw["iteration"])
            return real(directory, **kw)
        finally:
            with lock:
                live[0] -= 1

    monkeypatch.setattr(C, "save_checkpoint", slow_save)
    w = CheckpointWriter(tmp_path, worker=2, meta={"model": "tiny"})
    model = small_model()
    assert w.submit(model, iteration=1, t_s=1.0)
    started.wait()
    assert w.busy
    assert not w.submit(model, iteration=2, t_s=2.0)  # the write of iteration 1 is still running
    assert w.skipped == 1
    done = []
    t = threading.Thread(target=lambda: done.append(w.submit(model, iteration=3, t_s=3.0, block=True)))
    t.start()  # waits for iteration 1's write, then starts its own
    gate.set()
    t.join()
    w.close()
    assert done == [True] and order == [1, 3] and peak[0] == 1
    assert [c.iteration for c in list_checkpoints(tmp_path)] == [1, 3]
    assert [c.iteration for c in w.written] == [1, 3] and w.written[0].model == "tiny" and w.written[0].worker == 2
    with pytest.raises(RuntimeError, match="after close"):
        w.submit(model, iteration=4, t_s=4.0)


def test_writer_reports_a_failed_write_on_close(tmp_path, monkeypatch):
    def broken(directory, **kw):
        raise OSError("disk full")

    monkeypatch.setattr(C, "save_checkpoint", broken)
    w = CheckpointWriter(tmp_path, worker=0)
    assert w.submit({"w": torch.zeros(3)}, iteration=7, t_s=1.0)
    with pytest.raises(CheckpointError, match="iteration 7 failed: OSError: disk full"):
        w.close()


def test_writer_writes_the_model_the_worker_holds(tmp_path):
    model = small_model()
    w = CheckpointWriter(checkpoint_dir(tmp_path), worker=0, meta={"model": "tiny"})
    assert w.submit(model, iteration=10, t_s=12.0, wall_s=1.7e9)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model[4].weight.mul_(2.0)  # the next step changes the model while the write may still run
    w.close()
    (c,) = list_checkpoints(tmp_path)
    state, _ = load_checkpoint(c)
    assert all(torch.equal(state[k], v) for k, v in expected.items())
    assert w.copy_s >= 0 and w.skipped == 0


# ----------------------------------------------------------------------------- scripts/test_checkpoints.py
def _script():
    from rog import checkpoint_accuracy

    return checkpoint_accuracy


@pytest.fixture(scope="module")
def quick():
    from rog.workloads import QuickWorkload

    wl = QuickWorkload(seed=0, n_workers=2, cache_dir=CACHE)
    return wl, wl.pretrained_state()


def _perturbed(state: dict, scale: float, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in state.items():
        if v.is_floating_point():
            out[k] = v + scale * v.abs().mean() * torch.randn(v.shape, generator=g)
        else:
            out[k] = v.clone()
    out = {k: (v.abs() + 0.1 if k.endswith("running_var") else v) for k, v in out.items()}
    return out


@pytest.fixture()
def run_dir(tmp_path, quick):
    """A synthetic run folder: config.yaml as scripts/run.py writes it, worker event files, 3 checkpoints
    of worker 0 (the pre-trained model and two perturbations) and one of worker 1."""
    _, pre = quick
    rd = tmp_path / "ROG4-b1-w2-seed0"
    rd.mkdir()
    cfg = dict(library="ROG", threshold=4, workers=2, iterations=30, seed=0, model="convmlp_quick", workload="quick",
               cache_dir=str(CACHE), run_id=rd.name)
    (rd / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    for k, t in ((0, 5.0), (1, 5.25)):
        (rd / f"events-w{k}.jsonl").write_text('{"kind":"header","schema":1}\n'
                                               f'{{"kind":"run_start","t_s":{t},"worker":{k}}}\n')
    d = checkpoint_dir(rd)
    states = [pre, _perturbed(pre, 0.3, 1), _perturbed(pre, 1.0, 2)]
    for (it, t), st in zip(((0, 5.0), (10, 20.0), (20, 35.5)), states):
        save(d, it=it, t_s=t, state=st, model="convmlp_quick")
    save(d, it=10, t_s=21.0, state=pre, worker=1, model="convmlp_quick")
    return rd, states


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _direct_accuracy(wl, state) -> float:
    model = wl.make_model("convmlp_quick")
    model.load_state_dict(state)
    return wl.evaluate(model)


def test_script_accuracy_equals_direct_evaluation_and_resumes(run_dir, quick, capsys):
    wl, _ = quick
    rd, states = run_dir
    expected = [_direct_accuracy(wl, s) for s in states]
    assert len(set(expected)) == 3  # the perturbations change the answer, so a wrong model would show
    mod = _script()
    assert mod.main([str(rd)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["tested"], summary["checkpoints"], summary["already_tested"]) == (3, 3, 0)
    rows = _rows(rd / "accuracy.csv")
    assert list(rows[0]) == ["time", "iteration", "accuracy", "worker", "checkpoint"]
    assert [float(r["accuracy"]) for r in rows] == expected
    assert [float(r["time"]) for r in rows] == [0.0, 15.0, 30.5]  # since the first worker's run_start (5.0)
    assert [int(r["iteration"]) for r in rows] == [0, 10, 20] and {r["worker"] for r in rows} == {"0"}
    assert [r["checkpoint"] for r in rows] == ["ckpt-w0-it000000.pt", "ckpt-w0-it000010.pt", "ckpt-w0-it000020.pt"]

    # resume: tested checkpoints are skipped (a sentinel value survives), only new ones are tested
    text = (rd / "accuracy.csv").read_text().replace(rows[1]["accuracy"], "0.123", 1)
    (rd / "accuracy.csv").write_text(text)
    assert mod.main([str(rd)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["tested"], summary["already_tested"]) == (0, 3)
    d = checkpoint_dir(rd)
    save(d, it=30, t_s=50.0, state=states[1], model="convmlp_quick")
    save(d, it=40, t_s=65.0, state=states[2], model="convmlp_quick")
    assert mod.main([str(rd), "--limit", "1"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (summary["tested"], summary["remaining"]) == (1, 1)
    rows = _rows(rd / "accuracy.csv")
    assert [float(r["accuracy"]) for r in rows] == [expected[0], 0.123, expected[2], expected[1]]
    assert rows[-1]["checkpoint"] == "ckpt-w0-it000030.pt" and float(rows[-1]["time"]) == 45.0


def test_script_other_worker_and_corrupted_checkpoint(run_dir, quick, capsys):
    wl, pre = quick
    rd, _ = run_dir
    mod = _script()
    assert mod.main([str(rd), "--worker", "1"]) == 0
    capsys.readouterr()
    (row,) = _rows(rd / "accuracy.csv")
    assert (row["worker"], row["iteration"], float(row["time"])) == ("1", "10", 16.0)
    assert float(row["accuracy"]) == _direct_accuracy(wl, pre)
    p = checkpoint_dir(rd) / "ckpt-w0-it000010.pt"
    p.write_bytes(p.read_bytes()[:-10])
    assert mod.main([str(rd), "--worker", "all"]) == 1
    out = capsys.readouterr()
    summary = json.loads(out.out.strip().splitlines()[-1])
    assert summary["tested"] == 2 and [f["checkpoint"] for f in summary["failed"]] == ["ckpt-w0-it000010.pt"]
    assert "ckpt-w0-it000010.pt" in out.err and "truncated" in out.err
    assert sorted(r["checkpoint"] for r in _rows(rd / "accuracy.csv")) == [
        "ckpt-w0-it000000.pt", "ckpt-w0-it000020.pt", "ckpt-w1-it000010.pt"]


def test_script_refuses_a_foreign_accuracy_csv(run_dir, capsys):
    rd, _ = run_dir
    (rd / "accuracy.csv").write_text("t,acc\n1,0.5\n")
    assert _script().main([str(rd)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("test_checkpoints.py: error:") and "missing column" in err[0]


def test_script_runs_standalone_without_ssh_or_tc_modules(run_dir):
    rd, _ = run_dir
    code = ("import json, sys\n"
            "from rog.checkpoint_accuracy import main\n"
            f"assert main([{str(rd)!r}, '--limit', '1']) == 0\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('fabric', 'paramiko', 'invoke')\n"
            "             or m.startswith(('rog.testbed', 'rog.deploy', 'rog.experiment')))\n"
            "print('FORBIDDEN', json.dumps(bad))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[-1] == "FORBIDDEN []"
    assert json.loads(lines[-2])["tested"] == 1


def test_script_on_a_cruda_run_equals_test_metrics(tmp_path, capsys):
    from data_gen.make_tiny_fedcifar import make_tiny_cruda_dir
    from rog.workloads.cruda import CrudaWorkload

    data = tmp_path / "data"
    make_tiny_cruda_dir(data, train_clients=4, test_clients=3, images_per_client=8, num_classes=100, seed=0)
    rd = tmp_path / "run"
    rd.mkdir()
    (rd / "config.yaml").write_text(yaml.safe_dump(dict(model="convmlp_s", workload="cruda", seed=0, workers=2,
                                                        data_dir=str(data), image_size=32)))
    wl = CrudaWorkload(data, n_workers=2, image_size=32, seed=0)
    states = []
    for it, seed in ((0, 0), (5, 1)):
        torch.manual_seed(seed)
        states.append(wl.make_model("convmlp_s").state_dict())
        save(checkpoint_dir(rd), it=it, t_s=2.0 + it, state=states[-1], model="convmlp_s")
    expected = []
    for s in states:
        m = wl.make_model("convmlp_s")
        m.load_state_dict(s)
        expected.append(wl.test_metrics(m)["accuracy"])
    assert _script().main([str(rd), "--batch-size", "7"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["test_images"] == 24
    rows = _rows(rd / "accuracy.csv")
    assert [float(r["accuracy"]) for r in rows] == expected
    assert [float(r["time"]) for r in rows] == [2.0, 7.0]  # no event files: the event clock itself
    # a checkpoint of another model is refused by name, not silently tested
    save(checkpoint_dir(rd), it=9, t_s=20.0, state=states[0], model="convmlp_m")
    assert _script().main([str(rd)]) == 1
    assert "ckpt-w0-it000009.pt" in capsys.readouterr().err
