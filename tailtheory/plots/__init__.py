"""Figures of the papers as pure functions returning ``(fig, df)``; one module per theory module."""
