"""Triage of optimizer output: per-step bisection, repro bundles, adapters for peer optimizers."""
