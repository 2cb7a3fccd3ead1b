"""Print the HTTP API's OpenAPI document: ``python -m server.openapi > docs/openapi.json``.

The served document (``GET /v1/openapi.json``) and the committed one are the same;
``tests/test_server.py`` keeps them so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def document() -> dict[str, object]:
    from server.app import Settings, build_api

    doc: dict[str, object] = build_api(Settings(home=Path("."))).openapi()
    return doc


if __name__ == "__main__":
    sys.stdout.write(json.dumps(document(), indent=2, sort_keys=True) + "\n")
