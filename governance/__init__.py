"""governance package."""
