"""Scoring and data sets for benchmarks: manifests, text normalisation, WER/CER."""
