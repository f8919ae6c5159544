"""What the benches share: paths and corpora, free ports, the servers they start, the wrk runner."""
