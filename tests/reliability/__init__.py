"""Reliability and security suite: faults, concurrency and hostile input (docs/reliability.md)."""
