"""utils/download_data.sh against a local file:// "server" (no network): verification, resume, failures.

The built-in manifest is checked against docs/design.md ("Artifact data files"); behaviour is tested with a manifest of
files made in tmp (ROG_DATA_MANIFEST), served through the same URL-base overrides a user would set.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "utils" / "download_data.sh"
FACTS = ROOT / "docs" / "design.md"  # its "Artifact data files" section

pytestmark = pytest.mark.skipif(shutil.which("curl") is None or shutil.which("bash") is None,
                                reason="needs bash and curl")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def gitblob(data: bytes) -> str:
    """Git's blob id, computed independently of the script: sha1 of 'blob <size>\\0' + content."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


class Server:
    """A directory served by file:// URLs, plus a manifest describing what the script should fetch."""

    def __init__(self, root: Path):
        self.root = root / "srv"
        self.root.mkdir()
        self.lines: list[str] = []
        self.manifest = root / "manifest.txt"
        self.data_dir = root / "data"

    def put(self, rel: str, data: bytes) -> bytes:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        return data

    def add(self, name, source, rel, dest, size, checksum, optional=""):
        self.lines.append(f"{name} {source} {rel} {dest} {size} {checksum} {optional}".rstrip())
        self.manifest.write_text("# test manifest\n" + "\n".join(self.lines) + "\n")

    def run(self, *args, env_extra=None, base=None):
        base = base or self.root.as_uri()
        env = dict(os.environ, ROG_DATA_MANIFEST=str(self.manifest), ROG_DATA_BASE_URL=base, ROG_RAW_BASE_URL=base,
                   ROG_CONVMLP_URL=f"{base}/weights.pth", ROG_DOWNLOADER="curl")
        env.pop("ROG_CONVMLP_SHA256", None)
        env.pop("ROG_DATA_DIR", None)
        env.update(env_extra or {})
        return subprocess.run(["bash", str(SCRIPT), "--data-dir", str(self.data_dir), *args], env=env,
                              capture_output=True, text=True, timeout=60)


def summary_line(out: str, name: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.strip().startswith(name + " ")]
    assert lines, f"no summary line for {name} in:\n{out}"
    return lines[-1]


@pytest.fixture
def srv(tmp_path) -> Server:
    return Server(tmp_path)


def _random(n: int, seed: int) -> bytes:
    return bytes((i * 2654435761 + seed * 97) % 251 for i in range(n))


# ---------------------------------------------------------------------------- built-in manifest
def test_builtin_manifest_matches_the_documented_checksums():
    text = FACTS.read_text().split("## Artifact data files", 1)[1].split("\n## ", 1)[0]
    sha_facts = {m[0]: (m[1], int(m[2])) for m in
                 re.findall(r"`([^`]+)`: ([0-9a-f]{64}), (\d+) bytes", text)}
    blob_facts = {m[0]: m[1] for m in re.findall(r"`([^`]+)`: ([0-9a-f]{40})\s*$", text, flags=re.M)}
    assert len(sha_facts) == 4 and len(blob_facts) == 2
    out = subprocess.run(["bash", str(SCRIPT), "--print-manifest"], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "ROG_DATA_MANIFEST"}, check=True).stdout
    rows = {cols[2]: cols for cols in (ln.split() for ln in out.splitlines()) if len(cols) >= 6}
    for path, (digest, size) in sha_facts.items():
        assert rows[path][1] == "lfs" and rows[path][4] == str(size) and rows[path][5] == f"sha256:{digest}", path
    for path, blob in blob_facts.items():
        assert rows[path][1] == "raw" and rows[path][5] == f"gitblob:{blob}", path
    # the .pkl copies are opt-in only (the toolkit never unpickles)
    assert all(rows[p][6:] == ["optional"] for p in rows if p.endswith(".pkl"))
    weights = [c for c in rows.values() if c[0] == "weights"]
    assert weights and weights[0][3] == "convmlp_m_cifar100.pth"


def test_list_needs_no_network_and_names_urls():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROG_")}
    env["ROG_DATA_BASE_URL"] = "https://example.invalid/base"
    out = subprocess.run(["bash", str(SCRIPT), "--list", "--data-dir", "/nonexistent/dir"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert "https://example.invalid/base/datasets/mixed_fed_cifar100_train.h5" in out
    assert "/nonexistent/dir/bw_records/outdoors.txt" in out
    assert ".pkl" not in out  # opt-in
    assert not Path("/nonexistent/dir").exists()


# ---------------------------------------------------------------------------- behaviour
def test_fetches_and_verifies_every_kind(srv):
    big = srv.put("datasets/train.h5", _random(300_000, 1))
    rec = srv.put("scripts/bw_records/outdoors.txt", b"0 12.5\n0.5 30.1\n")
    w = srv.put("weights.pth", _random(1_500_000, 2))
    srv.add("train", "lfs", "datasets/train.h5", "mixed_fed_cifar100_train.h5", len(big), f"sha256:{sha256(big)}")
    srv.add("outdoors", "raw", "scripts/bw_records/outdoors.txt", "bw_records/outdoors.txt", "-", f"gitblob:{gitblob(rec)}")
    srv.add("weights", "url", "-", "convmlp_m_cifar100.pth", "-", "sha256:-")
    r = srv.run()
    assert r.returncode == 0, r.stdout + r.stderr
    d = srv.data_dir
    assert (d / "mixed_fed_cifar100_train.h5").read_bytes() == big
    assert (d / "bw_records" / "outdoors.txt").read_bytes() == rec
    assert (d / "convmlp_m_cifar100.pth").read_bytes() == w
    assert (d / "convmlp_m_cifar100.pth.sha256").read_text().strip() == sha256(w)
    assert "unpinned" in summary_line(r.stdout, "weights")
    assert not list(d.rglob("*.part"))

    # a second run finds everything in place and fetches nothing (the server is gone)
    r2 = srv.run(base="file:///nonexistent-server")
    assert r2.returncode == 0, r2.stdout + r2.stderr
    for name in ("train", "outdoors", "weights"):
        assert " present " in summary_line(r2.stdout, name)


def test_checksum_mismatch_fails_and_installs_nothing(srv):
    good = srv.put("datasets/a.h5", _random(50_000, 3))
    srv.add("good", "lfs", "datasets/a.h5", "a.h5", len(good), f"sha256:{sha256(good)}")
    srv.add("bad", "lfs", "datasets/a.h5", "b.h5", len(good), "sha256:" + "0" * 64)
    r = srv.run()
    assert r.returncode == 1
    line = summary_line(r.stdout, "bad")
    assert "FAILED" in line and "checksum mismatch" in line and sha256(good) in line
    assert not (srv.data_dir / "b.h5").exists()
    assert (srv.data_dir / "b.h5.bad").read_bytes() == good
    assert (srv.data_dir / "a.h5").read_bytes() == good  # the other item still completed
    assert "1 item(s) FAILED" in r.stdout


def test_git_blob_mismatch_fails(srv):
    rec = srv.put("scripts/bw_records/indoors.txt", b"0 5\n")
    srv.add("indoors", "raw", "scripts/bw_records/indoors.txt", "bw_records/indoors.txt", "-",
            f"gitblob:{gitblob(rec + b'x')}")
    r = srv.run()
    assert r.returncode == 1 and "checksum mismatch: gitblob" in summary_line(r.stdout, "indoors")
    assert not (srv.data_dir / "bw_records" / "indoors.txt").exists()


def test_resume_appends_to_the_partial_file(srv):
    data = _random(200_000, 4)
    half = 120_000
    # The server's copy has a corrupted first part: only a download that resumes after the first
    # `half` bytes (kept in .part from an earlier attempt) reproduces the expected checksum.
    srv.put("datasets/r.h5", b"\xff" * half + data[half:])
    srv.add("train", "lfs", "datasets/r.h5", "r.h5", len(data), f"sha256:{sha256(data)}")
    srv.data_dir.mkdir()
    (srv.data_dir / "r.h5.part").write_bytes(data[:half])
    r = srv.run()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resuming at 120000 of 200000 bytes" in r.stdout
    assert (srv.data_dir / "r.h5").read_bytes() == data
    assert not (srv.data_dir / "r.h5.part").exists()


def test_incomplete_download_is_kept_and_finished_by_a_rerun(srv):
    data = _random(100_000, 5)
    srv.put("datasets/t.h5", data[:60_000])  # the transfer "breaks off" at 60 kB
    srv.add("train", "lfs", "datasets/t.h5", "t.h5", len(data), f"sha256:{sha256(data)}")
    r = srv.run()
    assert r.returncode == 1
    line = summary_line(r.stdout, "train")
    assert "incomplete: 60000 of 100000 bytes" in line and "run again to resume" in line
    assert (srv.data_dir / "t.h5.part").read_bytes() == data[:60_000]
    srv.put("datasets/t.h5", data)
    r = srv.run()
    assert r.returncode == 0, r.stdout + r.stderr
    assert (srv.data_dir / "t.h5").read_bytes() == data


def test_missing_source_and_lfs_pointer_are_reported(srv):
    pointer = srv.put("datasets/p.h5", b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 9\n")
    srv.add("gone", "lfs", "datasets/none.h5", "none.h5", 10, "sha256:" + "1" * 64)
    srv.add("pointer", "lfs", "datasets/p.h5", "p.h5", "-", "sha256:" + "2" * 64)
    r = srv.run()
    assert r.returncode == 1
    assert "download failed" in summary_line(r.stdout, "gone")
    assert "Git LFS pointer" in summary_line(r.stdout, "pointer")
    assert "2 item(s) FAILED" in r.stdout
    assert len(pointer) > 0 and not (srv.data_dir / "p.h5").exists()


def test_corrupt_existing_file_is_replaced(srv):
    data = _random(40_000, 6)
    srv.put("datasets/c.h5", data)
    srv.add("train", "lfs", "datasets/c.h5", "c.h5", len(data), f"sha256:{sha256(data)}")
    srv.data_dir.mkdir()
    (srv.data_dir / "c.h5").write_bytes(b"\x00" * len(data))
    r = srv.run()
    assert r.returncode == 0, r.stdout + r.stderr
    assert (srv.data_dir / "c.h5").read_bytes() == data
    assert (srv.data_dir / "c.h5.bad").read_bytes() == b"\x00" * len(data)


def test_pinned_weights_checksum_is_enforced(srv):
    w = srv.put("weights.pth", _random(1_200_000, 7))
    srv.add("weights", "url", "-", "w.pth", "-", "sha256:" + "3" * 64)
    r = srv.run()
    assert r.returncode == 1 and "checksum mismatch" in summary_line(r.stdout, "weights")
    srv.lines.clear()
    srv.add("weights", "url", "-", "w.pth", "-", f"sha256:{sha256(w)}")
    r = srv.run()
    assert r.returncode == 0 and (srv.data_dir / "w.pth").read_bytes() == w


def test_only_and_usage_errors(srv):
    a = srv.put("datasets/a.h5", _random(1000, 8))
    srv.add("a", "lfs", "datasets/a.h5", "a.h5", len(a), f"sha256:{sha256(a)}")
    srv.add("b", "lfs", "datasets/a.h5", "b.h5", len(a), f"sha256:{sha256(a)}")
    srv.add("opt", "lfs", "datasets/a.h5", "o.h5", len(a), f"sha256:{sha256(a)}", "optional")
    r = srv.run("--only", "b")
    assert r.returncode == 0 and (srv.data_dir / "b.h5").exists() and not (srv.data_dir / "a.h5").exists()
    r = srv.run()
    assert r.returncode == 0 and not (srv.data_dir / "o.h5").exists()  # optional items need --with-pkl
    r = srv.run("--with-pkl")
    assert r.returncode == 0 and (srv.data_dir / "o.h5").exists()
    assert srv.run("--only", "nope").returncode == 2
    assert srv.run("--bogus").returncode == 2
