"""parley environments.comma."""
