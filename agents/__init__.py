"""parley agents."""
