"""What leaves Boltz: attempt bundles, task exports and training formats, streamed zips and
the agent's final files as a tar.gz."""
