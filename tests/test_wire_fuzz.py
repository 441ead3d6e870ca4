"""Wire fuzzing, a bounded derandomised share of the >= 10,000 cases bench_faults runs:
frames, the message parser and received transmissions never crash, never deliver a damaged,
duplicated or reordered frame, and stay within memory bounds derived from the frame limits; a
tampering link inside a real PS/worker run costs no committed row."""

from __future__ import annotations

import struct

import pytest

from benchmarks.faults import wire_fuzz as wf
from rog.runtime.worker import MANDATORY_RETRIES
from rog.wire import HEADER_BYTES, FrameError, decode_frame

N_CASES = 80  # per target (bench_faults runs 11,000): about 15 s together on this loaded machine


@pytest.mark.parametrize("target", wf.TARGETS)
def test_fuzz_target_holds_its_contract(target):
    stats = wf.fuzz(target, N_CASES, seed=0)
    assert stats["cases"] >= N_CASES * 0.9  # hypothesis ran (about) the cases asked for
    assert stats["peak_bytes"] > 0
    if target == "frames":
        assert stats["rejected"] > 0 and stats.get("intact", 0) > 0
    elif target == "parser":
        assert stats["rejected"] > 0
    else:
        assert stats["delivered_frames"] > 0 and stats["cut_short"] > 0


def test_huge_length_fields_are_refused_before_allocating():
    s = wf.sample("raw", 0)
    for field, value in (("data_len", 0xFFFFFFFF), ("n_segments", 0xFFFFFFFF)):
        for fix in (False, True):
            data = wf.mutate_field(s.frames[0], field, value, fix)
            out, peak = wf._peak_during(lambda: decode_frame(data, wf.PARTITION, wf.CODECS["raw"]))
            assert isinstance(out, FrameError)
            assert peak < 64 * 1024  # nothing near the 4 GiB claimed


def test_forged_duplicate_row_is_refused_even_with_a_valid_checksum():
    s = wf.sample("raw", 1)
    frame = next(f for f in s.frames if struct.unpack_from("<I", f, 16)[0] >= 2)  # >= 2 segments
    forged = wf.forge(frame, "duplicate_segment", 0, 0)
    with pytest.raises(FrameError):
        decode_frame(forged, wf.PARTITION, wf.CODECS["raw"])


def test_oracle_catches_a_decoder_that_skips_its_checksum(monkeypatch):
    """The fuzz oracle is not vacuous: a decoder accepting a damaged frame is reported."""
    import rog.wire as wire

    def no_crc(buf, partition, codec, max_data_len=None):
        header = wire.parse_header(buf, partition, max_data_len)
        header = wire.ChunkHeader(header.codec_id, header.iteration, header.seq, header.n_segments,
                                  header.data_len, wire.zlib.crc32(buf[HEADER_BYTES:], header.crc_seed), header.crc_seed)
        return header, wire.decode_body(header, memoryview(buf)[HEADER_BYTES:], partition, codec)

    monkeypatch.setattr(wf, "decode_frame", no_crc)
    s = wf.sample("raw", 0)
    last_data_bit = 8 * len(s.frames[0]) - 1  # a flip in the data: structurally fine, only the crc sees it
    with pytest.raises(wf.FuzzViolation, match="damaged frame"):
        wf.check_frame_case("raw", 0, 0, "bytes", "flip", 0, 0, [last_data_bit], False, {})


def test_oracle_catches_a_receiver_that_applies_a_duplicate(monkeypatch):
    """A naive receiver (frames in arrival order, no sequence checks) is reported by the transmission oracle."""
    import types
    import zlib

    from rog.transport.messages import End, Piece

    def naive(conn, begin, validator):
        frames, current = [], bytearray()
        while True:
            msg = conn.recv(5.0)
            if isinstance(msg, End):
                break
            if isinstance(msg, Piece):
                current += msg.data
                if len(current) == msg.frame_len:
                    frames.append(bytes(current))
                    current = bytearray()
        out = [decode_frame(f, wf.PARTITION, wf.CODECS["raw"]) for f in frames]
        digest = 0
        for f in frames:
            digest = zlib.crc32(f, digest)
        return types.SimpleNamespace(frames=out, delivered=len(out), digest=digest, reason=None)

    monkeypatch.setattr(wf, "receive_transmission", naive)
    wf.check_transmission_case("raw", 0, "none", 0, 0, [0], 4096, {})  # the naive receiver is fine on intact input
    with pytest.raises(wf.FuzzViolation, match="delivered 20 frames of 19"):
        wf.check_transmission_case("raw", 0, "dup_frame", 0, 0, [0], 4096, {})  # 20 frames "delivered" of 19


@pytest.mark.parametrize("policy, side, mode", [("SSP", "push", "flip"), ("SSP", "push", "swap_frames"),
                                                 ("ROG", "pull", "dup_frame"), ("ROG", "pull", "flip")])
def test_tampering_link_costs_no_committed_row(policy, side, mode):
    out = wf.tampered_run(mode, side, policy=policy, timeout_s=30.0)
    assert out["fired"] >= 1  # the damage happened
    assert not out["hung"] and not out["worker_errors"] and not out["ps_errors"], out
    if side == "push":  # frame 0 (mandatory) rejected in iterations 2 and 4: each costs one retransmission
        assert out["push_retries"] == 2, out
    else:
        assert out["transmissions_cut"] >= 1  # the receiver cut the damaged transmission to a prefix
    assert out["rows_lost"] == 0  # every worker holds w0 - sum(updates)/W


def test_replayed_push_fails_loudly_and_applies_nothing():
    out = wf.tampered_run("replay", "push", policy="SSP", timeout_s=30.0)
    assert out["fired"] == 1 and not out["hung"]
    assert "ProtocolError" in " ".join(out["worker_errors"].values())


@pytest.mark.parametrize("mode", ["flip", "swap_frames"])
def test_rog_push_with_a_rejected_mandatory_frame_is_retransmitted(mode):
    # before the fix the worker's overdue rows stayed stale at the PS and the gate closed for wait_timeout_s
    out = wf.tampered_run(mode, "push", policy="ROG", timeout_s=8.0)
    assert out["fired"] == 2 and out["push_retries"] == 2, out  # one retransmission per damaged push
    assert not out["hung"] and not out["worker_errors"] and not out["ps_errors"], out
    assert out["rows_lost"] == 0, out


def test_a_damaged_flush_push_is_retransmitted():
    out = wf.tampered_run("flip", "push", policy="ROG", timeout_s=8.0, tamper_iterations=(7,))  # 6 iterations + flush
    assert out["fired"] == 1 and out["push_retries"] == 1, out
    assert not out["hung"] and not out["worker_errors"] and not out["ps_errors"] and out["rows_lost"] == 0, out


def test_a_link_that_keeps_damaging_mandatory_frames_fails_loudly():
    out = wf.tampered_run("flip", "push", policy="ROG", timeout_s=8.0, persistent=True)
    assert not out["hung"]
    assert out["push_retries"] == MANDATORY_RETRIES and out["fired"] == MANDATORY_RETRIES + 1, out
    assert "keeps damaging frames" in out["worker_errors"][0], out
