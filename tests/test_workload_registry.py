"""--workload quick|cruda: rog.workloads.registry and how scripts/run.py puts the choice into config.yaml.

Expected values come from Table II (ConvMLP-M, 224 px, batch 24 on a robot / 16 on a laptop, learning
rate 1e-6) and the device profiles' own batch_size fields, read independently of the registry.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rog.workloads.registry import DEFAULTS, WorkloadConfigError, make_workload, resolve_workload
from rog.experiment import cli
from rog.experiment import config as runcfg

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from data_gen.make_tiny_fedcifar import make_tiny_cruda_dir

    d = tmp_path_factory.mktemp("tiny_cruda")
    make_tiny_cruda_dir(d, train_clients=8, test_clients=2, images_per_client=6, seed=0)
    return d


def profile_batch(name: str) -> int:
    return int(yaml.safe_load((ROOT / "configs" / "devices" / f"{name}.yaml").read_text())["batch_size"])


def test_quick_defaults_and_cruda_flags_refused():
    wl = resolve_workload("quick")
    assert wl == dict(workload="quick", model="convmlp_quick", base_batch=32, default_lr=5e-5)
    with pytest.raises(WorkloadConfigError, match="--data-dir, --random-init belong"):
        resolve_workload("quick", data_dir="/x", random_init=True)
    with pytest.raises(WorkloadConfigError, match="unknown workload"):
        resolve_workload("crimp")


def test_cruda_missing_data_says_how_to_get_it(tmp_path):
    with pytest.raises(WorkloadConfigError) as e:
        resolve_workload("cruda", profile_batch_size=24, data_dir=tmp_path)
    msg = str(e.value)
    assert "mixed_fed_cifar100_train.h5" in msg and "mixed_fed_cifar100_test.h5" in msg
    assert "utils/download_data.sh" in msg and "data_gen.make_tiny_fedcifar" in msg


def test_cruda_without_weights_refuses_unless_random_init(tiny_dir):
    with pytest.raises(WorkloadConfigError, match="--random-init") as e:
        resolve_workload("cruda", profile_batch_size=24, data_dir=tiny_dir)
    assert "convmlp_m_cifar100.pth" in str(e.value)
    wl = resolve_workload("cruda", profile_batch_size=24, data_dir=tiny_dir, random_init=True)
    assert wl["weights"] is None and wl["random_init"] is True
    assert (wl["model"], wl["image_size"], wl["base_batch"], wl["default_lr"]) == ("convmlp_m", 224, 24, 1e-6)
    assert wl["data_dir"] == str(Path(tiny_dir).resolve()) and wl["split"] == "label_sorted"
    with pytest.raises(WorkloadConfigError, match="exclude each other"):
        resolve_workload("cruda", profile_batch_size=24, data_dir=tiny_dir, random_init=True, weights="w.pth")
    with pytest.raises(WorkloadConfigError, match="--split"):
        resolve_workload("cruda", profile_batch_size=24, data_dir=tiny_dir, random_init=True, split="sorted")


def test_cruda_weights_file_is_used(tiny_dir, tmp_path):
    w = tmp_path / "w.pth"
    w.write_bytes(b"not checked here")  # existence is checked at resolve time, contents when loaded
    wl = resolve_workload("cruda", profile_batch_size=16, data_dir=tiny_dir, weights=w)
    assert wl["weights"] == str(w.resolve()) and wl["random_init"] is False and wl["base_batch"] == 16


def test_make_workload_cruda_random_init_is_seeded_and_shared(tiny_dir):
    entries = resolve_workload("cruda", profile_batch_size=24, data_dir=tiny_dir, random_init=True)
    cfg = dict(entries, seed=3, workers=4, cache_dir=None)
    a, b = make_workload(cfg), make_workload(cfg)
    assert a.n_workers == 4 and a.image_size == 224 and a.random_init
    sa, sb = a.pretrained_state("convmlp_s"), b.pretrained_state("convmlp_s")  # S: same code path, cheaper
    assert all(torch.equal(sa[k], sb[k]) for k in sa)  # every worker starts from the same model
    other = make_workload(dict(cfg, seed=4)).pretrained_state("convmlp_s")
    assert not all(torch.equal(sa[k], other[k]) for k in sa)
    assert "NOT pre-trained" in a.summary("convmlp_s")["weights"]


def test_quick_test_metrics_match_a_direct_computation():
    from rog.workloads import QuickWorkload

    wl = QuickWorkload(seed=0, n_workers=2, cache_dir=None)
    torch.manual_seed(0)
    model = wl.make_model()
    model.train()
    m = wl.test_metrics(model, batch_size=37)  # batches that do not divide the test set
    assert model.training  # train mode restored
    x, y = wl.test_set()
    model.eval()
    with torch.no_grad():
        logits = model(x)
    assert m["n"] == y.numel()
    assert m["accuracy"] == pytest.approx(float((logits.argmax(1) == y).float().mean()))
    assert m["loss"] == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)), rel=1e-5)
    assert m["accuracy"] == pytest.approx(wl.evaluate(model))


def test_run_py_puts_the_workload_into_the_config(tiny_dir, tmp_path):
    base = ["--testbed", "loopback", "-c", "none", "--result-dir", str(tmp_path), "--workload", "cruda",
            "--data-dir", str(tiny_dir), "--random-init", "--iterations", "2"]
    cfg = runcfg.resolve_config(cli.parse_args(base))
    assert (cfg["workload"], cfg["model"], cfg["image_size"], cfg["lr"]) == ("cruda", "convmlp_m", 224, 1e-6)
    assert cfg["profile"] == "jetson-xavier-nx" and cfg["base_batch"] == profile_batch("jetson-xavier-nx") == 24
    assert cfg["data_dir"] == str(Path(tiny_dir).resolve()) and cfg["random_init"] is True
    laptop = runcfg.resolve_config(cli.parse_args(base + ["--profile", "laptop", "--lr", "2e-6"]))
    assert laptop["base_batch"] == profile_batch("laptop") == 16 and laptop["lr"] == 2e-6
    quick = runcfg.resolve_config(cli.parse_args(["--testbed", "loopback", "--result-dir", str(tmp_path)]))
    assert (quick["workload"], quick["model"], quick["base_batch"], quick["lr"]) == ("quick", "convmlp_quick", 32, 5e-5)
    assert "data_dir" not in quick and quick["profile"] == DEFAULTS["quick"].profile
    # the children rebuild the workload from config.yaml alone
    wl = make_workload(yaml.safe_load(yaml.safe_dump(cfg)))
    assert wl.n_workers == cfg["workers"] and wl.image_size == 224 and np.concatenate(wl.shards).size == 8 * 6


def test_run_py_refuses_cruda_without_weights(tiny_dir, tmp_path, capsys):
    with pytest.raises(runcfg.ConfigError) as e:
        runcfg.resolve_config(cli.parse_args(["--testbed", "loopback", "-c", "none", "--result-dir", str(tmp_path),
                                                 "--workload", "cruda", "--data-dir", str(tiny_dir)]))
    assert "--random-init" in str(e.value) and "download_data.sh" in str(e.value)


def test_launcher_imports_no_torch():
    """scripts/run.py's launcher and PS import rog.workloads.registry; it must not pull in torch."""
    import subprocess

    code = ("import sys; import rog.experiment.cli, rog.experiment.launch, rog.experiment.launch_local, "
            "rog.experiment.launch_fabric, rog.experiment.children, rog.experiment.finalize; "
            "import rog.workloads.registry; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
