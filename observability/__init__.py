"""parley observability."""
