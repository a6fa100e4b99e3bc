"""parley runtime."""
