"""Replay recorded HTTP exchanges for the cloud adapters' unit tests.

A fixture (tests/unit/fixtures/clouds/*.json) is shaped like the recordings of the Azure SDK's
test proxy (azure-sdk-for-python ``devtools_testutils``): ``{"Entries": [{"RequestUri",
"RequestMethod", "RequestBody", "StatusCode", "ResponseHeaders", "ResponseBody"}, ...]}``. Every
entry must be requested, in order (``responses``' OrderedRegistry), and a request must carry the
entry's query parameters and (a superset of) its JSON body; any other request fails the test.
CloudStack's query also holds apiKey/signature, which the entries leave out (not compared).
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import responses
from responses import matchers
from responses.registries import OrderedRegistry

FIXTURES = Path(__file__).parent / "fixtures" / "clouds"


def _subset(want, got) -> bool:
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and _subset(v, got[k]) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(got, list) and len(want) == len(got) and all(_subset(a, b) for a, b in zip(want, got))
        )
    return want == got


def _body_matcher(want):
    def match(request):
        try:
            got = json.loads(request.body or b"null")
        except ValueError:
            return False, "request body is not JSON"
        return (True, "") if _subset(want, got) else (False, f"body {got!r} does not contain {want!r}")

    return match


def load(name: str) -> list[dict]:
    return json.loads((FIXTURES / f"{name}.json").read_text())["Entries"]


def replay(*names: str) -> responses.RequestsMock:
    """A started ``responses`` mock serving the entries of fixtures ``names``, in order."""
    mock = responses.RequestsMock(registry=OrderedRegistry, assert_all_requests_are_fired=True)
    for name in names:
        for e in load(name):
            parts = urlsplit(e["RequestUri"])
            match = [matchers.query_param_matcher(dict(parse_qsl(parts.query)), strict_match=False)]
            if e.get("RequestBody") is not None:
                match.append(_body_matcher(e["RequestBody"]))
            mock.add(
                e["RequestMethod"],
                f"{parts.scheme}://{parts.netloc}{parts.path}",
                json=e.get("ResponseBody"),
                status=e["StatusCode"],
                headers=e.get("ResponseHeaders") or {},
                match=match,
            )
    return mock
