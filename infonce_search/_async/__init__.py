"""The clients' one source: AsyncClient (the sync Client is generated from it, infonce_search/_sync/)."""
