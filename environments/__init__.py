"""parley environments."""
