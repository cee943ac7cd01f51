"""Shared pytest setup. Tests run on CPU; nothing here needs a Blackhole chip."""

import os

# Deterministic, quiet CPU runs; keep XLA from grabbing every core's worth of threads per process.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
