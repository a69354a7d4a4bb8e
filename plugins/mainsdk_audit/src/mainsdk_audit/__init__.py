"""Audit sinks for mainsdk sandbox."""
