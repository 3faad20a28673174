"""Evaluation: sampling answers from a checkpoint (``generate``), scoring them, the code sandbox."""
