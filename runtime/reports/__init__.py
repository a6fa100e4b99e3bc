"""Report sections: parley's own families' (one module each, ``report(records, run_dir) -> str``,
declared as ``parley.reports`` entry points in pyproject.toml) and those of any game."""
