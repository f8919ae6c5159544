"""Relevance judgments (POST /feedback) as training pairs, hard negatives and a held-out evaluation slice."""
