"""Relevance judgments users send back about what a search showed them (issue 41): the signed search id
that ties a judgment to the answer it judges, and the durable per-collection store of judgments."""
