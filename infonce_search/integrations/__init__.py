"""Vector stores for LangChain and LlamaIndex on the infonce-search API (optional extras)."""
