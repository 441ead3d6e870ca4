"""The bench's own cross-system comparison: the compare item (every training system on the outdoors links), its summary section, pacing check and figure (docs/compare.md)."""
