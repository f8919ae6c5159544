"""The serving contract: what the API imports (read side of bundles, indexes, documents)."""
