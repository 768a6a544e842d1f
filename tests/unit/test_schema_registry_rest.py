"""sparklog.schemas.rest: each endpoint of the Confluent REST API and each of its error bodies, sans-IO over a
registry in a real ZooKeeper; and the HTTP edge (sparklog.schemas.http_server): bounded bodies, JSON errors."""

from __future__ import annotations

import http.client
import json

import pytest

from sparklog.schemas import SchemaRegistry
from sparklog.schemas.http_server import MAX_BODY_BYTES, ListenerError, RegistryServer, parse_listener
from sparklog.schemas.rest import handle

V1 = {"type": "record", "name": "View", "namespace": "t", "fields": [{"name": "page", "type": "string"}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "n", "type": "long", "default": 0}]}
NO_DEFAULT = {**V1, "fields": V1["fields"] + [{"name": "n", "type": "long"}]}  # not BACKWARD-readable of V1
DROPPED = {**V1, "fields": []}  # BACKWARD-compatible with V1, not FORWARD


@pytest.fixture
def registry(zk):
    return SchemaRegistry(zk)


def call(registry, method, target, body=None):
    raw = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
    response = handle(registry, method, target, raw)
    return response.status, response.body


def schema_body(schema, **extra):
    return {"schema": json.dumps(schema), **extra}


def error(status, code):
    return lambda result: result[0] == status and result[1]["error_code"] == code and result[1]["message"]


# -- subjects and versions


def test_register_list_and_get_versions(registry):
    status, body = call(registry, "POST", "/subjects/views-value/versions", schema_body(V1))
    assert status == 200 and body == {"id": 1, "subject": "views-value", "version": 1}
    assert call(registry, "POST", "/subjects/views-value/versions", schema_body(V2))[1]["id"] == 2
    assert call(registry, "POST", "/subjects/views-value/versions", schema_body(V1))[1]["version"] == 1  # again
    assert call(registry, "GET", "/subjects") == (200, ["views-value"])
    assert call(registry, "GET", "/subjects?subjectPrefix=x") == (200, [])
    assert call(registry, "GET", "/subjects/views-value/versions") == (200, [1, 2])
    status, latest = call(registry, "GET", "/subjects/views-value/versions/latest")
    assert status == 200 and {k: latest[k] for k in ("subject", "version", "id")} == \
        {"subject": "views-value", "version": 2, "id": 2}
    assert json.loads(latest["schema"]) == json.loads(registry.schema_text(2))
    assert call(registry, "GET", "/subjects/views-value/versions/-1")[1] == latest
    assert call(registry, "GET", "/subjects/views-value/versions/1")[1]["id"] == 1
    assert call(registry, "GET", "/subjects/views-value/versions/1/schema")[1]["name"] == "t.View"


def test_the_same_schema_in_two_subjects_has_one_id(registry):
    first = call(registry, "POST", "/subjects/a-value/versions", schema_body(V1))[1]["id"]
    assert call(registry, "POST", "/subjects/b-value/versions", schema_body(V1))[1] == \
        {"id": first, "subject": "b-value", "version": 1}


def test_subject_names_are_url_decoded(registry):
    assert call(registry, "POST", "/subjects/my%20topic-value/versions", schema_body(V1))[0] == 200
    assert call(registry, "GET", "/subjects") == (200, ["my topic-value"])


def test_lookup_of_a_schema_under_a_subject(registry):
    call(registry, "POST", "/subjects/s/versions", schema_body(V1))
    status, body = call(registry, "POST", "/subjects/s", schema_body(V1))
    assert status == 200 and (body["id"], body["version"]) == (1, 1)
    assert error(404, 40403)(call(registry, "POST", "/subjects/s", schema_body(V2)))
    assert error(404, 40401)(call(registry, "POST", "/subjects/none", schema_body(V1)))


@pytest.mark.parametrize("target", ["/subjects/none/versions", "/subjects/none/versions/1",
                                    "/subjects/none/versions/latest"])
def test_unknown_subject_is_40401(registry, target):
    result = call(registry, "GET", target)
    assert error(404, 40401)(result) and result[1]["message"] == "Subject 'none' not found."


def test_unknown_version_is_40402_and_a_bad_version_42202(registry):
    call(registry, "POST", "/subjects/s/versions", schema_body(V1))
    assert error(404, 40402)(call(registry, "GET", "/subjects/s/versions/7"))
    for bad in ("0", "-2", "x", "2147483648", "earliest"):
        assert error(422, 42202)(call(registry, "GET", f"/subjects/s/versions/{bad}")), bad


def test_invalid_subject_is_42208(registry):
    assert error(422, 42208)(call(registry, "POST", "/subjects/a%2Fb/versions", schema_body(V1)))


@pytest.mark.parametrize("body", [
    {"schema": "{not json"}, {"schema": json.dumps({"type": "fixed", "name": "F"})},  # no size
    {"schema": json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]})},
    {"schema": json.dumps({"type": "nosuchtype"})}, {"schemaa": "x"}, {"schema": 5}, ["x"],
    {"schema": json.dumps(V1), "schemaType": "PROTOBUF"},
    {"schema": json.dumps(V1), "references": [{"name": "x", "subject": "y", "version": 1}]},
])
def test_invalid_schemas_are_42201_and_nothing_is_written(registry, body):
    assert error(422, 42201)(call(registry, "POST", "/subjects/s/versions", body))
    assert call(registry, "GET", "/subjects") == (200, [])


def test_malformed_json_is_400(registry):
    assert error(400, 400)(call(registry, "POST", "/subjects/s/versions", b"{\"schema\": "))
    assert error(400, 400)(call(registry, "PUT", "/config", b"\xff\xfe"))


def test_incompatible_schema_is_409_and_nothing_is_written(registry):
    call(registry, "POST", "/subjects/s/versions", schema_body(V1))
    status, body = call(registry, "POST", "/subjects/s/versions", schema_body(NO_DEFAULT))
    assert status == 409 and body["error_code"] == 409
    assert "incompatible with an earlier schema for subject \"s\"" in body["message"]
    assert "field 'n' is new and has no default" in body["message"]
    assert call(registry, "GET", "/subjects/s/versions") == (200, [1])


# -- schemas by id


def test_schema_by_id_and_unknown_ids_are_40403(registry):
    schema_id = call(registry, "POST", "/subjects/s/versions", schema_body(V1))[1]["id"]
    status, body = call(registry, "GET", f"/schemas/ids/{schema_id}?subject=s")
    assert status == 200 and body == {"schema": registry.schema_text(schema_id)}
    for unknown in ("99", "x", "-1"):
        assert error(404, 40403)(call(registry, "GET", f"/schemas/ids/{unknown}")), unknown
    assert call(registry, "GET", "/schemas/types") == (200, ["AVRO"])


def test_subjects_and_versions_of_a_schema_id(registry):
    schema_id = call(registry, "POST", "/subjects/b/versions", schema_body(V1))[1]["id"]
    call(registry, "POST", "/subjects/a/versions", schema_body(V2))
    call(registry, "POST", "/subjects/a/versions", schema_body(V1))  # a's version 2 (V1 reads V2's data: BACKWARD)
    assert call(registry, "GET", f"/schemas/ids/{schema_id}/subjects") == (200, ["a", "b"])
    assert call(registry, "GET", f"/schemas/ids/{schema_id}/versions") == \
        (200, [{"subject": "a", "version": 2}, {"subject": "b", "version": 1}])
    assert error(404, 40403)(call(registry, "GET", "/schemas/ids/42/subjects"))
    assert error(404, 40403)(call(registry, "GET", "/schemas/ids/x/versions"))


# -- compatibility


def test_compatibility_endpoint(registry):
    call(registry, "POST", "/subjects/s/versions", schema_body(V1))
    assert call(registry, "POST", "/compatibility/subjects/s/versions/latest", schema_body(V2)) == \
        (200, {"is_compatible": True})
    assert call(registry, "POST", "/compatibility/subjects/s/versions/1", schema_body(NO_DEFAULT)) == \
        (200, {"is_compatible": False})
    status, body = call(registry, "POST", "/compatibility/subjects/s/versions/1?verbose=true", schema_body(NO_DEFAULT))
    assert body["is_compatible"] is False and "field 'n' is new and has no default" in body["messages"][0]
    assert call(registry, "POST", "/compatibility/subjects/s/versions", schema_body(V2))[1] == {"is_compatible": True}
    assert error(404, 40401)(call(registry, "POST", "/compatibility/subjects/x/versions/1", schema_body(V2)))
    assert error(404, 40402)(call(registry, "POST", "/compatibility/subjects/s/versions/5", schema_body(V2)))
    assert error(422, 42202)(call(registry, "POST", "/compatibility/subjects/s/versions/zz", schema_body(V2)))
    assert error(422, 42201)(call(registry, "POST", "/compatibility/subjects/s/versions/1", {"schema": "{"}))
    assert call(registry, "GET", "/subjects/s/versions") == (200, [1])  # a test registers nothing


# -- config


def test_global_config_defaults_to_backward_and_is_set_and_deleted(registry):
    assert call(registry, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert call(registry, "PUT", "/config", {"compatibility": "full"}) == (200, {"compatibility": "FULL"})
    assert call(registry, "GET", "/config") == (200, {"compatibilityLevel": "FULL"})
    assert call(registry, "DELETE", "/config") == (200, {"compatibilityLevel": "FULL"})
    assert call(registry, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})


def test_subject_config(registry):
    assert error(404, 40408)(call(registry, "GET", "/config/s"))
    assert call(registry, "GET", "/config/s?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})
    assert call(registry, "PUT", "/config/s", {"compatibility": "NONE"}) == (200, {"compatibility": "NONE"})
    assert call(registry, "GET", "/config/s") == (200, {"compatibilityLevel": "NONE"})
    assert call(registry, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert call(registry, "DELETE", "/config/s") == (200, {"compatibilityLevel": "NONE"})
    assert error(404, 40408)(call(registry, "DELETE", "/config/s"))
    assert call(registry, "GET", "/subjects") == (200, [])  # a level alone makes no subject


@pytest.mark.parametrize("body", [{"compatibility": "SIDEWAYS"}, {"compatibility": 3}, {}, []])
def test_invalid_level_is_42203(registry, body):
    assert error(422, 42203)(call(registry, "PUT", "/config", body))
    assert error(422, 42203)(call(registry, "PUT", "/config/s", body))


@pytest.mark.parametrize("level, accepted", [
    ("NONE", [NO_DEFAULT, DROPPED]), ("BACKWARD", [DROPPED]), ("FORWARD", [NO_DEFAULT]), ("FULL", []),
])
def test_each_level_decides_what_registers(registry, level, accepted):
    call(registry, "PUT", "/config/s", {"compatibility": level})
    call(registry, "POST", "/subjects/s/versions", schema_body(V1))
    for schema in (NO_DEFAULT, DROPPED):
        status, _ = call(registry, "PUT", "/config/s", {"compatibility": level})
        status, body = call(registry, "POST", "/subjects/s/versions", schema_body(schema))
        assert (status == 200) == (schema in accepted), (level, schema, body)
        if status == 200:  # back to a subject whose latest is V1, for the next schema
            call(registry, "PUT", "/config/s", {"compatibility": "NONE"})
            call(registry, "POST", "/subjects/s/versions", schema_body(V1))


def test_transitive_levels_check_every_version(registry):
    """v1 {page: string}, v2 {} (BACKWARD of v1), then v3 {page: long = 0}: reads v2's data, not v1's."""
    v3 = {**V1, "fields": [{"name": "page", "type": "long", "default": 0}]}
    call(registry, "PUT", "/config/s", {"compatibility": "BACKWARD"})
    for schema in (V1, DROPPED):
        assert call(registry, "POST", "/subjects/s/versions", schema_body(schema))[0] == 200
    call(registry, "PUT", "/config/s", {"compatibility": "BACKWARD_TRANSITIVE"})
    assert error(409, 409)(call(registry, "POST", "/subjects/s/versions", schema_body(v3)))
    call(registry, "PUT", "/config/s", {"compatibility": "BACKWARD"})
    assert call(registry, "POST", "/subjects/s/versions", schema_body(v3))[1]["version"] == 3


# -- routing


@pytest.mark.parametrize("method, target, status", [
    ("GET", "/nothing", 404), ("GET", "/subjects/s/versions/1/schema/x", 404), ("GET", "/schemas/ids", 404),
    ("DELETE", "/subjects/s", 405), ("DELETE", "/subjects/s/versions/1", 405), ("POST", "/schemas/ids/1", 405),
    ("PATCH", "/config", 405),
])
def test_unknown_endpoints_and_methods(registry, method, target, status):
    assert error(status, status)(call(registry, method, target))


def test_root_answers_empty_object(registry):
    assert call(registry, "GET", "/") == (200, {})


# -- the HTTP edge


@pytest.fixture
def server(registry):
    with RegistryServer(registry, "127.0.0.1", 0) as running:
        yield running


def over_http(server, method, path, body=None, headers=None):
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), json.loads(response.read())
    finally:
        connection.close()


def test_http_serves_the_api_as_json(server):
    status, content_type, body = over_http(server, "POST", "/subjects/s/versions", json.dumps(schema_body(V1)).encode())
    assert (status, content_type, body["id"]) == (200, "application/vnd.schemaregistry.v1+json", 1)
    assert over_http(server, "GET", "/schemas/ids/77")[2]["error_code"] == 40403


def test_http_refuses_a_huge_body_before_reading_it(server):
    status, _, body = over_http(server, "POST", "/subjects/s/versions", b"x" * 64,
                           headers={"Content-Length": str(MAX_BODY_BYTES + 1)})
    assert status == 413 and body["error_code"] == 413 and "exceeds the limit" in body["message"]
    status, _, body = over_http(server, "POST", "/subjects/s/versions", b"{", headers={"Content-Length": "abc"})
    assert status == 400 and "malformed Content-Length" in body["message"]


def test_http_malformed_json_is_a_json_error(server):
    status, _, body = over_http(server, "POST", "/subjects/s/versions", b"{\"schema\": ")
    assert status == 400 and body["error_code"] == 400 and "malformed JSON" in body["message"]


def test_http_a_handler_bug_is_500_and_the_server_goes_on(server, monkeypatch):
    monkeypatch.setattr(server.registry, "subjects", lambda: 1 / 0)
    status, _, body = over_http(server, "GET", "/subjects")
    assert status == 500 and body["error_code"] == 50001 and "ZeroDivisionError" in body["message"]
    monkeypatch.undo()
    assert over_http(server, "GET", "/subjects")[0] == 200


@pytest.mark.parametrize("text", ["http://h", "https://h:1", "h:1", "http://h:1/path", "http://:1"])
def test_listeners_must_be_http_host_port(text):
    with pytest.raises(ListenerError):
        parse_listener(text)
    assert parse_listener("http://0.0.0.0:8081") == ("0.0.0.0", 8081)


def test_start_on_a_port_in_use_ends_with_one_line(zk_connect, capsys):
    import socket

    from sparklog.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["schema-registry", "start", "--zookeeper", zk_connect, "--listeners", f"http://127.0.0.1:{port}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and err[0].startswith(f"error: cannot listen on http://127.0.0.1:{port}")


def test_start_with_a_bad_listener_ends_with_one_line(capsys):
    from sparklog.cli import main

    code = main(["schema-registry", "start", "--zookeeper", "127.0.0.1:1", "--listeners", "tcp://h:1"])
    assert code == 1 and capsys.readouterr().err == "error: listeners must be http://HOST:PORT, not 'tcp://h:1'\n"
