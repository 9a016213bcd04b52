"""Bringing data over from other agents (today: nanobot), reading their files only."""
