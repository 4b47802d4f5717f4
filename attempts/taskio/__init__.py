"""Tasks coming in: importers (Boltz folders, Harbor, SWE-bench), task folders, task images,
repositories and uploaded archives."""
