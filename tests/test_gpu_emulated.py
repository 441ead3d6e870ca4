"""scripts/run_gpu_emulated.py without a GPU: its runs and flags, the unpacked-iproute2 path, the refusal without CUDA."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rog.experiment import gpu_emulated as G


def _exe(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{text}'\n")
    path.chmod(0o755)


def test_find_tools_in_an_unpacked_tree(tmp_path):
    _exe(tmp_path / "sbin" / "ip", "ip utility, fake")
    _exe(tmp_path / "sbin" / "tc", "tc utility, fake")
    lib = tmp_path / "usr" / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libmnl.so.0.2.0").write_bytes(b"\x7fELF")
    (lib / "libmnl.so.0").symlink_to("libmnl.so.0.2.0")
    tools = G.find_tools(tmp_path)
    assert tools.ip == str(tmp_path / "sbin" / "ip") and tools.tc == str(tmp_path / "sbin" / "tc")
    assert tools.path_dirs == [str(tmp_path / "sbin")] and tools.lib_dirs == [str(lib)]
    env = tools.env({"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/x"})
    assert env["PATH"] == f"{tmp_path / 'sbin'}:/usr/bin" and env["LD_LIBRARY_PATH"] == f"{lib}:/opt/x"
    assert shutil.which("ip", path=env["PATH"]) == tools.ip
    assert G.tool_version(tools.ip, env) == "ip utility, fake"
    (tmp_path / "sbin" / "tc").unlink()
    with pytest.raises(ValueError, match="no executable tc"):
        G.find_tools(tmp_path)


def _fake_debs(folder: Path, names=G.IPROUTE2_PACKAGES) -> Path:
    """Real .deb archives (dpkg-deb --build) of the iproute2 package names, carrying fake ip/tc and a library."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        root = folder / f"src-{name}"
        (root / "DEBIAN").mkdir(parents=True)
        (root / "DEBIAN" / "control").write_text(f"Package: {name}\nVersion: 1.0\nArchitecture: all\n"
                                                 "Maintainer: test <t@example.org>\nDescription: fake\n")
        if name == "iproute2":
            _exe(root / "bin" / "ip", "ip utility, iproute2-fake")
            _exe(root / "sbin" / "tc", "tc utility, iproute2-fake")
        else:
            d = root / "usr" / "lib" / "x86_64-linux-gnu"
            d.mkdir(parents=True)
            (d / f"{name}.so.1").write_bytes(b"\x7fELF")
        subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(folder / f"{name}_1.0_all.deb")],
                       check=True, capture_output=True)
        shutil.rmtree(root)
    return folder


needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb is not installed")


@needs_dpkg
def test_unpacked_debs_give_their_ip_and_tc_and_the_dry_run_says_which(tmp_path, capsys):
    debs = _fake_debs(tmp_path / "debs")
    tools = G.choose_iproute2(str(debs), tmp_path / "x")
    assert tools.ip == str(tmp_path / "x" / "bin" / "ip") and tools.tc == str(tmp_path / "x" / "sbin" / "tc")
    assert tools.source == str(debs) and str(tmp_path / "x" / "usr" / "lib" / "x86_64-linux-gnu") in tools.lib_dirs
    rc = G.main(["--devices", "cpu", "--dry-run", "--budget-s", "30", "--iproute2-debs", str(debs),
                 "--result-dir", str(tmp_path / "res")])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    assert out[0].startswith("ip: /") and "(ip utility, iproute2-fake)" in out[0] and f"from {debs}" in out[0]
    doc = json.loads(out[-1])
    assert doc["iproute2"]["tc_version"] == "tc utility, iproute2-fake" and len(doc["runs"]) == 4
    (debs / "libbpf1_1.0_all.deb").unlink()
    with pytest.raises(ValueError, match="missing libbpf1"):
        G.choose_iproute2(str(debs), tmp_path / "y")


def test_no_ip_on_the_host_and_no_debs_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ValueError, match="--iproute2-debs"):
        G.choose_iproute2(None, tmp_path)


def test_the_runs_are_the_outdoors_items_rog4_and_bsp_per_device_and_launcher(tmp_path):
    runs = G.plan(["cuda", "cpu"], ["local", "fabric"], 45.0, tmp_path, str(tmp_path / "cache"))
    assert [(r.device, r.launcher, r.system) for r in runs] == [
        (d, lch, s) for d in ("cuda", "cpu") for lch in ("local", "fabric") for s in ("ROG-4", "BSP")]
    assert len({(str(r.result_dir), r.run_id) for r in runs}) == 8  # no two runs share a folder
    for r in runs:
        a = r.args
        flag = {a[i]: a[i + 1] for i in range(len(a) - 1) if a[i].startswith("-")}
        assert flag["--device"] == r.device and flag["--launcher"] == r.launcher
        assert flag["--testbed"] == "emulated" and flag["-c"] == "outdoors" and flag["--replay-mode"] == "artifact"
        assert flag["--item"] == "outdoors" and flag["--budget-s"] == "45" and flag["--workers"] == "4"
        assert flag["--checkpoint-workers"] == "all" and flag["--result-dir"] == str(r.result_dir)
        assert flag["--cache-dir"] == str(tmp_path / "cache")
        assert r.result_dir.name == f"{r.device}-{r.launcher}"
        if r.system == "ROG-4":
            assert flag["--library"] == "ROG" and flag["--threshold"] == "4" and r.run_id.startswith("ROG4-outdoors")
        else:
            assert flag["--library"] == "BSP" and "--threshold" not in flag and r.run_id.startswith("BSP-outdoors")


def test_without_cuda_it_refuses_unless_asked_for_cpu(monkeypatch, capsys):
    import rog.device.choice

    monkeypatch.setattr(rog.device.choice, "nvidia_driver_present", lambda: False)
    assert G.main(["--devices", "cuda", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "no NVIDIA driver" in err and "--devices cpu" in err
    assert G.main(["--devices", "cuda:x", "--dry-run"]) == 2
    assert "--devices 'cuda:x'" in capsys.readouterr().err
    if shutil.which("ip") and shutil.which("tc"):
        assert G.main(["--devices", "cpu", "--launchers", "local", "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert "from host" in out.splitlines()[0] and out.count("--launcher local") == 2


def test_fabric_hosts_of_the_emulated_testbed_get_this_path(monkeypatch, tmp_path, run_config):
    """On the emulated testbed (hosts = namespaces of this machine, a clock origin) the fabric plan's processes
    get this process's PATH and LD_LIBRARY_PATH, so a shell started with that environment alone finds the
    unpacked ``tc`` first; real devices (no origin) keep their own."""
    import rog.deploy.plan as plan

    unpacked = tmp_path / "unpacked" / "sbin"
    _exe(unpacked / "tc", "unpacked tc")
    monkeypatch.setenv("PATH", f"{unpacked}:/usr/bin:/bin")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path / "unpacked" / "lib"))
    specs = []
    monkeypatch.setattr(plan, "build_plan", lambda hosts_file, spec, code, run_dir: specs.append(spec))
    monkeypatch.setattr(plan.CodeBundle, "scan", staticmethod(lambda root: None))
    from rog.experiment.launch_fabric import deploy_plan

    for origin in (123.0, None):
        deploy_plan(run_config(), tmp_path / "hosts.yaml", str(tmp_path), origin=origin)
    emulated, real = (s.env for s in specs)
    assert emulated["LD_LIBRARY_PATH"] == str(tmp_path / "unpacked" / "lib")
    out = subprocess.run(["/bin/sh", "-c", "tc"], env=emulated, capture_output=True, text=True)
    assert out.stdout.strip() == "unpacked tc", out.stderr  # the remote shell's tc is the unpacked one
    assert "PATH" not in real and "LD_LIBRARY_PATH" not in real  # real devices: their own
    assert emulated["PYTHONUNBUFFERED"] == real["PYTHONUNBUFFERED"] == "1"
