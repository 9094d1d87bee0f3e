"""pytest wiring: scenario collection lands here with the harness (issue 4)."""
