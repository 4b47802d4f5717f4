"""Writes and reads that the pages, the API, the admin and the command line share (keyword-only)."""
