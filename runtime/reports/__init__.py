"""Per-family report tables (one module per family: ``report(records, run_dir) -> str``)."""
