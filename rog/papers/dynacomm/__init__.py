"""DynaComm: its items (paired runs, the sweep, per-layer pacing), summary, rules and figures (docs/dynacomm.md)."""
