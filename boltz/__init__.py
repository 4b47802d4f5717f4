"""Boltz Python client SDK (HTTP API): lands with the API issue; this reserves the name."""
