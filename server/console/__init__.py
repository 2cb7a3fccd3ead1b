"""The browser console at ``/console`` (ADR 0032): :func:`console_app`."""

from server.console.app import console_app

__all__ = ["console_app"]
