"""Verification: the independent order checker and the in-memory simulator."""
