"""parley memory."""
