"""The web view refuses a request whose Host header names a host it is not served under (a DNS-rebinding
page's `evil.example.com`), with a 400 and one plain line, and every response, pages, static files, errors
and refusals, carries the headers against framing and content sniffing."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from coevolve.benchmarks.ui_pages import RUN, pages, write_run
from coevolve.ui.app import create_app

SECURITY = {"x-frame-options": "DENY", "content-security-policy": "frame-ancestors 'none'",
            "x-content-type-options": "nosniff"}  # fmt: skip


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ui-host")
    write_run(root, steps=20, rounds=1)
    return root


def get(app, host: str, path: str = "/"):
    return TestClient(app, raise_server_exceptions=False).get(path, headers={"Host": host})


@pytest.mark.parametrize("host", ["127.0.0.1:8420", "localhost:8420", "[::1]:8420", "localhost", "127.0.0.1",
                                  "LOCALHOST.:9000", "127.0.0.2:8420"])  # fmt: skip
def test_loopback_names_with_any_port_are_answered(root, host):
    response = get(create_app(root), host)
    assert response.status_code == 200 and RUN in response.text


@pytest.mark.parametrize("host", ["evil.example.com", "evil.example.com:8420", "localhost.evil.example.com",
                                  "127.0.0.1.nip.io:8420", "10.0.0.5:8420", "testserver", ""])  # fmt: skip
def test_any_other_host_is_refused_with_one_plain_line(root, host):
    response = get(create_app(root), host, f"/runs/{RUN}")
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text.count("\n") == 1 and "does not answer to Host" in response.text
    assert RUN not in response.text


def test_the_host_named_by_host_is_also_answered_and_others_still_refused(root):
    app = create_app(root, served_on="10.0.0.5")
    assert get(app, "10.0.0.5:8420").status_code == 200
    assert get(app, "127.0.0.1:8420").status_code == 200
    assert get(app, "evil.example.com:8420").status_code == 400
    named = create_app(root, served_on="view.lab.example")
    assert get(named, "view.lab.example:8420").status_code == 200
    assert get(named, "evil.example.com").status_code == 400


def test_a_wildcard_address_answers_addresses_typed_as_such_but_not_foreign_names(root):
    app = create_app(root, served_on="0.0.0.0")
    assert get(app, "192.168.1.20:8420").status_code == 200
    assert get(app, "[fe80::1]:8420").status_code == 200
    assert get(app, "evil.example.com:8420").status_code == 400


def test_every_response_carries_the_framing_and_sniffing_headers(root):
    app = create_app(root)
    responses = [get(app, "127.0.0.1:8420", url) for url in pages(1).values()]
    responses += [get(app, "127.0.0.1:8420", "/static/style.css"), get(app, "127.0.0.1:8420", "/runs/nope"),
                  get(app, "evil.example.com", "/")]  # fmt: skip
    assert [r.status_code for r in responses[-2:]] == [404, 400]
    for response in responses:
        for name, value in SECURITY.items():
            assert response.headers.get(name) == value, (response.url, name)
