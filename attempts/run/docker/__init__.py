"""Sandboxes: the Docker runtime (the one module that imports docker) and the sandbox image."""
