"""balagg: reproduction suite for Balanced Aggregation in GRPO (Zeng et al., 2026)."""

__version__ = "0.1.0"
