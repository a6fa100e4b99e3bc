"""LVLM-Playground tests."""
