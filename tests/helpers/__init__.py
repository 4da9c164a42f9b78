"""Helpers shared by the test modules: checkpoint round trips, threads, simulated clocks."""
