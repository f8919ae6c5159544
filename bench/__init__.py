"""The project's benchmarks, one module per bench, run by name: `python -m bench` lists them,
`python -m bench NAME [args...]` runs one (bench/catalog.py names them; bench/harness/ is what they share)."""
