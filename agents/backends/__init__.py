"""Model backends: the registry entries, OpenAI-compatible and Anthropic clients shared per
endpoint, adaptive concurrency, retries, and the LLM policy."""
