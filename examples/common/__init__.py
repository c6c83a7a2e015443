"""Shared code of the example jobs; see fleet_example.py."""
