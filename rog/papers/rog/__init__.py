"""ROG (MICRO 2022): the long-horizon item outdoors_long (the default plan's items and claim tables are the bench's own, in rog.experiment.items and rog.analysis; docs/architecture.md)."""
