"""The serving contract: what the API imports to read and serve a bundle (see docs/architecture.md)."""
