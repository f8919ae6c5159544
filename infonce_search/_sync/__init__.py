"""Generated from infonce_search/_async/ by scripts/unasync_client.py: do not edit."""
