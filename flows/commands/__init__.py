"""The `platonic` command's groups, one module each; `flows/cli.py` registers them on the app."""
