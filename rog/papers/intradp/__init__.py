"""Intra-DP (inference): its item (Table 6, Fig. 1), the paper's Table 6 rows, verdict rules, summary and figures (docs/intradp.md)."""
