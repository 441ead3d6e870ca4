"""ADSP (Hu, Wang, Wu, AAAI 2020): its items, summary section, verdict rules and figures (docs/adsp.md)."""
