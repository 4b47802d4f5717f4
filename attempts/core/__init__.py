"""The domain's rules and records that both sides use: errors, agents, the timeline, output
capture, redaction, protected paths, storage. No Docker, no HTTP."""
