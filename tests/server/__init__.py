"""Tests of ``hippobot serve``."""
