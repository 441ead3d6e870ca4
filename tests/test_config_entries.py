"""The shared type check of configuration entries (rog.config_entries): kinds, conversions and the error wording."""

from __future__ import annotations

from pathlib import Path

import pytest

from rog.config_entries import PATH, check_kind, entry, require_mapping
from rog.errors import ConfigError


def test_kinds_by_hand():
    assert check_kind(3, int, "w") == 3 and check_kind(2, float, "w") == 2 and check_kind({}, dict, "w") == {}
    for value, kind, words in ((True, int, "an integer"), (1.5, int, "an integer"), (False, float, "a number"),
                               ("x", float, "a number"), (1, str, "a string"), ([], dict, "a mapping"),
                               (1, bool, "true/false"), (3, PATH, "a path")):
        with pytest.raises(ConfigError, match=f"^w: expected {words}, got "):
            check_kind(value, kind, "w")
    with pytest.raises(ConfigError, match=r"^w: expected a number \(a Top-k run\), got None$"):
        check_kind(None, float, "w", "a number (a Top-k run)")


def test_entries_convert_and_name_the_source():
    d = {"a": 2, "p": Path("/x"), "s": "t", "n": None}
    assert entry(d, "a", float, "f.yaml") == 2.0 and isinstance(entry(d, "a", float, "f.yaml"), float)
    assert entry(d, "p", PATH, "f.yaml") == "/x" and entry(d, "s", str, "f.yaml") == "t"
    assert entry(d, "n", int, "f.yaml") is None and entry(d, "absent", int, "f.yaml") is None
    with pytest.raises(ConfigError, match=r"^f.yaml: seed: missing \(rerun\)$"):
        entry(d, "seed", int, "f.yaml", missing="(rerun)")
    with pytest.raises(ConfigError, match="^f.yaml: s: expected an integer, got 't'$"):
        entry(d, "s", int, "f.yaml")
    with pytest.raises(ConfigError, match="^f.yaml: expected a mapping of configuration keys, got list$"):
        require_mapping([], "f.yaml")
