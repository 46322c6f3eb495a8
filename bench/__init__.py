"""Benchmarks of kernelexec against raw jupyter_client and the peers: ``python -m bench``."""
