"""One module per state."""
