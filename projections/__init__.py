"""Read models rebuilt from the notification log.

``service.Projections(app)`` is the entry point: ``catch_up``, ``rebuild``, ``status``,
``recall``, ``memory_list``, ``memory_inspect``, ``state_as_of``. ``runner`` applies
verified log entries (``entries``) to the read models (``atoms``, ``keyword``,
``vectors``, ``audit``, ``asof``) at their own tracking positions; ``routes`` is the
registry of every place that holds memory content, with purge and probe; ``decay`` and
``memory`` are pure. ``cli`` holds the commands the ``ledger`` CLI mounts.
See docs/adr/0005, 0006 and 0007.
"""
