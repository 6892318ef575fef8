"""Tests of the benchmark commands (bench/)."""
